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
from ._shift_sets import (
    FIXED_PIXEL,
    PER_SEVERITY,
    WNIDS,
    cifar_label,
    colour,
    decode_cifar,
    decode_imagenet,
    make_cifar10c,
    make_imagenetc,
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
    "FIXED_PIXEL",
    "FULL",
    "LOGITS_ATOL",
    "MOMENTUM_RTOL",
    "NODE_APP",
    "PER_SEVERITY",
    "ROOT",
    "RUNTIME_VENV",
    "STATE_ATOL",
    "WNIDS",
    "NearTie",
    "Tiny",
    "allowed_ties",
    "assert_same_state",
    "cifar_label",
    "colour",
    "compare_twins",
    "decode_cifar",
    "decode_imagenet",
    "edit_manifest",
    "export_digits",
    "flip",
    "follow",
    "has_cuda",
    "json_values",
    "kink_tie",
    "last_line_in_a_fresh_interpreter",
    "locked",
    "make_cifar10c",
    "make_imagenetc",
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
