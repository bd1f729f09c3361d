"""Every list of methods is read from the registry: no method name written anywhere else.

A method's name appears as a string only in its own files (``methods/`` of each package) and
the lab's row registry (``lab/realm_lab/rows.py``, where the rows that are not methods are
named); every other module asks the registry (``realm_runtime.methods.BY_NAME``), so a new
method file reaches every command, bench, page and parity case. JavaScript and Python alike.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from realm_lab.rows import NO_ADAPT, ROWS
from realm_runtime.methods import BY_NAME

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("runtime", "sdk", "export", "tools", "lab", "examples", "clients", "dev")
# No-adapt's key, "none", is also the word for nothing (a --set value, CSS, a sentinel): the
# benches ask a row whether it adapts instead, which tests/lab/test_rows.py holds them to.
NAMES = set(BY_NAME) | set(ROWS) - {NO_ADAPT.key}
ROW_REGISTRY = ROOT / "lab" / "realm_lab" / "rows.py"


def _sources(suffixes: tuple[str, ...]) -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            if path.suffix not in suffixes or parts & {"node_modules", "methods", "test", "runs"}:
                continue
            if path != ROW_REGISTRY:
                found.append(path)
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _program_name(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    """The command's own name, ``realm``: argparse's ``prog=`` or a ``program`` default."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword) and parent.arg == "prog":
        return True
    if isinstance(parent, ast.arguments):
        named = parent.args[len(parent.args) - len(parent.defaults) :]
        return any(
            a.arg == "program" and d is node for a, d in zip(named, parent.defaults, strict=True)
        )
    return False


def _named_in_python(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return [
        f"{_shown(path)}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in NAMES
        and not _program_name(node, parents)
    ]


def _named_in_javascript(path: Path) -> list[str]:
    names = "|".join(map(re.escape, sorted(NAMES)))
    quoted = re.compile(rf"""["'`]({names})["'`]""")
    return [
        f"{_shown(path)}:{n} {m.group(1)!r}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for m in quoted.finditer(line)
    ]


@pytest.mark.parametrize("path", _sources((".py",)), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_python_module_names_a_method(path):
    assert not _named_in_python(path)


def test_no_javascript_module_names_a_method():
    assert not [hit for p in _sources((".js", ".mjs")) for hit in _named_in_javascript(p)]


def test_the_checks_see_what_they_look_for(tmp_path):
    # A literal method name is caught in either language; the command's own name is not one.
    module = tmp_path / "m.py"
    name = next(iter(BY_NAME))
    module.write_text(
        f"import argparse\nCHOICE = {name!r}\nparser = argparse.ArgumentParser(prog='realm')\n"
        "def header(program='realm'): return program\n"
    )
    assert [hit.split(" ", 1)[1] for hit in _named_in_python(module)] == [repr(name)]
    page = tmp_path / "m.js"
    page.write_text(f'const picked = "{name}";\n')
    assert _named_in_javascript(page) == [f"m.js:1 {name!r}"]
