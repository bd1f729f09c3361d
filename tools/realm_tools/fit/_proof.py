"""The proof: the choice, the defaults and not adapting on the held-out images, over seeds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ._candidates import Candidate
from ._options import SEVERITIES, FitOptions
from ._pool import Bench, Job, Journal, run_jobs
from ._schedule import MIN_LENGTH
from ._streams import build_stream, normalise, shifted_keys

SEEDS = 3  # draws of the held-out streams, where the time allows
FORWARD_SHARE = 0.3  # what a sample of not adapting costs, against an adapting one


def prove(
    model: nn.Module,
    options: FitOptions,
    images: np.ndarray,
    labels: np.ndarray,
    compared: list[Candidate],
    *,
    seconds: float,
    per_sample: float,
    workers: int,
    journal_path: Path,
    fingerprint: str,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run ``compared`` on the held-out streams as long and as often as ``seconds`` allows.

    Returns:
        fit.json's ``proof``: the length and seeds, each configuration's mean per corruption
        (over severities and seeds), per seed, overall and its spread over seeds.
    """
    unique = list({c.key: c for c in compared}.values())
    weight = sum(FORWARD_SHARE if c.config is None else 1.0 for c in unique)
    streams_per_seed = len(SEVERITIES) * 15
    seeds, length = SEEDS, len(images)
    while True:
        fits = seconds * workers / (streams_per_seed * seeds * weight * per_sample)
        length = int(min(len(images), fits))
        if length >= MIN_LENGTH or seeds == 1:
            break
        seeds -= 1
    length = max(min(MIN_LENGTH, len(images)), length)
    keys = [
        k for s in range(seeds) for k in shifted_keys("proof", SEVERITIES, options.seed + 1 + s)
    ]
    streams = {k.name: build_stream(k, images, labels, length) for k in keys}
    clean = normalise(images[:1], options.mean, options.std)  # unused: no long stream here
    bench = Bench(model, streams, options.mean, options.std, clean, labels[:1])
    journal = Journal(journal_path, fingerprint)
    jobs = [Job((k.name,), length, tuple(unique)) for k in keys]
    tell = None
    if progress is not None:
        tell = progress("proof on the held-out images", int(sum(j.weight for j in jobs)))
    for _ in run_jobs(bench, jobs, journal, workers=workers, progress=tell, notify=notify):
        pass

    def accuracy(key: Any, candidate: Candidate) -> float:
        job = Job((key.name,), length, (candidate,))
        return float(journal.results[job.key(candidate)]["accuracy"])

    table: dict[str, dict[str, float]] = {}
    per_seed: dict[str, list[float]] = {}
    for c in compared:
        for k in keys:
            table.setdefault(k.corruption, {}).setdefault(c.label, 0.0)
            table[k.corruption][c.label] += accuracy(k, c) / (seeds * len(SEVERITIES))
        per_seed[c.label] = [
            float(np.mean([accuracy(k, c) for k in keys if k.seed == options.seed + 1 + s]))
            for s in range(seeds)
        ]
    return {
        "length": length,
        "seeds": seeds,
        "images": len(images),
        "compared": [c.describe() for c in compared],
        "by_corruption": table,
        "per_seed": per_seed,
        "mean": {label: float(np.mean(v)) for label, v in per_seed.items()},
        "spread": {label: float(np.std(v)) for label, v in per_seed.items()},
    }
