"""The run of one parity case: both sides step by step, judged after every step.

The near-tie and overflow rules it judges steps by are explained in the package docstring
(``realm_tools.parity``).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime import ALPHA_MAX, ALPHA_MIN, COUNTERS, LAMBDA_MIN, RealmConfig
from realm_runtime.contract import INTERVENTIONS, PARAMS_NAME, VELOCITY_NAME
from realm_runtime.methods import method_named
from realm_sdk import RealmAdapter, decision_margin, prediction_cosines

from ._cases import ARBITER, ParityCase, build_case, make_stream
from ._exports import ExportCache
from ._judge import (
    OVERFLOW_INPUT,
    QUANTITIES,
    TIE_MARGIN,
    TOLERANCES,
    abs_diff,
    judge_step,
    max_abs,
    max_diff,
    step_tie,
    within_tolerance,
)
from ._report import ParityReport


def run_case(
    case: ParityCase,
    *,
    device: str = "cpu",
    work_dir: str | os.PathLike[str] | None = None,
    threads: int | None = 1,
    on_step: Callable[[int], None] | None = None,
    backends: Sequence[str] | None = None,
    reference_device: str = "cpu",
    exports: ExportCache | None = None,
) -> list[ParityReport]:
    """Export the case's model once; run its stream through each backend and the SDK.

    Args:
        case: what to compare.
        device: the runtime's execution provider (``"cpu"`` or ``"cuda"``).
        work_dir: where the temporary artifacts go (default: the system's temp folder).
        threads: the runtime's intra-op threads (``None``: ONNX Runtime's default).
        on_step: called with the number of steps done, over all backends.
        backends: the runtime backends to compare, each against a fresh SDK run
            (default: the case's).
        reference_device: the torch device the SDK runs on; ``"cuda"`` compares a runtime
            on the CPU with a CUDA reference (cuDNN/cuBLAS kernels instead of ATen's CPU ones).
        exports: exports shared with other cases (default: this case's own, exported with
            its configuration); settings that differ from a shared export's reach the
            runtime as ``overrides``.

    Returns:
        One report per backend, in the order of ``backends``.
    """
    model, config, shape = build_case(case)
    clean = clean_images(shape) if config.rules.clean_state else None
    reports = []
    # The float32 SDK runs the same path for every backend: one float64 run serves them all.
    arbiter = (
        _float64_path(case, model, config, shape, reference_device, clean) if case.arbiter else None
    )
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        cache = exports if exports is not None else ExportCache(tmp)
        backends = case.backends if backends is None else backends
        legacy_gap = method_named(case.method).legacy_training
        training = "ort-training" in backends and legacy_gap is None  # asked for where run
        artifacts, overrides = cache.artifacts(
            case.model, model, config, shape, training=training, clean=clean
        )
        for index, backend in enumerate(backends):
            progress = None
            if on_step is not None:  # one count over all backends: k + the steps before
                progress = _offset(on_step, index * case.steps)
            report = ParityReport(
                case.name,
                case.model,
                case.preset,
                case.method,
                case.steps,
                case.batch,
                device,
                backend,
                reference_device=reference_device,
                tolerance={**TOLERANCES, **case.tolerance},
                overrides=sorted(overrides),
            )
            if backend == "ort-training" and legacy_gap is not None:
                report.not_applicable = f"{legacy_gap} (SPEC §4)"
            elif backend in ("onnx", "onnx-steps") and case.batch > 1:
                report.not_applicable = (
                    f"batch {case.batch}: the portable step graph takes one sample per step "
                    "(SPEC §3: batches are a convenience of the training artifacts)"
                )
            else:
                _run_stream(
                    case,
                    model,
                    config,
                    artifacts,
                    report,
                    shape,
                    device,
                    threads,
                    progress,
                    arbiter,
                    clean,
                )
            reports.append(report)
    return reports


@contextlib.contextmanager
def _full_float32(device: torch.device) -> Iterator[None]:
    """On CUDA, run convolutions and matmuls in full float32 for the duration.

    cuDNN's TF32 default (a 10-bit mantissa) would put the reference ~1e-3 away from any
    float32 runtime.
    """
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _offset(on_step: Callable[[int], None], base: int) -> Callable[[int], None]:
    return lambda done: on_step(base + done)


def _run_stream(
    case: ParityCase,
    model: nn.Module,
    config: RealmConfig,
    artifacts: Path,
    report: ParityReport,
    shape: tuple[int, ...],
    device: str,
    threads: int | None,
    on_step: Callable[[int], None] | None,
    arbiter: _Float64Path | None = None,
    clean: np.ndarray | None = None,
) -> None:
    from realm_runtime import RealmRuntime

    worst = dict.fromkeys(QUANTITIES, 0.0)
    near = dict.fromkeys(ARBITER, 0.0)  # see _arbitrate
    rt = RealmRuntime(
        artifacts,
        device=device,
        threads=threads,
        overrides={name: getattr(config, name) for name in report.overrides},
        backend=report.backend,  # type: ignore[arg-type]
    )
    ref = torch.device(report.reference_device)
    adapter = RealmAdapter(copy.deepcopy(model).to(ref), config, clean_images=clean)
    with tempfile.TemporaryDirectory() as scratch, _full_float32(ref):
        sync = Path(scratch) / "sdk-state.npz"
        before = Path(scratch) / "sdk-before.npz"
        for step, x in enumerate(make_stream(case, shape)):
            adapter.save(before)  # to tell a step tie from a disagreement (step_tie)
            margin, cos_sdk = decision_margin(adapter, x)
            ema_rt = rt.state.ema
            r = rt.adapt(np.ascontiguousarray(x))
            s = adapter.adapt(torch.from_numpy(x).to(ref))
            if cos_sdk is not None and ema_rt is not None and np.isfinite(r.logits).all():
                finite = np.isfinite(cos_sdk)
                if finite.any():
                    cos_rt = prediction_cosines(r.logits, ema_rt)
                    report.cos_error = max(
                        report.cos_error, float(np.abs(cos_rt - cos_sdk)[finite].max())
                    )
            verdict = judge_step(r, s, margin, float(np.abs(x).max()))
            if verdict == "near-tie" or (verdict == "same" and margin < TIE_MARGIN):
                report.near_ties += 1
            elif verdict != "overflow":
                report.min_margin = min(report.min_margin, margin)
            if verdict in ("near-tie", "overflow"):  # both branches are right: go on from the SDK's
                if verdict == "overflow":
                    report.overflow_resynced += 1
                else:
                    report.near_ties_resynced += 1
                adapter.save(sync)
                rt.restore(sync)
            elif verdict == "mismatch":
                report.decision_mismatches += 1
                if report.first_mismatch is None:
                    report.first_mismatch = step
            # An arbitrated case's float64 SDK judges such steps first (either SDK passes); a
            # runtime far from both may still have taken the step with other gates at a kink.
            found: list[str] = []
            scale = worst.get("_v_scale", 0.0)  # the run's so far (_compare_state)
            tie = verdict == "same" and (
                arbiter is None or not _near_float64(rt, arbiter, step, scale)
            )
            if tie and step_tie(rt, adapter, s, x, before, found, model, scale):
                report.step_ties += 1
                report.kinks += [f"step {step}: {k}" for k in found]
            if np.isfinite(r.logits).all() and torch.isfinite(s.logits).all():
                worst["logits"] = max(worst["logits"], abs_diff(r.logits, s.logits.cpu().numpy()))
            gaps = _compare_state(rt, adapter, worst, report)
            if arbiter is not None:
                _arbitrate(rt, gaps, arbiter, step, near)
            if on_step is not None:
                on_step(step + 1)
    st = rt.state
    report.max_abs = {q: worst[q] for q in QUANTITIES}
    if arbiter is not None:
        momentum = near["momentum"] / max(worst["_v_scale"], 1e-12)
        report.arbitrated = {"params": near["params"], "momentum": momentum}
        report.arbitrated_steps = len(arbiter.states)
        report.sdk_float64 = dict(arbiter.sdk_distance)
    report.updates = st.updates
    report.skipped_diversity = st.skipped_diversity
    report.skipped_entropy = st.skipped_entropy
    report.skipped_nonfinite = st.skipped_nonfinite
    report.interventions = {k: getattr(st, k) for k in INTERVENTIONS}
    mine = adapter.state
    report.watch_error = max(
        abs((st.update_rate or 0.0) - (mine.update_rate or 0.0)),
        abs((st.entropy_ema or 0.0) - (mine.entropy_ema or 0.0)),
        abs((st.loss_ema or 0.0) - (mine.loss_ema or 0.0)),
        abs(st.drift - mine.drift),
    )


def clean_images(shape: tuple[int, ...], count: int = 16) -> np.ndarray:
    """Seeded finite inputs standing for an app's clean images (EATA's Fisher)."""
    rng = np.random.default_rng(1234)
    return rng.standard_normal((count, *shape)).astype(np.float32)


@dataclass(frozen=True)
class _Float64Path:
    """A float64 SDK run beside the float32 one, while the two decide alike."""

    states: list[dict[str, dict[str, np.ndarray]]]  # per step: ARBITER quantity -> arrays
    sdk_distance: dict[str, float]  # the float32 SDK's worst distance from it, as max_abs


def _float64_path(
    case: ParityCase,
    model: nn.Module,
    config: RealmConfig,
    shape: tuple[int, ...],
    reference_device: str,
    clean: np.ndarray | None = None,
) -> _Float64Path:
    """Run the case's stream through a float32 and a float64 SDK side by side.

    An input that overflows float32 (the stream's 3e38 samples) is raised to 1e300 for the
    float64 run, so that it overflows there too and both refuse the step alike. The run ends
    at the first step the two decide differently (a near-tie): from there on the paths
    part, and only the float32 SDK judges the runtime.
    """
    ref = torch.device(reference_device)
    single = RealmAdapter(copy.deepcopy(model).to(ref), config, clean_images=clean)
    fisher = single.fisher or None  # the float32 F the graphs hold, for both
    double = RealmAdapter(copy.deepcopy(model).to(ref, torch.float64), config, fisher=fisher)
    states: list[dict[str, dict[str, np.ndarray]]] = []
    worst, scale = {"params": 0.0, "momentum": 0.0}, 0.0
    with _full_float32(ref):
        for x in make_stream(case, shape):
            wide = x.astype(np.float64)
            huge = np.abs(wide) >= OVERFLOW_INPUT
            wide[huge] = np.copysign(1e300, wide[huge])
            a = single.adapt(torch.from_numpy(x).to(ref))
            b = double.adapt(torch.from_numpy(wide).to(ref))
            if judge_step(a, b, 0.0, 0.0) != "same":
                break
            mine, theirs = _arrays(double), _arrays(single)
            states.append(mine)
            worst["params"] = max(worst["params"], max_diff(theirs["params"], mine["params"]))
            worst["momentum"] = max(
                worst["momentum"], max_diff(theirs["momentum"], mine["momentum"])
            )
            scale = max(scale, max_abs(theirs["momentum"]))
    worst["momentum"] /= max(scale, 1e-12)
    return _Float64Path(states, worst)


def _arbitrate(
    rt: Any, gaps: dict[str, float], arbiter: _Float64Path, step: int, near: dict[str, float]
) -> None:
    """Keep the worst, over the steps, of the runtime's distance to the nearer SDK.

    A float32 side within tolerance of either the float32 SDK (``gaps``, this step's) or the
    float64 one (where that ran) computed the step right: the references' own gap is float32
    rounding.
    """
    mine = {"params": rt.trainable_parameters(), "momentum": rt.momentum_buffers()}
    for q in ARBITER:
        gap = gaps[q]
        if step < len(arbiter.states):
            gap = min(gap, max_diff(mine[q], arbiter.states[step][q]))
        near[q] = max(near[q], gap)


def _near_float64(rt: Any, arbiter: _Float64Path, step: int, momentum_scale: float) -> bool:
    """Whether the runtime lies within tolerance of the float64 SDK after ``step``."""
    if step >= len(arbiter.states):
        return False
    wide = arbiter.states[step]
    flat = {
        PARAMS_NAME: np.concatenate([v.reshape(-1) for v in wide["params"].values()]),
        VELOCITY_NAME: np.concatenate([v.reshape(-1) for v in wide["momentum"].values()]),
    }
    return within_tolerance(rt, flat, momentum_scale)


def _arrays(adapter: RealmAdapter) -> dict[str, dict[str, np.ndarray]]:
    """The ARBITER quantities of an SDK, in float64."""

    def host(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        return {n: t.detach().cpu().numpy().astype(np.float64) for n, t in tensors.items()}

    return {
        "params": host(adapter.trainable_parameters()),
        "momentum": host(adapter.momentum_buffers()),
    }


def _compare_state(
    rt: Any, adapter: RealmAdapter, worst: dict[str, float], report: ParityReport
) -> dict[str, float]:
    """Fold this step's differences into ``worst``; returns the step's ARBITER gaps (abs)."""
    pa, pb = rt.trainable_parameters(), adapter.trainable_parameters()
    pb = {n: t.cpu().numpy() for n, t in pb.items()}
    va, vb = rt.momentum_buffers(), adapter.momentum_buffers()
    vb = {n: t.cpu().numpy() for n, t in vb.items()}
    gaps = {"params": max_diff(pa, pb), "momentum": max_diff(va, vb)}
    worst["params"] = max(worst["params"], gaps["params"])
    # Momentum: the run's largest abs difference over the run's largest buffer entry.
    worst["_v_abs"] = max(worst.get("_v_abs", 0.0), gaps["momentum"])
    worst["_v_scale"] = max(worst.get("_v_scale", 0.0), max_abs(vb))
    worst["momentum"] = worst["_v_abs"] / max(worst["_v_scale"], 1e-12)
    sa, sb = rt.state, adapter.state
    if sb.alpha is not None:
        worst["alpha"] = max(worst["alpha"], abs(sa.alpha - sb.alpha))
        worst["lam"] = max(worst["lam"], abs(sa.lam - sb.lam) / max(1.0, abs(sb.lam)))
        report.alpha_at_bound |= math.isclose(sb.alpha, ALPHA_MIN, rel_tol=1e-6) or math.isclose(
            sb.alpha, ALPHA_MAX, rel_tol=1e-6
        )
        report.lambda_at_bound |= math.isclose(sb.lam, LAMBDA_MIN, rel_tol=1e-6)
    if (sa.ema is None) != (sb.ema is None):
        report.counter_mismatches += 1
    elif sa.ema is not None:
        worst["ema"] = max(worst["ema"], abs_diff(sa.ema, sb.ema))
    if any(getattr(sa, c) != getattr(sb, c) for c in COUNTERS):
        report.counter_mismatches += 1
    return gaps
