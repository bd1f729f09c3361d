"""The largest drift bound whose worst case stays within an allowed drop: one ladder, climbed once.

Each candidate bound, from the smallest up, is searched for the θ of lowest clean accuracy
(:func:`worst_case`); each larger bound starts one restart from the smaller one's worst point,
so the lowest found can only fall as the bound grows. The climb stops at the first bound that
loses more than allowed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._search import NormBall, SearchSettings, worst_case

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoundLadder:
    """What a climb found: the largest allowed bound (None: not even the first) and each try."""

    chosen: float | None  # the largest bound whose worst case found lost at most the drop
    tried: list[dict[str, Any]] = field(default_factory=list)  # WorstCase.to_dict() + "drop"


def climb_bounds(
    ball: NormBall,
    images: np.ndarray,
    labels: np.ndarray,
    bounds: Sequence[float],
    *,
    allowed_drop: float,
    search: SearchSettings,
    seed: int,
    notify: Callable[[str], None] | None = None,
    deadline: float | None = None,
) -> BoundLadder:
    """Search each bound from the smallest up; stop at the first that loses more than allowed.

    Args:
        ball: the model's adapted parameters and their source values.
        images: float ``(N, C, ...)`` clean inputs, as the model takes them.
        labels: ``(N,)`` their classes.
        bounds: increasing candidate ``max_drift`` values.
        allowed_drop: points of clean accuracy the worst θ found may lose.
        search: how hard each bound is searched.
        seed: of the random starts and minibatches.
        notify: told the bound being searched, before each search.
        deadline: a ``time.perf_counter()`` reading: a bound after the first is searched only
            where, priced as the last one, it ends by then (the climb keeps the largest
            allowed so far), and each search's restarts after its first likewise.
    """
    images = np.ascontiguousarray(images, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    tried: list[dict[str, Any]] = []
    chosen, start, took = None, None, 0.0
    for bound in bounds:
        if tried and deadline is not None and time.perf_counter() + took > deadline:
            break
        if notify is not None:
            notify(f"drift check: the worst case inside max_drift {bound:g}")
        began = time.perf_counter()
        found = worst_case(
            ball, images, labels, bound, search, seed=seed, start=start, deadline=deadline
        )
        took = time.perf_counter() - began
        tried.append({**found.to_dict(), "drop": found.drop})
        log.info(
            "drift check: max_drift %g: source %.2f %%, worst found %.2f %% (−%.2f points, "
            "allowed %g)",
            bound,
            found.source_accuracy,
            found.worst_accuracy,
            found.drop,
            allowed_drop,
        )
        if found.drop > allowed_drop:
            break
        chosen, start = bound, found.delta
    return BoundLadder(chosen=chosen, tried=tried)
