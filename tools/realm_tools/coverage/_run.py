"""Model coverage: which timm architectures export, validate and adapt (``realm coverage``).

Each architecture is built with random weights (nothing is downloaded), exported with
``realm_export``'s default options under the ImageNet preset (100 classes), validated against
the PyTorch reference, then run through ``RealmRuntime`` on a few random samples beside the
torch forward and the SDK's step. A refused export is a finding, not an error: its row holds
the exception's sentence.

Every model runs in a fresh process (``python -m realm_tools.workers.coverage``) under a
timeout, so a hang, a crash or a leak in one export cannot take the others with it; the worker
answers with one JSON row on stdout.
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._machine import cpu_name
from ..workers import COVERAGE as COVERAGE_WORKER

if TYPE_CHECKING:  # the worker imports these where it needs them
    from torch import nn

    from realm_runtime import RealmConfig

# name → family, the table's grouping. The first 40 are the list users asked for; the others cover
# every other timm family with an edge or mobile variant, at its smallest size.
COVERAGE_MODELS: dict[str, str] = {
    "mobilenetv3_small_100": "mobilenet",
    "mobilenetv3_large_100": "mobilenet",
    "mobilenetv4_hybrid_medium": "mobilenet",
    "efficientnet_b0": "efficientnet",
    "tf_efficientnetv2_b0": "efficientnet",
    "lcnet_050": "lcnet",
    "resnet18": "resnet",
    "resnet50": "resnet",
    "resnet18d": "resnet",
    "repvit_m0_9": "repvit",
    "fastvit_t8": "fastvit",
    "edgenext_xx_small": "edgenext",
    "mobilevit_xxs": "mobilevit",
    "mobilevitv2_050": "mobilevit",
    "levit_128s": "levit",
    "deit_tiny_patch16_224": "vit",
    "vit_small_patch16_224": "vit",
    "tiny_vit_5m_224": "tinyvit",
    "poolformer_s12": "metaformer",
    "convnextv2_atto": "convnext",
    "swin_tiny_patch4_window7_224": "swin",
    "cs3darknet_s": "cspnet",
    "mobilenetv2_100": "mobilenet",
    "efficientnet_lite0": "efficientnet",
    "mnasnet_100": "mnasnet",
    "mobileone_s0": "mobileone",
    "mobilenetv4_conv_small": "mobilenet",
    "efficientformer_l1": "efficientformer",
    "efficientvit_b0": "efficientvit",
    "efficientformerv2_s0": "efficientformer",
    "ghostnet_100": "ghostnet",
    "regnetx_002": "regnet",
    "regnety_002": "regnet",
    "densenet121": "densenet",
    "vgg11_bn": "vgg",
    "dla34": "dla",
    "hrnet_w18_small": "hrnet",
    "inception_v3": "inception",
    "nf_resnet26": "nfnet",  # no norm layer: refused by design
    "resmlp_12_224": "mlp",
    # the other edge and mobile families (and smaller variants of some above)
    "mobilenetv1_100": "mobilenet",
    "mobilenetv4_conv_medium": "mobilenet",
    "tf_mobilenetv3_small_minimal_100": "mobilenet",  # no SE, no hard-swish: accelerators
    "tinynet_a": "efficientnet",
    "efficientnet_es": "efficientnet",  # EfficientNet-EdgeTPU
    "fbnetc_100": "fbnet",
    "spnasnet_100": "nas",
    "semnasnet_100": "mnasnet",
    "mixnet_s": "mixnet",
    "hardcorenas_a": "nas",
    "ghostnetv2_100": "ghostnet",
    "repghostnet_050": "ghostnet",
    "efficientvit_m0": "efficientvit",
    "resnet10t": "resnet",
    "repvgg_a0": "repvgg",
    "convnext_atto": "convnext",
    "convnext_zepto_rms": "convnext",  # RMSNorm
    "rexnet_100": "rexnet",
    "hgnetv2_b0": "hgnet",
    "ese_vovnet19b_slim_dw": "vovnet",
    "cspnext_tiny": "cspnet",
    "lcnetv2_small": "lcnet",
    "pvt_v2_b0": "pvt",
    "xcit_nano_12_p16_224": "xcit",
    "pit_ti_224": "pit",
    "coat_lite_tiny": "coat",
    "mambaout_femto": "mambaout",
    "inception_next_atto": "inception",
    "starnet_s050": "starnet",
    "fasternet_t0": "fasternet",
    "shvit_s1": "shvit",
    "iformer_t": "iformer",
    "swiftformer_xs": "swiftformer",
    "efficientvim_m1": "efficientvim",
    "cpubone_nano": "cpubone",
    "fastvit_mci0": "fastvit",  # MobileCLIP's image tower
    "lowformer_b0": "lowformer",
}

COVERAGE_CLASSES = 100  # the head every model is built with
COVERAGE_PRESET = "imagenet"
REASON_CHARS = 300  # the table's one-line refusal
# untimed samples before the timed ones: torch's first calls at a new shape run many times slower
WARMUP = 2

Status = Literal["ok", "refused", "failed", "timeout", "crashed"]
# ok: exported, validated, predicted and adapted through RealmRuntime. refused: the export
# raised (the row holds why). failed: building the model, the runtime or torch raised.
# timeout / crashed: the worker gave no row (killed at the timeout, or died).


@dataclass(frozen=True)
class CoverageRow:
    """One architecture's export, validation and adaptation figures (None: not reached)."""

    model: str  # the timm name
    family: str  # the table's grouping label
    status: Status
    input_size: tuple[int, ...] | None = None  # (C, H, W) of the export
    stage: str | None = None  # where it stopped: build, export, runtime, torch (the SDK), worker
    error_type: str | None = None  # the exception's class name
    error: str | None = None  # the exception's full message
    export_s: float | None = None  # export wall time, validation included
    # the graph the figures below validate: portable, training, or refused (the validation
    # that failed the export)
    figures_from: str | None = None
    logits_max_abs: float | None = None  # ORT vs torch, over the export's validation inputs
    loss_max_abs: float | None = None
    grad_max_rel: float | None = None  # the worst trainable tensor's, relative to its scale
    grad_worst_tensor: str | None = None
    atol: float | None = None  # the export's tolerance on logits and loss (absolute)
    grad_rtol: float | None = None  # and on gradients (relative)
    # the tolerances the logits and the worst gradient were held to, where the export widens
    # them (with the logits' scale, with the reference's own spread); else atol, grad_rtol
    logits_tolerance: float | None = None
    grad_tolerance: float | None = None
    validation_passed: bool | None = None
    training_artifacts: bool | None = None  # onnxruntime-training artifacts written
    training_error: str | None = None  # why not, where the export says
    portable_error: str | None = None  # why there is no portable step graph, if there is none
    artifact_mb: float | None = None  # every file of the artifact directory
    trainable_tensors: int | None = None  # the SDK's norm tensors, then α and λ
    backend: str | None = None  # the RealmRuntime backend that ran
    samples: int | None = None  # timed samples per figure (after WARMUP untimed ones)
    runtime_predict_ms: float | None = None  # medians, batch 1
    torch_predict_ms: float | None = None  # the model's forward under no_grad
    runtime_step_ms: float | None = None  # an updating step (S_div forced open)
    sdk_step_ms: float | None = None  # RealmAdapter's, the same samples and overrides
    step_update_rate: float | None = None  # lower of the two sides' share of samples updated
    seconds: float | None = None  # the worker's wall time, start-up included
    log_tail: str | None = None  # the worker's last stderr lines (timeout, crash)

    @property
    def ok(self) -> bool:
        """Exported, validated and adapted."""
        return self.status == "ok"

    @property
    def reason(self) -> str:
        """The error's first sentence on one line (at most ``REASON_CHARS``), or ``""``."""
        if not self.error:
            return ""
        text = one_line(self.error)
        return f"{self.error_type}: {text}" if self.error_type else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``input_size`` a list), with the one-line ``reason`` beside the error."""
        out = asdict(self)
        out["input_size"] = list(self.input_size) if self.input_size else None
        out["reason"] = self.reason or None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CoverageRow:
        """The row of :meth:`to_dict` (unknown keys, such as ``reason``, ignored)."""
        known = {f.name for f in fields(cls)}
        values = {
            k: float(v) if v in ("nan", "inf", "-inf") else v  # _finite's strings, read back
            for k, v in data.items()
            if k in known
        }
        if values.get("input_size") is not None:
            values["input_size"] = tuple(values["input_size"])
        return cls(**values)


def one_line(message: str, limit: int = REASON_CHARS) -> str:
    """The first sentence of a message's first non-empty line, at most ``limit`` characters.

    Export errors can run to many lines (a graph dump, a traceback of ONNX's); the table
    shows the sentence that says what is wrong, the JSON keeps the whole message.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z(\[])", lines[0], maxsplit=1)[0]
    first = re.sub(r"\s+", " ", first)
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def family_of(name: str) -> str:
    """The family label of a model: :data:`COVERAGE_MODELS`' or its name's leading letters."""
    if name in COVERAGE_MODELS:
        return COVERAGE_MODELS[name]
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name


def coverage_input_size(model: nn.Module, image_size: int) -> tuple[int, int, int]:
    """(C, H, W) a model runs at: its own where its ``pretrained_cfg`` fixes it, else N px.

    Transformers with absolute position embeddings or fixed windows (ViT, DeiT, Swin, LeViT,
    ...) declare ``fixed_input_size``; convolutional models take any size.
    """
    import torch

    cfg = getattr(model, "pretrained_cfg", None) or {}
    own = tuple(int(d) for d in cfg.get("input_size", (3, image_size, image_size)))
    if cfg.get("fixed_input_size"):
        return own  # type: ignore[return-value]
    asked = (own[0], image_size, image_size)
    try:  # some fix their size without saying so (EfficientFormerV2's attention biases)
        with torch.no_grad():
            model.eval()(torch.zeros(1, *asked))
    except Exception:  # any failure means: not at this size
        return own  # type: ignore[return-value]
    return asked


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
        info = export_realm_artifacts(
            model, out, ExportOptions(config=config, input_shape=(1, *shape))
        )
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
        "training_artifacts": "training_model" in info.files,
        "training_error": getattr(info, "training_error", None),  # a newer field, where present
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
    first. The step runs with S_div forced open (``forced_overrides``) and the runtime's
    ``train`` schedule, so each timed call is one updating step on both sides.
    """
    import numpy as np
    import torch

    from realm_runtime import RealmRuntime
    from realm_sdk import RealmAdapter

    from ..bench import forced_overrides, take_turns, timed_side

    warmup = WARMUP
    xs = np.random.default_rng(seed).standard_normal((warmup + samples, *shape)).astype(np.float32)
    forced = forced_overrides(config)
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


# --------------------------------------------------------------------- the run (the parent)


def run_coverage(
    models: Sequence[str] | None = None,
    *,
    image_size: int = 128,
    timeout: float = 600.0,
    threads: int = 2,
    samples: int = 3,
    seed: int = 0,
    jobs: int = 1,
    on_row: Callable[[CoverageRow], None] | None = None,
) -> list[CoverageRow]:
    """Export, validate and adapt each model, each in a fresh worker process.

    Args:
        models: timm architectures (default: :data:`COVERAGE_MODELS`).
        image_size: the square side of models whose ``pretrained_cfg`` does not fix their
            input size (fixed ones, e.g. ViTs, run at their own).
        timeout: seconds per model before its worker is killed (a ``timeout`` row).
        threads: torch's and ONNX Runtime's intra-op threads in the worker.
        samples: timed samples per figure (after ``WARMUP`` untimed ones); a few, not a
            benchmark.
        seed: seed of the weights and the samples.
        jobs: workers at a time (each with ``threads`` threads: jobs × threads ≤ cores keeps
            the timings apart).
        on_row: called with each row as its model ends (progress, for a command line).

    Returns:
        One row per model, in order. A model that hangs or crashes its worker gets a
        ``timeout`` or ``crashed`` row; none stops the run.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    names = list(COVERAGE_MODELS if models is None else models)
    rows: dict[str, CoverageRow] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(_run_worker, name, image_size, timeout, threads, samples, seed): name
            for name in names
        }
        for future in as_completed(futures):
            row = future.result()
            rows[futures[future]] = row
            if on_row is not None:
                on_row(row)
    return [rows[name] for name in names]


