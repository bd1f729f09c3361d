"""The numpy half of one online step (SPEC §3): S_div, sample weights, SGD, projection, EMA.

Everything that decides *whether* to step lives here, in float32 like the PyTorch
reference, for both backends. *How* to step: the ort-training backend takes the SGD with
momentum and the projection from here (the training graph gives gradients only); the
portable step graph has the same update inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._config import RealmConfig
from ._names import ALPHA_NAME, LAMBDA_NAME
from .methods.realm import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN

F32 = np.float32


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(B, C)`` float32 logits, in float32."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=1, keepdims=True)).astype(F32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``(B, C)`` log-probabilities of each row, in the logits' dtype, from the shifted logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def entropy(logits: np.ndarray) -> np.ndarray:
    """``(B,)`` entropies (nats) in the logits' dtype, as the SDK and the graphs compute them.

    From :func:`log_softmax`, so that confident predictions do not produce ``0·log 0``.
    """
    log_p = log_softmax(logits)
    return -(np.exp(log_p) * log_p).sum(axis=1)


def cosine_to(probs: np.ndarray, ema: np.ndarray) -> np.ndarray:
    """``(B,)`` cosine similarity of each row of ``probs`` to ``ema`` (torch's eps = 1e-8)."""
    dots = probs @ ema
    norms = np.maximum(np.linalg.norm(probs, axis=1) * np.linalg.norm(ema), F32(1e-8))
    return (dots / norms).astype(F32)


@dataclass(frozen=True)
class Selection:
    """Which samples of a batch update, and with what weight in the graph's loss."""

    keep: np.ndarray  # (B,) bool: passed EATA's entropy cut and S_div
    weights: np.ndarray  # (B,) float32 loss weights: 1/n on the n kept samples, else zero
    eata_factor: np.ndarray | None  # (B,) detached exp(−(H − e0)) of an entropy weight, or None
    probs: np.ndarray  # (B, C) float32 softmax of the pre-update logits
    uncertain: int  # samples refused by EATA's entropy threshold
    similar: int  # samples refused by S_div


def select(logits: np.ndarray, ema: np.ndarray | None, config: RealmConfig) -> Selection:
    """SPEC §3 step 2 (and EATA's entropy cut): the per-sample decisions and loss weights.

    The graph's loss is ``Σ w_i L_i``; ``w_i = 1/n`` on the ``n`` kept samples makes it the
    mean over them (SPEC §3, batches). EATA's constant weight ``exp(−(H_i − e0))`` is
    returned beside ``w``: the training graph takes it inside ``w`` (its gradient is that
    weight times ∂H, as in EATA's code), the portable step graph computes it itself.
    """
    probs = softmax(logits)
    batch = logits.shape[0]
    keep = np.ones(batch, dtype=bool)
    uncertain = 0
    rules = config.rules
    h = entropy(logits).astype(F32) if rules.entropy_cut or rules.entropy_weight else None
    if h is not None and rules.entropy_cut:
        keep = h < F32(config.e0)
        uncertain = int((~keep).sum())
    similar = 0
    if rules.diversity and ema is not None:
        diverse = np.abs(cosine_to(probs, ema)) < F32(config.diversity_margin)
        similar = int((keep & ~diverse).sum())
        keep = keep & diverse
    weights = np.zeros(batch, dtype=F32)
    n = int(keep.sum())
    if n:
        weights[keep] = F32(1.0) / F32(n)
    factor = None
    if h is not None and rules.entropy_weight:
        factor = np.exp(-(h - F32(config.e0))).astype(F32)
    return Selection(keep, weights, factor, probs, uncertain, similar)


def sgd_momentum(
    param: np.ndarray, grad: np.ndarray, momentum: np.ndarray, lr: float, mu: float
) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch SGD (dampening 0, no Nesterov): ``v ← μ·v + g``, ``w ← w − lr·v``; new arrays.

    ``momentum`` is the buffer v, ``mu`` the coefficient μ (``RealmConfig.momentum``).
    """
    v = (F32(mu) * momentum + grad).astype(F32)
    return (param - F32(lr) * v).astype(F32), v


def project_alpha(alpha: np.ndarray) -> np.ndarray:
    """α into [α_min, α_max] (SPEC §2)."""
    return np.clip(alpha, F32(ALPHA_MIN), F32(ALPHA_MAX)).astype(F32)


def project_lambda(lam: np.ndarray) -> np.ndarray:
    """λ into [λ_min, ∞) (SPEC §2)."""
    return np.maximum(lam, F32(LAMBDA_MIN)).astype(F32)


def ema_update(ema: np.ndarray | None, probs: np.ndarray, beta: float) -> np.ndarray:
    """``m ← p̄`` (first update) or ``m ← β·m + (1 − β)·p̄`` with p̄ the mean kept prediction."""
    mean_p = probs.mean(axis=0).astype(F32)
    if ema is None:
        return mean_p
    return (F32(beta) * ema + F32(1 - beta) * mean_p).astype(F32)


def relax_and_anchor(
    values: dict[str, np.ndarray], initial: dict[str, np.ndarray], config: RealmConfig
) -> dict[str, np.ndarray]:
    """SPEC §10's share given back per update: ``v ← v − κ·(v − v0)``, new arrays.

    κ is ``guardrails.anchor`` for the norm tensors θ and ``guardrails.relax`` for α and λ.
    """
    guard = config.guard
    out = dict(values)
    for name, v in values.items():
        share = guard.relax if name in (ALPHA_NAME, LAMBDA_NAME) else guard.anchor
        if share is not None:
            out[name] = (v - F32(share) * (v - initial[name])).astype(F32)
    return out
