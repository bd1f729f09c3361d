"""Speed and memory: per-sample predict/adapt latency, torch reference vs. RealmRuntime.

Torch and every runtime backend (SPEC §8: the portable ``onnx`` step graph and the
``ort-training`` artifacts) run on the same machine, with the same thread count and the same
input stream, taking turns in blocks (``take_turns``), so each backend's figures stand
beside the same torch figures. With ``runtime_python``, one more side runs the onnx backend
in another interpreter (the newest onnxruntime, no torch), driven block by block in the same
turns (``_external``). The runtime's peak memory is measured in a separate process that
imports only ``realm_runtime``, with torch made unimportable, as on a device (``_rss``).

Beside the times: the physical floor (FLOPs of a predict and of an updating step, counted on
the torch reference, over the machine's peak FLOP/s; see ``_flops``) and the cost of each
method (REALM, Tent, EATA) through both implementations.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from realm_runtime import METHODS, RealmConfig
from realm_sdk import RealmAdapter

from ..models import build_model
from ._external import ExternalRuntime
from ._flops import MachinePeak, count_flops, machine_peak
from ._rss import runtime_only_peak_rss, torch_only_peak_rss
from ._timing import block_ratios, forced_overrides, take_turns, timed_side

if TYPE_CHECKING:  # realm_export is imported where an export runs (bench_model)
    from realm_export import ExportInfo


class _AdaptRatios:
    """Runtime / torch ratios of the rows that time both sides' adapt and updating step."""

    torch_adapt_ms: float
    runtime_adapt_ms: float
    torch_step_ms: float
    runtime_step_ms: float

    @property
    def adapt_ratio(self) -> float:
        """Runtime adapt time / torch adapt time (target ≤ 1)."""
        return self.runtime_adapt_ms / self.torch_adapt_ms

    @property
    def step_ratio(self) -> float:
        """Runtime / torch time of a step that updates (target ≤ 1)."""
        return self.runtime_step_ms / self.torch_step_ms


@dataclass(frozen=True)
class MethodRow(_AdaptRatios):
    """One method's cost on one model (milliseconds per sample, batch 1, medians)."""

    model: str
    backend: str  # the runtime backend of the runtime_* figures
    method: str  # realm, tent or eata: the preset's settings with this method's loss/filters
    threads: int
    samples: int  # timed samples per measurement, after warm-up
    step_gflop: float  # counted FLOPs of one updating step of this method (torch reference)
    update_rate: float  # share of the runtime's normal-adapt samples that updated
    step_update_rate: float  # lowest share (torch, runtime) of forced samples that updated
    torch_adapt_ms: float  # adapt with the method's own filters
    torch_step_ms: float  # adapt with the filters forced open: every sample updates
    runtime_adapt_ms: float
    runtime_step_ms: float


@dataclass(frozen=True)
class SpeedRow(_AdaptRatios):
    """One model's figures on one runtime backend (milliseconds per sample, batch 1)."""

    model: str
    backend: str  # the runtime backend of the runtime_* figures ("onnx" or "ort-training")
    threads: int
    samples: int  # timed samples per measurement, after warm-up
    update_rate: float  # share of the timed REALM samples that updated
    torch_predict_ms: float  # median
    torch_adapt_ms: float  # median
    torch_adapt_p90_ms: float
    torch_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    runtime_predict_ms: float  # median
    runtime_adapt_ms: float  # median
    runtime_adapt_p90_ms: float
    runtime_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    torch_peak_rss_mb: float | None  # a torch-reference-only process; None: skipped (--quick)
    runtime_peak_rss_mb: float  # a process with realm_runtime only, torch unimportable
    predict_gflop: float  # counted FLOPs of one forward (matmul, conv, attention only)
    step_gflop: float  # the same for one updating REALM step: forward + input-gradient backward
    peak: MachinePeak  # the FLOP/s the floors divide by, at this row's thread count
    methods: tuple[MethodRow, ...] = ()  # REALM/Tent/EATA cost on the same stream
    # The REALM export the rows ran: wall time (validation included) and, per validated
    # graph ("training", "portable"), its largest logits / loss / relative gradient error.
    export_s: float | None = None
    validation: dict[str, dict[str, float]] = field(default_factory=dict)
    # The updating step's ratio in each of take_turns' blocks (ratio of the two sides'
    # medians within the block): how far one run's noise moves the ratio.
    step_ratio_blocks: tuple[float, ...] = ()

    @property
    def predict_ratio(self) -> float:
        """Runtime predict time / torch predict time (target ≤ 1)."""
        return self.runtime_predict_ms / self.torch_predict_ms

    @property
    def predict_floor_ms(self) -> float:
        """Predict FLOPs / measured peak: no implementation on this machine beats it."""
        return self.predict_gflop / self.peak.measured_gflops * 1e3

    @property
    def step_floor_ms(self) -> float:
        """Updating-step FLOPs / measured peak."""
        return self.step_gflop / self.peak.measured_gflops * 1e3

    @property
    def step_floor_theoretical_ms(self) -> float | None:
        """Updating-step FLOPs / theoretical peak (None where the CPU's spec is unknown)."""
        if self.peak.theoretical_gflops is None:
            return None
        return self.step_gflop / self.peak.theoretical_gflops * 1e3

    def achieved(self) -> dict[str, float]:
        """Floor / median time (share of the measured peak reached), per side and call."""
        return {
            "torch_predict_achieved": self.predict_floor_ms / self.torch_predict_ms,
            "runtime_predict_achieved": self.predict_floor_ms / self.runtime_predict_ms,
            "torch_step_achieved": self.step_floor_ms / self.torch_step_ms,
            "runtime_step_achieved": self.step_floor_ms / self.runtime_step_ms,
        }


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


