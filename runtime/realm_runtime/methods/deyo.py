"""DeYO: entropy and the pseudo-label probability difference (PLPD) under a patch shuffle.

Lee et al., "Entropy is not Enough for Test-Time Adaptation: From the Perspective of
Disentangled Factors", ICLR 2024, Eq. (5)–(8). A sample updates when its entropy is under
e0 (0.5·ln C) and shuffling its image patches lowers the probability of its predicted class
by more than ``plpd_threshold``; its entropy is weighed by exp(−(H − 0.8·e0)) + exp(PLPD).
One departure, so that every implementation shuffles alike: the patch order is one fixed
permutation (``shuffle_seed``), not a fresh one per sample (SPEC §4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._guardrails import Guardrails
from .._names import PLPD_THRESHOLD_NAME
from .._numbers import finite, integer
from ._method import Method
from ._settings import MethodSettings


@dataclass(frozen=True)
class DeyoSettings(MethodSettings):
    """DeYO's own settings: the PLPD cut and the patch shuffle behind it."""

    BAKED = frozenset({"patch_grid", "shuffle_seed"})  # the patch order is in the step graph

    plpd_threshold: float = 0.2  # update only if PLPD > this (DeYO's τ_PLPD)
    patch_grid: int = 4  # patches per side of the shuffle (DeYO's patch_len)
    shuffle_seed: int = 0  # seed of the one patch order every implementation applies

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not finite(self.plpd_threshold) or not -1 <= self.plpd_threshold < 1:
            errors.append(f"plpd_threshold must be in [-1, 1), got {self.plpd_threshold!r}")
        if not integer(self.patch_grid) or self.patch_grid < 2:
            errors.append(f"patch_grid must be an integer ≥ 2, got {self.patch_grid!r}")
        if not integer(self.shuffle_seed) or self.shuffle_seed < 0:
            errors.append(f"shuffle_seed must be an integer ≥ 0, got {self.shuffle_seed!r}")
        return errors

    def slots(self) -> dict[str, float]:
        """The PLPD cut."""
        return {PLPD_THRESHOLD_NAME: self.plpd_threshold}


DEYO = Method(
    name="deyo",
    label="DeYO",
    paper="Lee et al., ICLR 2024",
    diversity=False,
    entropy_cut=True,
    entropy_weight=False,  # its weight reads the shuffled copy's prediction: the step's
    learns_alpha_lambda=False,
    recovery=False,
    settings=DeyoSettings,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    second_forward="a forward of a patch-shuffled copy, whose prediction decides and weighs",
    step_cut=True,
    step_input=PLPD_THRESHOLD_NAME,
    entropy_share=0.5,  # DeYO's entropy filter; its weight's margin is 0.4·ln C
    legacy_training="DeYO's second forward, on a patch-shuffled copy of the sample, is not in "
    "the legacy training artifacts",
    cost=1.5,  # a second forward, of the shuffled copy, on every sample it keeps
)

WEIGHT_MARGIN_SHARE = 0.8  # the weight's margin over the filter's: 0.4·ln C / 0.5·ln C


def patch_permutation(grid: int, seed: int) -> np.ndarray:
    """The order of the ``grid × grid`` patches after the shuffle: never the identity.

    Args:
        grid: patches per side.
        seed: ``DeyoSettings.shuffle_seed``.

    Returns:
        ``(grid², )`` int64: the patch now at position k is the one that was at ``perm[k]``.
    """
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(grid * grid).astype(np.int64)
        if (perm != np.arange(grid * grid)).any():
            return perm
