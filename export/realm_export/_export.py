"""``export_realm_artifacts``: torch model → validated ORT training artifacts + manifest."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from realm_runtime import InputSpec, Manifest, load_private_key, onnxruntime_module, sign_manifest
from realm_runtime.contract import (
    ALPHA_NAME,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    CHECKPOINT,
    EVAL_MODEL,
    FORWARD_MODEL,
    INFERENCE_MODEL,
    LAMBDA_NAME,
    LAYOUT_VERSION,
    MANIFEST_NAME,
    PARAMS_NAME,
    SHARED_WEIGHTS,
    SOURCE_PARAMS,
    STEP_MODEL,
    TRAINING_MODEL,
    sha256_of,
)
from realm_sdk import RealmAdapter, RealmConfig

from ._adapt import write_adapt
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
from ._portable import PortableGraphs, build_portable_graphs
from ._rewrite import UnsupportedModelError
from ._validate import (
    ValidationError,
    ValidationReport,
    training_graph_error,
    validate_artifacts,
    validate_portable,
)
from ._validate_adapt import validate_adapt, validate_adapt_graphs
from ._weights import save_with_shared_weights

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# The portable graphs' files by role, as the manifest's portable section names them.
_PORTABLE_FILES = {
    "step_model": STEP_MODEL,
    "forward_model": FORWARD_MODEL,
    "source_params": SOURCE_PARAMS,
}


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
    training_error: str | None = None  # why there are no training artifacts, if there are none


@dataclass(frozen=True)
class _ExportPlan:
    """One export's settled arguments, shared by its stages: trace, build, validate, write."""

    out_dir: Path  # the artifact directory to create
    config: RealmConfig
    shape: tuple[int, ...]  # (batch, C, ...) of the export
    training: bool  # try the ORT training artifacts (None already resolved)
    training_required: bool  # their failure is an error: asked for, or nothing else is written
    training_skipped: str | None  # why they are not tried, when they are not
    portable: bool  # write the portable step and forward graphs
    web: bool  # and the decision graph beside them
    ort_format: bool  # and their ORT-format conversions
    validate: bool
    atol: float
    grad_rtol: float
    validation_inputs: int
    dynamic_batch: bool
    standalone_inference: bool  # inference_model.onnx with its weights inside (not shared)
    overwrite: bool
    seed: int
    preprocessing: dict[str, Any] | None  # None: from the model's pretrained_cfg
    model_info: dict[str, Any] | None
    signing_key: object | None  # loaded already, so a bad key fails before the export
    notify: _Stages  # the progress callback, remembering the current stage

    def training_inputs(self) -> list[np.ndarray]:
        """The training artifacts' validation inputs (one more of batch B + 1 if dynamic)."""
        return validation_batch(
            self.shape, self.validation_inputs, seed=self.seed + 1, extra_batch=self.dynamic_batch
        )

    def portable_inputs(self) -> list[np.ndarray]:
        """The portable graphs' validation inputs: batch 1, the on-device protocol."""
        return validation_batch(
            (1, *self.shape[1:]), self.validation_inputs, seed=self.seed + 1, extra_batch=False
        )


@dataclass(frozen=True)
class _Traced:
    """What the trace stage made of the model."""

    source: nn.Module  # the private eval-mode copy, parameters frozen: the PyTorch reference
    example: torch.Tensor  # the traced input, of the export shape
    trainable: list[str]  # the SDK's norm parameters
    requires_grad: list[str]  # those, then α and λ where the method learns them
    forward: onnx.ModelProto | None  # the inference graph (TorchScript); None: it failed
    with_loss: onnx.ModelProto | None  # the forward graph with REALM's loss: the training base
    branches: list[str]  # where the tracer froze data-dependent control flow
    versions: dict[str, int]  # IR version and opset of the forward graph
    forward_error: str | None = None  # why the TorchScript forward graph failed, if it did