def _counted_flops(model: nn.Module, config: RealmConfig, x: torch.Tensor) -> tuple[float, float]:
    """GFLOPs of a predict and of an updating adapt step of a fresh (forced) reference."""
    adapter = RealmAdapter(copy.deepcopy(model), config.with_overrides(**forced_overrides(config)))
    predict = count_flops(lambda: adapter.predict(x))
    results = []
    step = count_flops(lambda: results.append(adapter.adapt(x)))
    if not results[0].updated:  # counted a skip, not a step: the floor would be a forward's
        raise RuntimeError(f"the counted {config.method} step did not update ({results[0].reason})")
    return predict / 1e9, step / 1e9


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
        for m in dict.fromkeys(["realm", *methods])
    }
    # (warmup + samples, C, H, W): distinct warm-up samples, then the timed ones.
    xs = np.random.default_rng(seed).standard_normal((warmup + samples, *shape)).astype(np.float32)
    peak = peak if peak is not None else machine_peak(threads)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        dirs = {m: Path(tmp) / f"{name.replace(':', '_')}-{m}" for m in configs}
        infos = {
            m: export_realm_artifacts(
                model, dirs[m], ExportOptions(config=cfg, input_shape=(1, *shape))
            )
            for m, cfg in configs.items()
        }
        missing = next((i.training_error for i in infos.values() if i.training_error), None)
        if "ort-training" in backends and missing is not None:
            # The legacy artifacts never veto the product: that backend sits this model out.
            print(f"{name}: no ort-training timing, the training artifacts are {missing}")
            backends = [b for b in backends if b != "ort-training"]
        torch.set_num_threads(threads)
        flops = {
            m: _counted_flops(model, cfg, torch.from_numpy(xs[0][None]))
            for m, cfg in configs.items()
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
                memory[b] = runtime_only_peak_rss(
                    dirs["realm"], xs, threads, "onnx", runtime_python
                )
            else:
                memory[b] = runtime_only_peak_rss(dirs["realm"], xs, threads, b)
    common = {"model": name, "threads": threads, "samples": samples}
    export = {"export_s": infos["realm"].seconds, "validation": _validation(infos["realm"])}
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
    predict = _predict_sides(model, configs["realm"], dirs["realm"], *args)
    adapt = {m: _adapt_sides(model, cfg, {}, dirs[m], *args) for m, cfg in configs.items()}
    # Tent has no filter: every sample updates, and its adapt is its step.
    step = {
        m: adapt[m]
        if m == "tent"
        else _adapt_sides(model, cfg, forced_overrides(cfg), dirs[m], *args)
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
        update_rate=r_adapt["realm"][1],
        torch_predict_ms=float(np.median(t_pred)),
        torch_adapt_ms=float(np.median(t_adapt["realm"][0])),
        torch_adapt_p90_ms=float(np.percentile(t_adapt["realm"][0], 90)),
        torch_step_ms=float(np.median(t_step["realm"][0])),
        runtime_predict_ms=float(np.median(r_pred)),
        runtime_adapt_ms=float(np.median(r_adapt["realm"][0])),
        runtime_adapt_p90_ms=float(np.percentile(r_adapt["realm"][0], 90)),
        runtime_step_ms=float(np.median(r_step["realm"][0])),
        torch_peak_rss_mb=memory.get("torch"),
        runtime_peak_rss_mb=memory[backend],
        predict_gflop=flops["realm"][0],
        step_gflop=flops["realm"][1],
        peak=peak,
        methods=method_rows,
        step_ratio_blocks=block_ratios(r_step["realm"][0], t_step["realm"][0]),
    )


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
