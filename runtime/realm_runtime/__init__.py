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

from ._backend import BACKENDS
from ._checkpoint import read_state, write_state
from ._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig
from ._manifest import ArtifactError, InputSpec, Manifest, load_manifest, verify_files
from ._runtime import AdaptResult, RealmRuntime, RuntimeState
from ._signing import generate_keypair, load_public_key, sign_manifest

__version__ = "0.1.0"

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "BACKENDS",
    "LAMBDA_MIN",
    "AdaptResult",
    "ArtifactError",
    "InputSpec",
    "Manifest",
    "RealmConfig",
    "RealmRuntime",
    "RuntimeState",
    "generate_keypair",
    "load_manifest",
    "load_public_key",
    "read_state",
    "sign_manifest",
    "verify_files",
    "write_state",
]
