"""realm_export.legacy: the onnxruntime-training 1.19.2 artifacts. Deprecated; do not build on.

The deprecated ORT-training extra (``pip install 'realm-tta[runtime-training]'``, Python 3.11
only: the last published training wheels). Asked for (``ExportOptions(training=True)``,
``realm export --training``), an export writes beside the portable graphs
``training_model.onnx``, ``eval_model.onnx`` and ``checkpoint`` for onnxruntime-training's
``Module`` API (``RealmRuntime(..., backend="ort-training")``): REALM's loss graph on the
TorchScript forward graph, differentiated by ONNX Runtime, validated like the portable graph.

Asked for, their failure is the export's: onnxruntime-training missing, a method they cannot
hold (SAR, DeYO), a layer without a gradient or kernel in it. Not asked for, the export
says so (``ExportInfo.training_error``, the manifest's ``training`` section).
"""

from ._artifacts import TrainingOutcome, training_wanted, write_training_artifacts
from ._loss import append_loss
from ._validate import validate_artifacts

# The first three are what the export calls; the last two, the pieces a user of
# the training API may want on a graph of their own.
__all__ = [
    "TrainingOutcome",
    "append_loss",
    "training_wanted",
    "validate_artifacts",
    "write_training_artifacts",
]
