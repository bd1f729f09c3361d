"""realm_export: torch/timm model → ONNX Runtime on-device training artifacts for REALM.

    >>> from realm_export import export_realm_artifacts
    >>> info = export_realm_artifacts(model, "artifacts/", config=cfg, input_shape=(1, 3, 224, 224))
    >>> print(info.validation.table())

The artifacts (training/eval models, checkpoint, an inference-only model and the manifest
``realm.json``) load with onnxruntime-training's own API; ``realm_runtime.RealmRuntime`` runs
the online step on them without torch.
"""

from ._export import ExportInfo, export_realm_artifacts
from ._graph import append_loss, declare_layer_norm_outputs, model_to_onnx
from ._rewrite import UnsupportedModelError, export_friendly_norms
from ._validate import ValidationError, ValidationReport

__all__ = [
    # export
    "ExportInfo",
    "UnsupportedModelError",
    "ValidationError",
    "ValidationReport",
    # graph building blocks
    "append_loss",
    "declare_layer_norm_outputs",
    "export_friendly_norms",
    "export_realm_artifacts",
    "model_to_onnx",
]
