"""Other processes the tests run: a fresh interpreter, the torch-free runtime venv, Node."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_VENV = ROOT / ".venv-runtime"
# A hang guard for a whole command, not a speed check: a shared CPU runs it many times slower.
HANG_S = 1800


def _run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def run_in_runtime_venv(python: Path, script: str, *args: object, cwd: Path) -> dict:
    """Run ``script`` under the runtime venv's Python; its last stdout line, as JSON."""
    out = _run(
        [str(python), "-c", script, *map(str, args)],
        cwd=cwd,
        # This checkout's realm_runtime ahead of the copy installed when the venv was made
        # (it is rebuilt only when pyproject.toml changes).
        env={**os.environ, "PYTHONPATH": str(ROOT / "runtime")},
    )
    return json.loads(out.strip().splitlines()[-1])


def _newest_python() -> str:
    """The newest CPython ≥ 3.12 that runs here (pyenv shims of absent versions do not)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (13, 12)]
    candidates += sorted(
        (str(p) for p in Path.home().glob(".pyenv/versions/3.1[23]*/bin/python3.1[23]")),
        reverse=True,
    )
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import venv"], capture_output=True)
        if probe.returncode == 0:
            return exe
    return sys.executable  # 3.11: still the newest onnxruntime, not the newest Python


def runtime_venv_python() -> Path:
    """``.venv-runtime/bin/python`` with ``.[runtime]`` installed (made when missing/stale)."""
    stamp = RUNTIME_VENV / ".realm-tta-runtime"
    # A plain (non-editable) install: rebuilt when pyproject.toml or the runtime's code
    # changes, or the venv would go on testing the runtime as it was when first installed.
    sources = [
        ROOT / "pyproject.toml",
        *sorted((ROOT / "runtime").rglob("*.py")),
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    py = RUNTIME_VENV / "bin" / "python"
    if not (py.exists() and stamp.exists() and stamp.read_text() == digest):
        shutil.rmtree(RUNTIME_VENV, ignore_errors=True)
        _run([_newest_python(), "-m", "venv", str(RUNTIME_VENV)])
        uv = Path(sys.executable).with_name("uv")  # the dev venv's (Makefile), far faster
        if uv.exists():
            pip = [str(uv), "pip", "install", "--quiet", "--python", str(py)]
            refresh = ["--reinstall-package", "realm-tta"]  # never uv's cached build
        else:
            pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            refresh = []
        _run([*pip, "--upgrade", "onnxruntime"])  # the newest, whatever the extra allows
        _run([*pip, *refresh, f"{ROOT}[runtime]"])
        stamp.write_text(digest)
    return py


NODE_APP = ROOT / "examples" / "node"


def node_app_missing() -> str | None:
    """Why the Node app (examples/node) cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "Node.js not found: the Node app's tests need node"
    if not (NODE_APP / "node_modules" / "onnxruntime-node").is_dir():
        return "examples/node/node_modules lacks onnxruntime-node: run `make web-deps`"
    return None


def run_node_app(
    artifacts: Path, stream: Path, *extra: str, timeout: int = 300
) -> subprocess.CompletedProcess:
    """The Node app on ``artifacts`` and a stream folder, with more flags; skips without it."""
    missing = node_app_missing()
    if missing is not None:
        pytest.skip(missing)
    return subprocess.run(
        ["node", "edge-app.mjs", "--artifacts", str(artifacts), "--stream", str(stream), *extra],
        cwd=NODE_APP,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_line_in_a_fresh_interpreter(script: str, *argv: str, timeout: int) -> str:
    """Run ``script`` in a new interpreter (``sys.argv[1:]`` = ``argv``); its last output line."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def has_cuda() -> bool:
    """Whether this onnxruntime has the CUDA provider (onnxruntime-gpu): the CUDA tests' gate."""
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()
