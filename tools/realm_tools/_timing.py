"""How the benchmarks time: sides taking turns on one stream, and steps forced to update.

Every side (torch, each runtime backend, a runtime in another interpreter) runs the same
samples in interleaved blocks (:func:`take_turns`), so a noisy moment of a shared machine
falls on all of them alike; an updating step is timed under :func:`updating_overrides`, so
each timed call is a step and not a skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def timed_side(
    fn: Callable[[np.ndarray], object], xs: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` as a side of :func:`take_turns`: milliseconds of each call on ``xs[idx]``."""

    def block(idx: np.ndarray) -> np.ndarray:
        out = np.empty(len(idx))
        for k, i in enumerate(idx):
            start = time.perf_counter()
            fn(xs[i][None])
            out[k] = (time.perf_counter() - start) * 1e3
        return out

    return block


TURN_BLOCKS = 6  # blocks the timed samples are split into, the sides alternating per block


def take_turns(
    sides: dict[str, Callable[[np.ndarray], np.ndarray]],
    samples: int,
    warmup: int,
    rounds: int = TURN_BLOCKS,
) -> dict[str, np.ndarray]:
    """Milliseconds of each side on each sample ``warmup .. samples - 1``, sides taking turns.

    Every side first runs the untimed samples ``0 .. warmup - 1``, then each sees every timed
    sample once, in order, but the sides alternate in ``rounds`` blocks (the order reversed
    every other block): on a shared machine a noisy moment then falls on all of them alike,
    and the ratio of their medians holds still where back-to-back blocks of one side each did
    not (the resnet50_gn step ratio moved 0.78–0.90 between such runs). Warm-up samples are
    not timed samples again: a sample seen twice in a row predicts what the EMA holds
    (|cos| = 1), and S_div would skip it even with d = 1.

    Args:
        sides: name → a function that runs the samples with the given indices and returns
            each one's milliseconds, timed where it runs (a function of this process, or an
            :class:`ExternalSide` in another interpreter).
        samples: how many samples there are (warm-up included).
        warmup: how many of them come first, untimed.
        rounds: blocks the timed samples are split into.

    Returns:
        name → milliseconds of each timed sample, in sample order.
    """
    for side in sides.values():
        side(np.arange(warmup))
    timed = np.arange(warmup, samples)
    out = {name: np.empty(len(timed)) for name in sides}
    order = list(sides)
    for block, idx in enumerate(_turn_blocks(len(timed), rounds)):
        for name in order if block % 2 == 0 else order[::-1]:
            out[name][idx] = sides[name](timed[idx])
    return out


def block_ratios(
    runtime: np.ndarray, reference: np.ndarray, rounds: int = TURN_BLOCKS
) -> tuple[float, ...]:
    """Median ratio per block of :func:`take_turns` (the same blocks, in sample order)."""
    blocks = _turn_blocks(len(reference), rounds)
    return tuple(float(np.median(runtime[b]) / np.median(reference[b])) for b in blocks if len(b))


def _turn_blocks(count: int, rounds: int) -> list[np.ndarray]:
    """Indices of ``count`` timed samples in ``rounds`` consecutive blocks (take_turns')."""
    return np.array_split(np.arange(count), rounds)
