"""Every model the tools build, in one registry, and the one way weights are loaded into them.

A model is named the same way by every command: a key of :data:`MODELS`, or ``timm:<name>``
for any timm architecture (random initialisation: nothing is downloaded). Weights come from a
local file through :func:`load_weights` only. The digits task's own model,
:class:`DigitsGNNet`, is trained (and cached) by :func:`train_digits_model`.

    >>> from realm_tools.models import build_model
    >>> model, shape, classes = build_model("resnet50_gn")
"""

from ._digest import weights_digest
from ._digits import DigitsGNNet, train_digits_model
from ._fashion import (
    RECIPES,
    Recipe,
    ResNet26GN,
    described,
    fashion_model,
    weights_file,
)
from ._fashion import SHIPPED as WEIGHTS_DIR
from ._fashion import accuracy as fashion_accuracy
from ._registry import (
    MODELS,
    ModelSpec,
    build_model,
    known_model,
    load_weights,
    model_from_spec,
    source_model,
    timm_model,
)

__all__ = [
    "MODELS",
    "RECIPES",
    "WEIGHTS_DIR",
    "DigitsGNNet",
    "ModelSpec",
    "Recipe",
    "ResNet26GN",
    "build_model",
    "described",
    "fashion_accuracy",
    "fashion_model",
    "known_model",
    "load_weights",
    "model_from_spec",
    "source_model",
    "timm_model",
    "train_digits_model",
    "weights_digest",
    "weights_file",
]
