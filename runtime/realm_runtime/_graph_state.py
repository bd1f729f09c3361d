"""The adapt graph's state besides θ and momentum: one layout, read and written here only.

The adapt graph (SPEC §11) carries S_div's EMA, the watch's marginal and figures, which of
them hold a value yet, the finite samples seen since the last reset and the counters as six
tensors. A state file holds the same six (``_checkpoint``), ``RealmRuntime`` moves them
between the host and its session, and the exporter's graph computes their next values
under the same names; this module is where their layout turns into host values and back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ._names import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    COUNTERS,
    COUNTERS_NAME,
    EMA_NAME,
    FIGURE_ENTROPY_EMA,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_NAME,
    KNOWN_UPDATE_RATE,
    KNOWN_WATCH,
    MARGINAL_NAME,
    SEEN_NAME,
    WATCH_NAME,
)

# The state tensors this module lays out, in the adapt graph's input order.
WATCH_STATE = (EMA_NAME, MARGINAL_NAME, WATCH_NAME, KNOWN_NAME, SEEN_NAME, COUNTERS_NAME)


@dataclass(frozen=True)
class WatchArrays:
    """The figures both twins keep alike, as numpy values (None: no value yet).

    ``entropy_ema`` and ``marginal`` hold a value together (the flag ``KNOWN_WATCH``): both
    start with the first finite sample after a reset.
    """

    seen: int  # finite samples since the last reset
    update_rate: np.ndarray | None  # 0-d EMA of updates per call
    entropy_ema: np.ndarray | None  # 0-d EMA of the prediction entropy
    marginal: np.ndarray | None  # (num_classes,) EMA of the predictions
    loss_ema: np.ndarray | None  # 0-d SAR's loss EMA


@dataclass(frozen=True)
class Slots:
    """The order of the flags, figures and counters inside their tensors.

    The manifest's ``adapt`` section names them (a client reads the order from there); the
    defaults are this library's own.
    """

    known: Sequence[str] = ADAPT_KNOWN
    watch: Sequence[str] = ADAPT_WATCH
    counters: Sequence[str] = COUNTERS


def watch_tensors(
    ema: np.ndarray | None,
    watch: WatchArrays,
    counters: Mapping[str, int],
    num_classes: int,
    slots: Slots = Slots(),
) -> dict[str, np.ndarray]:
    """The six state tensors, by input name, from host values.

    ``ema`` keeps its dtype (the SDK may adapt a float64 model); the rest is float32, bool
    and int64, as the graph declares them.
    """
    figures = {
        FIGURE_UPDATE_RATE: watch.update_rate,
        FIGURE_ENTROPY_EMA: watch.entropy_ema,
        FIGURE_LOSS_EMA: watch.loss_ema,
    }
    known = {
        KNOWN_EMA: ema is not None,
        KNOWN_UPDATE_RATE: watch.update_rate is not None,
        KNOWN_WATCH: watch.entropy_ema is not None,
        KNOWN_LOSS_EMA: watch.loss_ema is not None,
    }
    zeros = np.zeros(num_classes, np.float32)
    return {
        EMA_NAME: zeros if ema is None else np.asarray(ema),
        MARGINAL_NAME: zeros if watch.marginal is None else watch.marginal.astype(np.float32),
        WATCH_NAME: np.array(
            [0.0 if figures[k] is None else float(figures[k]) for k in slots.watch], np.float32
        ),
        KNOWN_NAME: np.array([known[k] for k in slots.known], np.bool_),
        SEEN_NAME: np.array(watch.seen, np.int64),
        COUNTERS_NAME: np.array([counters[k] for k in slots.counters], np.int64),
    }


def read_watch_tensors(
    tensors: Mapping[str, np.ndarray], slots: Slots = Slots()
) -> tuple[np.ndarray | None, WatchArrays, dict[str, int]]:
    """``(ema, watch, counters)`` from the six state tensors (shapes already checked).

    A value whose flag is off reads as None, whatever its tensor holds.
    """
    known = dict(zip(slots.known, np.asarray(tensors[KNOWN_NAME]).tolist(), strict=True))
    figure = dict(zip(slots.watch, np.asarray(tensors[WATCH_NAME], np.float32), strict=True))
    counts = np.asarray(tensors[COUNTERS_NAME]).tolist()

    def scalar(key: str, flag: str) -> np.ndarray | None:
        return np.array(figure[key], np.float32) if known[flag] else None

    watch = WatchArrays(
        seen=int(tensors[SEEN_NAME]),
        update_rate=scalar(FIGURE_UPDATE_RATE, KNOWN_UPDATE_RATE),
        entropy_ema=scalar(FIGURE_ENTROPY_EMA, KNOWN_WATCH),
        marginal=np.asarray(tensors[MARGINAL_NAME], np.float32) if known[KNOWN_WATCH] else None,
        loss_ema=scalar(FIGURE_LOSS_EMA, KNOWN_LOSS_EMA),
    )
    ema = np.asarray(tensors[EMA_NAME]) if known[KNOWN_EMA] else None
    return ema, watch, dict(zip(slots.counters, counts, strict=True))


def fresh_watch_tensors(num_classes: int) -> dict[str, np.ndarray]:
    """The six state tensors of a fresh (or reset) adapter: nothing known, nothing counted."""
    empty = WatchArrays(0, None, None, None, None)
    return watch_tensors(None, empty, dict.fromkeys(COUNTERS, 0), num_classes)
