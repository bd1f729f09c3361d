"""One model through export, validation and the runtime, timed beside torch: its row."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._models import COVERAGE_CLASSES, COVERAGE_PRESET, coverage_input_size, family_of
from ._row import WARMUP, CoverageRow, Status

if TYPE_CHECKING:  # the worker imports these where it needs them
    from torch import nn

    from realm_runtime import RealmConfig

# --------------------------------------------------------------------- one model (the worker)


def measure_model(
    name: str,
    work_dir: str | os.PathLike[str],
    *,
    image_size: int = 128,
    threads: int = 2,
    samples: int = 3,
    seed: int = 0,
) -> CoverageRow:
    """Build, export, validate and adapt one timm architecture in this process.

    Never raises for the model's sake: an exception at any stage becomes the row's
    ``status`` (``refused`` where the export raised, ``failed`` elsewhere), ``stage``,
    ``error_type`` and ``error``.

    Args:
        name: a timm architecture.
        work_dir: an existing folder for the artifacts (left for the caller to remove).
        image_size: the square side of models whose input size is not fixed.
        threads: torch's and ONNX Runtime's intra-op threads.
        samples: timed samples per figure, after ``WARMUP`` untimed ones.
        seed: seed of the weights and the samples.
    """
    import torch

    from realm_export import ExportOptions, ValidationError, export_realm_artifacts
    from realm_runtime import RealmConfig

    from ..models import timm_model

    family = family_of(name)
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        model = timm_model(name, num_classes=COVERAGE_CLASSES).eval()
        shape = coverage_input_size(model, image_size)
    except Exception as exc:
        return _failed(name, family, "failed", "build", exc)
    config = RealmConfig.preset(COVERAGE_PRESET, num_classes=COVERAGE_CLASSES)
    out = Path(work_dir) / name
    start = time.perf_counter()
    try:
        # The product's graphs; the legacy training artifacts are the export's on request.
        options = ExportOptions(config=config, input_shape=(1, *shape))
        info = export_realm_artifacts(model, out, options)
    except Exception as exc:
        seconds = time.perf_counter() - start
        row = _failed(name, family, "refused", "export", exc, input_size=shape, export_s=seconds)
        report = getattr(exc, "report", None) if isinstance(exc, ValidationError) else None
        if report is not None:  # the numbers that failed, not only the verdict
            return CoverageRow(**{**asdict(row), **_figures(report, "refused")})
        return row
    export_s = time.perf_counter() - start
    portable, training = info.portable_validation, info.validation
    report, role = (portable, "portable") if portable is not None else (training, "training")
    common: dict[str, Any] = {
        "input_size": shape,
        "export_s": export_s,
        **(_figures(report, role) if report is not None else {}),
        # None where not asked for: the table says "—", not "no".
        "training_artifacts": ("training_model" in info.files) if options.training else None,
        "training_error": info.training_error if options.training else None,
        "portable_error": info.portable_error,
        "artifact_mb": sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6,
        "trainable_tensors": len(info.trainable),
    }
    try:
        timings = _time_model(model, config, out, shape, threads, samples, seed)
    except _StageError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        return _failed(name, family, "failed", exc.stage, cause, **common)
    return CoverageRow(name, family, "ok", samples=samples, **common, **timings)


class _StageError(RuntimeError):
    """An error of the timing stage, naming the side that raised (runtime or torch)."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


def _failed(
    name: str, family: str, status: Status, stage: str, exc: BaseException, **values: Any
) -> CoverageRow:
    message = str(exc).strip() or repr(exc)
    return CoverageRow(
        name, family, status, stage=stage, error_type=type(exc).__name__, error=message, **values
    )


def _figures(report: Any, role: str) -> dict[str, Any]:
    """The row's validation figures from a ``ValidationReport`` (``to_dict``'s names)."""
    d = report.to_dict()
    return {
        "figures_from": role,
        "logits_max_abs": d["logits_max_abs_diff"],
        "loss_max_abs": d["loss_max_abs_diff"],
        "grad_max_rel": d["grad_max_rel_diff"],
        "grad_worst_tensor": d["grad_worst_tensor"],
        "atol": d["atol"],
        "grad_rtol": d["grad_rtol"],
        "logits_tolerance": d.get("logits_tolerance", d["atol"]),  # where the export reports it
        "grad_tolerance": d.get("grad_tolerance", d["grad_rtol"]),
        "validation_passed": d["passed"],
    }


def _time_model(
    model: nn.Module,
    config: RealmConfig,
    artifacts: Path,
    shape: tuple[int, ...],
    threads: int,
    samples: int,
    seed: int,
) -> dict[str, Any]:
    """Median predict and updating-step milliseconds, RealmRuntime beside torch / the SDK.

    The sides take turns on the same samples (``take_turns``), ``WARMUP`` untimed ones
    first. The step runs with S_div forced open (``updating_overrides``) and the runtime's
    ``train`` schedule, so each timed call is one updating step on both sides.
    """
    import numpy as np
    import torch

    from realm_runtime import RealmRuntime
    from realm_runtime.measure import updating_overrides
    from realm_sdk import RealmAdapter

    from .._timing import take_turns, timed_side

    warmup = WARMUP
    xs = np.random.default_rng(seed).standard_normal((warmup + samples, *shape)).astype(np.float32)
    forced = updating_overrides(config)
    try:
        predictor = RealmRuntime(artifacts, threads=threads)
        stepper = RealmRuntime(artifacts, threads=threads, overrides=forced, schedule="train")
    except Exception as exc:
        raise _StageError("runtime") from exc
    try:
        reference = copy.deepcopy(model).eval()
        adapter = RealmAdapter(copy.deepcopy(model), config.with_overrides(**forced))
    except Exception as exc:
        raise _StageError("torch") from exc

    def forward(x: np.ndarray) -> None:
        with torch.no_grad():
            reference(torch.from_numpy(x))

    # Which side raised decides the stage: the runtime's and the SDK's calls are wrapped.
    predict = take_turns(
        {
            "runtime": timed_side(_on_stage("runtime", predictor.predict), xs),
            "torch": timed_side(_on_stage("torch", forward), xs),
        },
        len(xs),
        warmup,
    )
    step = take_turns(
        {
            "runtime": timed_side(_on_stage("runtime", stepper.adapt), xs),
            "sdk": timed_side(_on_stage("torch", lambda x: adapter.adapt(torch.from_numpy(x))), xs),
        },
        len(xs),
        warmup,
    )
    rates = [s.state.updates / max(s.state.samples, 1) for s in (stepper, adapter)]
    return {
        "backend": predictor.backend,
        "runtime_predict_ms": float(np.median(predict["runtime"])),
        "torch_predict_ms": float(np.median(predict["torch"])),
        "runtime_step_ms": float(np.median(step["runtime"])),
        "sdk_step_ms": float(np.median(step["sdk"])),
        "step_update_rate": min(rates),
    }


def _on_stage(stage: str, fn: Callable[[Any], object]) -> Callable[[Any], object]:
    def call(x: Any) -> object:
        try:
            return fn(x)
        except Exception as exc:
            raise _StageError(stage) from exc

    return call
