"""The endless setting's table, JSON and plot: windowed accuracy over the whole stream."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..rows import row_named
from ._endless import Calibration, EndlessRow

ALLOWED_GAP = 1.0  # points any window may sit below no-adapt


def _gaps(row: EndlessRow, none: EndlessRow | None) -> list[float] | None:
    if none is None or not row_named(row.method).adapts:
        return None
    return [a - b for a, b in zip(row.windows, none.windows, strict=True)]


def format_endless(cal: Calibration, rows: Sequence[EndlessRow], window: int) -> str:
    """One row per method: mean, first, last and lowest window, and the gap to no-adapt."""
    none = next((r for r in rows if not row_named(r.method).adapts), None)
    lines = [
        f"| method | mean % | first window | last window | lowest window | "
        f"worst window − no-adapt | windows more than {ALLOWED_GAP:g} below no-adapt | "
        "updates | resets | drift clips | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gaps = _gaps(r, none)
        worst = "" if gaps is None else f"{min(gaps):+.2f}"
        below = "" if gaps is None else str(sum(g < -ALLOWED_GAP for g in gaps))
        lines.append(
            f"| {r.method} | {r.accuracy:.2f} | {r.windows[0]:.2f} | {r.windows[-1]:.2f} | "
            f"{min(r.windows):.2f} | {worst} | {below} | {r.updates} | {r.resets} | "
            f"{r.drift_clips} | {r.seconds:.0f}{' (kept)' if r.kept else ''} |"
        )
    severities = ", ".join(f"{c} {s}" for c, s in cal.chosen.items())
    lines += [
        "",
        f"{rows[0].samples:,} samples, windows of {window:,}. Difficulty held at "
        f"{cal.target:.1f} % no-adapt accuracy: severities {severities}"
        + (
            f"; left out (no severity within reach): {', '.join(cal.left_out)}"
            if cal.left_out
            else ""
        )
        + ".",
    ]
    if any(r.kept for r in rows):
        lines += [
            "",
            "(kept): the row of an earlier command with the same model, stream and method, "
            "taken back from `rows/`; its seconds are that run's.",
        ]
    return "\n".join(lines)


def endless_to_json(cal: Calibration, rows: Sequence[EndlessRow], meta: dict[str, object]) -> str:
    """The calibration, every row with its windows, and the run's facts."""
    return json.dumps(
        {"meta": meta, "calibration": asdict(cal), "rows": [asdict(r) for r in rows]}, indent=1
    )


def plot_endless(rows: Sequence[EndlessRow], window: int, path: Path, title: str) -> None:
    """Windowed accuracy of every method over the stream; below, each one's gap to no-adapt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    none = next((r for r in rows if not row_named(r.method).adapts), None)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    for k, r in enumerate(rows):
        at = [(i + 0.5) * window for i in range(len(r.windows))]
        top.plot(at, r.windows, color=f"C{k}", lw=1.2, label=f"{r.method} ({r.accuracy:.2f} %)")
        gaps = _gaps(r, none)
        if gaps is not None:
            bottom.plot(at, gaps, color=f"C{k}", lw=1.2, label=r.method)
    bottom.axhline(0, color="black", lw=0.8)
    bottom.axhline(-ALLOWED_GAP, color="black", ls=":", lw=1, label=f"−{ALLOWED_GAP:g} point")
    top.set_ylabel(f"accuracy per {window:,} samples, %")
    bottom.set_ylabel("− no-adapt, points")
    bottom.set_xlabel("samples")
    top.set_title(title)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
