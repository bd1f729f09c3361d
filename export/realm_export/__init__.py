"""realm_export: torch/timm model → validated on-device REALM artifacts.

    >>> from realm_export import ExportOptions, export_realm_artifacts
    >>> options = ExportOptions(config=cfg, input_shape=(1, 3, 224, 224))
    >>> info = export_realm_artifacts(model, "artifacts/", options)
    >>> print(info.portable_validation.table())

Two pipelines, each checked against ``realm_sdk`` before anything is moved into place:

* the portable pipeline, the product: the step, forward and adapt graphs in standard ONNX
  ops for any onnxruntime ≥ 1.19 (``step_model.onnx``, ``forward_model.onnx``,
  ``adapt_model.onnx``), ORT-format copies for mobile builds, an inference-only model and
  the manifest ``realm.json``;
* :mod:`realm_export.legacy`, deprecated: the training/eval models and checkpoint for
  onnxruntime-training 1.19.2's API, written only when asked for
  (``ExportOptions(training=True)``, ``realm export --training``).

``realm_runtime.RealmRuntime`` runs the online step on either without torch.
``ExportOptions(drift_check=DriftCheck(images=x, labels=y))`` fits ``max_drift`` to the worst
case inside it (:mod:`realm_export.bound`).
"""

from ._errors import DriftBoundError, MemoryBudgetError, UnsupportedModelError
from ._export import ExportInfo, export_realm_artifacts
from ._layers import export_friendly_norms
from ._options import DriftCheck, ExportOptions, MemoryCheck
from ._torchscript import declare_layer_norm_outputs, model_to_onnx
from ._validate import (
    LOGITS_RTOL,
    ValidationError,
    ValidationReport,
    reference_spread,
    torch_reference,
)
from .portable import PortableGraphs, build_portable_graphs

__all__ = [
    "LOGITS_RTOL",
    "DriftBoundError",
    "DriftCheck",
    "ExportInfo",
    "ExportOptions",
    "MemoryBudgetError",
    "MemoryCheck",
    "PortableGraphs",
    "UnsupportedModelError",
    "ValidationError",
    "ValidationReport",
    "build_portable_graphs",
    "declare_layer_norm_outputs",
    "export_friendly_norms",
    "export_realm_artifacts",
    "model_to_onnx",
    "reference_spread",
    "torch_reference",
]
