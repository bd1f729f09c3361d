"""The tree is ruff-clean, as `make lint` asks: CI runs `make test` only, so the suite checks it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"
