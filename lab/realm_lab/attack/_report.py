"""The worst-case curve as a table, JSON and a plot: clean accuracy against the drift bound."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from realm_export.bound import SHAPES, SearchSettings, WorstCase

ALLOWED_DROP = 2.0  # points below the source the guarantee allows
SHAPE_TITLES = {
    "l2": "ball ‖θ − θ0‖ ≤ b·‖θ0‖ (max_drift)",
    "box": "box |θ_i − θ0_i| ≤ b·rms(θ0_t), per entry (a candidate guardrail)",
}


def _shapes(curves: dict[str, list[WorstCase]]) -> list[str]:
    return [s for s in SHAPES if any(p.shape == s for ps in curves.values() for p in ps)]


def format_worst_case(
    curves: dict[str, list[WorstCase]], settings: SearchSettings, counts: dict[str, int]
) -> str:
    """Per shape, one row per model, one column per bound: the lowest accuracy found (drop)."""
    lines: list[str] = []
    for shape in _shapes(curves):
        lines += [f"**{SHAPE_TITLES[shape]}**", ""]
        of_shape = {n: [p for p in ps if p.shape == shape] for n, ps in curves.items()}
        lines += _table(of_shape, counts)
        lines.append("")
    lines += [
        f"Search: {settings.restarts} restarts × {settings.steps} steps "
        f"(losses alternate: margin, cross-entropy; first step {settings.step:g} of the "
        f"set's size, cosine decay; {settings.batch} images per step), scored on every image "
        f"every {settings.eval_every} steps; the lowest score is the entry. Each bound but "
        "the smallest has one more restart (margin loss), from the worst point of the next "
        "smaller bound (its set holds the smaller one).",
    ]
    return "\n".join(lines)


def _table(curves: dict[str, list[WorstCase]], counts: dict[str, int]) -> list[str]:
    curves = {name: points for name, points in curves.items() if points}
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
    return lines


def worst_case_to_json(
    curves: dict[str, list[WorstCase]], settings: SearchSettings, meta: dict[str, object]
) -> str:
    """Every point, the search's settings and the run's facts (CPU, counts, seconds)."""
    return json.dumps(
        {
            "meta": meta,
            "settings": asdict(settings),
            "curves": {name: [p.to_dict() for p in points] for name, points in curves.items()},
        },
        indent=1,
    )


def plot_worst_case(curves: dict[str, list[WorstCase]], path: Path, title: str) -> None:
    """Per shape, per model: the worst clean accuracy against the bound, and source − 2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = _shapes(curves)
    fig, axes = plt.subplots(
        1, len(shapes), figsize=(6.5 * len(shapes), 4.5), squeeze=False, sharey=True
    )
    for ax, shape in zip(axes[0], shapes, strict=True):
        for k, (name, points) in enumerate(curves.items()):
            ordered = sorted((p for p in points if p.shape == shape), key=lambda p: p.bound)
            if not ordered:
                continue
            colour = f"C{k}"
            ax.plot(
                [p.bound for p in ordered],
                [p.worst_accuracy for p in ordered],
                "o-",
                color=colour,
                label=f"{name} (source {ordered[0].source_accuracy:.1f} %)",
            )
            ax.axhline(ordered[0].source_accuracy - ALLOWED_DROP, color=colour, ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel(f"b: {SHAPE_TITLES[shape]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("lowest clean accuracy found, %")
    fig.suptitle(title + " (dotted: source − 2 points)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
