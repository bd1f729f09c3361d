"""realm_runtime: the torch-free on-device REALM loop over exported ONNX Runtime artifacts.

    >>> from realm_runtime import RealmRuntime
    >>> rt = RealmRuntime("artifacts/", device="cpu")
    >>> res = rt.adapt(x)          # x: float32 (1, C, H, W); res.logits are pre-update
    >>> rt.save("state.npz")       # atomic; rt.restore(...) resumes

Needs numpy and onnxruntime-training (1.19.2) only; importing this package loads neither
ONNX Runtime nor torch (ONNX Runtime is loaded when a ``RealmRuntime`` is created).
"""

from ._checkpoint import read_state, write_state
from ._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig
from ._manifest import ArtifactError, InputSpec, Manifest, load_manifest, verify_files
from ._runtime import AdaptResult, RealmRuntime, RuntimeState

__version__ = "0.1.0"

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "LAMBDA_MIN",
    # the adapt loop
    "AdaptResult",
    # artifacts
    "ArtifactError",
    "InputSpec",
    "Manifest",
    # configuration (shared with realm_sdk)
    "RealmConfig",
    "RealmRuntime",
    "RuntimeState",
    "load_manifest",
    # adaptation-state files (shared with realm_sdk)
    "read_state",
    "verify_files",
    "write_state",
]
