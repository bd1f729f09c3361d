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


# The draw's integer hash: Wellons' lowbias32 on 32-bit words held in int64, its products
# split in 16-bit halves so that none passes 2^49 and no runtime rounds or overflows; right
# shifts, never a division (a traced integer division goes through float32).
WORD = 0xFFFFFFFF
HALF = 0xFFFF
MIX = (0x7FEB352D, 0x846CA68B)  # lowbias32's multipliers: its avalanche is measured
SHIFTS = (16, 15, 16)  # lowbias32's xorshifts
GOLDEN = 0x9E3779B9  # spreads the patches' indices before they are mixed
MAX_PATCHES = 1 << 16  # the patch index fills the key's low 16 bits
MAX_GRID = 256  # grid² patches within MAX_PATCHES


def mul32(x: np.ndarray, m: int) -> np.ndarray:
    """``x · m mod 2^32`` for 32-bit ``x`` in int64, from products below 2^49."""
    return (x * (m & HALF) + ((x * (m >> 16)) & HALF) * (HALF + 1)) & WORD


def mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32: a bijection of 32-bit words whose output bits each depend on every input bit."""
    x = x ^ (x >> SHIFTS[0])
    x = mul32(x, MIX[0])
    x = x ^ (x >> SHIFTS[1])
    x = mul32(x, MIX[1])
    return x ^ (x >> SHIFTS[2])


def seed_word(seed: int) -> int:
    """``shuffle_seed`` folded to a mixed 32-bit word (a constant of the graph)."""
    seed = int(seed) & ((1 << 64) - 1)
    return int(mix32(np.int64(mix32(np.int64(seed & WORD)) ^ (seed >> 32))))


def patch_keys(grid: int, seed: int, samples: np.ndarray) -> np.ndarray:
    """The sort keys of each sample's patches: their order is the keys' ascending order.

    The sample's index (both 32-bit halves) and the seed are hashed by :func:`mix32`; each
    patch's key is the hash of that word XORed with the patch's spread index, above the
    patch's index, which makes the keys distinct: no sort has a tie to break.

    Args:
        grid: patches per side (at most 256).
        seed: ``DeyoSettings.shuffle_seed``.
        samples: ``(B,)`` int64, each sample's index in the stream (samples before it).

    Returns:
        ``(B, grid²)`` int64.
    """
    n = grid * grid
    s = np.asarray(samples, np.int64)
    h = mix32(mix32((s & WORD) ^ seed_word(seed)) ^ ((s >> 32) & WORD))
    patches = np.arange(n, dtype=np.int64)
    return mix32(h[:, None] ^ mul32(patches, GOLDEN)) * MAX_PATCHES + patches


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
