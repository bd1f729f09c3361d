"""Tables under docs/, the runs behind them under lab/runs/: the same command resumes them."""

from __future__ import annotations

from pathlib import Path

from realm_lab.cli import RUNS_HOME, runs_folder

ROOT = Path(__file__).resolve().parents[2]


def test_a_table_under_docs_keeps_its_runs_at_the_same_place_under_lab_runs():
    assert runs_folder(ROOT / "docs" / "fmnist" / "vit_ln") == RUNS_HOME / "fmnist" / "vit_ln"
    assert RUNS_HOME == ROOT / "lab" / "runs"


def test_a_table_anywhere_else_keeps_its_runs_beside_it(tmp_path):
    assert runs_folder(tmp_path / "q") == tmp_path / "q"
    assert runs_folder(ROOT / "docsy") == ROOT / "docsy"  # a neighbour is not docs/


def test_the_documented_tables_have_their_runs_in_the_lab():
    # Every table in docs/ was made by a command whose runs live under lab/runs/.
    tables = {"streams.md": "streams.json", "ccc.md": "ccc.json", "quality.md": "quality.json"}
    found = 0
    for table, data in tables.items():
        for path in (ROOT / "docs").glob(f"*/**/{table}"):  # docs/*.md are prose
            assert (runs_folder(path.parent) / data).is_file(), path
            found += 1
    assert found
    left = [p for p in (ROOT / "docs").rglob("*") if p.name in {"runs.jsonl", *tables.values()}]
    assert not left, left
