"""The fit's time: what one sample costs, how the budget is shared, and too small a budget."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch

from realm_runtime.methods import EXPORTED
from realm_sdk import RealmAdapter

from ..bench import run_online
from ._candidates import candidates
from ._data import FitInputError
from ._options import FitOptions
from ._pool import Bench
from ._schedule import least_cost
from ._streams import normalise

SHARES = {"search": 0.6, "long": 0.15, "proof": 0.25}  # of the time left after the exports
CALIBRATION_SAMPLES = 12  # samples each method steps to price one sample
SAFETY = 1.2  # a sample priced this much dearer than measured: later rounds hold dearer methods


class FitBudgetError(FitInputError):
    """The time given cannot measure even one configuration; says how much would."""


def price_sample(bench: Bench, stream: str, options: FitOptions) -> float:
    """Seconds one adapting sample costs one worker: the mean over the methods at the preset."""
    x = normalise(bench.streams[stream].images[:CALIBRATION_SAMPLES], bench.mean, bench.std)
    y = bench.streams[stream].labels[:CALIBRATION_SAMPLES]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        costs = []
        for c in candidates(
            options.preset,
            options.num_classes,
            bound=1.0,
            batch_norm=False,
            adapt_stages=None,
            tiers=1,
        ):
            assert c.config is not None
            adapter = RealmAdapter(copy.deepcopy(bench.model), c.config, clean_images=bench.clean)
            run_online(adapter, x[:2], y[:2], alpha_lambda=False)  # first calls warm up
            began = time.perf_counter()
            run_online(adapter, x, y, alpha_lambda=False)
            costs.append((time.perf_counter() - began) / len(x))
    finally:
        torch.set_num_threads(threads)
    return float(np.mean(costs))


def least_left(per_sample: float, streams: int, length: int, workers: int) -> float:
    """Seconds a fit needs past its set-up and exports: the cheapest search, at its share."""
    search = least_cost(
        len(EXPORTED),
        streams=streams,
        max_length=length,
        seconds_per_sample=per_sample * SAFETY,
        workers=workers,
    )
    return search / SHARES["search"]


def too_small(
    spent: float, per_sample: float, streams: int, length: int, workers: int, export_s: float
) -> FitBudgetError:
    """The sentence for a budget that cannot measure each method once, with what would."""
    least = spent + export_s + least_left(per_sample, streams, length, workers)
    return FitBudgetError(
        f"the time given cannot measure each method once here: one sample costs "
        f"{per_sample * 1e3:.1f} ms, an export {export_s:.0f} s, the set-up took {spent:.0f} s; "
        f"give at least --minutes {least / 60:.1f}"
    )


def time_left(budget: float, began: float, export_s: float) -> float:
    """Seconds of the budget left now, the final export's (as long as the first) held back."""
    return budget - (time.perf_counter() - began) - export_s


def long_stream_length(
    budget: float,
    began: float,
    export_s: float,
    per_sample: float,
    finalists: list[Any],
    streams: list[str],
    most: int,
    workers: int,
) -> int:
    """Samples of each stream in the long stream: what its share of the time left allows."""
    left = time_left(budget, began, export_s)
    share = left * SHARES["long"] / (SHARES["long"] + SHARES["proof"])
    parallel = min(workers, max(len(finalists), 1))
    per_stream = share * parallel / (per_sample * SAFETY * len(streams) * max(len(finalists), 1))
    return int(max(8, min(most, per_stream)))
