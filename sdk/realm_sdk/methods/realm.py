"""REALM's loss in torch: the robust loss ρ(H; α, λ) of SPEC §2 (Seto et al., WACV 2024)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from realm_runtime import RealmConfig
from realm_runtime.methods.realm import RealmSettings

from ._form import TorchForm


def robust_loss(h: Tensor, alpha: Tensor, lam: Tensor, *, scale_by_lambda: bool) -> Tensor:
    """REALM's robust loss ρ(H; α, λ) (paper Eq. "rho", SPEC §2).

    ``ρ = (ε/α) · C · ((t/ε + 1)^(α/2) − 1)`` with ``t = H/λ``, ``ε = |α − 2|`` and
    ``C = λ`` (ImageNet preset) or ``C = 1`` (CIFAR preset). The power is written as
    ``exp(α/2 · log(b))`` (b ≥ 1), the same form as the exported ONNX graph, because ONNX
    Runtime's ``Pow`` gives no gradient to its exponent; in torch both forms are exact.

    Args:
        h: entropies, any shape.
        alpha: scalar shape parameter in (0, 2).
        lam: scalar scale parameter > 0.
        scale_by_lambda: ``True`` for C = λ (gradient flows through it), ``False`` for C = 1.

    Returns:
        ρ with the shape of ``h``.
    """
    eps = (alpha - 2).abs()
    base = h / lam / eps + 1  # ≥ 1 since H ≥ 0
    power = torch.exp(alpha / 2 * torch.log(base))
    rho = eps / alpha * (power - 1)
    return rho * lam if scale_by_lambda else rho


def per_sample_loss(
    h: Tensor, learned: Sequence[Tensor], e0: Tensor | float, config: RealmConfig
) -> Tensor:
    """ρ(H; α, λ) with ``learned = (α, λ)``; e0 is not REALM's."""
    alpha, lam = learned
    return robust_loss(
        h, alpha, lam, scale_by_lambda=RealmSettings.of(config).loss_scale == "lambda"
    )


FORM = TorchForm.weighted(per_sample_loss)
