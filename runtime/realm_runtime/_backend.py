"""One interface, several executions of the step (SPEC §8): what ``RealmRuntime`` asks a backend.

A backend owns the trainable tensors (norm parameters, α, λ) and their momentum buffers,
wherever they live (an ONNX Runtime training checkpoint, host arrays, GPU memory), and runs
the graphs. The adapt graph (backend ``"onnx"``) decides *whether* to step inside the graph
(SPEC §11); for the twins (``"onnx-steps"``, ``"ort-training"``) that decision (S_div, EATA's
and SAR's cuts, counters, the EMA) stays in ``RealmRuntime``, the same for both.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from ._config import RealmConfig
    from ._manifest import Manifest

BackendName = Literal["auto", "onnx", "onnx-steps", "ort-training"]
BACKENDS: tuple[str, ...] = ("auto", "onnx", "onnx-steps", "ort-training")


def parse_device(device: object) -> tuple[str, int]:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` → ``(device type, index)``.

    Raises:
        ValueError: any other value, naming the accepted ones.
    """
    if device == "cpu":
        return "cpu", 0
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        index = device.partition(":")[2] or "0"
        if index.isdigit():
            return "cuda", int(index)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


GraphFormat = Literal["auto", "onnx", "ort"]


@dataclass(frozen=True)
class BackendRequest:
    """What every backend is opened with: the artifacts, the step's settings, where to run."""

    directory: Path  # the artifact directory the manifest's file names are relative to
    manifest: Manifest  # parsed and checked against the files before any backend opens
    config: RealmConfig  # the export's configuration with the caller's overrides applied
    device: str  # "cpu", "cuda" or "cuda:N", as given to RealmRuntime
    threads: int | None  # intra-op threads per session; None leaves ONNX Runtime's default
    session_config: dict[str, str] | None = None  # the caller's session entries, on top of ours
    graph_format: GraphFormat = "auto"  # which copies of the portable graphs to load


@dataclass(frozen=True)
class Candidate:
    """A computed but not yet applied step: pre-update logits, loss, and the new state.

    ``payload`` is backend-private (gradients, or the step graph's output tensors); only
    :meth:`StepBackend.accept` looks inside it.
    """

    logits: np.ndarray  # (B, C) float32 logits before the update
    loss: float  # the weighted loss of the step
    finite: bool  # the loss and every gradient are finite
    payload: Any  # what accept() needs to apply the step
    kept: int | None = None  # SAR: samples that passed the cut again at θ + ε (None: all)


class StepBackend(ABC):
    """What ``RealmRuntime`` needs from an execution of the REALM step."""

    name: str  # "onnx" or "ort-training"
    names: list[str]  # every trainable tensor in manifest order (norm parameters, then α, λ)
    max_batch: int | None  # largest batch the step accepts (None: any)
    graph_format: str = "onnx"  # the graphs' file format: "ort" for ORT-format copies

    @abstractmethod
    def infer(self, x: np.ndarray) -> np.ndarray:
        """Logits of the current parameters, no gradient."""

    @abstractmethod
    def compute(
        self,
        x: np.ndarray,
        weights: np.ndarray,
        eata_factor: np.ndarray | None,
        sample: int = 0,
    ) -> Candidate:
        """Forward, loss ``Σ w_i L_i``, gradients and the new state, committing nothing.

        Args:
            x: the input batch.
            weights: ``(B,)`` loss weights, ``1/n`` on the ``n`` selected samples.
            eata_factor: EATA's detached ``exp(−(H_i − e0))`` when known before the call;
                ``None`` lets the backend take it from this call's own logits (batch 1).
            sample: the batch's first sample's index in the stream (``realm.sample_index``).
        """

    @abstractmethod
    def accept(self, candidate: Candidate) -> None:
        """Apply a candidate's update (all tensors, or none on error)."""

    @abstractmethod
    def tensors(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Host copies of ``(values, momentum buffers)``, keyed by trainable name."""

    @abstractmethod
    def load(self, values: dict[str, np.ndarray], momentum: dict[str, np.ndarray]) -> None:
        """Replace every trainable tensor and momentum buffer (checked by the caller)."""

    @abstractmethod
    def export_inference_model(self, path: str | os.PathLike[str]) -> None:
        """Write the current model as a plain ``input → logits`` ONNX file at ``path``."""