@dataclass(frozen=True)
class _Built:
    """What the build stage wrote into the temporary directory, beside the training files."""

    directory: Path  # the temporary directory, moved into place by the write stage
    portable: dict[str, Any]  # the manifest's portable section; {"error": ...}; {} if not asked
    portable_report: ValidationReport | None = None
    ort_report: ValidationReport | None = None
    training_report: ValidationReport | None = None  # None: not validated, or not written
    training_error: str | None = None  # why there are no training artifacts, if there are none
    training_failure: ValidationError | None = None  # their failed validation, if that was why
    adapt: dict[str, Any] = field(default_factory=dict)  # the manifest's adapt section, if written


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
    standalone_inference: bool = False,
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
        standalone_inference: write ``inference_model.onnx`` with its weights inside, to be
            used apart from the directory; by default its weights point into
            ``weights.bin`` with the portable graphs' (one copy on the device).
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
        training: the legacy ONNX Runtime training artifacts (onnxruntime-training 1.19.2).
            None: tried where onnxruntime-training is installed (Python 3.11); where they
            cannot be built or do not validate, the export goes on without them and says why
            (:attr:`ExportInfo.training_error`, the manifest's ``training`` section, the
            log). True: their failure is an error. False: not written.
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
        UnsupportedModelError: the model cannot adapt on the device (no norm layer, an op
            without ONNX form or gradient, dynamic control flow), in one sentence: nothing
            asked for could be built; or ``training=True`` and the training artifacts failed.
        ValidationError: ORT and torch disagree beyond the tolerances on what was asked for
            (the report is attached).
        FileExistsError: ``out_dir`` exists, is not an empty directory, and ``overwrite`` is
            false.
    """
    start = time.perf_counter()
    path, shape, (attempt, skipped), signing_key = _checked_arguments(
        out_dir,
        input_shape,
        config,
        overwrite=overwrite,
        training=training,
        portable=portable,
        ort_format=ort_format,
        signing_key=signing_key,
    )
    plan = _ExportPlan(
        out_dir=path,
        config=config,
        shape=shape,
        training=attempt,
        training_required=attempt and (training is True or not portable),
        training_skipped=skipped,
        portable=portable,
        web=web,
        ort_format=ort_format,
        validate=validate,
        atol=atol,
        grad_rtol=grad_rtol,
        validation_inputs=validation_inputs,
        dynamic_batch=dynamic_batch,
        standalone_inference=standalone_inference,
        overwrite=overwrite,
        seed=seed,
        preprocessing=preprocessing,
        model_info=model_info,
        signing_key=signing_key,
        notify=_Stages(progress),
    )
    return _run(model, plan, start)


class _Stages:
    """The progress callback, remembering the stage it last announced (for error messages)."""

    def __init__(self, progress: Progress | None) -> None:
        self.current = "checking the model"
        self._progress = progress

    def __call__(self, label: str) -> None:
        self.current = label
        if self._progress is not None:
            self._progress(label)


def _run(model: nn.Module, plan: _ExportPlan, start: float) -> ExportInfo:
    """:func:`_stages`, with any error not already a sentence of ours made into one.

    Raises:
        UnsupportedModelError: naming the stage and the library's own message, where torch,
            onnxscript or ONNX Runtime raised something this package did not anticipate.
    """
    try:
        return _stages(model, plan, start)
    except (UnsupportedModelError, ValidationError, OSError, ImportError):
        raise
    except Exception as exc:
        stage = plan.notify.current
        text = str(exc).strip()
        first = re.sub(r"\s+", " ", text.splitlines()[0])[:300] if text else ""
        raise UnsupportedModelError(
            f"the export failed while {stage}: {type(exc).__name__}: {first} (a bug or a "
            "layer this exporter does not know: please report it with the model's name; "
            "freezing the layer with RealmConfig.frozen may avoid it)"
        ) from exc


def _stages(model: nn.Module, plan: _ExportPlan, start: float) -> ExportInfo:
    """The stages in order: trace, build, validate, write; ``start`` is the export's start."""
    traced = _trace(model, plan)
    # Everything goes to a temporary sibling, moved into place last: a failed export leaves
    # no half-written directory, and an existing one untouched.
    tmp = plan.out_dir.parent / f".{plan.out_dir.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        built = _build(plan, traced, tmp)
        manifest = _write(plan, traced, built)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportInfo(
        plan.out_dir,
        _files(plan, built),
        traced.requires_grad,
        built.training_report,
        manifest,
        time.perf_counter() - start,
        built.portable_report,
        built.portable.get("error"),
        built.ort_report,
        built.training_error,
    )


