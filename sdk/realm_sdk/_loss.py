"""The prediction entropy every method's loss is made of, in torch (SPEC §2)."""

from __future__ import annotations

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
