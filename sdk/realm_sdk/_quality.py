"""The offline shift benchmark: does online adaptation help on corrupted digits streams?

Methods: no adaptation, Tent, EATA and REALM through the PyTorch reference, and REALM through
the torch-free ``RealmRuntime`` on exported artifacts; batch size 1, several stream orders.
Per run: online accuracy (over all samples seen so far), final accuracy, updates, the α/λ
trajectory, and accuracy on clean data after adaptation (forgetting).
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime._config import RealmConfig

from ._adapter import RealmAdapter
from ._digits import NUM_CLASSES, DigitsData, load_digits, train_digits_model
from ._evaluate import run_online

METHODS: tuple[str, ...] = ("none", "tent", "eata", "realm", "realm-runtime")
LABELS = {
    "none": "no-adapt",
    "tent": "Tent",
    "eata": "EATA",
    "realm": "REALM (torch)",
    "realm-runtime": "REALM (runtime)",
}


@dataclass
class QualityRun:
    """One method on one corrupted stream order."""

    method: str
    corruption: str
    severity: int
    seed: int
    accuracy: float  # % correct over the stream (pre-update predictions)
    clean_after: float  # % correct on the clean test split after adapting (forgetting)
    updates: int  # optimizer steps
    online_accuracy: list[float] = field(default_factory=list)  # % after each sample
    alpha: list[float] = field(default_factory=list)  # α after each sample (REALM)
    lam: list[float] = field(default_factory=list)  # λ after each sample (REALM)


def _clean_accuracy(predict: Callable[[np.ndarray], np.ndarray], data: DigitsData) -> float:
    x, y = data.stream("clean", 1, seed=0)
    return float((predict(x) == y).mean() * 100)


def _torch_predict(model: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(x)).argmax(1).numpy()

    return predict


def bench_quality(
    *,
    corruptions: Sequence[str],
    severity: int = 5,
    seeds: Sequence[int] = (0, 1, 2),
    methods: Sequence[str] = METHODS,
    preset: str = "cifar",
    limit: int | None = None,
    cache_dir: str | os.PathLike[str] | None = ".cache",
    on_run: Callable[[str, int], Callable[[int], None] | None] | None = None,
    source: nn.Module | None = None,
) -> list[QualityRun]:
    """Run every method on every (corruption, seed) stream of the digits task.

    Args:
        corruptions: corruption names (``"clean"`` allowed).
        severity: 1–5.
        seeds: stream orders (and corruption noise).
        methods: a subset of :data:`METHODS`.
        preset: hyper-parameters for Tent, EATA and REALM.
        limit: use only the first ``limit`` samples of each stream (quick runs).
        cache_dir: where the source model is cached.
        on_run: ``(label, total) -> progress`` for progress bars.
        source: the source model (default: :func:`train_digits_model`, cached).

    Returns:
        One :class:`QualityRun` per method × corruption × seed.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {METHODS}")
    data = load_digits()
    if source is None:
        source = train_digits_model(data, cache_dir=cache_dir)
    runs: list[QualityRun] = []
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = None
        if "realm-runtime" in methods:
            from realm_export import export_realm_artifacts

            artifacts = Path(tmp) / "digits"
            cfg = RealmConfig.preset(preset, num_classes=NUM_CLASSES)  # type: ignore[arg-type]
            export_realm_artifacts(source, artifacts, config=cfg, input_shape=(1, 1, 32, 32))
        for corruption in corruptions:
            for seed in seeds:
                x, y = data.stream(corruption, severity, seed=seed)
                if limit is not None:
                    x, y = x[:limit], y[:limit]
                for method in methods:
                    progress = on_run(f"{corruption}/s{seed}/{method}", len(x)) if on_run else None
                    runs.append(
                        _one_run(
                            method,
                            source,
                            data,
                            x,
                            y,
                            corruption,
                            severity,
                            seed,
                            preset,
                            artifacts,
                            progress,
                        )
                    )
    return runs


