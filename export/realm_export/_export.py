"""``export_realm_artifacts``: torch model → validated ORT training artifacts + manifest."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from realm_runtime._manifest import (
    ALPHA_NAME,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    CHECKPOINT,
    EVAL_MODEL,
    INFERENCE_MODEL,
    LAMBDA_NAME,
    MANIFEST_NAME,
    TRAINING_MODEL,
    InputSpec,
    Manifest,
    sha256_of,
)
from realm_runtime._portable_io import (
    FORWARD_MODEL,
    LAYOUT_VERSION,
    SOURCE_PARAMS,
    STEP_MODEL,
)
from realm_runtime._signing import load_private_key, sign_manifest
from realm_sdk import RealmAdapter, RealmConfig

from ._decide import DECIDE_MODEL, decide_model
from ._graph import (
    INPUT_NAME,
    LOGITS_NAME,
    append_loss,
    check_trainable_names,
    check_versions,
    model_to_onnx,
)
from ._ort_format import CONVERTER, OPTIMIZATION_STYLE, TARGET_PLATFORM, write_ort_format
from ._portable import PortableGraphs, build_portable_graphs, save_proto
from ._rewrite import UnsupportedModelError
from ._validate import (
    ValidationError,
    ValidationReport,
    training_graph_error,
    validate_artifacts,
    validate_portable,
)

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExportInfo:
    """What :func:`export_realm_artifacts` wrote."""

    directory: Path  # the artifact directory
    files: dict[str, Path]  # role -> path: training, eval, checkpoint, inference, manifest
    trainable: list[str]  # trainable tensors: the SDK's norm parameters, then α and λ
    validation: ValidationReport | None  # None when validation was switched off
    manifest: Manifest  # the manifest as written
    seconds: float  # wall time of the export, validation included
    portable_validation: ValidationReport | None = None  # the portable step graph's figures
    portable_error: str | None = None  # why there is no portable step graph, if there is none
    ort_format_validation: ValidationReport | None = None  # the .ort graphs' figures


def export_realm_artifacts(
    model: nn.Module,
    out_dir: str | os.PathLike[str],
    *,
    config: RealmConfig,
    input_shape: Sequence[int],
    validate: bool = True,
    atol: float = 1e-4,
    grad_rtol: float = 1e-3,
    validation_inputs: int = 3,
    dynamic_batch: bool = True,
    overwrite: bool = False,
    seed: int = 0,
    preprocessing: dict[str, Any] | None = None,
    model_info: dict[str, Any] | None = None,
    web: bool = True,
    portable: bool = True,
    training: bool | None = None,
    ort_format: bool = False,
    signing_key: object | None = None,
    progress: Progress | None = None,
) -> ExportInfo:
    """Export ``model`` as ONNX Runtime on-device training artifacts whose loss is REALM's.

    The artifacts train exactly the parameters the SDK adapts (norm-layer affine weights and
    biases, minus the config's frozen patterns) plus α and λ, and are checked against the
    PyTorch reference before this returns. Everything is written to a temporary sibling
    directory and moved into place at the end, so a failed export leaves no half-written
    artifact directory (and an existing one untouched).

    Args:
        model: the classifier (timm or any ``nn.Module``); it is copied, never modified.
        out_dir: the artifact directory to create.
        config: the adaptation settings; method, preset and α0/λ0 shape the loss graph.
        input_shape: ``(batch, C, H, W)`` of the export, e.g. ``(1, 3, 224, 224)``.
        validate: compare ORT with torch on random inputs before returning.
        atol: tolerance on logits and loss (absolute).
        grad_rtol: tolerance on gradients (relative to each tensor's gradient scale).
        validation_inputs: how many random inputs to validate on.
        dynamic_batch: export a symbolic batch axis (B > 1 allowed at run time).
        overwrite: replace an existing ``out_dir``.
        seed: seed of the random validation inputs.
        preprocessing: mean/std/size for the manifest; default: timm's ``pretrained_cfg``.
        model_info: extra description of the model for the manifest (name, weights, ...).
        web: also write the decision graph (``decide_model.onnx``: S_div, EATA's cut, the
            next EMA) that the JavaScript clients run beside the portable graphs
            (``examples/web``, ``examples/node``). Needs the portable graph.
        portable: also write the portable step graph (``step_model.onnx``,
            ``forward_model.onnx``, ``source_params.npy``: standard ONNX ops, any onnxruntime
            ≥ 1.19), validated like the training graph. Where it cannot be built or does not
            validate, the reason is logged, kept in the manifest and in
            :attr:`ExportInfo.portable_error`, and the training artifacts are still written.
        training: write the ONNX Runtime training artifacts. None: where
            onnxruntime-training is installed (Python 3.11); elsewhere the portable graph
            alone is written, and its failure is then an error.
        ort_format: also write the portable graphs in ONNX Runtime's ORT format
            (``step_model.ort``, ``forward_model.ort``) and the operator configuration a
            reduced-size ONNX Runtime build takes (``required_operators.config``), with ONNX
            Runtime's own converter, for mobile apps; validated against the reference like
            the ``.onnx`` graphs. Needs the portable graph: where it cannot be built, this is
            an error.
        signing_key: an Ed25519 private key (PEM file, PEM bytes, or the key object) to sign
            the manifest with (``realm.sig``); a runtime given the public key as one of its
            ``trusted_keys`` then refuses anything else. ``realm keygen`` makes a key pair.
        progress: called with a short label as each stage starts.

    Returns:
        The paths, trainable names and validation figures.

    Raises:
        UnsupportedModelError: the model cannot become a training graph (no norm layer, an op
            without ONNX form or gradient, dynamic control flow), with the reason.
        ValidationError: ORT and torch disagree beyond the tolerances (the report is attached).
        FileExistsError: ``out_dir`` exists, is not an empty directory, and ``overwrite`` is
            false.
    """
    start = time.perf_counter()
    out_dir = Path(out_dir)
    notify = progress or (lambda _label: None)
    shape = _check_shape(input_shape)
    if not isinstance(config, RealmConfig):
        raise TypeError(f"config must be a RealmConfig, got {type(config).__name__}")
    if out_dir.exists() and not overwrite and not _empty_dir(out_dir):
        raise FileExistsError(f"{out_dir} exists; pass overwrite=True to replace it")

    training = _training_wanted(training)
    if not training and not portable:
        raise ValueError("nothing to export: training=False and portable=False")
    if signing_key is not None:
        signing_key = load_private_key(signing_key)  # a bad key fails now, not after the export
    if ort_format and not portable:
        raise ValueError("ort_format=True converts the portable graphs: it needs portable=True")

    notify("selecting parameters")
    source = copy.deepcopy(model).eval()
    try:
        trainable = RealmAdapter(copy.deepcopy(source), config).trainable_names
    except ValueError as exc:
        raise UnsupportedModelError(str(exc)) from exc
    for p in source.parameters():
        p.requires_grad_(False)

    notify("exporting the forward graph")
    example = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = source(example)
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (
        shape[0],
        config.num_classes,
    ):
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise UnsupportedModelError(
            f"the model must return logits of shape ({shape[0]}, {config.num_classes}) for an "
            f"input of shape {shape}, got {got}"
        )
    forward, branches = model_to_onnx(source, example, dynamic_batch=dynamic_batch)
    versions = check_versions(forward)
    check_trainable_names(forward, trainable)

    notify("adding the loss graph")
    with_loss = append_loss(forward, config)
    extra = [ALPHA_NAME, LAMBDA_NAME] if config.learns_alpha_lambda else []
    requires_grad = [*trainable, *extra]

    tmp = out_dir.parent / f".{out_dir.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        if training:
            notify("generating training artifacts")
            _generate(with_loss, requires_grad, tmp)
        onnx.save(forward, str(tmp / INFERENCE_MODEL))

        portable_section: dict[str, Any] = {}
        portable_report: ValidationReport | None = None
        ort_report: ValidationReport | None = None
        if portable:
            portable_section, portable_report, ort_report = _write_portable(
                tmp,
                source,
                config,
                trainable,
                example[:1],
                notify,
                validate=validate,
                inputs=validation_batch(
                    (1, *shape[1:]), validation_inputs, seed=seed + 1, extra_batch=False
                ),
                atol=atol,
                grad_rtol=grad_rtol,
                ort_format=ort_format,
                web=web,
            )
            if "error" in portable_section:
                if ort_format:
                    raise UnsupportedModelError(
                        "ORT-format graphs were asked for, but there is no portable step graph "
                        f"to convert: {portable_section['error']}"
                    )
                if not training:
                    raise UnsupportedModelError(
                        "no training artifacts (onnxruntime-training is not installed) and no "
                        f"portable step graph: {portable_section['error']}"
                    )
                log.warning(
                    "no portable step graph (the training artifacts are still written): %s",
                    portable_section["error"],
                )

        report = None
        if validate and training:
            notify("validating against the PyTorch reference")
            inputs = validation_batch(
                shape, validation_inputs, seed=seed + 1, extra_batch=dynamic_batch
            )
            report = validate_artifacts(tmp, source, config, inputs, atol=atol, grad_rtol=grad_rtol)
            log.info("validation of %s:\n%s", out_dir, report.table())
            if not report.passed:
                hint = ""
                if branches:
                    hint = (
                        "\nThe trace turned tensors into Python booleans (data-dependent control "
                        "flow, frozen into one branch) at: " + ", ".join(branches[:5])
                    )
                raise ValidationError(
                    "the exported artifacts disagree with the PyTorch reference:\n"
                    + report.table()
                    + hint,
                    report,
                )

        notify("writing the manifest")
        manifest = _manifest(
            tmp,
            source,
            config,
            forward,
            shape,
            dynamic_batch,
            requires_grad,
            versions,
            report,
            preprocessing,
            model_info,
            portable_section,
        )
        (tmp / MANIFEST_NAME).write_bytes(manifest.to_bytes())
        if signing_key is not None:
            notify("signing the manifest")
            sign_manifest(tmp, signing_key)
        _move_into_place(tmp, out_dir, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = {"inference_model": out_dir / INFERENCE_MODEL, "manifest": out_dir / MANIFEST_NAME}
    if training:
        files |= {
            "training_model": out_dir / TRAINING_MODEL,
            "eval_model": out_dir / EVAL_MODEL,
            "checkpoint": out_dir / CHECKPOINT,
        }
    if "step_model" in portable_section:
        for role in ("step_model", "forward_model", "source_params"):
            files[role] = out_dir / portable_section[role]
    ort_section = portable_section.get("ort_format", {})
    for role in ("step_model", "forward_model", "operators_config"):
        if role in ort_section:
            files[f"{role}_ort" if role != "operators_config" else role] = (
                out_dir / ort_section[role]
            )
    return ExportInfo(
        out_dir,
        files,
        requires_grad,
        report,
        manifest,
        time.perf_counter() - start,
        portable_report,
        portable_section.get("error"),
        ort_report,
    )


def _write_portable(
    directory: Path,
    model: nn.Module,
    config: RealmConfig,
    trainable: list[str],
    example: torch.Tensor,
    notify: Progress,
    *,
    validate: bool,
    inputs: list[np.ndarray],
    atol: float,
    grad_rtol: float,
    ort_format: bool = False,
    web: bool = False,
) -> tuple[dict[str, Any], ValidationReport | None, ValidationReport | None]:
    """Build, write and validate the portable graphs; on failure, the reason instead.

    Returns:
        The manifest's ``portable`` section (or ``{"error": reason}``), the report, and the
        ORT-format graphs' report (None unless asked for and validated).

    Raises:
        OrtFormatError: ONNX Runtime's converter failed (only with ``ort_format``).
        ValidationError: the ORT-format graphs disagree with the reference.
    """
    started = time.perf_counter()
    notify("building the portable step graph")
    try:
        graphs: PortableGraphs = build_portable_graphs(model, config, trainable, example)
    except UnsupportedModelError as exc:
        return {"error": str(exc)}, None, None
    names = {
        "step_model": STEP_MODEL,
        "forward_model": FORWARD_MODEL,
        "source_params": SOURCE_PARAMS,
    }
    save_proto(graphs.step, directory / STEP_MODEL)
    save_proto(graphs.forward, directory / FORWARD_MODEL)
    np.save(directory / SOURCE_PARAMS, graphs.source, allow_pickle=False)
    check = functools.partial(
        _check_graphs, directory, model, config, graphs.layout, inputs, notify, atol, grad_rtol
    )
    report = check("portable step graph", names) if validate else None
    if report is not None and not report.passed:
        for name in names.values():
            (directory / name).unlink(missing_ok=True)
        reason = "the portable step graph disagrees with the PyTorch reference:\n" + report.table()
        return {"error": reason, "validation": report.to_dict()}, report, None
    opset = max(o.version for o in graphs.step.opset_import if o.domain in ("", "ai.onnx"))
    section = {
        "layout_version": LAYOUT_VERSION,
        **names,
        "batch": 1,
        "opset": int(opset),
        "ir_version": int(graphs.step.ir_version),
        "size": int(graphs.source.shape[0]),
        "layout": [dataclasses.asdict(slot) for slot in graphs.layout],
        "step_nodes": graphs.step_nodes,
        "forward_nodes": graphs.forward_nodes,
        "validation": report.to_dict() if report is not None else {},
        "seconds": round(time.perf_counter() - started, 2),
    }
    if web:
        # SPEC §3's decision for the JavaScript clients of the portable graphs.
        onnx.save(decide_model(config, graphs.step.ir_version), str(directory / DECIDE_MODEL))
        section["decide_model"] = DECIDE_MODEL
    ort_report = None
    if ort_format:
        notify("writing the ORT-format graphs (ONNX Runtime's converter)")
        converted = write_ort_format(directory, [STEP_MODEL, FORWARD_MODEL])
        ort_names = {
            "step_model": converted[STEP_MODEL],
            "forward_model": converted[FORWARD_MODEL],
            "source_params": SOURCE_PARAMS,
        }
        ort_report = check("ORT-format graphs", ort_names) if validate else None
        if ort_report is not None and not ort_report.passed:
            raise ValidationError(
                "the ORT-format graphs disagree with the PyTorch reference:\n" + ort_report.table(),
                ort_report,
            )
        section["ort_format"] = _ort_format_section(ort_names, converted, ort_report)
    return section, report, ort_report


def _check_graphs(
    directory: Path,
    model: nn.Module,
    config: RealmConfig,
    layout: list[Any],
    inputs: list[np.ndarray],
    notify: Progress,
    atol: float,
    grad_rtol: float,
    what: str,
    files: dict[str, str],
) -> ValidationReport:
    """Validate one pair of step/forward graph files against the reference, and log it."""
    notify(f"validating the {what} against the PyTorch reference")
    report = validate_portable(
        directory, files, model, config, layout, inputs, atol=atol, grad_rtol=grad_rtol
    )
    log.info("validation of the %s:\n%s", what, report.table())
    return report


def _ort_format_section(
    files: dict[str, str], converted: dict[str, str], report: ValidationReport | None
) -> dict[str, Any]:
    """The manifest's ``portable.ort_format``: the files, how they were made, their figures."""
    import onnxruntime

    return {
        "step_model": files["step_model"],
        "forward_model": files["forward_model"],
        "operators_config": converted["operators_config"],
        "converter": f"{CONVERTER} (onnxruntime {onnxruntime.__version__})",
        "optimization_style": OPTIMIZATION_STYLE,
        "target_platform": TARGET_PLATFORM,
        "validation": report.to_dict() if report is not None else {},
    }


def _training_wanted(training: bool | None) -> bool:
    """Whether to build training artifacts: asked for, or onnxruntime-training is installed."""
    import importlib.util

    available = importlib.util.find_spec("onnxruntime") is not None and (
        importlib.util.find_spec("onnxruntime.training") is not None
    )
    if training is None:
        if not available:
            log.info(
                "onnxruntime-training is not installed (it exists for Python 3.11 only): "
                "writing the portable step graph without training artifacts"
            )
        return available
    if training and not available:
        raise ImportError(
            "training=True needs onnxruntime-training 1.19.2 (Python 3.11): pip install "
            "'realm-tta[runtime-training]', or export the portable graph alone"
        )
    return training


def validation_batch(
    shape: tuple[int, ...], count: int, *, seed: int, extra_batch: bool
) -> list[np.ndarray]:
    """Random validation inputs that differ in scale and offset, not just in noise.

    Input k is ``s_k · N(0, 1) + m_k`` with (s, m) cycling through (1, 0), (0.5, 0.5),
    (2, −0.5): a model whose trace baked in one branch of data-dependent control flow then
    disagrees with torch on some input. With ``extra_batch``, one more input has batch size
    ``shape[0] + 1`` to check the symbolic batch axis.
    """
    rng = np.random.default_rng(seed)
    styles = ((1.0, 0.0), (0.5, 0.5), (2.0, -0.5))
    shapes = [shape] * count + ([(shape[0] + 1, *shape[1:])] if extra_batch else [])
    return [
        (styles[k % 3][0] * rng.standard_normal(s) + styles[k % 3][1]).astype(np.float32)
        for k, s in enumerate(shapes)
    ]


def _check_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(input_shape)
    if len(shape) < 2 or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
    ):
        raise ValueError(
            f"input_shape must be positive integers (batch, C, ...), e.g. (1, 3, 224, 224); "
            f"got {input_shape!r}"
        )
    return shape


@contextlib.contextmanager
def _quiet_ort() -> Iterator[None]:
    """Silence onnxruntime's C++ INFO chatter while building the gradient graph.

    onnxblock's graph builder logs every graph transformer at INFO level straight to file
    descriptor 2, whatever the Python-side logger severity; so fd 2 is redirected to a
    temporary file for the duration, and its warning and error lines are passed on to the
    ``logging`` module.
    """
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").splitlines():
                if "[W:" in line or "[E:" in line:
                    log.warning("onnxruntime: %s", line.strip())


def _generate(proto: onnx.ModelProto, requires_grad: list[str], directory: Path) -> None:
    from onnxruntime.training import artifacts

    trainable = set(requires_grad)
    frozen = [init.name for init in proto.graph.initializer if init.name not in trainable]
    try:
        with _quiet_ort():
            artifacts.generate_artifacts(
                proto,
                requires_grad=requires_grad,
                frozen_params=frozen,
                loss=None,  # the graph's first output, realm.loss, is the loss
                optimizer=None,  # SGD with momentum and two learning rates runs in the runtime
                artifact_directory=str(directory),
            )
    except Exception as exc:
        raise UnsupportedModelError(
            training_graph_error(str(exc), "build the gradient graph")
        ) from exc


def _preprocessing(model: nn.Module, given: dict[str, Any] | None) -> dict[str, Any]:
    if given is not None:
        return dict(given)
    cfg = getattr(model, "pretrained_cfg", None)
    if not isinstance(cfg, dict):
        return {}
    keys = ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode")
    return {k: (list(cfg[k]) if isinstance(cfg[k], tuple) else cfg[k]) for k in keys if k in cfg}


def _manifest(
    directory: Path,
    model: nn.Module,
    config: RealmConfig,
    forward: onnx.ModelProto,
    shape: tuple[int, ...],
    dynamic_batch: bool,
    requires_grad: list[str],
    versions: dict[str, int],
    report: ValidationReport | None,
    preprocessing: dict[str, Any] | None,
    model_info: dict[str, Any] | None,
    portable: dict[str, Any],
) -> Manifest:
    import onnxruntime

    inits = {init.name: list(init.dims) for init in forward.graph.initializer}
    trainable = {n: inits.get(n, []) for n in requires_grad}  # α, λ are scalars: []
    all_versions: dict[str, Any] = {
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "torch": torch.__version__,
        **versions,
    }
    with contextlib.suppress(ImportError):
        import timm

        all_versions["timm"] = timm.__version__
    from realm_sdk import __version__ as realm_version

    all_versions["realm-tta"] = realm_version
    info = {"class": f"{type(model).__module__}.{type(model).__qualname__}"}
    info.update(model_info or {})
    files = {p.name: sha256_of(p) for p in sorted(directory.iterdir()) if p.is_file()}
    return Manifest(
        format=ARTIFACT_FORMAT,
        version=ARTIFACT_VERSION,
        input=InputSpec(
            INPUT_NAME, ["batch" if dynamic_batch else shape[0], *shape[1:]], "float32"
        ),
        logits_name=LOGITS_NAME,
        num_classes=config.num_classes,
        config=config.to_dict(),
        trainable=trainable,
        files=files,
        versions=all_versions,
        preprocessing=_preprocessing(model, preprocessing),
        validation=report.to_dict() if report is not None else {},
        model=info,
        portable=portable,
    )


def _empty_dir(path: Path) -> bool:
    """An existing empty directory (e.g. from mkdtemp): exporting into it loses nothing."""
    return path.is_dir() and not any(path.iterdir())


def _move_into_place(tmp: Path, out_dir: Path, *, overwrite: bool) -> None:
    if out_dir.exists():
        if not overwrite and not _empty_dir(out_dir):
            raise FileExistsError(f"{out_dir} appeared during the export; not replacing it")
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