def _checked_arguments(
    out_dir: str | os.PathLike[str],
    input_shape: Sequence[int],
    config: RealmConfig,
    *,
    overwrite: bool,
    training: bool | None,
    portable: bool,
    ort_format: bool,
    signing_key: object | None,
) -> tuple[Path, tuple[int, ...], tuple[bool, str | None], object | None]:
    """Check the arguments before anything is traced, in :func:`export_realm_artifacts`' order.

    Returns:
        The artifact directory, the input shape, whether to try the training artifacts and
        why not (``training`` resolved), and the loaded signing key.
    """
    path = Path(out_dir)
    shape = _check_shape(input_shape)
    if not isinstance(config, RealmConfig):
        raise TypeError(f"config must be a RealmConfig, got {type(config).__name__}")
    if path.exists() and not overwrite and not _empty_dir(path):
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    wanted = _training_wanted(training, config)
    if not wanted[0] and not portable:
        raise ValueError(
            f"nothing to export: portable=False, and the training artifacts are {wanted[1]}"
        )
    if signing_key is not None:
        signing_key = load_private_key(signing_key)  # a bad key fails now, not after the export
    if ort_format and not portable:
        raise ValueError("ort_format=True converts the portable graphs: it needs portable=True")
    return path, shape, wanted, signing_key


def _trace(model: nn.Module, plan: _ExportPlan) -> _Traced:
    """Stage 1: the reference copy, its trainable names, its forward and loss graphs."""
    plan.notify("selecting parameters")
    source, trainable = _reference(model, plan.config)
    plan.notify("exporting the forward graph")
    example = torch.randn(plan.shape, generator=torch.Generator().manual_seed(plan.seed))
    _check_logits(source, example, plan.shape, plan.config.num_classes)
    extra = [ALPHA_NAME, LAMBDA_NAME] if plan.config.learns_alpha_lambda else []
    requires_grad = [*trainable, *extra]
    try:
        # TorchScript's forward graph: the inference model and the legacy training graph's base.
        forward, branches = model_to_onnx(source, example, dynamic_batch=plan.dynamic_batch)
        versions = check_versions(forward)
        check_trainable_names(forward, trainable)
        plan.notify("adding the loss graph")
        with_loss = append_loss(forward, plan.config)
    except UnsupportedModelError as exc:
        if not plan.portable or plan.training_required:
            raise
        # The portable graph does not need it: the inference model comes from its forward.
        log.warning("no TorchScript forward graph (the portable graph stands in): %s", exc)
        return _Traced(source, example, trainable, requires_grad, None, None, [], {}, str(exc))
    return _Traced(
        source, example, trainable, requires_grad, forward, with_loss, branches, versions
    )


def _reference(model: nn.Module, config: RealmConfig) -> tuple[nn.Module, list[str]]:
    """A frozen eval-mode copy of ``model`` and the parameters the SDK adapts in it.

    Raises:
        UnsupportedModelError: the SDK finds nothing to adapt (e.g. no norm layer).
    """
    source = _copy_model(model).eval()
    try:
        trainable = RealmAdapter(copy.deepcopy(source), config).trainable_names
    except ValueError as exc:
        raise UnsupportedModelError(str(exc)) from exc
    for p in source.parameters():
        p.requires_grad_(False)
    return source, trainable


