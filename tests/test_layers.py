"""Issue 14: four packages in a line, each importing only those below it, through public names.

``realm_runtime`` ← ``realm_sdk`` ← ``realm_export`` ← ``realm_tools``. Every import statement
of every module is walked with ``ast``, including those inside functions (which a plain
``import`` test would not execute, and which is where an import circle hides). Two rules:

1. a package imports no package above it (and the runtime neither torch nor the exporters'
   libraries: it runs on devices that have neither);
2. no module outside a package — another package, a test, an example, a dev script — imports
   that package's private modules (``realm_x._y``): what one package gives another is public.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("realm_runtime", "realm_sdk", "realm_export", "realm_tools")
FOLDERS = {
    "realm_runtime": "runtime",
    "realm_sdk": "sdk",
    "realm_export": "export",
    "realm_tools": "tools",
}
# Libraries the runtime must never need (torch-free devices, no exporter on them).
EXPORT_LIBRARIES = ("torch", "torchvision", "timm", "onnxscript")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from realm_x import _y` reaches a private module as surely as `import realm_x._y`
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                for alias in node.names
                if node.module in LAYERS and _private(alias.name)
            ]
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / FOLDERS[package] / package).glob("*.py"))


def _outside_modules() -> list[Path]:
    files = [p for folder in ("tests", "dev") for p in (ROOT / folder).rglob("*.py")]
    files += [p for p in (ROOT / "examples").rglob("*.py") if "node_modules" not in p.parts]
    return sorted(files)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")  # __version__ is public


def _private_reach(module: str, own: str | None) -> bool:
    parts = module.split(".")
    return parts[0] in LAYERS and parts[0] != own and any(_private(p) for p in parts[1:])


@pytest.mark.parametrize(
    "package,path",
    [(pkg, p) for pkg in LAYERS for p in _modules(pkg)],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_a_package_imports_only_below_it_through_public_names(package, path):
    above = LAYERS[LAYERS.index(package) + 1 :]
    forbidden = above + (EXPORT_LIBRARIES if package == "realm_runtime" else ())
    wrong = [
        f"{package}/{path.name}:{line} imports {module}"
        for line, module in _imports(path)
        if module.split(".")[0] in forbidden or _private_reach(module, package)
    ]
    assert not wrong, wrong


@pytest.mark.parametrize("path", _outside_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_outside_a_package_imports_its_private_modules(path):
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for line, module in _imports(path)
        if _private_reach(module, None)
    ]
    assert not wrong, wrong


def test_every_package_is_walked():
    """The parametrisation above is not empty for any layer (a moved folder would be)."""
    assert all(len(_modules(pkg)) >= 3 for pkg in LAYERS)
    assert len(_outside_modules()) >= 20


def test_the_walker_sees_nested_and_private_imports(tmp_path):
    """The check itself: imports inside functions and private modules are found."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n"
        "    from realm_sdk import RealmAdapter\n"
        "    import torch\n"
        "    from realm_runtime import _checkpoint\n"
        "    import realm_export._graph\n"
        "    from realm_sdk import __version__\n"
    )
    modules = [m for _, m in _imports(probe)]
    assert modules == [
        "realm_sdk",
        "torch",
        "realm_runtime",
        "realm_runtime._checkpoint",
        "realm_export._graph",
        "realm_sdk",
    ]
    assert [m for m in modules if _private_reach(m, None)] == modules[3:5]
    assert not _private_reach("realm_runtime._checkpoint", "realm_runtime")  # its own
