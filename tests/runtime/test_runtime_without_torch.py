"""The runtime where torch and onnxruntime-training are not installed.

A virtual environment on the newest Python found here (3.13 or 3.12, else 3.11) gets
``pip install '.[runtime]'``: numpy, onnx and the newest plain onnxruntime from PyPI, no
torch, no training build. It runs adapt → save → restore → continue, reset and
export_inference_model on artifacts that this (torch) process exported beforehand, and
its steps are compared with the same stream on this process's onnxruntime-training 1.19.2
``InferenceSession`` (the same portable graphs on another ORT version and Python).

The environment is kept in ``.venv-runtime`` (rebuilt when pyproject.toml or the runtime's
code changes), so ``make test`` pays for the install once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import follow, run_in_runtime_venv

from realm_runtime import RealmRuntime
from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME

ROOT = Path(__file__).resolve().parents[2]

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
    import numpy as np, onnxruntime
    try:
        import onnxruntime.training  # noqa: F401
        training = True
    except ImportError:
        training = False
    from realm_runtime import RealmRuntime
    art, stream, work = sys.argv[1], sys.argv[2], sys.argv[3]
    xs = np.load(stream)
    rt = RealmRuntime(art, threads=1)
    logits, updated = [], []
    for i in range(20):
        r = rt.adapt(xs[i:i + 1]); logits.append(r.logits[0].tolist()); updated.append(r.updated)
    rt.save(work + "/state.npz")
    for i in range(20, 40):
        r = rt.adapt(xs[i:i + 1]); logits.append(r.logits[0].tolist()); updated.append(r.updated)
    resumed = RealmRuntime(art, threads=1)
    resumed.restore(work + "/state.npz")
    again = [resumed.adapt(xs[i:i + 1]).logits[0].tolist() for i in range(20, 40)]
    rt.export_inference_model(work + "/adapted.onnx")
    params = {n: v.tolist() for n, v in rt.trainable_parameters().items()}
    state = rt.state
    rt.reset()
    print(json.dumps({
        "backend": rt.backend, "ort": onnxruntime.__version__, "training": training,
        "python": sys.version.split()[0], "logits": logits, "updated": updated,
        "resumed": again, "params": params, "alpha": state.alpha, "lam": state.lam,
        "updates": state.updates, "after_reset": rt.state.samples,
        "torch_loaded": "torch" in sys.modules, "import_s": import_s,
        "peak_rss_mb": peak_rss_mb(),
    }))
""")


def test_runtime_on_newest_onnxruntime_without_torch_or_training(
    runtime_python, digits_artifacts, digits_model, digits_stream, tmp_path
):
    xs = np.ascontiguousarray(digits_stream[0][:40])
    np.save(tmp_path / "stream.npy", xs)
    there = run_in_runtime_venv(
        runtime_python, SCRIPT, digits_artifacts[0], tmp_path / "stream.npy", tmp_path, cwd=tmp_path
    )
    assert there["torch_loaded"] is False
    assert there["training"] is False, "onnxruntime.training is importable in the runtime venv"
    assert there["backend"] == "onnx"  # RealmRuntime(dir) picks the portable graph
    assert tuple(map(int, there["ort"].split(".")[:2])) >= (1, 20), there["ort"]
    assert there["after_reset"] == 0 and there["updates"] > 0
    assert (tmp_path / "adapted.onnx").is_file()
    # save → restore → continue reproduces the uninterrupted run exactly (same process, ORT).
    np.testing.assert_array_equal(np.array(there["resumed"]), np.array(there["logits"][20:]))

    # The same stream here, step for step: ORT 1.19.2's InferenceSession on Python 3.11.
    def newest(first: int, last: int, state: Path | None) -> list:
        np.save(tmp_path / "part.npy", xs[first:last])
        args = [digits_artifacts[0], tmp_path / "part.npy", *([state] if state else [])]
        rows = run_in_runtime_venv(runtime_python, STEPS_SCRIPT, *args, cwd=tmp_path)["rows"]
        arrays = [{PARAMS_NAME: np.float32(p), VELOCITY_NAME: np.float32(v)} for *_, p, v in rows]
        return [(*r[:3], a) for r, a in zip(rows, arrays, strict=True)]

    rt = RealmRuntime(digits_artifacts[0], threads=1)
    follow(newest, rt, xs, source=digits_model, where="the newest onnxruntime")
    assert rt.state.updates > 0
    print(
        f"torch-free runtime on Python {there['python']}, onnxruntime {there['ort']}: import "
        f"{there['import_s'] * 1e3:.0f} ms, peak RSS {there['peak_rss_mb']:.0f} MB",
        file=sys.stderr,
    )


STEPS_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from realm_runtime import RealmRuntime
    from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME, read_state
    art, stream = sys.argv[1], sys.argv[2]
    rt = RealmRuntime(art, threads=1)
    if len(sys.argv) > 3:
        rt.restore(sys.argv[3])
    rows = []
    for x in np.load(stream):
        r = rt.adapt(x[None])
        rt.save("step.npz")
        arrays = read_state("step.npz")[0]
        rows.append([r.reason, r.updated, r.logits[0].tolist(), arrays[PARAMS_NAME].tolist(),
                     arrays[VELOCITY_NAME].tolist()])
    print(json.dumps({"rows": rows}))
