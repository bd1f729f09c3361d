"""realm_export: torch/timm model → validated on-device REALM artifacts.

    >>> from realm_export import export_realm_artifacts
    >>> info = export_realm_artifacts(model, "artifacts/", config=cfg, input_shape=(1, 3, 224, 224))
    >>> print(info.portable_validation.table(), info.validation.table())

Two executions of the same step, both checked against ``realm_sdk``: the portable step graph
(``step_model.onnx``, ``forward_model.onnx``: standard ONNX ops, any onnxruntime ≥ 1.19) and
the ONNX Runtime training artifacts (training/eval models and checkpoint for
onnxruntime-training 1.19.2's API), plus an inference-only model and the manifest
``realm.json``. ``realm_runtime.RealmRuntime`` runs the online step on either without torch.
"""

from ._export import ExportInfo, export_realm_artifacts
from ._graph import append_loss, declare_layer_norm_outputs, model_to_onnx
from ._portable import PortableGraphs, build_portable_graphs
from ._rewrite import UnsupportedModelError, export_friendly_norms
from ._validate import (
    LOGITS_RTOL,
    ValidationError,
    ValidationReport,
    reference_spread,
    torch_reference,
)

__all__ = [
    "LOGITS_RTOL",
    "ExportInfo",
    "PortableGraphs",
    "UnsupportedModelError",
    "ValidationError",
    "ValidationReport",
    "append_loss",
    "build_portable_graphs",
    "declare_layer_norm_outputs",
    "export_friendly_norms",
    "export_realm_artifacts",
    "model_to_onnx",
    "reference_spread",
    "torch_reference",
]