def merge_rows(old: Sequence[CoverageRow], new: Sequence[CoverageRow]) -> list[CoverageRow]:
    """``old`` with each model of ``new`` replaced (or added), in COVERAGE_MODELS order first."""
    merged = {r.model: r for r in old} | {r.model: r for r in new}
    ranked = {name: i for i, name in enumerate(COVERAGE_MODELS)}
    return sorted(merged.values(), key=lambda r: ranked.get(r.model, len(ranked)))


def _run_worker(
    name: str, image_size: int, timeout: float, threads: int, samples: int, seed: int
) -> CoverageRow:
    """One model's row from a fresh ``realm_tools.workers.coverage`` process."""
    family = family_of(name)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="realm-coverage-") as work:
        command = [
            sys.executable,
            "-m",
            COVERAGE_WORKER,
            name,
            "--work-dir",
            work,
            "--image-size",
            str(image_size),
            "--threads",
            str(threads),
            "--samples",
            str(samples),
            "--seed",
            str(seed),
        ]
        try:
            done = _spawn(command, timeout)
        except subprocess.TimeoutExpired as exc:
            return CoverageRow(
                name,
                family,
                "timeout",
                stage="worker",
                error=f"no result within {timeout:g} s: the worker was killed",
                seconds=time.perf_counter() - start,
                log_tail=_tail(exc.stderr),
            )
    seconds = time.perf_counter() - start
    result = _last_json(done.stdout)
    if result is not None:  # a row is whole once written, whatever the exit (ORT at exit)
        return CoverageRow.from_dict({**result, "seconds": seconds})
    last = [line for line in (done.stderr or "").splitlines() if line.strip()][-1:]
    return CoverageRow(
        name,
        family,
        "crashed",
        stage="worker",
        error=f"the worker {_exit_text(done.returncode)} without a result"
        + (f"; its last line: {last[0].strip()}" if last else ""),
        seconds=seconds,
        log_tail=_tail(done.stderr),
    )


