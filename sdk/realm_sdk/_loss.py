"""The losses of SPEC §2 (REALM) and §4 (Tent, EATA baselines), per sample, in torch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def entropy(logits: Tensor) -> Tensor:
    """Shannon entropy (nats) of softmax(logits) along the last axis.

    Computed from ``log_softmax`` so that confident predictions do not produce ``0·log 0``.

    Args:
        logits: ``(B, C)`` class scores.

    Returns:
        ``(B,)`` entropies ``H = −Σ_c p_c log p_c``.
    """
    log_p = F.log_softmax(logits, dim=-1)  # (B, C)
    return -(log_p.exp() * log_p).sum(dim=-1)


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


def eata_loss(h: Tensor, e0: float) -> Tensor:
    """EATA's sample-weighted entropy ``exp(−(H − e0)) · H`` (without the Fisher term).

    The weight is a constant of the step, as in EATA's code (``1 / exp(H.detach() − e0)``):
    it ranks samples, and no gradient flows through it.

    Args:
        h: entropies, any shape.
        e0: entropy threshold; samples with ``H ≥ e0`` are excluded by the caller.

    Returns:
        The weighted entropies, shape of ``h``.
    """
    return torch.exp(-(h.detach() - e0)) * h