def _copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``, its caches of computed tensors left behind.

    timm's attention layers (LeViT, EfficientFormer, ...) cache their bias tables, computed
    from a parameter, after an eval-mode forward; such a tensor is no graph leaf and refuses
    ``deepcopy``. The caches are emptied for the copy and put back: the model is unchanged.
    """
    caches = [
        (module, name, value)
        for module in model.modules()
        for name, value in vars(module).items()
        if isinstance(value, dict)
        and value
        and not name.startswith("_")
        and all(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in value.values())
    ]
    for module, name, _ in caches:
        setattr(module, name, {})
    try:
        return copy.deepcopy(model)
    finally:
        for module, name, value in caches:
            setattr(module, name, value)


def _check_logits(
    source: nn.Module, example: torch.Tensor, shape: tuple[int, ...], num_classes: int
) -> None:
    """The model must map the example, of the export ``shape``, to (batch, C) logits.

    Raises:
        UnsupportedModelError: it returns something else.
    """
    try:
        with torch.no_grad():
            logits = source(example)
    except Exception as exc:
        text = str(exc).strip()
        first = text.splitlines()[0][:300] if text else type(exc).__name__
        cfg = getattr(source, "pretrained_cfg", None)
        size = cfg.get("input_size") if isinstance(cfg, dict) else None
        hint = f" (it declares input_size {tuple(size)})" if size else ""
        raise UnsupportedModelError(
            f"the model does not run on an input of shape {shape} in torch itself "
            f"({type(exc).__name__}: {first}): export it at a size it accepts{hint}"
        ) from exc
    if isinstance(logits, torch.Tensor) and tuple(logits.shape) == (shape[0], num_classes):
        return
    got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
    raise UnsupportedModelError(
        f"the model must return logits of shape ({shape[0]}, {num_classes}) for an "
        f"input of shape {shape}, got {got}"
    )


def _build(plan: _ExportPlan, traced: _Traced, directory: Path) -> _Built:
    """Stage 2: the inference graph, the portable graphs (the product), the training artifacts.

    Raises:
        UnsupportedModelError, ValidationError: nothing asked for could be built, or the
            training artifacts failed where they were required.
    """
    plan.notify("writing the inference graph")
    if traced.forward is not None:
        onnx.save(traced.forward, str(directory / INFERENCE_MODEL))
    built = _write_portable(plan, traced, directory) if plan.portable else _Built(directory, {})
    training_report, training_error, failure = None, plan.training_skipped, None
    if plan.training and traced.with_loss is None:
        training_error = f"not written: their base, {traced.forward_error}"
    elif plan.training:
        try:
            training_report = _write_training(plan, traced, directory)
        except (UnsupportedModelError, ValidationError) as exc:
            if plan.training_required:
                raise
            training_error = _one_sentence(exc)
            failure = exc if isinstance(exc, ValidationError) else None
            if "error" not in built.portable:
                log.warning("legacy training artifacts %s", training_error)
    built = dataclasses.replace(
        built,
        training_report=training_report,
        training_error=training_error,
        training_failure=failure,
    )
    if "error" in built.portable:
        _portable_missing(plan, built, traced.branches)
    return built


def _one_sentence(exc: UnsupportedModelError | ValidationError) -> str:
    """An export error in one line: what failed, and the figures where it was validation."""
    if isinstance(exc, ValidationError):
        return f"refused: they disagree with the PyTorch reference ({exc.report.summary()})"
    text = str(exc).strip()
    return f"not written: {text.splitlines()[0] if text else type(exc).__name__}"


def _portable_missing(plan: _ExportPlan, built: _Built, branches: list[str]) -> None:
    """No portable step graph: an error unless the training artifacts stand in for it.

    Raises:
        UnsupportedModelError: ORT-format graphs were asked for, or there are no training
            artifacts either.
        ValidationError: as above, where the portable graph failed its validation.
    """
    reason = built.portable["error"]
    if plan.ort_format:
        raise UnsupportedModelError(
            "ORT-format graphs were asked for, but there is no portable step graph "
            f"to convert: {reason}"
        )
    if built.training_error is None:
        log.warning(
            "no portable step graph (the training artifacts are written): %s",
            reason.splitlines()[0],
        )
        return
    first, _, details = reason.partition("\n")
    message = (
        f"no artifact for this model: {first} (and the legacy training artifacts are "
        f"{built.training_error})" + (f"\n{details}" if details else "")
    )
    if built.portable_report is not None and not built.portable_report.passed:
        raise ValidationError(message + _branch_hint(branches), built.portable_report)
    if built.training_failure is not None:
        failed = built.training_failure.report
        raise ValidationError(message + "\n" + failed.table() + _branch_hint(branches), failed)
    raise UnsupportedModelError(message)


def _write_training(plan: _ExportPlan, traced: _Traced, directory: Path) -> ValidationReport | None:
    """The legacy training artifacts, built and validated aside, then moved into ``directory``.

    Returns:
        Their validation report (None where validation is switched off).

    Raises:
        UnsupportedModelError: onnxruntime-training could not build or run them.
        ValidationError: they disagree with the PyTorch reference.
    """
    plan.notify("generating training artifacts (legacy, onnxruntime-training 1.19.2)")
    aside = directory / ".training"
    aside.mkdir()
    try:
        _generate(traced.with_loss, traced.requires_grad, aside)
        report = _validate(plan, traced, aside)
        for name in (TRAINING_MODEL, EVAL_MODEL, CHECKPOINT):
            os.replace(aside / name, directory / name)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return report


def _validate(plan: _ExportPlan, traced: _Traced, directory: Path) -> ValidationReport | None:
    """The training artifacts against the PyTorch reference (None if not asked).

    Raises:
        ValidationError: they disagree beyond the tolerances.
    """
    if not plan.validate:
        return None
    plan.notify("validating the training artifacts against the PyTorch reference")
    report = validate_artifacts(
        directory,
        traced.source,
        plan.config,
        plan.training_inputs(),
        atol=plan.atol,
        grad_rtol=plan.grad_rtol,
    )
    log.info("validation of %s:\n%s", plan.out_dir, report.table())
    if not report.passed:
        raise ValidationError(_disagreement(report, traced.branches), report)
    return report


def _branch_hint(branches: list[str]) -> str:
    """Where the trace froze data-dependent control flow: the likely cause of a disagreement."""
    if not branches:
        return ""
    return (
        "\nThe trace turned tensors into Python booleans (data-dependent control "
        "flow, frozen into one branch) at: " + ", ".join(branches[:5])
    )


def _disagreement(report: ValidationReport, branches: list[str]) -> str:
    """The failed validation's message, naming frozen control flow as the likely cause."""
    return (
        "the training artifacts disagree with the PyTorch reference:\n"
        + report.table()
        + _branch_hint(branches)
    )


