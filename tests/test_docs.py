"""The words in their place.

- The contract lives in the repo: ``docs/SPEC.md`` exists and every "SPEC §N" cited anywhere
  (code, tests, JavaScript, docs) names one of its sections.
- Every relative link of a Markdown page resolves inside the repo (a clone has no ``../shared``).
- Code comments, docstrings and string literals say why, not what was measured where: no
  timing, size or speed figure and no machine name in them (the figures live in
  docs/BENCHMARKS.md). Tests' literals are left out: they feed inputs such as a timeout.
- No issue numbers in code: history lives in git and docs/.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "SPEC.md"
SKIP_PARTS = {"node_modules", ".venv", ".venv-runtime", ".venv-current", "build", ".git"}
CITATION = re.compile(r"SPEC(?:\.md)?\)?,? §\s?(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)?)[.:)]? ", re.MULTILINE)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
# A figure with a unit of time, size or speed, or a machine's name: what a measurement looks like.
MEASUREMENT = re.compile(
    r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|seconds|minutes|min|MB|MiB|GB|GiB|KB|KiB|"
    r"GFLOP/s|TFLOP/s|FLOP/s|it/s|samples/s)\b"
    r"|\b\d+(?:\.\d+)?\s?(?:%|[x×] (?:slower|faster))"
    r"|\b(?:EPYC|Zen ?\d|Xeon|Sapphire Rapids|Ice Lake|Skylake|H100|H200|A100|V100|RTX ?\d+|"
    r"Apple M\d|Snapdragon|Chromium \d+)\b"
)
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+\b")


def _files(*suffixes: str) -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*")
        if p.suffix in suffixes and p.is_file() and not SKIP_PARTS & set(p.relative_to(ROOT).parts)
    )


def _sections() -> set[str]:
    return set(HEADING.findall(SPEC.read_text(encoding="utf-8")))


def test_the_contract_is_in_the_repo():
    assert SPEC.is_file(), "docs/SPEC.md is missing: the code cites it"
    assert {str(n) for n in range(1, 12)} <= _sections()


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in _files(".py", ".js", ".mjs", ".md", ".html", ".toml")
        if p not in (SPEC, Path(__file__))
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_spec_citation_resolves(path):
    text = path.read_text(encoding="utf-8")
    sections = _sections()
    wrong = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1} cites SPEC §{m.group(1)}"
        for m in CITATION.finditer(text)
        if m.group(1) not in sections
    ]
    assert not wrong, f"{wrong}: docs/SPEC.md has no such section"


@pytest.mark.parametrize("path", _files(".md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    text = path.read_text(encoding="utf-8")
    broken = [
        target
        for target in LINK.findall(text)
        if "://" not in target
        and not target.startswith("mailto:")
        and not (path.parent / target).resolve().exists()
    ]
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"
    outside = [
        t
        for t in LINK.findall(text)
        if "://" not in t and ROOT not in (path.parent / t).resolve().parents
    ]
    assert not outside, f"{path.relative_to(ROOT)} links outside the repo: {outside}"


def _python_words(path: Path, literals: bool = True) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, and with ``literals``
    its other string constants (an f-string's pieces are format specs, not words: left out)."""
    source = path.read_text(encoding="utf-8")
    words = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    tree = ast.parse(source)
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                words.append((node.body[0].lineno, doc))
                docs.add(id(node.body[0].value))  # type: ignore[attr-defined]
    if literals:
        pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        words += [
            (n.lineno, n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and id(n) not in docs | pieces
        ]
    return words


def _js_words(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every // and /* */ comment of a JavaScript file (strings are not parsed:
    a URL's // in a string is rare in this code and would only over-report)."""
    text = path.read_text(encoding="utf-8")
    return [
        (text[: m.start()].count("\n") + 1, m.group(0))
        for m in re.finditer(r"/\*.*?\*/|(?<![:\"'])//[^\n]*", text, re.DOTALL)
    ]


def _code_files() -> list[Path]:
    folders = ("runtime", "sdk", "export", "tools", "lab", "clients", "examples", "dev", "tests")
    return [p for p in _files(".py", ".js", ".mjs") if p.relative_to(ROOT).parts[0] in folders]


@pytest.mark.parametrize("path", _code_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measurement_or_machine_name_in_code_words(path):
    literals = path.relative_to(ROOT).parts[0] != "tests"
    words = _python_words(path, literals) if path.suffix == ".py" else _js_words(path)
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
        for line, text in words
        for m in MEASUREMENT.finditer(text)
    ]
    assert not hits, f"figures and machines belong in docs/BENCHMARKS.md, not in code: {hits}"
    issues = [
        f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
        for line, text in words
        for m in ISSUE.finditer(text)
    ]
    assert not issues, f"issue numbers belong in git and docs/, not in code: {issues}"


def test_the_word_checks_see_what_they_look_for(tmp_path):
    """The checks themselves: a measurement in a comment and in a docstring, a machine name, a
    citation of a missing section."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Runs 226 ms on an EPYC, 8x slower."""\nx = "12 ms"  # 3.5 MiB kept, 9 % more\n',
        encoding="utf-8",
    )
    found = [m.group(0) for _, t in _python_words(probe) for m in MEASUREMENT.finditer(t)]
    assert sorted(found) == ["12 ms", "226 ms", "3.5 MiB", "8x slower", "9 %", "EPYC"]
    quiet = [m.group(0) for _, t in _python_words(probe, False) for m in MEASUREMENT.finditer(t)]
    assert "12 ms" not in quiet and "226 ms" in quiet  # a test's literals are its inputs
    fmt = tmp_path / "fmt.py"
    fmt.write_text('x = 1\ny = f"{x:8s} {x:.0%}" + "issue 28"\n', encoding="utf-8")
    words = [t for _, t in _python_words(fmt)]
    assert not [m for t in words for m in MEASUREMENT.finditer(t)]  # format specs, not figures
    assert [m.group(0) for t in words for m in ISSUE.finditer(t)] == ["issue 28"]
    js = tmp_path / "probe.js"
    js.write_text('const u = "http://x"; // took 40 ms\n/* on Zen 4 */\n', encoding="utf-8")
    assert [m.group(0) for _, t in _js_words(js) for m in MEASUREMENT.finditer(t)] == [
        "40 ms",
        "Zen 4",
    ]
    assert [m.group(1) for m in CITATION.finditer("see SPEC §3 and docs/SPEC.md §11.2")] == [
        "3",
        "11.2",
    ]


def test_the_readme_is_for_a_newcomer():
    """At most 300 lines: what it is, the two commands, the API, links for the rest."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move sections to docs/"
    assert any("make demo" in line for line in lines) and any("make test" in line for line in lines)
