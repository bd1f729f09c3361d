"""The worst-case curve as a table, JSON and a plot: clean accuracy against the drift bound."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ._worst_case import SearchSettings, WorstCase

ALLOWED_DROP = 2.0  # points below the source the guarantee allows


def format_worst_case(
    curves: dict[str, list[WorstCase]], settings: SearchSettings, counts: dict[str, int]
) -> str:
    """One row per model, one column per bound: the lowest clean accuracy found (drop)."""
    bounds = sorted({p.bound for points in curves.values() for p in points})
    lines = [
        "| model | images | source % | "
        + " | ".join(f"b = {b:g}" for b in bounds)
        + f" | largest b with drop ≤ {ALLOWED_DROP:g} |",
        "|---|---|---|" + "---|" * len(bounds) + "---|",
    ]
    for name, points in curves.items():
        at = {p.bound: p for p in points}
        cells = [
            f"{at[b].worst_accuracy:.1f} (−{at[b].drop:.1f})" if b in at else "" for b in bounds
        ]
        safe = [p.bound for p in points if p.drop <= ALLOWED_DROP]
        largest = f"{max(safe):g}" if safe else "none tried"
        lines.append(
            f"| {name} | {counts[name]} | {points[0].source_accuracy:.1f} | "
            + " | ".join(cells)
            + f" | {largest} |"
        )
    lines += [
        "",
        f"Search: {settings.restarts} restarts × {settings.steps} steps "
        f"(losses alternate: margin, cross-entropy; first step {settings.step:g} of the "
        f"radius, cosine decay; {settings.batch} images per step), scored on every image "
        f"every {settings.eval_every} steps; the lowest score is the entry.",
    ]
    return "\n".join(lines)


def worst_case_to_json(
    curves: dict[str, list[WorstCase]], settings: SearchSettings, meta: dict[str, object]
) -> str:
    """Every point, the search's settings and the run's facts (CPU, counts, seconds)."""
    return json.dumps(
        {
            "meta": meta,
            "settings": asdict(settings),
            "curves": {name: [asdict(p) for p in points] for name, points in curves.items()},
        },
        indent=1,
    )


def plot_worst_case(curves: dict[str, list[WorstCase]], path: Path, title: str) -> None:
    """Per model: the worst clean accuracy against the bound, and its source − 2 line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, (name, points) in enumerate(curves.items()):
        colour = f"C{k}"
        ordered = sorted(points, key=lambda p: p.bound)
        ax.plot(
            [p.bound for p in ordered],
            [p.worst_accuracy for p in ordered],
            "o-",
            color=colour,
            label=f"{name} (source {ordered[0].source_accuracy:.1f} %)",
        )
        ax.axhline(ordered[0].source_accuracy - ALLOWED_DROP, color=colour, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("drift bound b (‖θ − θ0‖ ≤ b·‖θ0‖)")
    ax.set_ylabel("lowest clean accuracy found, %")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
