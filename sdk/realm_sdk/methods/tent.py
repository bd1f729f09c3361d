"""Tent's loss in torch: the entropy itself (Wang et al., ICLR 2021)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from realm_runtime import RealmConfig

from ._form import TorchForm


def per_sample_loss(
    h: Tensor, learned: Sequence[Tensor], e0: Tensor | float, config: RealmConfig
) -> Tensor:
    """H, unweighted."""
    return h


FORM = TorchForm.weighted(per_sample_loss)
