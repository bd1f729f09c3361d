"""Five packages in a line, each importing only those below it, through public names.

``realm_runtime`` ← ``realm_sdk`` ← ``realm_export`` ← ``realm_tools`` ← ``realm_lab``: the
product, then the lab above it, which nothing of the product imports. Every import statement
of every module (subpackages included) is walked with ``ast``, including those inside functions
(which a plain ``import`` test would not execute, and which is where an import circle hides).
Three rules:

1. a package imports no package above it (and the runtime neither torch nor the exporters'
   libraries: it runs on devices that have neither);
2. no module outside a package — another package, a test, an example, a dev script — imports
   that package's private modules (``realm_x._y``): what one package gives another is public;
3. within a package no module reaches itself again through its imports: no import
   loop, deferred imports included, so that every module can be read after the ones it uses;
4. a subpackage's private modules are its own too: ``realm_tools.cli`` reaches
   ``realm_tools.data`` through its public names, never ``realm_tools.data._digits``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("realm_runtime", "realm_sdk", "realm_export", "realm_tools", "realm_lab")
FOLDERS = {
    "realm_runtime": "runtime",
    "realm_sdk": "sdk",
    "realm_export": "export",
    "realm_tools": "tools",
    "realm_lab": "lab",
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
    return sorted((ROOT / FOLDERS[package] / package).rglob("*.py"))


def _module_name(path: Path, package: str) -> str:
    parts = path.relative_to(ROOT / FOLDERS[package]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _internal_imports(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that a file imports, relative and deferred imports included."""
    here = _module_name(path, package).split(".")
    anchor = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != package:
                continue
            # `from . import _x` needs the submodule; `from .x import y` needs x (and y if a module)
            names = {f"{module}.{a.name}" for a in node.names}
            found |= names if node.module is None and node.level else names | {module}
    return found


def _foreign_private(path: Path, package: str) -> list[str]:
    """Private modules of another (sub)package of ``package`` that a file imports."""
    here = _module_name(path, package).split(".")
    folder = here if path.name == "__init__.py" else here[:-1]
    wrong = []
    for module in sorted(_internal_imports(path, package)):
        parts = module.split(".")
        private = [i for i, part in enumerate(parts[1:], 1) if _private(part)]
        if private and folder[: private[0]] != parts[: private[0]]:
            wrong.append(module)
    return wrong


def _import_loops(package: str) -> list[list[str]]:
    """Strongly connected groups of more than one module in the package's import graph."""
    paths = {_module_name(p, package): p for p in _modules(package)}
    graph = {
        name: sorted(m for m in _internal_imports(path, package) if m in paths and m != name)
        for name, path in paths.items()
    }
    # Tarjan's algorithm, iterative: the graph is small but recursion limits are not ours to set.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(graph[node]):
                work.append((node, child + 1))
                nxt = graph[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    loops.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return loops


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


@pytest.mark.parametrize("package", LAYERS)
def test_a_subpackage_is_reached_through_its_public_names(package):
    wrong = {
        str(p.relative_to(ROOT)): found
        for p in _modules(package)
        if (found := _foreign_private(p, package))
    }
    assert not wrong, wrong


@pytest.mark.parametrize("package", LAYERS)
def test_no_import_loop_within_a_package(package):
    assert not _import_loops(package), f"{package} has import loops: {_import_loops(package)}"


def test_the_loop_finder_sees_deferred_relative_imports(tmp_path, monkeypatch):
    """The check itself: a loop closed only by an import inside a function is found."""
    folder = tmp_path / "pkgfolder" / "realm_probe"
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._a import f\n")
    (folder / "_a.py").write_text("from .sub import g\n\ndef f():\n    return g()\n")
    (folder / "sub" / "__init__.py").write_text("from ._b import g\n")
    (folder / "sub" / "_b.py").write_text("def g():\n    from .._a import f\n    return f\n")
    (folder / "_c.py").write_text("from . import _a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setitem(FOLDERS, "realm_probe", "pkgfolder")
    assert _import_loops("realm_probe") == [
        ["realm_probe._a", "realm_probe.sub", "realm_probe.sub._b"]
    ]
