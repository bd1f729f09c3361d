"""Names of the portable step graph's inputs and outputs (shared by export and runtime).

Torch-free, like the rest of the runtime package: a client in another language reads the
same names from the manifest's ``portable`` section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STEP_MODEL = "step_model.onnx"  # forward, loss, gradients and the SGD update in one graph
FORWARD_MODEL = "forward_model.onnx"  # input + norm parameters -> logits
SOURCE_PARAMS = "source_params.npy"  # (P,) float32: realm.params of the exported model
# The step and forward graphs' large float32 initializers (the model's weights), each stored
# once, as ONNX external data both graphs point to: a runtime can read them once and hand the
# same buffers to both sessions, and any ONNX loader given the file path still resolves them.
SHARED_WEIGHTS = "weights.bin"
# With `realm export --ort-format`, ONNX Runtime's converter writes step_model.ort and
# forward_model.ort beside the graphs (for mobile and minimal builds) and this operator list,
# which a reduced-size ONNX Runtime build is made with.
ORT_OPERATORS_CONFIG = "required_operators.config"

LAYOUT_VERSION = 1  # of the manifest's "portable" section

LR_NAME = "realm.lr"  # learning rate of the norm parameters (scalar input)
LR_ALPHA_LAMBDA_NAME = "realm.lr_alpha_lambda"  # learning rate of α and λ (scalar input)
MOMENTUM_NAME = "realm.momentum"  # SGD momentum μ (scalar input)
ENTROPY_MARGIN_NAME = "realm.entropy_margin"  # EATA's e0 (scalar input; others ignore it)
FINITE_NAME = "realm.finite"  # bool output: the loss and every gradient are finite
SAM_RHO_NAME = "realm.sam_rho"  # SAR: SAM's radius ρ (scalar input)
KEPT_NAME = "realm.kept"  # SAR: samples that passed the cut again at θ + ε (scalar output)
PARAMS_NAME = "realm.params"  # (P,) every trainable tensor, flattened, in manifest order
VELOCITY_NAME = "realm.velocity"  # (P,) their SGD momentum buffers, same layout
NEW_PARAMS_NAME = "realm.new_params"  # (P,) output: the updated, projected parameters
NEW_VELOCITY_NAME = "realm.new_velocity"  # (P,) output: the updated momentum buffers


@dataclass(frozen=True)
class TensorSlot:
    """Where one trainable tensor lies in the flat parameter vector ``realm.params``."""

    name: str  # the SDK's parameter name (or realm.alpha / realm.lambda)
    offset: int  # first element in the flat vector
    shape: list[int]  # the tensor's shape ([] for α and λ)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)