def _write(plan: _ExportPlan, traced: _Traced, built: _Built) -> Manifest:
    """Stage 3: the manifest (signed if asked), then the directory moved into place."""
    plan.notify("writing the manifest")
    manifest = _manifest(plan, traced, built)
    (built.directory / MANIFEST_NAME).write_bytes(manifest.to_bytes())
    if plan.signing_key is not None:
        plan.notify("signing the manifest")
        sign_manifest(built.directory, plan.signing_key)
    _move_into_place(built.directory, plan.out_dir, overwrite=plan.overwrite)
    return manifest


def _files(plan: _ExportPlan, built: _Built) -> dict[str, Path]:
    """:attr:`ExportInfo.files`: role → path of every file the export wrote."""
    out_dir, portable = plan.out_dir, built.portable
    files = {"inference_model": out_dir / INFERENCE_MODEL, "manifest": out_dir / MANIFEST_NAME}
    if plan.training and built.training_error is None:
        files |= {
            "training_model": out_dir / TRAINING_MODEL,
            "eval_model": out_dir / EVAL_MODEL,
            "checkpoint": out_dir / CHECKPOINT,
        }
    if "step_model" in portable:
        for role in ("step_model", "forward_model", "source_params"):
            files[role] = out_dir / portable[role]
        files["weights"] = out_dir / portable["weights"]["file"]
    if "file" in built.adapt:
        files["adapt_model"] = out_dir / built.adapt["file"]
    ort_section = portable.get("ort_format", {})
    for role in ("step_model", "forward_model", "operators_config"):
        if role in ort_section:
            files[f"{role}_ort" if role != "operators_config" else role] = (
                out_dir / ort_section[role]
            )
    return files


