"""realm_runtime: the torch-free on-device REALM loop over exported artifacts.

    >>> from realm_runtime import RealmRuntime
    >>> rt = RealmRuntime("artifacts/", device="cpu")   # backend "auto": the portable graph
    >>> res = rt.adapt(x)          # x: float32 (1, C, H, W); res.logits are pre-update
    >>> rt.save("state.npz")       # atomic; rt.restore(...) resumes

Needs numpy and onnxruntime (any version ≥ 1.19, CPU or GPU build) for the portable step
graph, or onnxruntime-training 1.19.2 for the training artifacts (``backend="ort-training"``);
importing this package loads neither ONNX Runtime nor torch (ONNX Runtime is loaded when a
``RealmRuntime`` is created).
"""

from . import contract, measure
from ._adaptation import AdaptationState
from ._backend import BACKENDS
from ._checkpoint import read_state, write_state
from ._config import METHODS, PRESETS, Guardrails, RealmConfig
from ._manifest import InputSpec, Manifest, load_manifest, verify_files
from ._names import COUNTERS
from ._ort import onnxruntime_module, training_api
from ._runtime import AdaptResult, RealmRuntime
from ._signing import generate_keypair, load_private_key, load_public_key, sign_manifest
from ._untrusted import ArtifactError
from .methods.realm import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN

__version__ = "0.1.0"

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "BACKENDS",
    "COUNTERS",
    "LAMBDA_MIN",
    "METHODS",
    "PRESETS",
    "AdaptResult",
    "AdaptationState",
    "ArtifactError",
    "Guardrails",
    "InputSpec",
    "Manifest",
    "RealmConfig",
    "RealmRuntime",
    "contract",
    "generate_keypair",
    "load_manifest",
    "load_private_key",
    "load_public_key",
    "measure",
    "onnxruntime_module",
    "read_state",
    "sign_manifest",
    "training_api",
    "verify_files",
    "write_state",
]
