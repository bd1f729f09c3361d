"""The contract between the packages: artifact names, graph I/O names, formats, state files.

What a writer of artifacts (``realm_export``) or of state files (``realm_sdk``) must agree on
with the runtime lives in the runtime's private modules, next to the code that reads it; this
module is their one public face, so the packages above import names from here and never from
``realm_runtime._…``. Torch-free, like the rest of the package: another language's binding
reads the same names from the manifest. The twins (``realm_sdk.RealmAdapter`` and
``RealmRuntime``) also share their step's bookkeeping (:class:`OnlineAdaptation`) and their
input checks' rules and wording from here.

    >>> from realm_runtime.contract import STEP_MODEL, PARAMS_NAME, StateArrays, save_state
"""

from ._adaptation import AdaptationState, OnlineAdaptation
from ._checkpoint import (
    COUNTERS,
    STATE_FORMAT,
    STATE_VERSION,
    StateArrays,
    load_state,
    read_state,
    save_state,
    write_state,
)
from ._inputs import check_input_shape, input_dtype_error, input_nonfinite_error, input_type_error
from ._manifest import (
    ALPHA_NAME,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    CHECKPOINT,
    DIGEST_KEY,
    EVAL_MODEL,
    INFERENCE_MODEL,
    LAMBDA_NAME,
    LOSS_NAME,
    MANIFEST_NAME,
    SAMPLE_WEIGHT_NAME,
    TRAINING_MODEL,
    InputSpec,
    Manifest,
    parse_manifest,
    seal,
    sha256_of,
)
from ._portable_io import (
    ENTROPY_MARGIN_NAME,
    FINITE_NAME,
    FORWARD_MODEL,
    KEPT_NAME,
    LAYOUT_VERSION,
    LR_ALPHA_LAMBDA_NAME,
    LR_NAME,
    MOMENTUM_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    ORT_OPERATORS_CONFIG,
    PARAMS_NAME,
    SAM_RHO_NAME,
    SHARED_WEIGHTS,
    SOURCE_PARAMS,
    STEP_MODEL,
    VELOCITY_NAME,
    TensorSlot,
)

__all__ = [
    "ALPHA_NAME",
    "ARTIFACT_FORMAT",
    "ARTIFACT_VERSION",
    "CHECKPOINT",
    "COUNTERS",
    "DIGEST_KEY",
    "ENTROPY_MARGIN_NAME",
    "EVAL_MODEL",
    "FINITE_NAME",
    "FORWARD_MODEL",
    "INFERENCE_MODEL",
    "KEPT_NAME",
    "LAMBDA_NAME",
    "LAYOUT_VERSION",
    "LOSS_NAME",
    "LR_ALPHA_LAMBDA_NAME",
    "LR_NAME",
    "MANIFEST_NAME",
    "MOMENTUM_NAME",
    "NEW_PARAMS_NAME",
    "NEW_VELOCITY_NAME",
    "ORT_OPERATORS_CONFIG",
    "PARAMS_NAME",
    "SAMPLE_WEIGHT_NAME",
    "SAM_RHO_NAME",
    "SHARED_WEIGHTS",
    "SOURCE_PARAMS",
    "STATE_FORMAT",
    "STATE_VERSION",
    "STEP_MODEL",
    "TRAINING_MODEL",
    "VELOCITY_NAME",
    "AdaptationState",
    "InputSpec",
    "Manifest",
    "OnlineAdaptation",
    "StateArrays",
    "TensorSlot",
    "check_input_shape",
    "input_dtype_error",
    "input_nonfinite_error",
    "input_type_error",
    "load_state",
    "parse_manifest",
    "read_state",
    "save_state",
    "seal",
    "sha256_of",
    "write_state",
]
