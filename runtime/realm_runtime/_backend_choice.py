"""Which backend runs a ``RealmRuntime``: the choice checked, then only its module imported."""

from __future__ import annotations

from pathlib import Path

from ._backend import BackendName, BackendRequest, StepBackend
from ._manifest import Manifest
from ._names import (
    ERROR_KEY,
    FILE_KEY,
    STEP_MODEL_KEY,
)
from ._untrusted import ArtifactError


def open_backend(backend: BackendName, request: BackendRequest) -> StepBackend:
    """The backend that runs ``backend`` (``"onnx"`` and ``"onnx-steps"``: the portable one).

    Each backend's module is imported only when chosen, so the onnx backend never touches
    onnxruntime-training and the other never needs a current onnxruntime.
    """
    if backend in ("onnx", "onnx-steps"):
        from ._backend_onnx import PortableBackend

        return PortableBackend(request, adapt_graph=backend == "onnx")
    if request.graph_format == "ort":
        raise ValueError(
            "graph_format='ort' runs the portable graphs' ORT-format copies: it needs the onnx "
            "backend, not ort-training"
        )
    from ._backend_training import TrainingBackend

    return TrainingBackend(request)


def choose_backend(backend: str, manifest: Manifest, schedule: object, directory: Path) -> str:
    """The backend that runs: ``"auto"`` resolved, and ``"onnx"`` checked (SPEC §11).

    Args:
        backend: the one asked for.
        manifest: the artifacts' manifest.
        schedule: the host-step backends' order of graphs, or None.
        directory: the artifacts' folder, for the messages.

    Raises:
        ArtifactError: the artifacts lack what the backend needs.
        ValueError: a schedule the adapt graph cannot apply.
    """
    portable, adapt = manifest.portable, manifest.adapt
    has_graph = bool(portable.get(STEP_MODEL_KEY) and adapt.get(FILE_KEY))
    if backend == "auto":
        if has_graph and schedule is None:
            return "onnx"
        return "onnx-steps" if portable.get(STEP_MODEL_KEY) else "ort-training"
    if backend != "onnx":
        return backend
    if not portable.get(STEP_MODEL_KEY):
        why = portable.get(ERROR_KEY, "exported without it")
        raise ArtifactError(
            f"{directory}: these artifacts have no portable step graph ({why}), so no "
            "adapt graph: use backend='ort-training' where they hold the training artifacts, "
            "or re-export"
        )
    if not has_graph:
        why = adapt.get(ERROR_KEY, "exported without it")
        raise ArtifactError(
            f"{directory}: backend='onnx' runs the one adapt graph, and these "
            f"artifacts have none ({why}); use backend='onnx-steps', or re-export"
        )
    if schedule is not None:
        raise ValueError(
            "schedule chooses the order of the host-step backends' graphs; the adapt graph "
            "(backend='onnx') has one order of its own: leave schedule out"
        )
    return backend
