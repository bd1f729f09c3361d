"""realm_export.legacy: the onnxruntime-training 1.19.2 artifacts. Deprecated; do not build on.

The deprecated ORT-training extra (``pip install 'realm-tta[runtime-training]'``, Python 3.11
only: the last published training wheels). Beside the portable graphs, an export writes
``training_model.onnx``, ``eval_model.onnx`` and ``checkpoint`` for onnxruntime-training's
``Module`` API (``RealmRuntime(..., backend="ort-training")``): REALM's loss graph on the
TorchScript forward graph, differentiated by ONNX Runtime, validated like the portable graph.

They are written where they can be and never fail an export unless asked for
(``ExportOptions(training=True)``): where onnxruntime-training is missing, the method is SAR,
or a layer has no gradient or kernel in it, the export goes on without them and says why
(``ExportInfo.training_error``, the manifest's ``training`` section, the log).
"""

from ._artifacts import TrainingOutcome, training_wanted, write_training_artifacts
from ._loss import append_loss
from ._validate import validate_artifacts

# The first three are what the portable pipeline calls; the last two, the pieces a user of
# the training API may want on a graph of their own.
__all__ = [
    "TrainingOutcome",
    "append_loss",
    "training_wanted",
    "validate_artifacts",
    "write_training_artifacts",
]
