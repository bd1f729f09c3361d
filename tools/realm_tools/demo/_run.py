"""The end-to-end demo job: a source model on shifted streams, no-adapt vs. adaptation."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from realm_runtime import RealmConfig
from realm_runtime.methods import REALM, methods_costing
from realm_sdk import RealmAdapter

from ..bench import run_online
from ..data import (
    IMAGE_SIZE,
    NUM_CLASSES,
    DigitsData,
    digits_preprocessing,
    load_digits,
    write_stream_folder,
)
from ._task import DemoTask, digits_task

if TYPE_CHECKING:  # the export extra is optional for the SDK
    from realm_export import ExportInfo

# The demo's columns: the methods whose update costs one forward and one backward (the costlier
# ones are in the lab's tables), REALM last, beside its α, λ and speed.
METHOD_ORDER = methods_costing(1.0)


@dataclass(frozen=True)
class DemoRow:
    """One corruption's figures: accuracy (%) per method and REALM's end state."""

    corruption: str
    source: float  # no-adapt accuracy, %
    accuracy: dict[str, float]  # method -> online accuracy over the stream, %
    updates: dict[str, int]  # method -> optimizer steps applied
    alpha: float  # REALM's α at the end of the stream
    lam: float  # REALM's λ at the end of the stream
    ms_per_sample: float  # REALM adapt() wall time per sample


def run_demo(
    task: DemoTask | None = None,
    *,
    corruptions: Sequence[str] | None = None,
    severity: int = 5,
    seed: int = 0,
    preset: str = "cifar",
    on_stream: Callable[[str, int], Callable[[int], None]] | None = None,
) -> tuple[float, list[DemoRow]]:
    """Adapt the task's source model on shifted streams, batch size 1, with the SDK.

    Args:
        task: what to adapt (default: the digits, :func:`digits_task`).
        corruptions: corruption names to stream (default: the task's).
        severity: 1–5.
        seed: the stream order.
        preset: ``"cifar"`` or ``"imagenet"`` hyper-parameters.
        on_stream: ``(label, total) -> progress(done)`` for each stream (progress bars).

    Returns:
        ``(clean accuracy %, rows)``.
    """
    task = task or digits_task()
    source = task.source
    clean_x, clean_y = task.clean(seed)
    clean = run_online(source, clean_x, clean_y).accuracy * 100
    rows = []
    for corruption in corruptions or task.default_corruptions:
        x, y = task.stream(corruption, severity, seed)
        base = run_online(source, x, y).accuracy * 100
        acc: dict[str, float] = {}
        updates: dict[str, int] = {}
        alpha = lam = float("nan")
        ms = float("nan")
        for method in METHOD_ORDER:
            cfg = RealmConfig.preset(preset, num_classes=NUM_CLASSES, method=method)  # type: ignore[arg-type]
            adapter = RealmAdapter(copy.deepcopy(source), cfg, clean_images=clean_x)
            progress = on_stream(f"{corruption}/{method}", len(x)) if on_stream else None
            start = time.perf_counter()
            result = run_online(adapter, x, y, progress=progress)
            elapsed = time.perf_counter() - start
            acc[method] = result.accuracy * 100
            updates[method] = result.updates
            if cfg.rules.learns_alpha_lambda:  # the demo's α, λ and speed columns
                st = adapter.state
                alpha, lam = float(st.alpha or 0.0), float(st.lam or 0.0)
                ms = elapsed / len(x) * 1e3
        rows.append(DemoRow(corruption, base, acc, updates, alpha, lam, ms))
    return clean, rows


def format_demo(
    clean: float,
    rows: Sequence[DemoRow],
    *,
    severity: int,
    samples: int,
    model: str = "digits GN CNN",
) -> str:
    """The demo's results as a plain-text table."""
    head = f"{'corruption':<16}{'no-adapt':>9}" + "".join(f"{m:>8}" for m in METHOD_ORDER)
    head += f"{'REALM upd':>11}{'α':>7}{'λ':>7}{'ms/sample':>11}"
    lines = [
        f"{model}, clean accuracy {clean:.1f}%; severity {severity}, batch 1, "
        f"{samples} samples per stream",
        head,
        "-" * len(head),
    ]
    for r in rows:
        line = f"{r.corruption:<16}{r.source:>9.1f}"
        line += "".join(f"{r.accuracy[m]:>8.1f}" for m in METHOD_ORDER)
        line += f"{r.updates[REALM.name]:>11d}{r.alpha:>7.3f}{r.lam:>7.3f}{r.ms_per_sample:>11.2f}"
        lines.append(line)
    n = max(len(rows), 1)
    avg = f"{'average':<16}{sum(r.source for r in rows) / n:>9.1f}"
    avg += "".join(f"{sum(r.accuracy[m] for r in rows) / n:>8.1f}" for m in METHOD_ORDER)
    lines.append("-" * len(head))
    lines.append(avg)
    torch_threads = torch.get_num_threads()
    lines.append(f"(torch {torch.__version__}, {torch_threads} threads)")
    return "\n".join(lines)


@dataclass(frozen=True)
class RuntimeDemo:
    """The export → runtime leg of the demo, on one shifted stream."""

    artifacts: str  # the exported artifact directory
    stream_file: str  # the stream saved for examples/edge_app.py
    corruption: str  # the stream's corruption (severity as in the demo)
    source: float  # no-adapt accuracy, %
    sdk: float  # REALM accuracy through the PyTorch reference, %
    runtime: float  # REALM accuracy through RealmRuntime, %
    runtime_updates: int  # RealmRuntime's optimizer steps
    sdk_updates: int  # the reference's optimizer steps
    export_seconds: float  # export + validation wall time
    ms_median: float  # RealmRuntime adapt() latency per sample, median
    ms_p90: float  # ... 90th percentile
    sdk_ms_median: float  # RealmAdapter.adapt() latency per sample, median


def export_digits_artifacts(
    source: nn.Module,
    data: DigitsData | None,
    directory: str | os.PathLike[str],
    config: RealmConfig,
    **options: Any,
) -> ExportInfo:
    """Export the digits model, its preprocessing in the manifest: the one digits export.

    The test suite's fixtures export through this, so their artifacts differ only in the
    configuration and ``options``; the demo and the web page's site builder export the task's
    model with the same manifest fields, from :func:`digits_task`.

    Args:
        source: the digits model (trained, or any model of the task's input).
        data: the digits task, whose mean/std go into the manifest (None: :func:`load_digits`).
        directory: the artifact directory (replaced if it exists).
        config: the adaptation settings of the export.
        **options: further :class:`realm_export.ExportOptions` fields
            (``ort_format``, ``signing_key``, ``web``, ...).

    Returns:
        What :func:`realm_export.export_realm_artifacts` wrote.
    """
    from realm_export import ExportOptions, export_realm_artifacts

    return export_realm_artifacts(
        source,
        directory,
        ExportOptions(
            config=config,
            input_shape=(1, 1, IMAGE_SIZE, IMAGE_SIZE),
            overwrite=True,
            model_info={"name": "digits", "source": "realm_tools.train_digits_model"},
            # also for a model that does not come from train_digits_model
            preprocessing=digits_preprocessing(data if data is not None else load_digits()),
            **options,
        ),
    )


def run_runtime_demo(
    task: DemoTask | None = None,
    *,
    corruption: str = "gaussian_noise",
    severity: int = 5,
    seed: int = 0,
    preset: str = "cifar",
    out_dir: str | os.PathLike[str] = "artifacts",
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> RuntimeDemo:
    """Export the task's source model and adapt it with the torch-free runtime.

    Writes ``<out_dir>/<task>`` (the artifacts), ``<out_dir>/<task>_stream.npz`` (the
    shifted stream with labels, for ``examples/edge_app.py``) and the same stream as
    ``<out_dir>/<task>_stream/`` (one ``.npy`` a sample and ``labels.json``, for
    ``examples/node/edge-app.mjs``), runs the stream through
    :class:`realm_runtime.RealmRuntime` and through :class:`RealmAdapter`, and times both.
    """
    import numpy as np

    from realm_export import ExportOptions, export_realm_artifacts
    from realm_runtime import RealmRuntime

    task = task or digits_task()
    source = task.source
    cfg = RealmConfig.preset(preset, num_classes=NUM_CLASSES)  # type: ignore[arg-type]
    out = Path(out_dir)
    artifacts = out / task.name
    info = export_realm_artifacts(
        source,
        artifacts,
        ExportOptions(
            config=cfg,
            input_shape=task.input_shape,
            overwrite=True,
            model_info=task.model_info,
            preprocessing=task.preprocessing,
        ),
    )
    x, y = task.stream(corruption, severity, seed)
    stream_file = out / f"{task.name}_stream.npz"
    np.savez(stream_file, images=x, labels=y, corruption=corruption, severity=severity)
    write_stream_folder(out / f"{task.name}_stream", x, y)

    base = run_online(source, x, y).accuracy * 100
    rt = RealmRuntime(artifacts, threads=threads)
    on_runtime = run_online(rt, x, y, progress=progress, alpha_lambda=False)
    adapter = RealmAdapter(copy.deepcopy(source), cfg)
    on_sdk = run_online(adapter, x, y, alpha_lambda=False)
    times, sdk_times = on_runtime.seconds, on_sdk.seconds
    return RuntimeDemo(
        artifacts=str(artifacts),
        stream_file=str(stream_file),
        corruption=corruption,
        source=base,
        sdk=on_sdk.accuracy * 100,
        runtime=on_runtime.accuracy * 100,
        runtime_updates=rt.state.updates,
        sdk_updates=adapter.state.updates,
        export_seconds=info.seconds,
        ms_median=float(np.median(times[10:]) * 1e3),  # after a 10-sample warm-up
        ms_p90=float(np.percentile(times[10:], 90) * 1e3),
        sdk_ms_median=float(np.median(sdk_times[10:]) * 1e3),
    )


def format_runtime_demo(r: RuntimeDemo, *, severity: int) -> str:
    """The export → runtime leg as text."""
    return "\n".join(
        [
            f"exported the source model to {r.artifacts}/ in {r.export_seconds:.1f} s "
            "(validated against the PyTorch reference)",
            f"{r.corruption}, severity {severity}, batch 1, torch-free RealmRuntime:",
            f"  no-adapt {r.source:.1f}%   REALM (torch SDK) {r.sdk:.1f}% ({r.sdk_updates} updates)"
            f"   REALM (RealmRuntime) {r.runtime:.1f}% ({r.runtime_updates} updates)",
            f"  RealmRuntime adapt: {r.ms_median:.2f} ms/sample median, {r.ms_p90:.2f} ms p90 "
            f"(torch SDK: {r.sdk_ms_median:.2f} ms median)",
            f"the stream is saved in {r.stream_file}; run the edge app on it (no torch needed):",
            f"  python examples/edge_app.py --artifacts {r.artifacts} --stream {r.stream_file}",
            "or the Node.js edge app on the same stream, one .npy a sample (make web-deps first):",
            f"  node examples/node/edge-app.mjs --artifacts {r.artifacts} "
            f"--stream {Path(r.stream_file).with_suffix('')}",
        ]
    )
