"""The attack-stream table, its JSON and plot: clean accuracy after each attacked stream."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..rows import NO_ADAPT, row_named
from ._frame_stream import FrameRow
from ._frames import FrameSettings
from ._report import ALLOWED_DROP


def _label(row: FrameRow) -> str:
    if not row_named(row.method).adapts:
        return NO_ADAPT.label
    return f"{row.method} + guardrails" if row.guarded else row.method


def format_frame_attacks(rows: Sequence[FrameRow], settings: FrameSettings) -> str:
    """Per model: one row per method and guardrails, one column group per attacker's share."""
    lines: list[str] = []
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        shares = sorted({r.share for r in mine if row_named(r.method).adapts})
        source = mine[0].source_accuracy
        lines += [
            f"**{model}** (source {source:.1f} % clean; {mine[0].frames} frames per stream)",
            "",
            "| method | "
            + " | ".join(f"{s:.0%}: clean after | {s:.0%}: benign online" for s in shares)
            + " |",
            "|---|" + "---|---|" * len(shares),
        ]
        for label in dict.fromkeys(_label(r) for r in mine):
            at = {r.share: r for r in mine if _label(r) == label}
            cells = []
            for s in shares:
                r = at.get(s) or (next(iter(at.values())) if label == NO_ADAPT.label else None)
                if r is None:
                    cells += ["", ""]
                    continue
                mark = " **✗**" if r.drop > ALLOWED_DROP else ""
                online = "" if r.benign_online is None else f"{r.benign_online:.1f}"
                sign = "+" if r.drop <= 0 else "−"
                cells += [f"{r.clean_after:.1f} ({sign}{abs(r.drop):.1f}){mark}", online]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        f"Clean accuracy (%) after the stream (drop from the source; ✗: more than "
        f"{ALLOWED_DROP:g} points) and online accuracy (%) on the stream's benign frames. "
        f"The attacker crafts each of its frames with {settings.iterations} signed-gradient "
        f"steps on the pixels (first step {settings.step:g} of the pixel range, cosine decay), "
        f"looking one step ahead through the method's own step on {settings.batch} of its "
        "own labelled training images; a 100 % stream has no benign frame."
    )
    return "\n".join(lines)


def frame_attacks_to_json(
    rows: Sequence[FrameRow], settings: FrameSettings, meta: dict[str, object]
) -> str:
    """Every row, the attacker's settings and the run's facts."""
    return json.dumps(
        {"meta": meta, "settings": asdict(settings), "rows": [asdict(r) for r in rows]},
        indent=1,
        default=float,
    )


def plot_frame_attacks(rows: Sequence[FrameRow], path: Path) -> None:
    """Per model: clean accuracy after the stream against the attacker's share, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r.model for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        mine = [r for r in rows if r.model == model]
        source = mine[0].source_accuracy
        labels = [lb for lb in dict.fromkeys(_label(r) for r in mine) if lb != NO_ADAPT.label]
        for k, label in enumerate(labels):
            points = sorted((r for r in mine if _label(r) == label), key=lambda r: r.share)
            ax.plot(
                [100 * r.share for r in points],
                [r.clean_after for r in points],
                "o-" if "guardrails" in label else "o--",
                color=f"C{k // 2}",
                label=label,
            )
        ax.axhline(source, color="black", lw=1, label=f"source ({source:.1f} %)")
        ax.axhline(source - ALLOWED_DROP, color="black", ls=":", lw=1, label="source − 2")
        ax.set_xscale("log")
        ax.set_xlabel("attacker's frames, % of the stream")
        ax.set_ylabel("clean accuracy after the stream, %")
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
