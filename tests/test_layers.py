"""Issue 14 (first layer): the runtime imports nothing above it, anywhere in its code.

``realm_runtime`` is the bottom layer: the SDK and the export build on it, never the other
way. Every import statement of every module is walked with ``ast``, including those inside
functions (which a plain ``import`` test would not execute). The layers above are checked
once issue 14 splits the tools out of ``realm_sdk`` (its ``_quality`` still imports
``realm_export`` inside functions, the circle that issue describes).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE_THE_RUNTIME = ("realm_sdk", "realm_export", "torch", "torchvision", "timm", "onnxscript")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "runtime" / "realm_runtime").glob("*.py")), ids=lambda p: p.name
)
def test_the_runtime_imports_nothing_above_it(path):
    wrong = [
        f"{path.name}:{line} imports {module}"
        for line, module in _imports(path)
        if module.split(".")[0] in ABOVE_THE_RUNTIME
    ]
    assert not wrong, wrong


def test_the_walker_sees_nested_imports(tmp_path):
    """The check itself: an import inside a function is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from realm_sdk import RealmAdapter\n    import torch\n")
    assert [m for _, m in _imports(probe)] == ["realm_sdk", "torch"]