def _write_portable(plan: _ExportPlan, traced: _Traced, directory: Path) -> _Built:
    """Build, write and validate the portable graphs; on failure, the reason instead.

    Returns:
        The manifest's ``portable`` section (or ``{"error": reason}``) with the portable
        graphs' report and the ORT-format graphs' report (None unless asked for and
        validated).

    Raises:
        OrtFormatError: ONNX Runtime's converter failed (only with ``ort_format``).
        ValidationError: the ORT-format graphs disagree with the reference.
    """
    started = time.perf_counter()
    plan.notify("building the portable step graph")
    try:
        graphs = build_portable_graphs(
            traced.source, plan.config, traced.trainable, traced.example[:1]
        )
    except UnsupportedModelError as exc:
        return _Built(directory, {"error": str(exc)})
    # The inference model: the TorchScript forward, else the portable forward bound to θ0.
    inference = traced.forward if traced.forward is not None else _standalone(graphs)
    roles = {"step_model": graphs.step, "forward_model": graphs.forward}
    names = dict(_PORTABLE_FILES)
    if plan.standalone_inference:
        onnx.save(inference, str(directory / INFERENCE_MODEL))
    else:  # its weights in weights.bin too: one copy of them on the device
        roles["inference_model"] = _copy(inference)
        names["inference_model"] = INFERENCE_MODEL
    weights = save_with_shared_weights(roles, directory, names)
    np.save(directory / SOURCE_PARAMS, graphs.source, allow_pickle=False)
    what = "portable step graph"
    report = _check_graphs(plan, traced, directory, graphs, what, _PORTABLE_FILES)
    if report is not None and not report.passed:
        section = _discard_portable(directory, report)
        onnx.save(inference, str(directory / INFERENCE_MODEL))  # weights.bin went with them
        return _Built(directory, section, report)
    section = _portable_section(graphs, report, started) | {"weights": weights}
    # The one adapt graph reads the step graph's weights from the same file.
    weights["graphs"]["adapt_model"] = list(weights["graphs"]["step_model"])
    adapt = _write_adapt(plan, traced, directory, graphs)
    if plan.web:
        # SPEC §3's decision for the JavaScript clients of the portable graphs.
        decide = decide_model(plan.config, graphs.step.ir_version)
        onnx.save(decide, str(directory / DECIDE_MODEL))
        section["decide_model"] = DECIDE_MODEL
    ort_report = None
    if plan.ort_format:
        section["ort_format"], ort_report = _write_ort_format(
            plan, traced, directory, graphs, adapt
        )
    return _Built(directory, section, report, ort_report, adapt=adapt)


def _write_adapt(
    plan: _ExportPlan, traced: _Traced, directory: Path, graphs: PortableGraphs
) -> dict[str, Any]:
    """Write and validate the one adapt graph; its manifest section, or why it is not here."""
    plan.notify("writing the adapt graph")
    section = write_adapt(graphs.step, plan.config, graphs.source, directory)
    if not plan.validate:
        return section
    plan.notify("validating the adapt graph against the PyTorch reference")
    try:
        reports = validate_adapt_graphs(
            directory, section, traced.source, plan.config, **_adapt_checks(plan)
        )
    except Exception as exc:  # ONNX Runtime refused to load or run it: say so, keep the rest
        _discard_adapt(directory, section)
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        return {"error": f"ONNX Runtime could not run the adapt graph: {first}"}
    for report, what in zip(reports, ("", " (entropy cut opened)"), strict=False):
        log.info("validation of the adapt graph%s: %s", what, report.summary())
    figures = [r.to_dict() for r in reports]
    if all(r.passed for r in reports):
        return section | {"validation": figures}
    _discard_adapt(directory, section)
    failed = next(r for r in reports if not r.passed)
    reason = f"the adapt graph disagrees with the PyTorch reference: {failed.summary()}"
    return {"error": reason, "validation": figures}


def _adapt_checks(plan: _ExportPlan) -> dict[str, Any]:
    """The adapt graph's validation inputs and tolerances, the same for every check of it."""
    return {"inputs": plan.portable_inputs(), "atol": plan.atol, "grad_rtol": plan.grad_rtol}


def _discard_adapt(directory: Path, section: dict[str, Any]) -> None:
    """Remove the adapt graph and its initial state (not the source parameters, shared)."""
    for entry in section["state"]:
        if entry["initial"] != SOURCE_PARAMS:
            (directory / entry["initial"]).unlink(missing_ok=True)
    (directory / section["file"]).unlink(missing_ok=True)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _standalone(graphs: PortableGraphs) -> onnx.ModelProto:
    """The portable forward graph with ``realm.params`` bound to the source: ``input → logits``."""
    model = onnx.ModelProto()
    model.CopyFrom(graphs.forward)
    kept = [i for i in model.graph.input if i.name != PARAMS_NAME]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.append(onnx.numpy_helper.from_array(graphs.source, PARAMS_NAME))
    return model