def _spawn(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a process group of its own, killed whole at the timeout.

    ``subprocess.run`` kills only the worker, then waits for its pipes: a grandchild the export
    started (a compile or session helper) would hold them open and hang the whole run.
    """
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
        except BaseException:  # Ctrl-C: the new session no longer hears the terminal's signal
            _kill_group(proc)
            raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, ProcessLookupError):  # no process groups (Windows), or gone
        proc.kill()


def _last_json(stdout: str | None) -> dict[str, Any] | None:
    for line in reversed((stdout or "").splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _tail(text: str | bytes | None, lines: int = 20) -> str | None:
    if not text:
        return None
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


# --------------------------------------------------------------------- reporting


def coverage_environment(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The machine and versions behind a run: CPU, cores, Python, torch, timm, ORT, date."""
    import numpy as np
    import timm
    import torch

    try:
        import onnxruntime

        ort = onnxruntime.__version__
    except ImportError:
        ort = "not installed"
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "onnxruntime": ort,
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "command": "realm " + " ".join(sys.argv[1:] if argv is None else argv),
    }


def coverage_summary(rows: Sequence[CoverageRow]) -> str:
    """``"N of M export, validate and adapt"``, with the other statuses counted."""
    ok = sum(r.ok for r in rows)
    statuses = ("refused", "failed", "timeout", "crashed")
    others = {s: sum(r.status == s for r in rows) for s in statuses}
    rest = ", ".join(f"{n} {s}" for s, n in others.items() if n)
    return f"{ok} of {len(rows)} export, validate and adapt" + (f" ({rest})" if rest else "")


