"""Every name of the contract is spelled once, in Python, across both languages.

``realm_runtime/_names.py`` defines the names (files, graph I/O, manifest keys, counters,
reasons, settings slots, format versions); ``clients/js/contract.json`` and ``contract.js``
are written from it by ``dev/write_contract.py``. Checked here: the leaf module imports
nothing, the committed JavaScript copies are what Python produces now, and no JavaScript file
of the client or the examples spells a name of the contract as a string literal of its own.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from realm_runtime import contract

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "js"
NAMES = ROOT / "runtime" / "realm_runtime" / "_names.py"
REGENERATE = "python dev/write_contract.py"
# JavaScript that holds the names, or reads them from clients/js/contract.js.
JS_FOLDERS = (CLIENT, ROOT / "examples")
GENERATED = {CLIENT / "contract.js"}
# Names with one of these characters are distinctive enough to be refused inside any literal
# (a message, a path); the others (plain words such as "updates") only as a whole literal.
DISTINCTIVE = re.compile(r"[./_-]")


def test_the_names_module_is_a_leaf():
    """``_names`` imports nothing, so any module of any package can import it, loop-free."""
    tree = ast.parse(NAMES.read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert not imports, [ast.unparse(n) for n in imports]


def test_every_name_is_public_in_the_contract():
    """``realm_runtime.contract`` re-exports every name, so the packages above reach them all."""
    missing = [k for k in contract.contract_values() if k not in contract.__all__]
    assert not missing, missing
    assert len(contract.contract_values()) >= 100


@pytest.mark.parametrize(
    "name,produce",
    [("contract.json", contract.contract_json), ("contract.js", contract.contract_module)],
)
def test_the_committed_copy_is_what_python_produces(name, produce):
    committed = (CLIENT / name).read_text(encoding="utf-8")
    assert committed == produce(), (
        f"clients/js/{name} differs from realm_runtime's names: run `{REGENERATE}`"
    )


def test_the_es_module_exports_the_json_values():
    """``contract.js`` loads in Node and exports exactly the values of ``contract.json``."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js not found")
    script = (
        "const m = await import('./contract.js');"
        "console.log(JSON.stringify(Object.fromEntries(Object.entries(m))));"
    )
    done = subprocess.run(
        [node, "--input-type=module", "-e", script],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning either
    assert json.loads(done.stdout) == json.loads((CLIENT / "contract.json").read_text())


def _js_files() -> list[Path]:
    files = [
        p
        for folder in JS_FOLDERS
        for pattern in ("*.js", "*.mjs")
        for p in folder.rglob(pattern)
        if "node_modules" not in p.relative_to(ROOT).parts and p not in GENERATED
    ]
    return sorted(files)


def _contract_strings() -> set[str]:
    values = contract.contract_values().values()
    items = [v for value in values for v in (value if isinstance(value, list) else [value])]
    return {v for v in items if isinstance(v, str)}


def test_javascript_is_scanned():
    """The scan below is not empty: the client's modules and the examples' are found."""
    names = {p.name for p in _js_files()}
    assert {"adapt-client.js", "manifest.js", "state-file.js", "app.js", "edge-app.mjs"} <= names


@pytest.mark.parametrize("path", _js_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_javascript_file_spells_a_contract_name(path):
    """Each name comes from contract.js: a literal of its own would drift from Python's."""
    names = _contract_strings()
    distinctive = [n for n in names if DISTINCTIVE.search(n)]
    spelled = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for line, text in string_literals(path.read_text(encoding="utf-8"))
        if text in names or any(n in text for n in distinctive)
    ]
    assert not spelled, f"import these names from clients/js/contract.js instead: {spelled}"


def test_the_scanner_sees_every_kind_of_literal():
    """The check itself: quotes, template parts (nested too), not comments nor regexes."""
    source = (
        "// 'in a comment'\n"
        '/* "in a block" */\n'
        'const a = \'single\', b = "dou\\"ble";\n'
        "const c = `head ${x + `inner ${y}`} tail`;\n"
        "const r = /'not a string'/g, d = 4 / 2 / 1;\n"
        "if (q) { return /x\"y/.test(z) ? 'after' : c; }\n"
    )
    assert [t for _, t in string_literals(source)] == [
        "single",
        'dou\\"ble',
        "head ",
        "inner ",
        "",
        " tail",
        "after",
    ]
    assert [line for line, _ in string_literals(source)] == [3, 3, 4, 4, 4, 4, 6]


# ------------------------------------------------------------------ a JavaScript literal scanner

# Words after which a `/` starts a regular expression, not a division.
_BEFORE_EXPRESSION = {
    "return",
    "typeof",
    "case",
    "do",
    "else",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "instanceof",
    "yield",
    "await",
}
_WORD = re.compile(r"[A-Za-z_$][\w$]*|\d[\w.]*")


def string_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal of JavaScript source, as written (escapes kept).

    Quoted strings, and each static part of a template literal (templates nest through
    ``${…}``). Comments and regular-expression literals are skipped; a ``/`` starts a regular
    expression unless it follows a value (a name, a number, a literal, or a closing bracket).
    """
    found: list[tuple[int, str]] = []
    braces: list[str] = []  # "{" for a block or object, "`" for a template's ${
    i, previous = 0, ""

    def literal(start: int, end: int) -> None:
        found.append((source.count("\n", 0, start) + 1, source[start:end]))

    def template(i: int) -> int:
        """Read a template's static part from ``i``; stop after its end or at a ``${``."""
        start = i
        while source[i] != "`":
            if source[i] == "\\":
                i += 2
            elif source.startswith("${", i):
                literal(start, i)
                braces.append("`")
                return i + 2
            else:
                i += 1
        literal(start, i)
        return i + 1

    while i < len(source):
        c = source[i]
        if c.isspace():
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = len(source) if end < 0 else end
        elif source.startswith("/*", i):
            i = source.index("*/", i + 2) + 2
        elif c in "'\"":
            end = i + 1
            while source[end] != c:
                end += 2 if source[end] == "\\" else 1
            literal(i + 1, end)
            i, previous = end + 1, "literal"
        elif c == "`":
            i, previous = template(i + 1), "literal"
        elif c == "{":
            braces.append("{")
            i, previous = i + 1, c
        elif c == "}":
            if braces and braces.pop() == "`":
                i, previous = template(i + 1), "literal"
            else:
                i, previous = i + 1, c
        elif c == "/":
            value = previous == "literal" or (previous[-1:].isalnum() or previous[-1:] in "_$)]}")
            if value and previous not in _BEFORE_EXPRESSION:
                i, previous = i + 1, c
                continue
            i, in_class = i + 1, False
            while in_class or source[i] != "/":
                if source[i] == "\\":
                    i += 1
                elif source[i] in "[]":
                    in_class = source[i] == "["
                i += 1
            i += 1
            while i < len(source) and source[i].isalpha():  # flags
                i += 1
            previous = ")"  # a regular expression is a value
        elif match := _WORD.match(source, i):
            i, previous = match.end(), match.group()
        else:
            i, previous = i + 1, c
    return found
