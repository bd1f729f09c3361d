"""The ``realm`` command line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import HANG_S

from realm_tools.cli import main


def test_unknown_corruption_is_refused(capsys):
    assert main(["demo", "--corruptions", "snowstorm"]) == 2
    assert "unknown corruptions" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "realm_tools",
            "demo",
            "--corruptions",
            "gaussian_noise",
            "--no-progress",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_S,
    ).stdout
    assert "gaussian_noise" in out and "average" in out
    row = next(line for line in out.splitlines() if line.startswith("gaussian_noise"))
    numbers = [float(v) for v in row.split()[1:5]]
    assert all(0 <= v <= 100 for v in numbers)


def test_demo_runs_the_digits_where_fashion_mnist_is_missing(tmp_path, monkeypatch):
    from realm_tools.demo import demo_task

    monkeypatch.setenv("REALM_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setattr("realm_tools.data._fashion.DEBIAN_DIR", tmp_path / "debian")
    task, note = demo_task("auto", cache_dir=tmp_path)
    assert task.name == "digits" and "Running the digits instead" in note
    assert "apt-get install dataset-fashion-mnist" in note
    with pytest.raises(FileNotFoundError, match="REALM_DATA"):
        demo_task("fmnist", cache_dir=tmp_path)


def test_demo_refuses_a_corruption_of_the_other_task(capsys):
    assert main(["demo", "--data", "digits", "--corruptions", "frost"]) == 2
    assert "unknown corruptions ['frost'] for the digits demo" in capsys.readouterr().err


_HELP = """
import importlib, sys
main = importlib.import_module(sys.argv[1]).main
try:
    main(sys.argv[2:] + ["--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
print(sorted(m for m in ("torch", "scipy", "onnx", "onnxscript") if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("cli", "command"),
    [
        ("realm_tools.cli", []),
        ("realm_tools.cli", ["export"]),
        ("realm_tools.cli", ["coverage"]),
        ("realm_lab.cli", []),
        ("realm_lab.cli", ["bench", "quality"]),
        ("realm_lab.cli", ["bench", "attack"]),
    ],
)
def test_help_imports_no_heavy_library(cli, command):
    # What makes `realm --help` slow is what it imports: torch alone takes seconds.
    done = subprocess.run(
        [sys.executable, "-c", _HELP, cli, *command], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_export_without_the_export_extra_says_what_is_missing():
    script = (
        "import sys\nfrom realm_runtime.measure import block_torch\nblock_torch()\n"
        "from realm_tools.cli import main\n"
        "sys.exit(main(['export', '--model', 'digits', '--out', 'unused']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "realm export needs the export extra (missing: torch)" in done.stderr


def test_a_progress_bar_starts_at_its_first_sample(capsys):
    """Work before a stream's first sample (the demo's export) shows no bar and is not timed."""
    from realm_tools.cli import progress_factory

    update = progress_factory()("stream", 2)
    assert capsys.readouterr().err == ""
    update(1)
    assert "stream:" in capsys.readouterr().err  # the bar, made now
    update(2)
