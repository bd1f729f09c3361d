"""Which backend runs a ``RealmRuntime``: each one's module imported only when chosen."""

from __future__ import annotations

from ._backend import BackendName, BackendRequest, StepBackend


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