def _one_run(
    method: str,
    source: nn.Module,
    data: DigitsData,
    x: np.ndarray,
    y: np.ndarray,
    corruption: str,
    severity: int,
    seed: int,
    preset: str,
    artifacts: Path | None,
    progress: Callable[[int], None] | None,
) -> QualityRun:
    if method == "realm-runtime":
        from realm_runtime import RealmRuntime

        assert artifacts is not None
        rt = RealmRuntime(artifacts, threads=torch.get_num_threads())
        preds = np.empty(len(x), dtype=np.int64)
        alphas, lams = [], []
        for i in range(len(x)):
            preds[i] = rt.adapt(x[i : i + 1]).top1[0]
            st = rt.state
            alphas.append(float(st.alpha or 0.0))
            lams.append(float(st.lam or 0.0))
            if progress is not None:
                progress(i + 1)
        correct = preds == y
        online = np.cumsum(correct) / np.arange(1, len(x) + 1) * 100
        clean = _clean_accuracy(lambda xs: rt.predict(xs).argmax(1), data)
        return QualityRun(
            method,
            corruption,
            severity,
            seed,
            float(correct.mean() * 100),
            clean,
            rt.state.updates,
            online.tolist(),
            alphas,
            lams,
        )
    model = copy.deepcopy(source)
    if method == "none":
        result = run_online(model, x, y, progress=progress)
        clean = _clean_accuracy(_torch_predict(model), data)
    else:
        cfg = RealmConfig.preset(preset, num_classes=NUM_CLASSES, method=method)  # type: ignore[arg-type]
        adapter = RealmAdapter(model, cfg)
        result = run_online(adapter, x, y, progress=progress)
        clean = _clean_accuracy(_torch_predict(model), data)
    return QualityRun(
        method,
        corruption,
        severity,
        seed,
        result.accuracy * 100,
        clean,
        result.updates,
        (result.online_accuracy * 100).tolist(),
        list(result.alpha),
        list(result.lam),
    )


def quality_table(runs: Sequence[QualityRun]) -> str:
    """Markdown in the layout of the paper's Table 1: methods × corruptions, average column.

    Each cell is the mean accuracy (%) over seeds, ± the standard deviation when there are
    several; a last column gives the clean accuracy after adaptation (forgetting).
    """
    corruptions = list(dict.fromkeys(r.corruption for r in runs))
    methods = [m for m in METHODS if any(r.method == m for r in runs)]
    head = ["method", *corruptions, "average", "clean after"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        cells = [LABELS[m]]
        means = []
        for c in corruptions:
            acc = np.array([r.accuracy for r in runs if r.method == m and r.corruption == c])
            means.append(acc.mean())
            cells.append(f"{acc.mean():.1f}" + (f" ± {acc.std():.1f}" if len(acc) > 1 else ""))
        cells.append(f"**{np.mean(means):.1f}**")
        clean = np.array([r.clean_after for r in runs if r.method == m])
        cells.append(f"{clean.mean():.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_quality(runs: Sequence[QualityRun], out_dir: str | os.PathLike[str]) -> list[Path]:
    """PNG plots: online accuracy over the stream per corruption, and REALM's α/λ.

    Returns:
        The written files.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    corruptions = list(dict.fromkeys(r.corruption for r in runs))
    ncols = min(4, len(corruptions))
    nrows = -(-len(corruptions) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(corruptions) :]:
        ax.set_visible(False)
    for ax, c in zip(axes.flat, corruptions, strict=False):
        for m in METHODS:
            curves = [r.online_accuracy for r in runs if r.method == m and r.corruption == c]
            if curves:
                n = min(len(v) for v in curves)
                ax.plot(np.mean([v[:n] for v in curves], axis=0), label=LABELS[m])
        ax.set_title(c)
        ax.set_xlabel("samples seen")
        ax.set_ylabel("online accuracy (%)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    path = out / "online_accuracy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    realm = [r for r in runs if r.method in ("realm", "realm-runtime") and r.alpha]
    if realm:
        fig, (ax_a, ax_l) = plt.subplots(1, 2, figsize=(11, 3.6))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, c in enumerate(corruptions):
            for method, style in (("realm", "-"), ("realm-runtime", ":")):
                mine = [r for r in realm if r.corruption == c and r.method == method]
                if not mine:
                    continue
                n = min(len(r.alpha) for r in mine)
                label = c if method == "realm" else None
                color = colors[k % len(colors)]
                ax_a.plot(
                    np.mean([r.alpha[:n] for r in mine], axis=0), style, color=color, label=label
                )
                ax_l.plot(np.mean([r.lam[:n] for r in mine], axis=0), style, color=color)
        ax_a.set_title("α (shape), mean over stream orders")
        ax_l.set_title("λ (scale); dotted: RealmRuntime")
        for ax in (ax_a, ax_l):
            ax.set_xlabel("samples seen")
            ax.grid(alpha=0.3)
        fig.legend(loc="center right", fontsize=7, frameon=False)
        fig.tight_layout(rect=(0, 0, 0.85, 1))
        path = out / "alpha_lambda.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def runs_from_json(text: str) -> list[QualityRun]:
    """Inverse of :func:`runs_to_json` (to re-plot or re-tabulate a saved run)."""
    return [QualityRun(**r) for r in json.loads(text)["runs"]]


def runs_to_json(runs: Sequence[QualityRun], settings: dict[str, Any]) -> str:
    """Every number of every run, with the settings that produced them."""

    def compact(run: QualityRun) -> dict[str, Any]:
        data = asdict(run)
        data["online_accuracy"] = [round(v, 2) for v in run.online_accuracy]
        data["alpha"] = [float(f"{v:.6g}") for v in run.alpha]
        data["lam"] = [float(f"{v:.6g}") for v in run.lam]
        return data

    return json.dumps({"settings": settings, "runs": [compact(r) for r in runs]})
