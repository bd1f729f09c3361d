"""``export_realm_artifacts``: a torch model → validated on-device REALM artifacts + manifest.

Four stages, each announced to ``progress``: trace the model (a frozen reference copy, its
trainable names, the TorchScript forward graph); build the portable pipeline's files
(:mod:`.portable._write`), then the legacy training artifacts where they are tried
(:mod:`.legacy`); write the manifest; move the directory into place.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from realm_runtime import ArtifactError, Manifest, load_private_key
from realm_runtime.contract import (
    ALPHA_NAME,
    ERROR_KEY,
    INFERENCE_MODEL,
    LAMBDA_NAME,
)
from realm_runtime.methods import EXPORTED
from realm_sdk import RealmAdapter, RealmConfig, select_trainable

from ._directory import empty_dir, write_manifest, written_files
from ._drift import fit_drift
from ._errors import DriftBoundError, MemoryBudgetError, UnsupportedModelError
from ._inference import checked_inference
from ._memory import fit_budget, with_memory
from ._options import ExportOptions
from ._plan import Built, Plan, Progress, Stages, Traced
from ._torchscript import check_trainable_names, check_versions, model_to_onnx
from ._validate import ValidationError, ValidationReport, branch_hint
from .legacy import TrainingOutcome, training_wanted, write_training_artifacts
from .portable import write_portable

log = logging.getLogger(__name__)
# Errors already worded for the user: passed through as they are.
_SENTENCES = (
    UnsupportedModelError,
    ValidationError,
    MemoryBudgetError,
    DriftBoundError,
    ArtifactError,
    OSError,
    ImportError,
)


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


def export_realm_artifacts(
    model: nn.Module,
    out_dir: str | os.PathLike[str],
    options: ExportOptions | None = None,
    *,
    progress: Progress | None = None,
) -> ExportInfo:
    """Export ``model`` as on-device REALM artifacts, validated against the PyTorch reference.

    The portable graphs (the product: standard ONNX ops, any onnxruntime ≥ 1.19) and the
    legacy onnxruntime-training artifacts, where asked for, train exactly the parameters
    the SDK adapts (norm-layer affine weights and biases, minus the config's frozen patterns)
    plus α and λ. Everything is written to a temporary sibling directory and moved into place
    at the end, so a failed export leaves no half-written artifact directory (and an
    existing one untouched). Files: ``inference_model.onnx`` and ``realm.json`` always;
    ``step_model.onnx``, ``forward_model.onnx``, ``source_params.npy``, ``weights.bin``,
    ``adapt_model.onnx`` and its initial state (and ``*.ort`` with ``ort_format``) from the
    portable pipeline; ``training_model.onnx``, ``eval_model.onnx``, ``checkpoint`` from the
    legacy one with ``training``; ``realm.sig`` when signed.

    Args:
        model: the classifier (timm or any ``nn.Module``); it is copied, never modified.
        out_dir: the artifact directory to create.
        options: what to write and how hard to check it; None: ``ExportOptions()``.
        progress: called with a short label as each stage starts.

    Returns:
        The paths, trainable names and validation figures.

    Raises:
        UnsupportedModelError: the model cannot adapt on the device (no norm layer, an op
            without ONNX form or gradient, dynamic control flow), in one sentence: nothing
            asked for could be built; or ``training=True`` and the training artifacts failed
            (or the method is one they cannot hold).
        ValidationError: ORT and torch disagree beyond the tolerances on what was asked for
            (the report is attached).
        FileExistsError: ``out_dir`` exists, is not an empty directory, and
            ``options.overwrite`` is false.
        ValueError: no input shape (none given, none declared by the model).
        ImportError: ``training=True`` where onnxruntime-training is not installed.
    """
    start = time.perf_counter()
    plan = _settle(model, out_dir, options if options is not None else ExportOptions(), progress)
    memory = plan.options.memory
    if memory is not None and memory.budget_mb is not None:
        plan = fit_budget(model, plan, lambda trial: _run(model, trial, start).manifest)
    if plan.options.drift_check is not None:  # on the layers the budget left adapting
        plan = fit_drift(model, plan)
    return _run(model, plan, start)


def _settle(
    model: nn.Module,
    out_dir: str | os.PathLike[str],
    options: ExportOptions,
    progress: Progress | None,
) -> Plan:
    """The export's plan: the options' open fields settled, checked before anything is traced.

    Settles the input shape, the config and whether to build the training artifacts, and
    checks what depends on more than the options: the directory, the installed libraries,
    the signing key.

    Raises:
        FileExistsError, ValueError, ImportError, UnsupportedModelError: as
            :func:`export_realm_artifacts` says.
    """
    path = Path(out_dir)
    if path.exists() and not options.overwrite and not empty_dir(path):
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    shape = options.input_shape if options.input_shape is not None else _declared_shape(model)
    config = options.config if options.config is not None else _default_config(model, shape)
    rules = config.rules
    if not rules.exports:
        raise UnsupportedModelError(
            f"{rules.label} cannot be exported: {rules.sdk_only}; it runs in the PyTorch SDK "
            f"(realm_sdk.RealmAdapter with method {rules.name!r}), or export one of "
            f"{list(EXPORTED)}"
        )
    attempt, skipped = training_wanted(options.training, config)
    signing_key = options.signing_key
    if signing_key is not None:
        signing_key = load_private_key(signing_key)  # a bad key fails now, not after the export
    return Plan(
        options=dataclasses.replace(options, config=config, input_shape=shape),
        out_dir=path,
        training=attempt,
        training_skipped=skipped,
        signing_key=signing_key,
        notify=Stages(progress),
    )


def _declared_shape(model: nn.Module) -> tuple[int, ...]:
    """``(1, *input_size)`` of a model that declares its input size (timm's ``pretrained_cfg``).

    Raises:
        ValueError: it declares none.
    """
    cfg = getattr(model, "pretrained_cfg", None)
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    if not size:
        raise ValueError(
            "the model declares no input size (pretrained_cfg['input_size']): pass "
            "ExportOptions(input_shape=(1, C, H, W))"
        )
    return (1, *(int(d) for d in size))


def _default_config(model: nn.Module, shape: tuple[int, ...]) -> RealmConfig:
    """The SDK's default settings for as many classes as the model's logits have.

    Raises:
        UnsupportedModelError: the model does not run at ``shape``, or returns no
            ``(batch, classes)`` logits.
    """
    source = _copy_model(model).eval()
    logits = _forward(source, _example(shape, 0), shape)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != shape[0]:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise UnsupportedModelError(
            f"the model must return logits of shape ({shape[0]}, classes) for an input of "
            f"shape {shape}, got {got}"
        )
    return RealmConfig(num_classes=int(logits.shape[1]))


def _run(model: nn.Module, plan: Plan, start: float) -> ExportInfo:
    """:func:`_stages`, with any error not already a sentence of ours made into one.

    Raises:
        UnsupportedModelError: naming the stage and the library's own message, where torch,
            onnxscript or ONNX Runtime raised something this package did not anticipate.
    """
    try:
        return _stages(model, plan, start)
    except _SENTENCES:
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


def _stages(model: nn.Module, plan: Plan, start: float) -> ExportInfo:
    """The stages in order: trace, build, validate, write; ``start`` is the export's start."""
    traced = _trace(model, plan)
    # Everything goes to a temporary sibling, moved into place last: a failed export leaves
    # no half-written directory, and an existing one untouched.
    tmp = plan.out_dir.parent / f".{plan.out_dir.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        built = _build(plan, traced, tmp)
        if plan.options.memory is not None:
            built = with_memory(plan, traced, built)
        manifest = write_manifest(plan, traced, built)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportInfo(
        plan.out_dir,
        written_files(plan, built),
        traced.requires_grad,
        built.training.report,
        manifest,
        time.perf_counter() - start,
        built.portable_report,
        built.portable.get(ERROR_KEY),
        built.ort_report,
        built.training.error,
    )


def _trace(model: nn.Module, plan: Plan) -> Traced:
    """Stage 1: the reference copy, its trainable names, its TorchScript forward graph."""
    plan.notify("selecting parameters")
    source, trainable = _reference(model, plan.config)
    plan.notify("exporting the forward graph")
    example = _example(plan.shape, plan.options.seed)
    _check_logits(source, example, plan.shape, plan.config.num_classes)
    extra = [ALPHA_NAME, LAMBDA_NAME] if plan.config.rules.learns_alpha_lambda else []
    requires_grad = [*trainable, *extra]
    dynamic = plan.options.dynamic_batch
    # TorchScript's forwards: the inference model (the model's own norms) and the legacy
    # training graph's base (the export-friendly ones), which stands in for the first where
    # the exporter has no form of a norm as the model calls it.
    inference, branches, versions, forward = None, [], {}, None
    try:
        inference, branches = model_to_onnx(source, example, dynamic_batch=dynamic)
        versions = check_versions(inference)
    except UnsupportedModelError as exc:
        log.info("the model's own forward does not export (%s): the friendly forms' stands in", exc)
    if plan.training or inference is None:
        try:
            forward, seen = model_to_onnx(source, example, dynamic_batch=dynamic, for_training=True)
            versions = check_versions(forward)
            if plan.training:
                check_trainable_names(forward, trainable)
        except UnsupportedModelError as exc:
            if not plan.options.portable or plan.training:
                raise
            # The portable graph does not need it: the inference model comes from its forward.
            log.warning("no TorchScript forward graph (the portable graph stands in): %s", exc)
            fisher = _fisher(source, plan)
            return Traced(source, example, trainable, requires_grad, None, [], {}, fisher)
        if inference is None:
            inference, branches = forward, seen
    fisher = _fisher(source, plan)
    return Traced(
        source, example, trainable, requires_grad, forward, branches, versions, fisher, inference
    )


def _fisher(source: nn.Module, plan: Plan) -> dict[str, torch.Tensor] | None:
    """λ_F·F of a method with clean state (EATA), from the options' clean images, once."""
    if plan.config.rules.clean_state is None:
        return None
    plan.notify("estimating the Fisher information on the clean images")
    adapter = RealmAdapter(copy.deepcopy(source), plan.config, clean_images=plan.options.clean_of())
    return adapter.fisher


def _example(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """The traced input: seeded, so that the same options write the same files."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _reference(model: nn.Module, config: RealmConfig) -> tuple[nn.Module, list[str]]:
    """A frozen eval-mode copy of ``model`` and the parameters the SDK adapts in it.

    Raises:
        UnsupportedModelError: the SDK finds nothing to adapt (e.g. no norm layer).
    """
    source = _copy_model(model).eval()
    try:
        trainable = select_trainable(
            copy.deepcopy(source),
            config.frozen,
            freeze_last_block=config.freeze_last_block,
            adapt_stages=config.adapt_stages,
        )
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
    logits = _forward(source, example, shape)
    if isinstance(logits, torch.Tensor) and tuple(logits.shape) == (shape[0], num_classes):
        return
    got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
    raise UnsupportedModelError(
        f"the model must return logits of shape ({shape[0]}, {num_classes}) for an "
        f"input of shape {shape}, got {got}"
    )


def _forward(source: nn.Module, example: torch.Tensor, shape: tuple[int, ...]) -> Any:
    """``source(example)`` in torch, without gradients.

    Raises:
        UnsupportedModelError: the model does not run at ``shape``, naming the size it
            declares.
    """
    try:
        with torch.no_grad():
            return source(example)
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


def _build(plan: Plan, traced: Traced, directory: Path) -> Built:
    """Stage 2: the inference graph, the portable graphs (the product), the training artifacts.

    Raises:
        UnsupportedModelError, ValidationError: nothing asked for could be built, or the
            training artifacts failed where they were required.
    """
    inference, section = checked_inference(plan, traced)
    traced = dataclasses.replace(traced, inference=inference)
    plan.notify("writing the inference graph")
    if inference is not None:
        onnx.save(inference, str(directory / INFERENCE_MODEL))
    built = (
        write_portable(plan, traced, directory) if plan.options.portable else Built(directory, {})
    )
    if not (directory / INFERENCE_MODEL).exists():
        section = {"graph": None, "reason": section.get("reason", "")}
    built = dataclasses.replace(built, training=_legacy(plan, traced, directory), inference=section)
    if ERROR_KEY in built.portable:
        _portable_missing(plan, built, traced.branches)
    return built


def _legacy(plan: Plan, traced: Traced, directory: Path) -> TrainingOutcome:
    """The legacy training artifacts where asked for; why they are missing otherwise.

    Raises:
        UnsupportedModelError, ValidationError: they failed.
    """
    if not plan.training:
        return TrainingOutcome(error=plan.training_skipped)
    assert traced.forward is not None  # without it the trace raised: they were asked for
    return write_training_artifacts(
        directory,
        traced.forward,
        traced.source,
        traced.requires_grad,
        plan.options,
        branches=traced.branches,
        notify=plan.notify,
    )


def _portable_missing(plan: Plan, built: Built, branches: list[str]) -> None:
    """No portable step graph: an error unless the training artifacts stand in for it.

    Raises:
        UnsupportedModelError: ORT-format graphs were asked for, or there are no training
            artifacts either.
        ValidationError: as above, where the portable graph failed its validation.
    """
    reason = built.portable[ERROR_KEY]
    if plan.options.ort_format:
        raise UnsupportedModelError(
            "ORT-format graphs were asked for, but there is no portable step graph "
            f"to convert: {reason}"
        )
    if built.training.error is None:
        log.warning(
            "no portable step graph (the training artifacts are written): %s",
            reason.splitlines()[0],
        )
        return
    first, _, details = reason.partition("\n")
    message = (
        f"no artifact for this model: {first} (and the legacy training artifacts are "
        f"{built.training.error})" + (f"\n{details}" if details else "")
    )
    if built.portable_report is not None and not built.portable_report.passed:
        raise ValidationError(message + branch_hint(branches), built.portable_report)
    raise UnsupportedModelError(message)
