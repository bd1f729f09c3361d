"""The docs' manifest-only adapt client (docs/adapt.md) on other ONNX Runtime builds than the
export's: the newest onnxruntime (in the runtime venv), the ORT-format adapt graph a mobile
build runs, and the CUDA provider (with RealmRuntime on CUDA beside it). Each must take the
steps of the runtime on the CPU, decision for decision, within the tolerances.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import ADAPT_CASES as CASES
from helpers import adapt_arrays as _arrays
from helpers import adapt_client as _client
from helpers import adapt_stream as _stream
from helpers import client_source, export_digits, follow, has_cuda, run_in_runtime_venv

from realm_runtime import COUNTERS, RealmRuntime
from realm_runtime.contract import PARAMS_NAME, SETTINGS_NAME, VELOCITY_NAME, read_state

NEWEST = """
import json, sys
import numpy as np, onnxruntime
scope = {}
exec(open(sys.argv[1]).read(), scope)
client = scope["AdaptClient"](sys.argv[2])
if len(sys.argv) > 4:  # go on from a state file (the graph's tensors), the settings the export's
    with np.load(sys.argv[4]) as saved:
        client.state.update({k: saved[k] for k in client.state if k != "realm.settings"})
rows = []
for x in np.load(sys.argv[3]):
    logits, updated, reason = client.adapt(x[None])
    state = client.state
    rows.append([reason, updated, logits[0].tolist(), state["realm.params"].tolist(),
                 state["realm.velocity"].tolist()])
print(json.dumps({"ort": onnxruntime.__version__, "rows": rows}))
"""


@pytest.mark.parametrize("case", ["realm", "tent", "eta", "sar-recovering"])
def test_the_docs_client_on_the_newest_onnxruntime(
    case, runtime_python, digits_model, digits, tmp_path
):
    overrides, kind = CASES[case]
    directory = tmp_path / "a"
    export_digits(digits_model, directory, **overrides)
    # No overflowing input: whether its logits overflow depends on the version's kernels.
    xs = _stream(digits, kind, overflow=False)[:100]
    (tmp_path / "client.py").write_text(client_source())

    def newest(first: int, last: int, state: Path | None = None) -> list:
        """The docs' client on the newest onnxruntime: samples first..last-1, from ``state``."""
        np.save(tmp_path / "xs.npy", xs[first:last])
        args = [tmp_path / "client.py", directory, tmp_path / "xs.npy"]
        args += [state] if state is not None else []
        there = run_in_runtime_venv(runtime_python, NEWEST, *args, cwd=tmp_path)
        assert there["ort"] != onnxruntime.__version__  # two ONNX Runtime versions compared
        return there["rows"]

    import onnxruntime

    def other(first: int, last: int, state: Path | None) -> list:
        rows = newest(first, last, state)
        return [(r[0], r[1], r[2], _arrays(r[3], r[4])) for r in rows]

    runtime = RealmRuntime(directory, threads=1, backend="onnx-steps")
    follow(other, runtime, xs, source=digits_model, where="the newest onnxruntime's client")
    assert runtime.state.updates > 0


def test_the_ort_format_adapt_graph_takes_the_same_steps(
    digits_ort_artifacts, digits_model, digits
):
    """The docs' client on the .ort adapt graph against the runtime on the .onnx one."""
    directory = digits_ort_artifacts[0]
    manifest = json.loads((directory / "realm.json").read_text())
    mobile = manifest["portable"]["ort_format"]
    assert mobile["adapt_validation"]["passed"]
    operators = (directory / mobile["operators_config"]).read_text()
    assert re.search(r"^ai\.onnx;\d+;.*\bIf\b", operators, re.M), operators  # a build keeps If
    ort_client = _client(directory)
    ort_client.spec = {**ort_client.spec, "file": mobile["adapt_model"]}
    import onnxruntime

    ort_client.session = onnxruntime.InferenceSession(str(directory / mobile["adapt_model"]))
    settings = ort_client.state[SETTINGS_NAME]

    def other(first: int, last: int, state: Path | None) -> list:
        if state is not None:
            ort_client.state = {**read_state(state)[0], SETTINGS_NAME: settings}
        rows = []
        for x in xs[first:last]:
            logits, updated, reason = ort_client.adapt(x[None])
            graph = ort_client.state
            rows.append(
                (reason, updated, logits[0], _arrays(graph[PARAMS_NAME], graph[VELOCITY_NAME]))
            )
        return rows

    xs = _stream(digits, "shifted")[:100]
    onnx_graph = RealmRuntime(directory, threads=1, graph_format="onnx")
    assert onnx_graph.backend == "onnx"
    follow(other, onnx_graph, xs, source=digits_model, where="the .ort adapt graph")
    assert onnx_graph.state.updates > 0


@pytest.mark.cuda
@pytest.mark.skipif(not has_cuda(), reason="needs onnxruntime-gpu and an NVIDIA GPU")
@pytest.mark.parametrize("case", list(CASES))
def test_the_adapt_graph_on_cuda_takes_the_cpu_twins_steps(case, digits_model, digits, tmp_path):
    """The docs' client on the CUDA provider, and RealmRuntime on CUDA (its state on the GPU),
    against the numpy twin on the CPU: the same decisions, logits, parameters and counters."""
    import onnxruntime

    overrides, kind = CASES[case]
    directory = tmp_path / "a"
    export_digits(digits_model, directory, **overrides)
    # No overflowing input: whether its logits overflow depends on the provider's kernels.
    xs = _stream(digits, kind, overflow=False)
    twin = RealmRuntime(directory, threads=1, backend="onnx-steps")
    gpu = RealmRuntime(directory, device="cuda")
    client = _client(directory)
    cuda = [("CUDAExecutionProvider", {"use_tf32": "0"})]  # float32, as the reference
    client.session = onnxruntime.InferenceSession(
        str(directory / client.spec["file"]), providers=cuda
    )
    assert client.session.get_providers()[0] == "CUDAExecutionProvider"
    for i, x in enumerate(xs):
        ours = twin.adapt(x[None])
        logits, updated, reason = client.adapt(x[None])
        fed = gpu.adapt(x[None])
        assert (reason, updated) == (ours.reason, ours.updated), f"step {i}"
        assert (fed.reason, fed.updated) == (ours.reason, ours.updated), f"step {i}"
        np.testing.assert_allclose(logits, ours.logits, rtol=0, atol=1e-4)
        np.testing.assert_allclose(fed.logits, ours.logits, rtol=0, atol=1e-4)
    assert {v.device_name() for v in gpu._backend._state.values()} == {"cuda"}
    want = twin.trainable_parameters()
    flat = np.concatenate([want[n].reshape(-1) for n in want])
    size = flat.size
    np.testing.assert_allclose(client.state["realm.params"][:size], flat, atol=1e-4)
    for name, value in gpu.trainable_parameters().items():
        np.testing.assert_allclose(value, want[name], atol=1e-4, err_msg=name)
    state, on_gpu = twin.state, gpu.state
    counters = dict(zip(COUNTERS, client.state["realm.counters"].tolist(), strict=True))
    assert counters == {c: getattr(state, c) for c in COUNTERS}
    assert {c: getattr(on_gpu, c) for c in COUNTERS} == counters
    if state.alpha is not None:
        assert on_gpu.alpha == pytest.approx(state.alpha, abs=1e-5)
        assert on_gpu.lam == pytest.approx(state.lam, rel=1e-5)
