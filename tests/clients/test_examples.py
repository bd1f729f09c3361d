"""examples/edge_app.py: a stream, checkpoints, and a resume after a restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from realm_runtime import COUNTERS, RealmRuntime, read_state

APP = Path(__file__).resolve().parents[2] / "examples" / "edge_app.py"


def _app(*args):
    return subprocess.run(
        [sys.executable, str(APP), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout


def test_edge_app_resumes_where_it_stopped(digits_artifacts, digits_stream, tmp_path):
    xs, ys = digits_stream[0][:90], digits_stream[1][:90]
    np.savez(tmp_path / "stream.npz", images=xs, labels=ys)
    common = [
        "--artifacts",
        digits_artifacts[0],
        "--stream",
        tmp_path / "stream.npz",
        "--checkpoint",
        tmp_path / "state.npz",
        "--every",
        20,
        "--report",
        30,
        "--threads",
        1,
    ]
    first = _app(*common, "--limit", 50)
    assert "sample    30/90" in first and "top-1" in first and "updates" in first
    assert _counters(tmp_path / "state.npz")["samples"] == 50
    second = _app(*common)
    assert "resumed from" in second and "50 samples seen" in second
    assert "sample    90/90" in second
    counters = _counters(tmp_path / "state.npz")
    # The interrupted run ends where an uninterrupted one does.
    rt = RealmRuntime(digits_artifacts[0], threads=1)
    for i in range(90):
        rt.adapt(xs[i : i + 1])
    assert counters["samples"] == 90
    assert counters["updates"] == rt.state.updates
    assert "nothing left to do" in _app(*common)


def _counters(path) -> dict[str, int]:
    """A state file's counters (the adapt graph's realm.counters), by name."""
    arrays, _ = read_state(path)
    return dict(zip(COUNTERS, arrays["realm.counters"].tolist(), strict=True))


def test_edge_app_names_a_missing_stream(digits_artifacts, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(APP),
            "--artifacts",
            str(digits_artifacts[0]),
            "--stream",
            str(tmp_path / "none.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "stream file not found" in result.stderr
