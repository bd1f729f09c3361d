"""Speed and memory: per-sample predict/adapt latency, torch reference vs. RealmRuntime.

Torch and every runtime backend (SPEC §8: the portable ``onnx`` step graph and the
``ort-training`` artifacts, exported only where that backend is timed) run on the same machine,
with the same thread count and the same input stream, taking turns in blocks
(``take_turns``), so each backend's figures stand beside the same torch figures. With
``runtime_python``, one more side runs the onnx backend in another interpreter (the newest
onnxruntime, no torch), driven block by block in the same turns (``_external``). The
runtime's peak memory is measured in a separate process that imports only ``realm_runtime``,
with torch made unimportable, as on a device (``_rss``).

Beside the times: the physical floor (FLOPs of a predict and of an updating step, counted on
the torch reference, over the machine's peak FLOP/s; see ``_flops``) and the cost of each
method (REALM, Tent, EATA) through both implementations.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from realm_runtime import RealmConfig, onnxruntime_module
from realm_runtime.measure import updating_overrides
from realm_runtime.methods import EXPORTED as METHODS  # the bench times exports
from realm_runtime.methods import REALM, method_named
from realm_sdk import RealmAdapter

from .._timing import block_ratios, take_turns, timed_side
from ..models import build_model
from ._external import ExternalRuntime
from ._flops import MachinePeak, machine_peak, step_flops
from ._rss import runtime_only_peak_rss, torch_only_peak_rss
from ._speed_rows import MethodRow, SpeedRow

if TYPE_CHECKING:  # realm_export is imported where an export runs (bench_model)
    from realm_export import ExportInfo

# The method whose figures lead the table (export time, memory, the floor): REALM.
_MAIN = REALM.name


def _filters_nothing(name: str) -> bool:
    """A method that updates on every sample (Tent): its adapt is already its updating step."""
    rules = method_named(name)
    return not (rules.diversity or rules.entropy_cut or rules.step_cut)


def _predict_sides(
    model: nn.Module,
    config: RealmConfig,
    artifacts: Path,
    backends: Sequence[str],
    threads: int,
    xs: np.ndarray,
    warmup: int,
    external: ExternalRuntime | None = None,
) -> dict[str, np.ndarray]:
    """Interleaved predict times of torch (key ``"torch"``), each backend and ``external``."""
    from realm_runtime import RealmRuntime

    adapter = RealmAdapter(copy.deepcopy(model), config)
    sides = {"torch": timed_side(lambda x: adapter.predict(torch.from_numpy(x)), xs)}
    for b in backends:
        sides[b] = timed_side(RealmRuntime(artifacts, threads=threads, backend=b).predict, xs)  # type: ignore[arg-type]
    with contextlib.ExitStack() as stack:
        if external is not None:
            sides[external.label] = stack.enter_context(external.side(artifacts, {}, "predict"))
        return take_turns(sides, len(xs), warmup)


def _adapt_sides(
    model: nn.Module,
    config: RealmConfig,
    overrides: dict[str, Any],
    artifacts: Path,
    backends: Sequence[str],
    threads: int,
    xs: np.ndarray,
    warmup: int,
    external: ExternalRuntime | None = None,
) -> dict[str, tuple[np.ndarray, float]]:
    """Interleaved adapt times and update rates: torch (``"torch"``), backends, ``external``."""
    from realm_runtime import RealmRuntime

    adapter = RealmAdapter(copy.deepcopy(model), config.with_overrides(**overrides))
    runtimes = {b: _runtime(RealmRuntime, artifacts, threads, overrides, b) for b in backends}
    sides = {"torch": timed_side(lambda x: adapter.adapt(torch.from_numpy(x)), xs)}
    sides |= {b: timed_side(rt.adapt, xs) for b, rt in runtimes.items()}
    rates = {"torch": lambda: _rate(adapter.state)}
    rates |= {b: (lambda rt=rt: _rate(rt.state)) for b, rt in runtimes.items()}
    with contextlib.ExitStack() as stack:
        if external is not None:
            remote = stack.enter_context(external.side(artifacts, overrides, "adapt"))
            sides[external.label], rates[external.label] = remote, remote.rate
        times = take_turns(sides, len(xs), warmup)
        return {k: (times[k], rate()) for k, rate in rates.items()}


def _runtime(
    factory: Any, artifacts: Path, threads: int, overrides: dict[str, Any], backend: str
) -> Any:
    """A runtime of ``backend``; forced settings on "onnx" time its step graph (the twin's).

    The speed table's "onnx" step is the portable step graph, the same forward and backward
    as the adapt graph's updating branch, so that its figures stay those of one graph per
    call; ``realm bench adapt`` times the adapt graph itself, skip and update.
    """
    if overrides and backend == "onnx":
        return factory(
            artifacts, threads=threads, overrides=overrides, backend="onnx-steps", schedule="train"
        )
    return factory(artifacts, threads=threads, overrides=overrides, backend=backend)


def _rate(state: Any) -> float:
    return state.updates / max(state.samples, 1)  # type: ignore[no-any-return]


def bench_model(
    name: str,
    *,
    threads: int = 2,
    samples: int = 30,
    warmup: int = 10,
    work_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    image_size: int | None = None,
    peak: MachinePeak | None = None,
    torch_rss: bool = True,
    backends: Sequence[str] = ("onnx", "ort-training"),
    runtime_python: str | None = None,
) -> list[SpeedRow]:
    """Time one model: torch reference and RealmRuntime, predict and REALM adapt, batch 1.

    The stream is random normal inputs (a fixed seed), ``warmup`` untimed then ``samples``
    timed ones; the ImageNet preset for the 1000-class models, the CIFAR preset for the
    digits model. Update rates count every call, warm-up included.

    Args:
        name: a key of :data:`MODELS` or ``"timm:<model>"``.
        threads: torch and ONNX Runtime intra-op threads.
        samples: timed samples per measurement.
        warmup: untimed calls before each measurement.
        work_dir: where the temporary artifacts go (default: the system's temp folder).
        seed: seed of the weights and of the input stream.
        methods: methods of the per-method table (each exports its own artifacts); REALM's
            own figures come from the main measurement.
        image_size: square input side instead of the model's (smoke runs).
        peak: the machine's peak at ``threads`` (measured here when None).
        torch_rss: measure the torch-only process's peak RSS (a fresh torch import: seconds).
        backends: the runtime backends to time, each beside the same torch figures.
        runtime_python: another interpreter (e.g. ``.venv-runtime/bin/python``: the newest
            onnxruntime, no torch) that also times the onnx backend, in a process of its own
            that takes its turns with the others; its row's backend reads
            ``onnx@ORT <version> (py <version>)``, its peak RSS is a fresh runtime-only
            process's under that interpreter, like the other rows'.

    Returns:
        One row per backend, each with one :class:`MethodRow` per method in ``methods``.

    Raises:
        ValueError: an unknown model or method.
    """
    from realm_export import ExportOptions, export_realm_artifacts

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {METHODS}")
    torch.manual_seed(seed)
    model, shape, classes = build_model(name, image_size)
    preset = "cifar" if classes == 10 else "imagenet"
    configs = {
        m: RealmConfig.preset(preset, num_classes=classes, method=m)  # type: ignore[arg-type]
        for m in dict.fromkeys([_MAIN, *methods])
    }
    # (warmup + samples, C, H, W): distinct warm-up samples, then the timed ones.
    xs = np.random.default_rng(seed).standard_normal((warmup + samples, *shape)).astype(np.float32)
    peak = peak if peak is not None else machine_peak(threads)
    missing = _no_training_artifacts(configs) if "ort-training" in backends else None
    if missing is not None:
        # The legacy artifacts never veto the product: that backend sits this model out.
        print(f"{name}: no ort-training timing: {missing}")
        backends = [b for b in backends if b != "ort-training"]
    training = "ort-training" in backends  # its artifacts, asked for only where it is timed
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        dirs = {m: Path(tmp) / f"{name.replace(':', '_')}-{m}" for m in configs}
        infos = {
            m: export_realm_artifacts(
                model,
                dirs[m],
                ExportOptions(config=cfg, input_shape=(1, *shape), training=training),
            )
            for m, cfg in configs.items()
        }
        torch.set_num_threads(threads)
        flops = {
            m: step_flops(model, cfg, torch.from_numpy(xs[0][None])) for m, cfg in configs.items()
        }
        memory: dict[str, float] = {}
        external = (
            ExternalRuntime(runtime_python, xs, threads) if runtime_python is not None else None
        )
        try:
            timings = _time_sides(model, configs, dirs, backends, threads, xs, warmup, external)
            if external is not None:
                backends = [*backends, external.label]
        finally:
            if external is not None:
                external.close()
        if torch_rss:
            torch.save(model.state_dict(), Path(tmp) / "weights.pt")
            memory["torch"] = torch_only_peak_rss(
                name, Path(tmp) / "weights.pt", preset, xs, threads, image_size
            )
        for b in backends:
            if external is not None and b == external.label:  # the onnx backend, over there
                memory[b] = runtime_only_peak_rss(dirs[_MAIN], xs, threads, "onnx", runtime_python)
            else:
                memory[b] = runtime_only_peak_rss(dirs[_MAIN], xs, threads, b)
    common = {"model": name, "threads": threads, "samples": samples}
    export = {"export_s": infos[_MAIN].seconds, "validation": _validation(infos[_MAIN])}
    return [
        replace(_speed_row(common, b, timings, flops, memory, peak, methods), **export)
        for b in backends
    ]


def _validation(info: ExportInfo) -> dict[str, dict[str, float]]:
    """Largest errors of each validated graph of an export (``ExportInfo``)."""
    reports = {"training": info.validation, "portable": info.portable_validation}
    return {
        role: {
            "logits_max_abs": report.logits_max_abs,
            "loss_max_abs": report.loss_max_abs,
            "grad_max_rel": max(report.grad_max_rel.values(), default=0.0),
        }
        for role, report in reports.items()
        if report is not None
    }


def _no_training_artifacts(configs: dict[str, RealmConfig]) -> str | None:
    """Why the legacy training artifacts cannot be exported for every method; None: they can."""
    for method, config in configs.items():
        if config.rules.legacy_training is not None:
            return f"{method}: {config.rules.legacy_training}"
    # Imported through realm_runtime first: onnxruntime-training's import-time check.
    onnxruntime_module()
    if importlib.util.find_spec("onnxruntime.training") is None:
        return "onnxruntime-training 1.19.2 is not installed (it exists for Python 3.11)"
    return None


def _time_sides(
    model: nn.Module,
    configs: dict[str, RealmConfig],
    dirs: dict[str, Path],
    backends: Sequence[str],
    threads: int,
    xs: np.ndarray,
    warmup: int,
    external: ExternalRuntime | None = None,
) -> dict[str, dict[str, Any]]:
    """Per side (torch, each backend, ``external``): predict times; per method, (times, rate).

    Twice per method: the preset's adapt, and the updating step (the filters forced open).
    """
    # Torch and every backend take turns on the same samples (take_turns).
    args = (backends, threads, xs, warmup, external)
    predict = _predict_sides(model, configs[_MAIN], dirs[_MAIN], *args)
    adapt = {m: _adapt_sides(model, cfg, {}, dirs[m], *args) for m, cfg in configs.items()}
    # A method without a filter (Tent) updates on every sample: its adapt is its step.
    step = {
        m: adapt[m]
        if _filters_nothing(m)
        else _adapt_sides(model, cfg, updating_overrides(cfg), dirs[m], *args)
        for m, cfg in configs.items()
    }
    return {
        side: {
            "predict": predict[side],
            "adapt": {m: adapt[m][side] for m in configs},
            "step": {m: step[m][side] for m in configs},
        }
        for side in predict
    }


def _speed_row(
    common: dict[str, Any],
    backend: str,
    timings: dict[str, dict[str, Any]],
    flops: dict[str, tuple[float, float]],
    memory: dict[str, float],
    peak: MachinePeak,
    methods: Sequence[str],
) -> SpeedRow:
    """One backend's row beside the torch figures (medians; p90 of REALM's adapt)."""
    t_pred, t_adapt, t_step = (timings["torch"][k] for k in ("predict", "adapt", "step"))
    r_pred, r_adapt, r_step = (timings[backend][k] for k in ("predict", "adapt", "step"))
    method_rows = tuple(
        MethodRow(
            **common,
            backend=backend,
            method=m,
            step_gflop=flops[m][1],
            update_rate=r_adapt[m][1],
            step_update_rate=min(t_step[m][1], r_step[m][1]),
            torch_adapt_ms=float(np.median(t_adapt[m][0])),
            torch_step_ms=float(np.median(t_step[m][0])),
            runtime_adapt_ms=float(np.median(r_adapt[m][0])),
            runtime_step_ms=float(np.median(r_step[m][0])),
        )
        for m in methods
    )
    return SpeedRow(
        **common,
        backend=backend,
        update_rate=r_adapt[_MAIN][1],
        torch_predict_ms=float(np.median(t_pred)),
        torch_adapt_ms=float(np.median(t_adapt[_MAIN][0])),
        torch_adapt_p90_ms=float(np.percentile(t_adapt[_MAIN][0], 90)),
        torch_step_ms=float(np.median(t_step[_MAIN][0])),
        runtime_predict_ms=float(np.median(r_pred)),
        runtime_adapt_ms=float(np.median(r_adapt[_MAIN][0])),
        runtime_adapt_p90_ms=float(np.percentile(r_adapt[_MAIN][0], 90)),
        runtime_step_ms=float(np.median(r_step[_MAIN][0])),
        torch_peak_rss_mb=memory.get("torch"),
        runtime_peak_rss_mb=memory[backend],
        predict_gflop=flops[_MAIN][0],
        step_gflop=flops[_MAIN][1],
        peak=peak,
        methods=method_rows,
        step_ratio_blocks=block_ratios(r_step[_MAIN][0], t_step[_MAIN][0]),
    )
