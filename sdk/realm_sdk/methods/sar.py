"""SAR's step in torch: the entropy's gradient at θ + ρ·g/‖g‖ (SAM), the cut applied there.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023, Eq. (2)–(4);
Foret et al., ICLR 2021. Three forms of the one step: in place on the SDK's model, functional
for the traced step graph, and on a private copy for the export's reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from realm_runtime import RealmConfig

from .._loss import entropy
from ._form import CutStep

SAM_GUARD = 1e-12  # SAM's guard against a zero gradient: ε = ρ·g/(‖g‖ + guard)


def per_sample_loss(
    h: Tensor, learned: Sequence[Tensor], e0: Tensor | float, config: RealmConfig
) -> Tensor:
    """H, at whichever point it is evaluated (SAM supplies the point)."""
    return h


def sharp_step(
    model: nn.Module,
    params: list[nn.Parameter],
    x: Tensor,
    h: Tensor,
    keep: Tensor,
    config: RealmConfig,
) -> CutStep:
    """SAR's step on ``model`` in place: θ is moved to θ + ε, measured there, and put back.

    Args:
        model: the adapted model.
        params: its adapted parameters θ, moved and put back.
        x: the batch.
        h: its entropies at θ, with their autograd graph.
        keep: (B,) bool, the samples that passed the cut at θ.
        config: ``sam_rho`` and ``e0``.
    """
    with torch.enable_grad():
        first = h[keep].mean()
        g1 = torch.autograd.grad(first, params)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in g1]))
    scale = config.sam_rho / (norm + SAM_GUARD)
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p, g in zip(params, g1, strict=True):
                p.add_(g * scale)
        with torch.enable_grad():
            h2 = entropy(model(x))[keep]
            keep2 = h2.detach() < config.e0
            kept = int(keep2.sum())
            if kept == 0:
                return CutStep(float(h2.detach().mean()), True, (), 0)
            loss = h2[keep2].mean()
            grads = torch.autograd.grad(loss, params)
    finally:
        with torch.no_grad():
            for p, old in zip(params, saved, strict=True):
                p.copy_(old)
    value = float(loss.detach())
    finite = (
        np.isfinite(value)
        and bool(norm.isfinite())
        and all(bool(g.isfinite().all()) for g in grads)
    )
    return CutStep(value, finite, tuple(grads), kept)


def sharp_loss(
    logits_at: Callable[[Tensor, Tensor], Tensor],
    x: Tensor,
    weight: Tensor,
    e0: Tensor,
    flat: Tensor,
    rho: Tensor,
    h: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """SAR's second loss, functional, for the traced step graph (SPEC §4).

    Args:
        logits_at: ``(x, flat parameters) → logits``.
        x: the batch.
        weight: (B,) its sample weights (0: not kept at θ).
        e0: the entropy margin.
        flat: the flat parameter vector θ.
        rho: SAM's radius.
        h: the entropies at θ, with their graph.

    Returns:
        The weighted entropy at θ + ε of the samples that pass the cut there, how many do,
        and the first gradient g (whose finiteness the step also checks).
    """
    (g1,) = torch.autograd.grad((h * weight).sum(), [flat], retain_graph=True)
    eps = rho * g1 / (torch.linalg.vector_norm(g1) + SAM_GUARD)
    # ε is a constant of the step: ∂L(θ + ε)/∂θ is the gradient taken at θ + ε.
    h2 = entropy(logits_at(x, flat + eps.detach()))
    kept = (weight > 0) & (h2 < e0)
    count = kept.to(h2.dtype).sum()
    w2 = kept.to(h2.dtype) / torch.clamp(count, min=1.0)
    return (h2 * w2).sum(), count, g1


def sharp_reference(
    model: nn.Module,
    config: RealmConfig,
    x: Tensor,
    h: Tensor,
    weights: np.ndarray,
    params: list[Tensor],
) -> Tensor:
    """SAR's per-sample second loss on a private copy: entropies at θ + ε, over the kept.

    The perturbation moves ``model``'s parameters for good: its gradient is the one SAR
    takes there. Divided by the graph's weights, which the caller applies after.
    """
    w = torch.from_numpy(weights)
    g1 = torch.autograd.grad((h * w).sum(), params, retain_graph=True)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in g1]))
    with torch.no_grad():
        for p, g in zip(params, g1, strict=True):
            p.add_(g * (config.sam_rho / (norm + SAM_GUARD)))
    h2 = entropy(model(x))
    kept = ((w > 0) & (h2.detach() < config.e0)).to(h2.dtype)
    return h2 * kept / torch.clamp(kept.sum(), min=1.0) / torch.where(w > 0, w, 1.0)