""")


ORT_FORMAT_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxruntime
    from realm_runtime import RealmRuntime
    art, stream = sys.argv[1], sys.argv[2]
    xs = np.load(stream)
    out = {"version": onnxruntime.__version__}
    for fmt in ("ort", "onnx"):
        rt = RealmRuntime(art, threads=1, graph_format=fmt)
        steps = [rt.adapt(xs[i:i + 1]) for i in range(len(xs))]
        out[fmt] = {
            "format": rt.graph_format,
            "reasons": [r.reason for r in steps],
            "logits": [r.logits[0].tolist() for r in steps],
            "params": {n: v.tolist() for n, v in rt.trainable_parameters().items()},
            "updates": rt.state.updates,
        }
    print(json.dumps(out))
""")


def test_ort_format_graphs_load_on_the_newest_onnxruntime(
    runtime_python, digits_ort_artifacts, digits_stream, tmp_path
):
    """The .ort graphs (converted by this environment's ONNX Runtime 1.19.2) load on the
    newest onnxruntime and take the same steps as the .onnx graphs there."""
    xs = np.ascontiguousarray(digits_stream[0][:40])
    np.save(tmp_path / "stream.npy", xs)
    there = run_in_runtime_venv(
        runtime_python,
        ORT_FORMAT_SCRIPT,
        digits_ort_artifacts[0],
        tmp_path / "stream.npy",
        cwd=tmp_path,
    )
    assert tuple(map(int, there["version"].split(".")[:2])) >= (1, 20), there["version"]
    ort_run, onnx_run = there["ort"], there["onnx"]
    assert (ort_run["format"], onnx_run["format"]) == ("ort", "onnx")
    assert ort_run["reasons"] == onnx_run["reasons"] and ort_run["updates"] > 0
    np.testing.assert_allclose(ort_run["logits"], onnx_run["logits"], rtol=0, atol=1e-5)
    for name, value in onnx_run["params"].items():
        np.testing.assert_allclose(ort_run["params"][name], value, rtol=0, atol=1e-6)


def test_speed_bench_times_the_newest_onnxruntime_too(runtime_python, tmp_path):
    """`realm bench speed --runtime-python`: a row for the onnx backend on the newest ORT."""
    from realm_tools.bench import bench_model, machine_peak

    rows = bench_model(
        "digits",
        threads=1,
        samples=3,
        warmup=1,
        work_dir=tmp_path,
        methods=(),
        peak=machine_peak(1, n=256, repeats=2),
        torch_rss=False,
        runtime_python=str(runtime_python),
    )
    assert [r.backend for r in rows][:2] == ["onnx", "ort-training"]
    external = rows[2]
    assert external.backend.startswith("onnx@ORT 1.") and "py 3." in external.backend
    assert external.torch_step_ms == rows[0].torch_step_ms  # the same torch figures
    for value in (external.runtime_predict_ms, external.runtime_step_ms):
        assert 0 < value < 10_000
    assert 10 < external.runtime_peak_rss_mb < 2_000


def test_external_runtime_server_names_what_failed(runtime_python, tmp_path):
    """The bench's other-interpreter side: a bad request or a dead server is a clear error."""
    from realm_tools.bench import ExternalRuntime

    xs = np.zeros((2, 1, 8, 8), np.float32)
    with ExternalRuntime(str(runtime_python), xs, threads=1) as server:
        assert server.label.startswith("onnx@ORT 1.")
        with pytest.raises(RuntimeError, match="failed on open"):
            server.side(tmp_path / "missing", {}, "adapt")
        with pytest.raises(RuntimeError, match="unknown request 'nope'"):
            server.request(op="nope")
    dead = tmp_path / "python"
    dead.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 3\n")
    dead.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"could not time the runtime:\n(.|\n)*no such module"):
        ExternalRuntime(str(dead), xs, threads=1)
    with pytest.raises(RuntimeError, match="imported torch"):  # the dev venv: training build
        ExternalRuntime(sys.executable, xs, threads=1)


def test_the_runtime_workers_start_in_the_torch_free_venv(
    runtime_python, digits_artifacts, digits_stream, tmp_path
):
    """`python -m realm_tools.workers.runtime_rss` where torch is not installed: nothing on
    its import chain (realm_tools, realm_tools.workers) needs torch."""
    np.save(tmp_path / "stream.npy", np.ascontiguousarray(digits_stream[0][:5]))
    worker = ["-m", "realm_tools.workers.runtime_rss", str(digits_artifacts[0]), "onnx"]
    # this checkout's packages, ahead of the copies installed when the venv was made
    path = os.pathsep.join(str(ROOT / folder) for folder in ("runtime", "tools"))
    out = subprocess.run(
        [str(runtime_python), *worker, str(tmp_path / "stream.npy"), "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["torch"] is False
    assert 10 < result["peak_rss_mb"] < 2_000
