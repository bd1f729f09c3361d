"""Writing the legacy training artifacts: REALM's loss graph, ORT's gradient graph, validation.

``training_model.onnx``, ``eval_model.onnx`` and ``checkpoint`` for onnxruntime-training
1.19.2's ``Module`` API, built by its ``artifacts.generate_artifacts`` from the TorchScript
forward graph with REALM's loss on top, then checked against the PyTorch reference. They
are written aside and moved into the artifact directory only once they validate.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from torch import nn

from realm_runtime import onnxruntime_module, training_api
from realm_runtime.contract import CHECKPOINT, EVAL_MODEL, TRAINING_MODEL
from realm_sdk import RealmConfig

from .._errors import UnsupportedModelError
from .._options import ExportOptions
from .._validate import ValidationError, ValidationReport, branch_hint, validation_batch
from ._loss import append_loss
from ._validate import training_graph_error, validate_artifacts

log = logging.getLogger(__name__)

# Why an export holds no training artifacts unless asked for: the manifest's and the info's word.
NOT_ASKED = "not asked for (ExportOptions(training=True), realm export --training)"


@dataclass(frozen=True)
class TrainingOutcome:
    """What became of the legacy training artifacts in one export."""

    report: ValidationReport | None = None  # their figures; None: not validated, or not written
    error: str | None = None  # why they are not written, in one sentence; None: written

    @property
    def written(self) -> bool:
        """Whether the three files are in the artifact directory."""
        return self.error is None


def training_wanted(training: bool, config: RealmConfig) -> tuple[bool, str | None]:
    """Whether to build the training artifacts (only when asked for), and why not if not.

    Raises:
        ImportError: ``training=True`` where onnxruntime-training is not installed.
        UnsupportedModelError: ``training=True`` for a method they cannot hold (SAR, DeYO).
    """
    if not training:
        return False, NOT_ASKED
    why = config.rules.legacy_training
    if why is not None:
        raise UnsupportedModelError(f"training=True: {why}; export the portable graph")
    available = importlib.util.find_spec("onnxruntime") is not None
    if available:
        # Imported through realm_runtime, on a bare stack: onnxruntime-training's import-time
        # check keeps a traceback for good, which would pin this export's frames (the model).
        onnxruntime_module()
        available = importlib.util.find_spec("onnxruntime.training") is not None
    if not available:
        raise ImportError(
            "training=True (realm export --training) needs onnxruntime-training 1.19.2, which "
            "exists for Python 3.11: pip install 'onnxruntime-training==1.19.2' (the "
            "'realm-tta[runtime-training]' extra), or export without the training artifacts"
        )
    return True, None


def write_training_artifacts(
    directory: Path,
    forward: onnx.ModelProto,
    reference: nn.Module,
    requires_grad: list[str],
    options: ExportOptions,
    *,
    branches: Sequence[str],
    notify: Callable[[str], None],
) -> TrainingOutcome:
    """Build, validate and move into ``directory`` the legacy training artifacts asked for.

    Args:
        directory: the artifact directory being written.
        forward: the TorchScript forward graph (:func:`realm_export.model_to_onnx`).
        reference: the frozen eval-mode copy of the model: the PyTorch reference.
        requires_grad: the trainable tensors: the SDK's norm parameters, then α and λ.
        options: the export's options, ``config`` and ``input_shape`` settled.
        branches: where the trace froze data-dependent control flow (named on a failure).
        notify: the export's progress callback.

    Returns:
        Their report.

    Raises:
        UnsupportedModelError: onnxruntime-training could not build or run them.
        ValidationError: they disagree with the PyTorch reference.
    """
    report = _write(directory, forward, reference, requires_grad, options, branches, notify)
    return TrainingOutcome(report=report)


def _write(
    directory: Path,
    forward: onnx.ModelProto,
    reference: nn.Module,
    requires_grad: list[str],
    options: ExportOptions,
    branches: Sequence[str],
    notify: Callable[[str], None],
) -> ValidationReport | None:
    """The artifacts, built and validated aside, then moved into ``directory``.

    Returns:
        Their validation report (None where validation is switched off).
    """
    assert options.config is not None and options.input_shape is not None  # settled
    notify("adding the loss graph")
    with_loss = append_loss(forward, options.config)
    notify("generating training artifacts (legacy, onnxruntime-training 1.19.2)")
    aside = directory / ".training"
    aside.mkdir()
    try:
        _generate(with_loss, requires_grad, aside)
        report = _validate(aside, reference, options, branches, notify)
        for name in (TRAINING_MODEL, EVAL_MODEL, CHECKPOINT):
            os.replace(aside / name, directory / name)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return report


def _validate(
    directory: Path,
    reference: nn.Module,
    options: ExportOptions,
    branches: Sequence[str],
    notify: Callable[[str], None],
) -> ValidationReport | None:
    """The training artifacts against the PyTorch reference (None if not asked).

    Raises:
        ValidationError: they disagree beyond the tolerances.
    """
    if not options.validate:
        return None
    assert options.config is not None  # settled
    notify("validating the training artifacts against the PyTorch reference")
    report = validate_artifacts(
        directory,
        reference,
        options.config,
        _training_inputs(options),
        atol=options.atol,
        grad_rtol=options.grad_rtol,
    )
    log.info("validation of the legacy training artifacts:\n%s", report.table())
    if not report.passed:
        message = "the training artifacts disagree with the PyTorch reference:\n"
        raise ValidationError(message + report.table() + branch_hint(branches), report)
    return report


def _training_inputs(options: ExportOptions) -> list[np.ndarray]:
    """The validation inputs: the export's batch, and one of batch B + 1 if it is dynamic."""
    assert options.input_shape is not None  # settled
    return validation_batch(
        options.input_shape,
        options.validation_inputs,
        seed=options.seed + 1,
        extra_batch=options.dynamic_batch,
    )


def _generate(proto: onnx.ModelProto, requires_grad: list[str], directory: Path) -> None:
    training_api()  # the package without its __init__, which imports the unused ORTModule
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


@contextlib.contextmanager
def _quiet_ort() -> Iterator[None]:
    """Silence onnxruntime's C++ INFO chatter while building the gradient graph.

    onnxblock's graph builder logs every graph transformer at INFO level straight to file
    descriptor 2, whatever the Python-side logger severity; so fd 2 is redirected to a
    temporary file for the duration, and its warning and error lines are passed on to the
    ``logging`` module.
    """
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
