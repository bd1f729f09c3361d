"""ETA's loss in torch: the entropy weighted by exp(−(H − e0)) (Niu et al., ICML 2022).

EATA's (``eata.py``) is this plus its Fisher regulariser.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from realm_runtime import RealmConfig

from ._form import TorchForm


def eata_loss(h: Tensor, e0: Tensor | float) -> Tensor:
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


def per_sample_loss(
    h: Tensor, learned: Sequence[Tensor], e0: Tensor | float, config: RealmConfig
) -> Tensor:
    """``exp(−(H − e0)) · H``."""
    return eata_loss(h, e0)


FORM = TorchForm.weighted(per_sample_loss)
