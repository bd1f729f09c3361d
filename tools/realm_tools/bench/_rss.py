"""Peak memory of one side alone: a fresh process that runs the stream with it and nothing else.

The torch reference's process (``realm_tools.workers.torch_rss``) and the runtime's
(``realm_tools.workers.runtime_rss``: ``realm_runtime`` only, torch made unimportable, as on
a device) each report their VmHWM; the runtime's may run under another interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..workers import RUNTIME_RSS, TORCH_RSS
from ._external import checkout_env


def torch_only_peak_rss(
    name: str,
    weights: Path,
    preset: str,
    xs: np.ndarray,
    threads: int,
    image_size: int | None = None,
) -> float:
    """Peak RSS (MB) of a fresh process that runs the stream with the torch reference only."""
    return _peak_of(TORCH_RSS, [name, str(weights), preset, str(image_size or 0)], xs, threads)


def runtime_only_peak_rss(
    artifacts: Path, xs: np.ndarray, threads: int, backend: str = "auto", python: str | None = None
) -> float:
    """Peak RSS (MB) of a fresh process that runs the stream with realm_runtime only.

    ``python``: the interpreter (default: this one), e.g. a venv with the newest onnxruntime.
    """
    return _peak_of(RUNTIME_RSS, [str(artifacts), backend], xs, threads, python)


def _peak_of(
    worker: str, args: list[str], xs: np.ndarray, threads: int, python: str | None = None
) -> float:
    env = None if python is None else checkout_env()  # another interpreter: this checkout
    with tempfile.NamedTemporaryFile(suffix=".npy", delete=False) as handle:
        np.save(handle, xs)
    try:
        out = subprocess.run(
            [python or sys.executable, "-m", worker, *args, handle.name, str(threads)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
            env=env,
        ).stdout
    finally:
        Path(handle.name).unlink(missing_ok=True)
    result = json.loads(out.strip().splitlines()[-1])
    if result.get("torch"):
        raise RuntimeError("the runtime-only process imported torch")
    return float(result["peak_rss_mb"])
