"""The offline shift benchmark: does online adaptation help on corrupted streams?

Methods: no adaptation, Tent, EATA and REALM through the PyTorch reference, and REALM through
the torch-free ``RealmRuntime`` on exported artifacts; batch size 1, several stream orders.
Data: the built-in digits task (default), or CIFAR-10-C / ImageNet-C from disk through any
:class:`~realm_tools.data.ShiftDataset`. Per run: online accuracy (over all samples seen so
far), final accuracy, updates, the α/λ trajectory, and, where the data has a clean split
(digits only), accuracy on clean data after adaptation (forgetting).
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

from realm_runtime import RealmConfig
from realm_runtime.methods import method_named
from realm_sdk import RealmAdapter
from realm_tools.bench import run_online
from realm_tools.data import DigitsShift, LazyImages, ShiftDataset, load_digits
from realm_tools.models import train_digits_model

from ..rows import QUALITY_DEFAULT, ROWS, Row, rows_where
from ._clean_state import clean_state_images
from ._table1 import episodic_table
from ._views import view_overrides

# Every row an episodic run can hold, in table order: no-adapt, each method, REALM in the
# runtime (rows with guardrails or periodic resets belong to the long-running streams).
METHODS: tuple[str, ...] = tuple(
    r.key for r in ROWS.values() if not r.guarded and r.reset_every is None
)

Samples = np.ndarray | LazyImages


@dataclass
class QualityRun:
    """One method on one corrupted stream order."""

    method: str
    corruption: str
    severity: int
    seed: int
    accuracy: float  # % correct over the stream (pre-update predictions)
    clean_after: float | None  # % correct on clean data after adapting (None: no clean split)
    updates: int  # optimizer steps
    online_accuracy: list[float] = field(default_factory=list)  # % after each sample
    alpha: list[float] = field(default_factory=list)  # α after each sample (REALM)
    lam: list[float] = field(default_factory=list)  # λ after each sample (REALM)


def _clean_accuracy(
    predict: Callable[[np.ndarray], np.ndarray], clean: tuple[Samples, np.ndarray] | None
) -> float | None:
    if clean is None:
        return None
    x, y = clean
    return float((predict(x[:]) == y).mean() * 100)


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
    methods: Sequence[str] = QUALITY_DEFAULT,
    preset: str = "cifar",
    limit: int | None = None,
    cache_dir: str | os.PathLike[str] | None = ".cache",
    on_run: Callable[[str, int], Callable[[int], None] | None] | None = None,
    source: nn.Module | None = None,
    dataset: ShiftDataset | None = None,
    epochs: int = 30,
) -> list[QualityRun]:
    """Run every method on every (corruption, seed) stream of a shifted test set.

    Args:
        corruptions: corruption names of the dataset (``"clean"`` allowed for the digits).
        severity: 1–5.
        seeds: stream orders (and, for the digits, the corruption noise).
        methods: a subset of :data:`METHODS`.
        preset: hyper-parameters for Tent, EATA and REALM.
        limit: use only the first ``limit`` samples of each stream (quick runs).
        cache_dir: where the digits source model is cached.
        on_run: ``(label, total) -> progress`` for progress bars.
        source: the source model (default for the digits: :func:`train_digits_model`,
            cached; required with a ``dataset``, e.g. from :func:`source_model`).
        dataset: the data (default: the built-in digits task), e.g.
            :func:`~realm_tools.data.load_cifar10c` or :func:`~realm_tools.data.load_imagenetc`.
        epochs: training epochs of the default digits source model.

    Returns:
        One :class:`QualityRun` per method × corruption × seed.
    """
    rows = rows_where(methods, METHODS, "the episodic quality benchmark")
    if dataset is None:
        digits = load_digits()
        dataset = DigitsShift(digits)
        if source is None:
            source = train_digits_model(digits, epochs=epochs, cache_dir=cache_dir)
    elif source is None:
        raise ValueError(
            f"the {dataset.name} benchmark needs its source model: pass source= "
            "(e.g. source_model('resnet50_gn', num_classes=1000, weights=...))"
        )
    bad = [c for c in corruptions if c not in dataset.corruptions]
    if bad:
        raise ValueError(
            f"unknown corruptions {bad} for {dataset.name}; known: {list(dataset.corruptions)}"
        )
    clean = dataset.clean()
    clean_state = clean_state_images(dataset, [r.key for r in rows])  # EATA's Fisher images
    # No-adapt leaves the model as it was: its clean accuracy is the source's, measured once.
    adapting = all(r.adapts for r in rows)
    source_clean = None if adapting else _clean_accuracy(_torch_predict(source), clean)
    runs: list[QualityRun] = []
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = None
        runtime = next((r for r in rows if r.runtime), None)
        if runtime is not None:
            from realm_export import ExportOptions, export_realm_artifacts

            artifacts = Path(tmp) / dataset.name
            cfg = RealmConfig.preset(
                preset,  # type: ignore[arg-type]
                num_classes=dataset.num_classes,
                method=runtime.method,  # type: ignore[arg-type]
            )
            export_realm_artifacts(
                source, artifacts, ExportOptions(config=cfg, input_shape=dataset.input_shape)
            )
        for corruption in corruptions:
            for seed in seeds:
                x, y = dataset.stream(corruption, severity, seed=seed, limit=limit)
                for row in rows:
                    progress = on_run(f"{corruption}/s{seed}/{row.key}", len(x)) if on_run else None
                    runs.append(
                        _one_run(
                            row,
                            source,
                            dataset.num_classes,
                            clean,
                            source_clean,
                            x,
                            y,
                            corruption,
                            severity,
                            seed,
                            preset,
                            artifacts,
                            progress,
                            clean_state=clean_state,
                            views=view_overrides(dataset),
                        )
                    )
    return runs


def _one_run(
    row: Row,
    source: nn.Module,
    num_classes: int,
    clean: tuple[Samples, np.ndarray] | None,
    source_clean: float | None,
    x: Samples,
    y: np.ndarray,
    corruption: str,
    severity: int,
    seed: int,
    preset: str,
    artifacts: Path | None,
    progress: Callable[[int], None] | None,
    *,
    clean_state: np.ndarray | None = None,
    views: dict[str, Any] | None = None,
) -> QualityRun:
    if row.runtime:
        from realm_runtime import RealmRuntime

        assert artifacts is not None
        rt = RealmRuntime(artifacts, threads=torch.get_num_threads())
        result = run_online(rt, x, y, progress=progress)
        after = _clean_accuracy(lambda xs: rt.predict(xs).argmax(1), clean)
    elif not row.adapts:
        result = run_online(copy.deepcopy(source), x, y, progress=progress)
        after = source_clean
    else:
        model = copy.deepcopy(source)
        own = (views or {}) if method_named(row.method).augments else {}  # type: ignore[arg-type]
        cfg = RealmConfig.preset(preset, num_classes=num_classes, method=row.method, **own)  # type: ignore[arg-type]
        adapter = RealmAdapter(model, cfg, clean_images=clean_state)
        result = run_online(adapter, x, y, progress=progress)  # type: ignore[arg-type]
        after = _clean_accuracy(_torch_predict(model), clean)
    return QualityRun(
        row.key,
        corruption,
        severity,
        seed,
        result.accuracy * 100,
        after,
        result.updates,
        (result.online_accuracy * 100).tolist(),
        list(result.alpha),
        list(result.lam),
    )


def quality_table(runs: Sequence[QualityRun]) -> str:
    """Markdown in the layout of the paper's Table 1 (:func:`episodic_table`, the one layout).

    A row per corruption, a column per method, each cell the mean accuracy (%) over seeds
    ± the standard deviation; then the average, the gain over no-adapt and, where the data
    has a clean split (the digits), the clean accuracy after adapting.
    """
    episodes = []
    for method in dict.fromkeys(r.method for r in runs):
        for seed in dict.fromkeys(r.seed for r in runs if r.method == method):
            mine = [r for r in runs if r.method == method and r.seed == seed]
            cleans = [r.clean_after for r in mine if r.clean_after is not None]
            episodes.append(
                _Episode(
                    method=method,
                    seed=seed,
                    samples=sum(len(r.online_accuracy) for r in mine),
                    accuracy=float(np.mean([r.accuracy for r in mine])),
                    segments=[(r.corruption, r.accuracy) for r in mine],
                    clean_after=float(np.mean(cleans)) if cleans else None,
                )
            )
    return "\n".join(episodic_table(episodes, {m: ROWS[m].label for m in METHODS}))


@dataclass(frozen=True)
class _Episode:
    """One method's episodic run over every corruption of one seed, as Table 1 reads it."""

    method: str
    seed: int
    samples: int  # over every corruption
    accuracy: float  # the mean over the corruptions
    segments: list[tuple[str, float]]  # (corruption, accuracy)
    clean_after: float | None
    setting: str = "episodic"


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
                ax.plot(np.mean([v[:n] for v in curves], axis=0), label=ROWS[m].label)
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

    realm = [r for r in runs if ROWS[r.method].learns_alpha_lambda and r.alpha]
    if realm:
        fig, (ax_a, ax_l) = plt.subplots(1, 2, figsize=(11, 3.6))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, c in enumerate(corruptions):
            for method in dict.fromkeys(r.method for r in realm):
                mine = [r for r in realm if r.corruption == c and r.method == method]
                if not mine:
                    continue
                n = min(len(r.alpha) for r in mine)
                style = ":" if ROWS[method].runtime else "-"
                label = None if ROWS[method].runtime else c
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
