"""The paper's Table 1 layout: episodic online accuracy per corruption, one column a method."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..rows import NO_ADAPT


class StreamRun(Protocol):
    """What the table reads of a run (``realm_lab.bench.StreamRun`` has it)."""

    setting: str
    method: str
    seed: int
    samples: int
    accuracy: float | None
    segments: list[tuple[str, float]]
    clean_after: float | None


def _mean_std(values: Sequence[float]) -> str:
    if not values:
        return "–"
    a = np.asarray(values)
    return f"{a.mean():.1f}" + (f" ± {a.std():.1f}" if len(a) > 1 else "")


def episodic_table(runs: Sequence[StreamRun], labels: dict[str, str]) -> list[str]:
    """Markdown lines: a row per corruption, a column per method, mean ± std over seeds.

    The best mean of each row is bold; the last rows are the average over corruptions,
    each method's gain over no-adapt and, where the data has a clean split, the clean
    accuracy after adapting (forgetting). Empty where no episodic run is given. Every Table 1
    the lab prints is this one: the quality bench's and the streams bench's episodic setting.
    """
    episodic = [r for r in runs if r.setting == "episodic"]
    if not episodic:
        return []
    methods = [m for m in labels if any(r.method == m for r in episodic)]
    corruptions = list(dict.fromkeys(name for r in episodic for name, _ in r.segments))
    seeds = sorted({r.seed for r in episodic})
    per_stream = episodic[0].samples // max(len(corruptions), 1)
    out = [
        "### Episodic, per corruption (the paper's Table 1 protocol): online accuracy (%)",
        "",
        f"Each corruption from the source model, batch 1, {per_stream} samples per stream, "
        f"mean ± std over {len(seeds)} seed(s); bold: the best mean of the row.",
        "",
        "| corruption | " + " | ".join(labels[m] for m in methods) + " |",
        "|---" * (len(methods) + 1) + "|",
    ]
    rows = [*corruptions, "average"]
    for row in rows:
        values = {
            m: [
                r.accuracy if row == "average" else dict(r.segments)[row]
                for r in episodic
                if r.method == m and r.accuracy is not None
            ]
            for m in methods
        }
        best = max(float(np.mean(v)) for v in values.values() if v)
        cells = []
        for m in methods:
            text = _mean_std(values[m])
            if values[m] and round(float(np.mean(values[m])), 1) == round(best, 1):
                text = f"**{text}**"
            cells.append(text)
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    averages = values  # the "average" row's, the last: each method's accuracy per run
    if NO_ADAPT.key in methods:
        base = averages[NO_ADAPT.key]
        gains = [
            f"{np.mean(averages[m]) - np.mean(base):+.1f}" if base and averages[m] else "–"
            for m in methods
        ]
        out.append("| gain over no-adapt | " + " | ".join(gains) + " |")
    if any(r.clean_after is not None for r in episodic):
        clean = [
            [r.clean_after for r in episodic if r.method == m and r.clean_after is not None]
            for m in methods
        ]
        out.append("| clean after | " + " | ".join(_mean_std(c) for c in clean) + " |")
    return out
