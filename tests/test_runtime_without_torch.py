"""The runtime in an environment where torch is not installed (issue 4's first done-when line).

A fresh virtual environment gets only the runtime's dependencies (numpy and
onnxruntime-training-cpu) plus this package (no dependencies), then runs
adapt/save/restore/reset/export on artifacts exported beforehand by this (torch) process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from realm_runtime import RealmRuntime

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys, time
    def peak_rss_mb():
        # VmHWM belongs to this process's memory map; ru_maxrss would be inherited from the
        # (torch-sized) parent across fork and exec on Linux.
        with open("/proc/self/status") as status:
            line = next(l for l in status if l.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    start = time.perf_counter()
    import realm_runtime
    import_s = time.perf_counter() - start
    assert importlib.util.find_spec("torch") is None, "torch is installed here"
    import numpy as np
    from realm_runtime import RealmRuntime
    art, stream, work = sys.argv[1], sys.argv[2], sys.argv[3]
    xs = np.load(stream)
    rt = RealmRuntime(art, threads=1)
    preds = []
    for i in range(20):
        preds.append(int(rt.adapt(xs[i:i + 1]).top1[0]))
    rt.save(work + "/state.npz")
    for i in range(20, 30):
        preds.append(int(rt.adapt(xs[i:i + 1]).top1[0]))
    resumed = RealmRuntime(art, threads=1)
    resumed.restore(work + "/state.npz")
    again = [int(resumed.adapt(xs[i:i + 1]).top1[0]) for i in range(20, 30)]
    rt.export_inference_model(work + "/adapted.onnx")
    updates = rt.state.updates
    rt.reset()
    print(json.dumps({
        "preds": preds, "resumed": again, "updates": updates,
        "after_reset": rt.state.samples, "torch_loaded": "torch" in sys.modules,
        "import_s": import_s, "peak_rss_mb": peak_rss_mb(),
    }))
""")


def _run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def test_runtime_works_where_torch_is_not_installed(digits_artifacts, digits_stream, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, f"numpy=={version('numpy')}", "onnxruntime-training-cpu==1.19.2"])
    _run([*pip, "--no-deps", str(ROOT)])
    xs = digits_stream[0][:30]
    np.save(tmp_path / "stream.npy", xs)
    out = _run(
        [
            str(py),
            "-c",
            SCRIPT,
            str(digits_artifacts[0]),
            str(tmp_path / "stream.npy"),
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["torch_loaded"] is False
    assert result["resumed"] == result["preds"][20:]
    assert result["after_reset"] == 0 and result["updates"] > 0
    assert (tmp_path / "adapted.onnx").is_file()
    # The same stream in this (torch) process gives the same predictions.
    rt = RealmRuntime(digits_artifacts[0], threads=1)
    here = [int(rt.adapt(xs[i : i + 1]).top1[0]) for i in range(30)]
    assert here == result["preds"]
    print(
        f"torch-free runtime: import {result['import_s'] * 1e3:.0f} ms, "
        f"peak RSS {result['peak_rss_mb']:.0f} MB",
        file=sys.stderr,
    )
