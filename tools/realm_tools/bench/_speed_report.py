"""The speed benchmark's tables, JSON and plot, from its rows."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ._speed_rows import MethodRow, SpeedRow


def _ratio(num: float, den: float | None) -> str:
    return "—" if den is None else f"{num / den:.2f}"


def format_speed(rows: list[SpeedRow]) -> str:
    """Markdown: the speed table, the FLOP floor table and (if measured) the per-method table.

    Milliseconds per sample (medians), ratios runtime/torch; "achieved" is the floor (FLOPs /
    measured peak) over the median time: the share of the machine's matmul speed reached.
    """
    head = (
        "| model | backend | threads | predict ms torch / runtime (ratio) | REALM adapt ms "
        "torch / runtime (ratio), update rate | updating step ms torch / runtime (ratio; range "
        "over the sides' alternating blocks) | "
        "peak RSS MB torch-only / runtime-only (ratio) |"
    )
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        torch_rss = "—" if r.torch_peak_rss_mb is None else f"{r.torch_peak_rss_mb:.0f}"
        lines.append(
            f"| {r.model} | {r.backend} | {r.threads} | {r.torch_predict_ms:.2f} / "
            f"{r.runtime_predict_ms:.2f} "
            f"({r.predict_ratio:.2f}) | {r.torch_adapt_ms:.2f} / {r.runtime_adapt_ms:.2f} "
            f"({r.adapt_ratio:.2f}), {r.update_rate:.2f} | {r.torch_step_ms:.2f} / "
            f"{r.runtime_step_ms:.2f} ({r.step_ratio:.2f}{_spread(r.step_ratio_blocks)}) | "
            f"{torch_rss} / "
            f"{r.runtime_peak_rss_mb:.0f} ({_ratio(r.runtime_peak_rss_mb, r.torch_peak_rss_mb)}) |"
        )
    tables = ["\n".join(lines), _format_floor(rows)]
    if any(r.export_s is not None for r in rows):
        tables.append(_format_exports(rows))
    if any(r.methods for r in rows):
        tables.append(_format_methods([m for r in rows for m in r.methods]))
    return "\n\n".join(tables)


def _spread(ratios: tuple[float, ...]) -> str:
    return f"; blocks {min(ratios):.2f}–{max(ratios):.2f}" if ratios else ""


def _format_floor(rows: list[SpeedRow]) -> str:
    peaks = {r.peak.describe(): None for r in rows}  # one line per distinct peak, in order
    lines = [
        *(f"{line[0].upper()}{line[1:]}." for line in peaks),
        "",
        "| model | backend | GFLOP predict / updating step | floor ms predict / step "
        "(measured peak) | floor ms step (theoretical peak) | achieved % predict torch / "
        "runtime | achieved % step torch / runtime |",
        "|" + "---|" * 7,
    ]
    for r in rows:
        pct = {k: f"{100 * v:.3g}" for k, v in r.achieved().items()}
        theory = r.step_floor_theoretical_ms
        lines.append(
            f"| {r.model} | {r.backend} | {r.predict_gflop:.3g} / {r.step_gflop:.3g} | "
            f"{r.predict_floor_ms:.3g} / {r.step_floor_ms:.3g} | "
            f"{'—' if theory is None else f'{theory:.3g}'} | "
            f"{pct['torch_predict_achieved']} / {pct['runtime_predict_achieved']} | "
            f"{pct['torch_step_achieved']} / {pct['runtime_step_achieved']} |"
        )
    return "\n".join(lines)


def _format_exports(rows: list[SpeedRow]) -> str:
    lines = [
        "| model | export s (validation included) | training artifacts vs torch: logits / "
        "loss / worst gradient (relative) | portable graph vs torch: logits / loss / worst "
        "gradient (relative) |",
        "|" + "---|" * 4,
    ]
    for r in {r.model: r for r in rows if r.export_s is not None}.values():
        cells = []
        for role in ("training", "portable"):
            v = r.validation.get(role)
            cells.append(
                "not written"
                if v is None
                else f"{v['logits_max_abs']:.1e} / {v['loss_max_abs']:.1e} / "
                f"{v['grad_max_rel']:.1e}"
            )
        lines.append(f"| {r.model} | {r.export_s:.1f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _format_methods(rows: list[MethodRow]) -> str:
    lines = [
        "| model | backend | method | GFLOP step | adapt ms torch / runtime (ratio), update "
        "rate | updating step ms torch / runtime (ratio), update rate |",
        "|" + "---|" * 6,
    ]
    for m in rows:
        lines.append(
            f"| {m.model} | {m.backend} | {m.method} | {m.step_gflop:.3g} | "
            f"{m.torch_adapt_ms:.2f} / "
            f"{m.runtime_adapt_ms:.2f} ({m.adapt_ratio:.2f}), {m.update_rate:.2f} | "
            f"{m.torch_step_ms:.2f} / {m.runtime_step_ms:.2f} ({m.step_ratio:.2f}), "
            f"{m.step_update_rate:.2f} |"
        )
    return "\n".join(lines)


def rows_to_json(rows: list[SpeedRow]) -> str:
    """Every figure of the rows as JSON: the peaks, the speed rows and the per-method rows.

    ``{"peaks": [...], "speed": [...], "methods": [...]}``; ratios, floors and achieved
    shares are included beside the measured figures.
    """
    peaks = {r.peak.threads: asdict(r.peak) | {"describe": r.peak.describe()} for r in rows}
    speed = []
    for r in rows:
        row = {k: v for k, v in asdict(r).items() if k not in ("peak", "methods")}
        speed.append(
            row
            | {
                "adapt_ratio": r.adapt_ratio,
                "predict_ratio": r.predict_ratio,
                "step_ratio": r.step_ratio,
                "peak_measured_gflops": r.peak.measured_gflops,
                "peak_theoretical_gflops": r.peak.theoretical_gflops,
                "predict_floor_ms": r.predict_floor_ms,
                "step_floor_ms": r.step_floor_ms,
                "step_floor_theoretical_ms": r.step_floor_theoretical_ms,
            }
            | r.achieved()
        )
    methods = [
        asdict(m) | {"adapt_ratio": m.adapt_ratio, "step_ratio": m.step_ratio}
        for r in rows
        for m in r.methods
    ]
    return json.dumps({"peaks": list(peaks.values()), "speed": speed, "methods": methods}, indent=2)


def plot_speed(figures: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Bar chart of runtime / torch time ratios per model, from :func:`rows_to_json`'s data.

    Args:
        figures: the parsed JSON (``{"speed": [...], ...}``).
        out: the PNG to write.

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = figures["speed"]
    kinds = [("predict", "predict"), ("adapt", "REALM adapt"), ("step", "updating step")]
    # Wide enough for one group of bars and a three-line label per row (model, backend).
    fig, ax = plt.subplots(figsize=(max(8.0, 0.95 * len(rows)), 3.8), dpi=110)
    width = 0.8 / len(kinds)
    for k, (key, label) in enumerate(kinds):
        xs = [i + (k - 1) * width for i in range(len(rows))]
        ax.bar(xs, [r[f"{key}_ratio"] for r in rows], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    top = max([r[f"{key}_ratio"] for r in rows for key, _ in kinds], default=1.0)
    ax.set_ylim(0, max(top, 1.0) * 1.3)  # room for the legend above the bars
    # "onnx@ORT 1.32.0 (py 3.13.0)" → "onnx" over "ORT 1.32.0": the Python version is in the
    # JSON and the tables, not needed under a bar.
    labels = [
        f"{r['model']}\n" + r.get("backend", "").split(" (py")[0].replace("@", "\n") for r in rows
    ]
    ax.set_xticks(range(len(rows)), labels, fontsize=8 if len(rows) > 10 else None)
    ax.set_ylabel("runtime / torch time")
    threads = rows[0]["threads"] if rows else "?"
    ax.set_title(f"RealmRuntime vs. the torch reference (batch 1, {threads} threads; < 1: faster)")
    ax.legend(frameon=False, ncols=3, loc="upper left")
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path)
    plt.close(fig)
    return path
