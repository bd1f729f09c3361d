"""What the tests call beside their fixtures (``tests/conftest.py``), one concept a module.

``tests/`` is on ``sys.path`` under pytest (the root conftest's folder), so a test file in
any subfolder writes ``from helpers import ...``.
"""

from ._artifacts import (
    EXPORTS,
    edit_manifest,
    export_digits,
    flip,
    locked,
    manifest_offset,
    run_folder,
)
from ._data import needs_fashion_mnist
from ._hypothesis import FAST, FULL, json_values, tiers
from ._processes import (
    NODE_APP,
    ROOT,
    RUNTIME_VENV,
    has_cuda,
    last_line_in_a_fresh_interpreter,
    node_app_missing,
    run_in_runtime_venv,
    run_node_app,
    runtime_venv_python,
)
from ._tiny import CLASSES, D64, DIM, Tiny, tiny_config, tiny_sample
from ._twins import (
    BACKENDS,
    LOGITS_ATOL,
    MOMENTUM_RTOL,
    STATE_ATOL,
    NearTie,
    allowed_ties,
    assert_same_state,
    compare_twins,
    follow,
    kink_tie,
    snapshot,
)

__all__ = [
    "BACKENDS",
    "CLASSES",
    "D64",
    "DIM",
    "EXPORTS",
    "FAST",
    "FULL",
    "LOGITS_ATOL",
    "MOMENTUM_RTOL",
    "NODE_APP",
    "ROOT",
    "RUNTIME_VENV",
    "STATE_ATOL",
    "NearTie",
    "Tiny",
    "allowed_ties",
    "assert_same_state",
    "compare_twins",
    "edit_manifest",
    "export_digits",
    "flip",
    "follow",
    "has_cuda",
    "json_values",
    "kink_tie",
    "last_line_in_a_fresh_interpreter",
    "locked",
    "manifest_offset",
    "needs_fashion_mnist",
    "node_app_missing",
    "run_folder",
    "run_in_runtime_venv",
    "run_node_app",
    "runtime_venv_python",
    "snapshot",
    "tiers",
    "tiny_config",
    "tiny_sample",
]