def format_coverage(rows: Sequence[CoverageRow], environment: dict[str, Any] | None = None) -> str:
    """Markdown: a header (machine, versions, date, command), the summary and the table.

    Validation figures are the largest differences between ONNX Runtime and the PyTorch
    reference (logits and loss absolute, gradients relative to each tensor's scale); times
    are medians in milliseconds per sample, batch 1. A row that is not ok shows its error's
    first sentence; the JSON has the whole message.
    """
    lines = ["# Model coverage: export, validate, adapt", ""]
    if environment is not None:
        e = environment
        lines += [
            f"Command: `{e['command']}`",
            "",
            f"Machine: {e['cpu']}, {e['cores']} CPU cores, {e['system']}; Python {e['python']}, "
            f"torch {e['torch']}, timm {e['timm']}, onnxruntime {e['onnxruntime']}, numpy "
            f"{e['numpy']}. {e['date']}.",
            "",
        ]
        if e.get("jobs", 1) > 1 or e.get("threads"):
            lines += [
                f"{e.get('jobs', 1)} model(s) at a time, {e.get('threads')} thread(s) each: "
                "times compare the runtime with torch inside one row, not across machines.",
                "",
            ]
    lines += [
        f"**{coverage_summary(rows)}.**",
        "",
        f"Random weights, {COVERAGE_CLASSES} classes, the {COVERAGE_PRESET} preset, the export's "
        "default options. Validation: the portable step graph against the PyTorch reference "
        "(logits and loss max abs, worst gradient relative; a tolerance the export widened "
        "stands beside its figure). Times: medians of a few samples, "
        "batch 1; the step is an updating one (S_div forced open) on both sides.",
        "",
        "| model | family | status | input | export s | logits / loss / grad | training "
        "artifacts | MB | trainable | predict ms runtime / torch | step ms runtime / SDK | "
        "note |",
        "|" + "---|" * 12,
    ]
    for r in rows:
        size = "×".join(str(d) for d in r.input_size[1:]) if r.input_size else "—"
        cells = [
            r.model,
            r.family,
            f"{r.status} ({r.stage})" if r.status == "failed" else r.status,
            size,
            _num(r.export_s, ".1f"),
            _figures_cell(r),
            "—" if r.training_artifacts is None else ("yes" if r.training_artifacts else "no"),
            _num(r.artifact_mb, ".1f"),
            "—" if r.trainable_tensors is None else str(r.trainable_tensors),
            _pair(r.runtime_predict_ms, r.torch_predict_ms),
            _pair(r.runtime_step_ms, r.sdk_step_ms),
            _escape(_note(r)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figures_cell(row: CoverageRow) -> str:
    """The logits / loss / grad figures, a widened tolerance beside its figure (``tol``)."""
    if row.logits_max_abs is None or row.loss_max_abs is None or row.grad_max_rel is None:
        return "—"
    logits = f"{row.logits_max_abs:.1e}" + _widened(row.logits_tolerance, row.atol)
    grad = f"{row.grad_max_rel:.1e}" + _widened(row.grad_tolerance, row.grad_rtol)
    cell = f"{logits} / {row.loss_max_abs:.1e} / {grad}"
    return cell + ("" if row.figures_from == "portable" else f" ({row.figures_from})")


def _widened(tolerance: float | None, base: float | None) -> str:
    if tolerance is None or base is None or tolerance <= base:
        return ""
    return f" (tol {tolerance:.1e})"


def _note(row: CoverageRow) -> str:
    if not row.ok:
        return row.reason
    notes = []
    if row.portable_error:
        notes.append(f"no portable step graph ({row.backend}): {one_line(row.portable_error)}")
    if row.training_error:  # the export's own sentence: "not written: …", "refused: …"
        notes.append(f"training artifacts {one_line(row.training_error)}")
    if row.validation_passed is False:
        notes.append("validation outside its tolerance")
    return "; ".join(notes)


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _pair(runtime: float | None, reference: float | None) -> str:
    if runtime is None or reference is None:
        return "—"
    return f"{runtime:.2f} / {reference:.2f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def coverage_to_json(
    rows: Sequence[CoverageRow],
    environment: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> str:
    """``{"environment", "settings", "summary", "rows"}``: every row with its full error."""
    summary = {"ok": sum(r.ok for r in rows), "total": len(rows), "text": coverage_summary(rows)}
    payload = {
        "environment": environment or {},
        "settings": settings or {},
        "summary": summary,
        "rows": [_finite(r.to_dict()) for r in rows],
    }
    return json.dumps(payload, indent=2)


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """Non-finite figures as strings ("nan", "inf"): strict JSON has no NaN."""
    return {
        k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()
    }
