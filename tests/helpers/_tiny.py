"""A tiny float64 model for the SDK's exact checks."""

from __future__ import annotations

import torch
from torch import nn

D64 = torch.float64
DIM, CLASSES = 6, 4


class Tiny(nn.Module):
    """x (B, 6) → LayerNorm(6) with affine γ, β → fixed linear map W (4 × 6) → logits."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.norm = nn.LayerNorm(DIM, dtype=D64)
        self.fc = nn.Linear(DIM, CLASSES, bias=False, dtype=D64)
        with torch.no_grad():
            self.norm.weight.copy_(1 + 0.1 * torch.randn(DIM, generator=g, dtype=D64))
            self.norm.bias.copy_(0.1 * torch.randn(DIM, generator=g, dtype=D64))
            self.fc.weight.copy_(torch.randn(CLASSES, DIM, generator=g, dtype=D64))

    def forward(self, x):
        return self.fc(self.norm(x))


def tiny_config(**kw):
    """A REALM configuration for :class:`Tiny` (no momentum, C = 1, no guardrails), overridable."""
    from realm_runtime.methods import method_named
    from realm_sdk import Guardrails, RealmConfig

    method = kw.pop("method", "realm")
    base = dict(lr=0.05, momentum=0.0, diversity_margin=0.4, guardrails=Guardrails.off())
    if method_named(method).learns_alpha_lambda:  # REALM's own settings
        base.update(lr_alpha_lambda=0.1, alpha0=0.15, lambda0=0.1, loss_scale="one")
    return RealmConfig(num_classes=CLASSES, method=method).with_overrides(**{**base, **kw})


def tiny_sample(seed: int) -> torch.Tensor:
    """One (1, 6) float64 input of :class:`Tiny`."""
    return torch.randn(1, DIM, generator=torch.Generator().manual_seed(seed), dtype=D64)