def _discard_portable(directory: Path, report: ValidationReport) -> dict[str, Any]:
    """Remove the portable graphs that failed validation; the section that says why."""
    for name in (*_PORTABLE_FILES.values(), SHARED_WEIGHTS):
        (directory / name).unlink(missing_ok=True)
    reason = (
        f"the portable step graph disagrees with the PyTorch reference ({report.summary()}):\n"
        + report.table()
    )
    return {"error": reason, "validation": report.to_dict()}


def _portable_section(
    graphs: PortableGraphs, report: ValidationReport | None, started: float
) -> dict[str, Any]:
    """The manifest's ``portable`` section for graphs written (and validated) since ``started``."""
    opset = max(o.version for o in graphs.step.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "layout_version": LAYOUT_VERSION,
        **_PORTABLE_FILES,
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


def _write_ort_format(
    plan: _ExportPlan,
    traced: _Traced,
    directory: Path,
    graphs: PortableGraphs,
    adapt: dict[str, Any],
) -> tuple[dict[str, Any], ValidationReport | None]:
    """Convert the portable graphs (and the adapt graph) to ORT format and validate them.

    Returns:
        The manifest's ``portable.ort_format`` section, and the report (None unless
        validated).

    Raises:
        OrtFormatError: ONNX Runtime's converter failed.
        ValidationError: the ORT-format graphs disagree with the reference.
    """
    plan.notify("writing the ORT-format graphs (ONNX Runtime's converter)")
    names = [STEP_MODEL, FORWARD_MODEL, *([adapt["file"]] if "file" in adapt else [])]
    converted = write_ort_format(directory, names, [SHARED_WEIGHTS])
    files = {
        "step_model": converted[STEP_MODEL],
        "forward_model": converted[FORWARD_MODEL],
        "source_params": SOURCE_PARAMS,
    }
    report = _check_graphs(plan, traced, directory, graphs, "ORT-format graphs", files)
    if report is not None and not report.passed:
        raise ValidationError(
            "the ORT-format graphs disagree with the PyTorch reference:\n" + report.table(),
            report,
        )
    section = _ort_format_section(files, converted, report)
    if "file" in adapt:
        section["adapt_model"] = converted[adapt["file"]]
        if plan.validate:  # the same trajectory from the ORT-format adapt graph
            # The written graph's trajectory only: the cut-opened twin was checked in .onnx.
            ort_adapt = adapt | {"file": converted[adapt["file"]]}
            figures = validate_adapt(
                directory, ort_adapt, traced.source, plan.config, **_adapt_checks(plan)
            )
            log.info("validation of the ORT-format adapt graph: %s", figures.summary())
            section["adapt_validation"] = figures.to_dict()
            if not figures.passed:
                raise ValidationError(
                    f"the ORT-format adapt graph disagrees with the PyTorch reference: "
                    f"{figures.summary()}",
                    report,  # type: ignore[arg-type]
                )
    return section, report


def _check_graphs(
    plan: _ExportPlan,
    traced: _Traced,
    directory: Path,
    graphs: PortableGraphs,
    what: str,
    files: dict[str, str],
) -> ValidationReport | None:
    """Validate one pair of step/forward graph files against the reference, and log it.

    Returns:
        The report, or None where validation is switched off.
    """
    if not plan.validate:
        return None
    plan.notify(f"validating the {what} against the PyTorch reference")
    report = validate_portable(
        directory,
        files,
        traced.source,
        plan.config,
        graphs.layout,
        plan.portable_inputs(),
        atol=plan.atol,
        grad_rtol=plan.grad_rtol,
    )
    log.info("validation of the %s:\n%s", what, report.table())
    return report


def _ort_format_section(
    files: dict[str, str], converted: dict[str, str], report: ValidationReport | None
) -> dict[str, Any]:
    """The manifest's ``portable.ort_format``: the files, how they were made, their figures."""
    onnxruntime = onnxruntime_module()
    return {
        "step_model": files["step_model"],
        "forward_model": files["forward_model"],
        "operators_config": converted["operators_config"],
        "converter": f"{CONVERTER} (onnxruntime {onnxruntime.__version__})",
        "optimization_style": OPTIMIZATION_STYLE,
        "target_platform": TARGET_PLATFORM,
        "validation": report.to_dict() if report is not None else {},
    }


def _training_wanted(training: bool | None, config: RealmConfig) -> tuple[bool, str | None]:
    """Whether to try the training artifacts (asked for, or installed), and why not if not.

    Raises:
        ImportError: ``training=True`` where onnxruntime-training is not installed.
        UnsupportedModelError: ``training=True`` for SAR, which they cannot hold.
    """
    if config.method == "sar":
        why = (
            "SAR's step takes a second gradient at a perturbed point (SAM), which the legacy "
            "training artifacts cannot hold"
        )
        if training:
            raise UnsupportedModelError(f"training=True: {why}; export the portable graph")
        return False, f"not written: {why}"
    import importlib.util

    available = importlib.util.find_spec("onnxruntime") is not None
    if available:
        # Imported through realm_runtime, on a bare stack: onnxruntime-training's import-time
        # check keeps a traceback for good, which would pin this export's frames (the model).
        onnxruntime_module()
        available = importlib.util.find_spec("onnxruntime.training") is not None
    if training is False:
        return False, "not asked for (training=False)"
    if training and not available:
        raise ImportError(
            "training=True needs onnxruntime-training 1.19.2 (Python 3.11): pip install "
            "'realm-tta[runtime-training]', or export the portable graph alone"
        )
    if not available:
        reason = "not written: onnxruntime-training is not installed (it exists for Python 3.11)"
        log.info("legacy training artifacts %s", reason)
        return False, reason
    return True, None


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


def _manifest(plan: _ExportPlan, traced: _Traced, built: _Built) -> Manifest:
    """The manifest of the files in ``built.directory``, as :func:`_write` writes it."""
    shape = plan.shape
    inits = {n: list(p.shape) for n, p in traced.source.named_parameters()}
    files = {p.name: sha256_of(p) for p in sorted(built.directory.iterdir()) if p.is_file()}
    return Manifest(
        format=ARTIFACT_FORMAT,
        version=ARTIFACT_VERSION,
        input=InputSpec(
            INPUT_NAME, ["batch" if plan.dynamic_batch else shape[0], *shape[1:]], "float32"
        ),
        logits_name=LOGITS_NAME,
        num_classes=plan.config.num_classes,
        config=plan.config.to_dict(),
        trainable={n: inits.get(n, []) for n in traced.requires_grad},  # α, λ are scalars: []
        files=files,
        versions=_versions(traced.versions),
        preprocessing=_preprocessing(traced.source, plan.preprocessing),
        validation=built.training_report.to_dict() if built.training_report is not None else {},
        model=_model_info(traced.source, plan.model_info),
        portable=built.portable,
        training=_training_section(built),
        adapt=built.adapt,
    )


def _training_section(built: _Built) -> dict[str, Any]:
    """The manifest's ``training``: whether the legacy training artifacts are here, and why not."""
    if built.training_error is None:
        return {"written": True}
    return {"written": False, "reason": built.training_error}


def _versions(graph_versions: dict[str, int]) -> dict[str, Any]:
    """The manifest's ``versions``: the libraries of the export, the graph's IR and opset."""
    onnxruntime = onnxruntime_module()
    versions: dict[str, Any] = {
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "torch": torch.__version__,
        **graph_versions,
    }
    with contextlib.suppress(ImportError):
        import timm

        versions["timm"] = timm.__version__
    from realm_sdk import __version__ as realm_version

    versions["realm-tta"] = realm_version
    return versions


def _model_info(model: nn.Module, given: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest's ``model``: the model's class, then what the caller said about it."""
    info = {"class": f"{type(model).__module__}.{type(model).__qualname__}"}
    info.update(given or {})
    return info


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
