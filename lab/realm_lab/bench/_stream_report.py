"""Tables and plots of the long-running benchmark's runs (``bench_streams``).

Accuracy per setting, clean accuracy after each stream, the continual stream per pass, the
paper's Table 1 layout for the episodic setting, interventions by reason, and a line for
each place REALM loses; one plot per setting of windowed accuracy, α, λ and the drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from realm_runtime import Guardrails
from realm_tools.data import JUNK

from ..rows import row_named
from ._stream_run import EVENTS, STREAM_LABELS, STREAM_METHODS, StreamRun
from ._table1 import episodic_table


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    a = np.array(values)
    return f"{a.mean():.1f}" + (f" ± {a.std():.1f}" if len(a) > 1 else "")


def streams_tables(runs: Sequence[StreamRun]) -> str:
    """Markdown: accuracy per setting, clean accuracy after each, and continual per pass."""
    settings = list(dict.fromkeys(r.setting for r in runs))
    methods = [m for m in STREAM_METHODS if any(r.method == m for r in runs)]
    scored = [s for s in settings if s not in JUNK]
    out: list[str] = []
    if scored:  # junk streams alone have no labels to score
        out += ["### Online accuracy (%), mean ± std over seeds", ""]
        out += ["| method | " + " | ".join(scored) + " |", "|---" * (len(scored) + 1) + "|"]
        for m in methods:
            cells = [
                _cell([r.accuracy for r in runs if r.method == m and r.setting == s and r.accuracy])
                for s in scored
            ]
            out.append(f"| {STREAM_LABELS[m]} | " + " | ".join(cells) + " |")
    if any(r.clean_after is not None for r in runs):
        out += (
            ["", "### Clean accuracy (%) after each stream", ""]
            if out
            else [
                "### Clean accuracy (%) after each stream",
                "",
            ]
        )
        out += ["| method | " + " | ".join(settings) + " |", "|---" * (len(settings) + 1) + "|"]
        for m in methods:
            cells = [
                _cell(
                    [
                        r.clean_after
                        for r in runs
                        if r.method == m and r.setting == s and r.clean_after is not None
                    ]
                )
                for s in settings
            ]
            out.append(f"| {STREAM_LABELS[m]} | " + " | ".join(cells) + " |")
    table1 = episodic_table(runs, STREAM_LABELS)
    if table1:
        out += ["", *table1]
    losses = _where_realm_loses(runs, settings)
    if losses:
        out += ["", "### Where REALM loses (mean over seeds)", "", *losses]
    continual = [r for r in runs if r.setting == "continual"]
    if continual:
        passes = _passes(continual[0])
        out += ["", "### Continual: accuracy (%) per pass", ""]
        head = [f"pass {k + 1}" for k in range(len(passes))]
        out += ["| method | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
        for m in methods:
            mine = [_passes(r) for r in continual if r.method == m]
            cells = [_cell([p[k] for p in mine]) for k in range(len(passes))]
            out.append(f"| {STREAM_LABELS[m]} | " + " | ".join(cells) + " |")
    out += ["", "### Interventions (mean count per stream)", ""]
    out += ["| method | setting | " + " | ".join(EVENTS) + " |", "|---" * (len(EVENTS) + 2) + "|"]
    for m in methods:
        for s in settings:
            mine = [r for r in runs if r.method == m and r.setting == s]
            if mine and any(sum(r.events.values()) for r in mine):
                counts = [f"{np.mean([r.events[e] for r in mine]):.1f}" for e in EVENTS]
                out.append(f"| {STREAM_LABELS[m]} | {s} | " + " | ".join(counts) + " |")
    return "\n".join(out)


def _where_realm_loses(runs: Sequence[StreamRun], settings: Sequence[str]) -> list[str]:
    """One line per setting and figure where a REALM row is below EATA's or SAR's mean."""

    def mean(method: str, setting: str, figure: str) -> float | None:
        values = [
            getattr(r, figure)
            for r in runs
            if r.method == method and r.setting == setting and getattr(r, figure) is not None
        ]
        return float(np.mean(values)) if values else None

    lines = []
    for setting in settings:
        for figure, what in (("accuracy", "online accuracy"), ("clean_after", "clean after")):
            for realm in (m for m in STREAM_METHODS if row_named(m).learns_alpha_lambda):
                mine = mean(realm, setting, figure)
                if mine is None:
                    continue
                for rival in (m for m in STREAM_METHODS if _rival(m)):
                    theirs = mean(rival, setting, figure)
                    if theirs is not None and round(theirs, 1) > round(mine, 1):
                        lines.append(
                            f"- {setting}, {what}: {STREAM_LABELS[realm]} {mine:.1f} < "
                            f"{STREAM_LABELS[rival]} {theirs:.1f}"
                        )
    return lines


def _rival(key: str) -> bool:
    """A row REALM is measured against: another method, run as its paper does."""
    row = row_named(key)
    return row.adapts and not row.learns_alpha_lambda


def _passes(run: StreamRun) -> list[float]:
    """Accuracy per pass of a continual run: its segments grouped by repetition."""
    names = [name for name, _ in run.segments]
    per_pass = len(dict.fromkeys(names))
    values = [acc for _, acc in run.segments]
    return [float(np.mean(values[k : k + per_pass])) for k in range(0, len(values), per_pass)]


def plot_streams(runs: Sequence[StreamRun], out_dir: str | Path) -> list[Path]:
    """PNG per setting: windowed accuracy, α and λ, drift and update rate, resets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    # One colour per row the bench can run (tab20's twenty: more rows than the default ten).
    palette = [plt.get_cmap("tab20")(k % 20) for k in range(len(STREAM_METHODS))]
    colors = dict(zip(STREAM_METHODS, palette, strict=True))
    for setting in dict.fromkeys(r.setting for r in runs if r.trace):
        mine = [r for r in runs if r.setting == setting]
        seed = min(r.seed for r in mine)  # one seed drawn; the tables have all of them
        fig, axes = plt.subplots(1, 4, figsize=(20, 3.8))
        for r in (r for r in mine if r.seed == seed):
            color = colors[r.method]
            label = STREAM_LABELS[r.method]
            axes[0].plot(r.trace_at, r.trace["accuracy"], color=color, label=label, lw=1)
            row = row_named(r.method)
            if row.learns_alpha_lambda and r.trace.get("lam"):
                style = "--" if row.guarded else "-"
                axes[1].plot(r.trace_at, r.trace["lam"], style, color=color, label=f"λ {label}")
                axes[1].plot(r.trace_at, r.trace["alpha"], style, color=color, alpha=0.5)
            if r.trace.get("drift"):
                axes[2].plot(r.trace_at, r.trace["drift"], color=color, label=label, lw=1)
            if r.trace.get("update_rate"):
                axes[3].plot(r.trace_at, r.trace["update_rate"], color=color, label=label, lw=1)
            for ax in (axes[0], axes[3]):
                for at in r.reset_at:
                    ax.axvline(at, color=color, alpha=0.25, lw=0.8)
        bound = Guardrails().max_drift
        if bound is not None and any(row_named(r.method).guarded for r in mine):
            label = "drift bound at full rate (defaults)"
            axes[2].axhline(bound, color="grey", ls=":", lw=1, label=label)
        axes[0].set_title(f"{setting}: accuracy over the last 500 samples (%)")
        axes[1].set_title("REALM's λ (bright) and α (faded)")
        axes[2].set_title("drift ‖θ − θ0‖ / ‖θ0‖ (bound shrinks with the update rate)")
        axes[3].set_title("update rate (EMA over ~100 samples)")
        for ax in axes:
            ax.set_xlabel(f"samples (seed {seed}); vertical lines: resets")
            ax.grid(alpha=0.3)
        for ax in axes[:3]:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"stream_{setting}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
