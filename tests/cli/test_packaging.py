"""What ``pip install 'realm-tta[...]'`` installs: the product, and no module of the lab."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from realm_tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # The wheel pip would install, built from a copy: the build leaves nothing in the checkout.
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    ignore = shutil.ignore_patterns(".*", "node_modules", "build", "dist", "*.egg-info", "docs")
    shutil.copytree(ROOT, source, ignore=ignore)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "out"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(f"cannot build a wheel here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = (tmp / "out").glob("realm_tta-*.whl")
    return found


def test_the_wheel_holds_the_product_and_no_module_of_the_lab(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if n.endswith(".py")}
    assert packages == {"realm_runtime", "realm_sdk", "realm_export", "realm_tools"}
    assert not [n for n in names if "realm_lab" in n or n.startswith("lab/")]
    assert any(n.endswith(".safetensors") for n in names)  # the shipped models travel


def test_the_wheel_runs_only_the_product_command(wheel):
    entry = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "realm = realm_tools.cli:main" in text and "realm-lab" not in text


def test_realm_help_lists_what_a_user_runs_on_their_own_model():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert commands == {"demo", "keygen", "bench", "parity", "export", "fit", "coverage"}
    bench = parser._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    assert set(bench._subparsers._group_actions[0].choices) == {  # type: ignore[union-attr]
        "speed", "adapt", "memory", "export", "profile"
    }  # fmt: skip
