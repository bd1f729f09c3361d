"""DeYO: entropy and the pseudo-label probability difference (PLPD) under a patch shuffle.

Lee et al., "Entropy is not Enough for Test-Time Adaptation: From the Perspective of
Disentangled Factors", ICLR 2024, Eq. (5)–(8). A sample updates when its entropy is under
e0 (0.5·ln C) and shuffling its image patches lowers the probability of its predicted class
by more than ``plpd_threshold``; its entropy is weighed by exp(−(H − 0.8·e0)) + exp(PLPD).
As its authors' code does, every sample gets a patch order of its own; it is drawn from
``shuffle_seed`` and the sample's index in the stream (``realm.sample_index``) by
:func:`patch_order`, integer arithmetic every implementation computes alike (SPEC §4).
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

    BAKED = frozenset({"patch_grid", "shuffle_seed"})  # the draw's constants are in the graph

    plpd_threshold: float = 0.2  # update only if PLPD > this (DeYO's τ_PLPD)
    patch_grid: int = 4  # patches per side of the shuffle (DeYO's patch_len)
    shuffle_seed: int = 0  # seed of the patch orders, one drawn for each sample

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not finite(self.plpd_threshold) or not -1 <= self.plpd_threshold < 1:
            errors.append(f"plpd_threshold must be in [-1, 1), got {self.plpd_threshold!r}")
        if not integer(self.patch_grid) or not 2 <= self.patch_grid <= MAX_GRID:
            errors.append(
                f"patch_grid must be an integer in [2, {MAX_GRID}], got {self.patch_grid!r}"
            )
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
    draws=True,  # each sample's patch order, from its index in the stream
    entropy_share=0.5,  # DeYO's entropy filter; its weight's margin is 0.4·ln C
    legacy_training="DeYO's second forward, on a patch-shuffled copy of the sample, is not in "
    "the legacy training artifacts",
    cost=1.5,  # a second forward, of the shuffled copy, on every sample it keeps
)

WEIGHT_MARGIN_SHARE = 0.8  # the weight's margin over the filter's: 0.4·ln C / 0.5·ln C


# The draw's integer hash: multiplications, XORs and masks inside 31 bits, so that every
# product fits int64 and no runtime rounds (a division would go through float in a graph).
MASK = 0x7FFFFFFF
SAMPLE_STRIDE = 65599  # spreads the samples' indices
PATCH_STRIDE = 0x9E3779B  # spreads the patches (a fraction of the golden ratio)
MULTIPLIERS = (0x45D9F3B, 0x2C1B3C6D, 0x297A2D39, 0x1B873593)  # odd, below 2^30
SALTS = (0x5BD1E995, 0x68E31DA4)  # XORed in between
HIGH = 0x7FFF0000  # the key's bits: a product's high bits depend on all of its factor's
MAX_GRID = 256  # the patch index fills the bits below HIGH


def patch_keys(grid: int, seed: int, samples: np.ndarray) -> np.ndarray:
    """The sort keys of each sample's patches: their order is the keys' ascending order.

    Multiplicative hashing (Knuth's: the high bits of a product) of the sample's index and
    the seed, then of each patch's index XORed in; the patch's index in the low bits makes
    the keys distinct, so no sort has a tie to break.

    Args:
        grid: patches per side (at most ``MAX_GRID``).
        seed: ``DeyoSettings.shuffle_seed``.
        samples: ``(B,)`` int64, each sample's index in the stream (samples before it).

    Returns:
        ``(B, grid²)`` int64.
    """
    a, b, c, d = MULTIPLIERS
    n = grid * grid
    x = ((np.asarray(samples, np.int64) & MASK) * SAMPLE_STRIDE + (int(seed) & MASK)) & MASK
    h = (((x * a) & MASK) ^ SALTS[0]) & MASK
    h = (h * b) & MASK
    patches = np.arange(n, dtype=np.int64)
    v = (h[:, None] ^ (patches * PATCH_STRIDE)) & MASK
    v = (((v * c) & MASK) ^ SALTS[1]) & MASK
    v = (v * d) & MASK
    return (v & HIGH) + patches


def patch_order(grid: int, seed: int, samples: np.ndarray) -> np.ndarray:
    """Each sample's patch order: the patch now at position k is the one that was at [k].

    Args:
        grid: patches per side.
        seed: ``DeyoSettings.shuffle_seed``.
        samples: ``(B,)`` int64, each sample's index in the stream.

    Returns:
        ``(B, grid²)`` int64 permutations (the identity among them, rarely, as in DeYO's code).
    """
    return np.argsort(patch_keys(grid, seed, samples), axis=1, kind="stable")
