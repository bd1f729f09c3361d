"""What one export's stages hand each other: the settled plan, the trace, the files built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from realm_sdk import RealmConfig

from ._options import ExportOptions
from ._validate import ValidationReport, validation_batch
from .legacy import TrainingOutcome

Progress = Callable[[str], None]


class Stages:
    """The progress callback, remembering the stage it last announced (for error messages)."""

    def __init__(self, progress: Progress | None) -> None:
        self.current = "checking the model"
        self._progress = progress

    def __call__(self, label: str) -> None:
        self.current = label
        if self._progress is not None:
            self._progress(label)


@dataclass(frozen=True)
class Plan:
    """One export's settled arguments, shared by its stages: trace, build, validate, write."""

    options: ExportOptions  # config and input_shape settled: never None here
    out_dir: Path  # the artifact directory to create
    training: bool  # build the legacy training artifacts (asked for: their failure is an error)
    training_skipped: str | None  # why they are not built, when they are not
    signing_key: object | None  # loaded already, so a bad key fails before the export
    notify: Stages  # the progress callback, remembering the current stage
    budget_trials: tuple[dict[str, Any], ...] = ()  # each adapt_stages tried against the budget
    drift_check: dict[str, Any] = field(default_factory=dict)  # max_drift fitted; {}: not asked

    @property
    def config(self) -> RealmConfig:
        """The adaptation settings of the export."""
        assert self.options.config is not None  # settled by export_realm_artifacts
        return self.options.config

    @property
    def shape(self) -> tuple[int, ...]:
        """``(batch, C, ...)`` of the export."""
        assert self.options.input_shape is not None  # settled by export_realm_artifacts
        return self.options.input_shape

    def portable_inputs(self) -> list[np.ndarray]:
        """The portable graphs' validation inputs: batch 1, the on-device protocol."""
        return validation_batch(
            (1, *self.shape[1:]),
            self.options.validation_inputs,
            seed=self.options.seed + 1,
            extra_batch=False,
        )


@dataclass(frozen=True)
class Traced:
    """What the trace stage made of the model."""

    source: nn.Module  # the private eval-mode copy, parameters frozen: the PyTorch reference
    example: torch.Tensor  # the traced input, of the export shape
    trainable: list[str]  # the SDK's norm parameters
    requires_grad: list[str]  # those, then α and λ where the method learns them
    forward: onnx.ModelProto | None  # the legacy training graph's base; None: not asked for
    branches: list[str]  # where the tracer froze data-dependent control flow
    versions: dict[str, int]  # IR version and opset of the TorchScript graphs
    # λ_F·F by adapted tensor, computed once from the clean images (EATA); None: no such state.
    fisher: dict[str, torch.Tensor] | None = None
    # The model's own forward, its norms as they are (unchecked); None: TorchScript failed.
    inference: onnx.ModelProto | None = None


@dataclass(frozen=True)
class Built:
    """What the build stage wrote into the temporary directory."""

    directory: Path  # the temporary directory, moved into place by the write stage
    portable: dict[str, Any]  # the manifest's portable section; {"error": ...}; {} if not asked
    portable_report: ValidationReport | None = None
    ort_report: ValidationReport | None = None
    adapt: dict[str, Any] = field(default_factory=dict)  # the manifest's adapt section, if written
    memory: dict[str, Any] = field(default_factory=dict)  # the measured updating peak, if asked
    inference: dict[str, Any] = field(default_factory=dict)  # which graph inference_model.onnx is
    # The legacy training artifacts, or why they are missing: set by the build stage.
    training: TrainingOutcome = field(default_factory=lambda: TrainingOutcome(error="not tried"))
