"""The long-running benchmark: every method on the streams of :mod:`._streams`, no reset.

Rows: no adaptation, Tent, EATA, SAR, REALM as its paper runs it, and REALM with its default
guardrails (``RealmConfig``'s), all through the PyTorch reference at batch size 1. Per run:
accuracy over the stream (labelled samples), accuracy per pass or segment, clean accuracy after
the stream where the data has a clean split, the interventions by reason, and traces of the
windowed accuracy, α, λ, the drift from the source and the update rate, for the plots.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime import Guardrails, RealmConfig
from realm_sdk import RealmAdapter

from ._quality import _clean_accuracy, _torch_predict
from ._realdata import ShiftDataset
from ._streams import JUNK, NO_LABEL, Stream, StreamSettings, build_stream

STREAM_METHODS: tuple[str, ...] = ("none", "tent", "eata", "sar", "realm", "realm-guarded")
STREAM_LABELS = {
    "none": "no-adapt",
    "tent": "Tent",
    "eata": "EATA",
    "sar": "SAR",
    "realm": "REALM",
    "realm-guarded": "REALM + guardrails",
}
TRACE_POINTS = 400  # samples of each trace: enough for a plot, small in the JSON
EVENTS = ("resets_recovery", "resets_collapse", "drift_clips")


@dataclass
class StreamRun:
    """One method on one stream."""

    setting: str
    method: str
    seed: int
    samples: int  # length of the stream
    accuracy: float | None  # % correct over the labelled samples (None: no labels)
    segments: list[tuple[str, float]]  # (segment or pass, % correct) in stream order
    clean_after: float | None  # % correct on the clean split after the stream
    updates: int  # optimizer steps
    events: dict[str, int]  # interventions by reason (EVENTS)
    reset_at: list[int] = field(default_factory=list)  # samples after which a reset happened
    trace_at: list[int] = field(default_factory=list)  # sample index of each trace point
    trace: dict[str, list[float]] = field(default_factory=dict)  # accuracy, alpha, lam, ...


def method_config(method: str, preset: str, num_classes: int) -> RealmConfig:
    """The configuration of one row: the paper's, and REALM's defaults for the guarded row."""
    if method == "realm-guarded":
        return RealmConfig.preset(preset, num_classes=num_classes)  # type: ignore[arg-type]
    return RealmConfig.preset(
        preset,  # type: ignore[arg-type]
        num_classes=num_classes,
        method=method,  # type: ignore[arg-type]
        guardrails=Guardrails.off(),
    )


def run_stream(
    method: str,
    source: nn.Module,
    stream: Stream,
    *,
    preset: str,
    num_classes: int,
    clean: tuple[Any, np.ndarray] | None,
    progress: Callable[[int], None] | None = None,
) -> StreamRun:
    """One method through one stream, sample by sample, on a private copy of ``source``."""
    model = copy.deepcopy(source).eval()
    adapter = (
        None
        if method == "none"
        else RealmAdapter(model, method_config(method, preset, num_classes))
    )
    n = len(stream)
    every = max(1, n // TRACE_POINTS)
    correct = np.zeros(n, dtype=bool)
    trace: dict[str, list[float]] = {k: [] for k in ("alpha", "lam", "drift", "update_rate")}
    trace_at: list[int] = []
    reset_at: list[int] = []
    resets = 0
    for i in range(n):
        x = torch.from_numpy(stream.sample(i))
        if adapter is None:
            with torch.no_grad():
                top1 = int(model(x).argmax(1)[0])
        else:
            top1 = int(adapter.adapt(x).top1[0])
        correct[i] = top1 == stream.labels[i]
        if adapter is not None and ((i + 1) % every == 0 or i + 1 == n):
            st = adapter.state  # a snapshot costs a pass over θ: taken at trace points only
            trace_at.append(i)
            trace["alpha"].append(float(st.alpha or 0.0))
            trace["lam"].append(float(st.lam or 0.0))
            trace["drift"].append(st.drift)
            trace["update_rate"].append(float(st.update_rate or 0.0))
            if st.resets_recovery + st.resets_collapse != resets:
                reset_at.append(i)  # at trace resolution
                resets = st.resets_recovery + st.resets_collapse
        if progress is not None and ((i + 1) % 64 == 0 or i + 1 == n):
            progress(i + 1)
    labelled = stream.labels != NO_LABEL
    at = trace_at if adapter is not None else sorted({*range(every - 1, n, every), n - 1})
    window = _windowed(correct, labelled, at)
    segment = stream.segment_of()
    segments = []
    for k, (_, name) in enumerate(stream.segments):
        mask = (segment == k) & labelled
        if mask.any():
            segments.append((name, float(correct[mask].mean() * 100)))
    state = adapter.state if adapter is not None else None
    return StreamRun(
        setting=stream.setting,
        method=method,
        seed=-1,
        samples=n,
        accuracy=float(correct[labelled].mean() * 100) if labelled.any() else None,
        segments=segments,
        clean_after=_clean_accuracy(_torch_predict(model), clean),
        updates=state.updates if state is not None else 0,
        events={k: getattr(state, k) if state is not None else 0 for k in EVENTS},
        reset_at=reset_at,
        trace_at=at,
        trace={**(trace if adapter is not None else {}), "accuracy": window},
    )


def _windowed(correct: np.ndarray, labelled: np.ndarray, at: Sequence[int]) -> list[float]:
    """% correct over the last 500 labelled samples, at each trace point."""
    hits = np.cumsum(correct & labelled)
    seen = np.cumsum(labelled)
    out = []
    for i in at:
        j = max(0, np.searchsorted(seen, seen[i] - 500, side="right"))
        count = seen[i] - (seen[j - 1] if j > 0 else 0)
        got = hits[i] - (hits[j - 1] if j > 0 else 0)
        out.append(float(got / count * 100) if count else float("nan"))
    return out


def bench_streams(
    dataset: ShiftDataset,
    source: nn.Module,
    *,
    settings: Sequence[str],
    seeds: Sequence[int],
    corruptions: Sequence[str],
    methods: Sequence[str] = STREAM_METHODS,
    preset: str = "cifar",
    stream_settings: StreamSettings | None = None,
    on_run: Callable[[str, int], Callable[[int], None] | None] | None = None,
) -> list[StreamRun]:
    """Every method × setting × seed; ``episodic``: each corruption from the source, averaged.

    Returns:
        One :class:`StreamRun` per combination.
    """
    unknown = [m for m in methods if m not in STREAM_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {STREAM_METHODS}")
    clean = dataset.clean()
    shape = stream_settings or StreamSettings()

    def one(method: str, stream: Stream, label: str) -> StreamRun:
        progress = on_run(label, len(stream)) if on_run else None
        return run_stream(
            method,
            source,
            stream,
            preset=preset,
            num_classes=dataset.num_classes,
            clean=clean,
            progress=progress,
        )

    runs = []
    for setting in settings:
        for seed in seeds:
            if setting == "episodic":
                runs += [_episodic(dataset, m, seed, corruptions, shape, one) for m in methods]
                continue
            stream = build_stream(
                dataset, setting, seed=seed, corruptions=corruptions, settings=shape
            )
            for method in methods:
                run = one(method, stream, f"{setting}/s{seed}/{method}")
                run.seed = seed
                runs.append(run)
    return runs


def _episodic(
    dataset: ShiftDataset,
    method: str,
    seed: int,
    corruptions: Sequence[str],
    settings: StreamSettings,
    one: Callable[[str, Stream, str], StreamRun],
) -> StreamRun:
    """The paper's protocol as one row: each corruption from the source, then the mean."""
    parts = []
    for name in corruptions:
        x, y = dataset.stream(name, settings.severity, seed=seed, limit=settings.limit)
        rows = np.stack([np.zeros(len(y)), np.arange(len(y))], 1).astype(np.int64)
        stream = Stream("episodic", (x,), rows, np.asarray(y), ((0, name),))
        parts.append(one(method, stream, f"episodic/{name}/s{seed}/{method}"))
    cleans = [r.clean_after for r in parts if r.clean_after is not None]
    return StreamRun(
        setting="episodic",
        method=method,
        seed=seed,
        samples=sum(r.samples for r in parts),
        accuracy=float(np.mean([r.accuracy for r in parts if r.accuracy is not None])),
        segments=[(name, r.accuracy or 0.0) for name, r in zip(corruptions, parts, strict=True)],
        clean_after=float(np.mean(cleans)) if cleans else None,
        updates=sum(r.updates for r in parts),
        events={k: sum(r.events[k] for r in parts) for k in EVENTS},
    )


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
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = dict(zip(STREAM_METHODS, palette, strict=False))  # six rows, ten colours
    for setting in dict.fromkeys(r.setting for r in runs if r.trace):
        mine = [r for r in runs if r.setting == setting]
        seed = min(r.seed for r in mine)  # one seed drawn; the tables have all of them
        fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
        for r in (r for r in mine if r.seed == seed):
            color = colors[r.method]
            label = STREAM_LABELS[r.method]
            axes[0].plot(r.trace_at, r.trace["accuracy"], color=color, label=label, lw=1)
            if r.method.startswith("realm") and r.trace.get("lam"):
                style = "-" if r.method == "realm" else "--"
                axes[1].plot(r.trace_at, r.trace["lam"], style, color=color, label=f"λ {label}")
                axes[1].plot(r.trace_at, r.trace["alpha"], style, color=color, alpha=0.5)
            if r.trace.get("drift"):
                axes[2].plot(r.trace_at, r.trace["drift"], color=color, label=label, lw=1)
            for at in r.reset_at:
                axes[0].axvline(at, color=color, alpha=0.25, lw=0.8)
        axes[0].set_title(f"{setting}: accuracy over the last 500 samples (%)")
        axes[1].set_title("REALM's λ (bright) and α (faded)")
        axes[2].set_title("drift ‖θ − θ0‖ / ‖θ0‖")
        for ax in axes:
            ax.set_xlabel(f"samples (seed {seed}); vertical lines: resets")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        path = out / f"stream_{setting}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def streams_to_json(runs: Sequence[StreamRun], settings: dict[str, Any]) -> str:
    """Every figure of every run, with the settings that produced them."""

    def compact(run: StreamRun) -> dict[str, Any]:
        data = asdict(run)
        data["trace"] = {k: [float(f"{v:.5g}") for v in vs] for k, vs in run.trace.items()}
        return data

    return json.dumps({"settings": settings, "runs": [compact(r) for r in runs]})
