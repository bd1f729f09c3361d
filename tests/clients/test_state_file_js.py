"""A state file moves between Python and JavaScript (clients/js/state-file.js).

``RealmRuntime`` (and the SDK) write the ``.npz`` state: exactly the adapt graph's state
tensors, under its input names (version 3). Node reads it with the browser's module and writes
it back; the runtime and the SDK restore what Node wrote. Needs Node.js only (the module has no
npm dependency).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from realm_runtime import COUNTERS, RealmRuntime

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "js"

# Reads argv[1]; prints its header and arrays as JSON; writes it back to argv[2] (if given)
# with writeState, i.e. from what readState returned.
ROUND_TRIP = """
import { readFileSync, writeFileSync } from "node:fs";
import { readState, writeState } from "./state-file.js";
const [source, target] = process.argv.slice(1);
const state = readState(new Uint8Array(readFileSync(source)));
const arrays = {};
for (const [name, a] of state.arrays) {
  arrays[name] = { dtype: a.dtype, shape: a.shape, data: Array.from(a.data, Number) };
}
console.log(JSON.stringify({ header: state.header, arrays }));
if (target) {
  const { format, version, ...header } = state.header;
  writeFileSync(target, writeState(header, state.arrays));
}
"""


def _node_round_trip(source: Path, target: Path | None = None) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js not found: the JavaScript state-file tests need node")
    args = [node, "--input-type=module", "-e", ROUND_TRIP, str(source)]
    if target is not None:
        args.append(str(target))
    done = subprocess.run(args, cwd=CLIENT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _adapted(artifacts: Path, stream: np.ndarray) -> RealmRuntime:
    rt = RealmRuntime(artifacts, threads=1)
    for x in stream[:40]:
        rt.adapt(np.ascontiguousarray(x[None]))
    assert rt.state.updates > 0
    return rt


def test_node_reads_the_runtimes_state_exactly(digits_artifacts, digits_stream, tmp_path):
    directory = digits_artifacts[0]
    rt = _adapted(directory, digits_stream[0])
    rt.save(tmp_path / "state.npz")
    there = _node_round_trip(tmp_path / "state.npz")
    header, arrays = there["header"], there["arrays"]
    assert header["format"] == "realm-tta/adaptation-state" and header["method"] == "realm"
    assert header["version"] == 3
    # Exactly the adapt graph's state, each of its initial value's dtype and shape.
    spec = json.loads((directory / "realm.json").read_text())["adapt"]
    assert set(arrays) == {e["input"] for e in spec["state"]}
    for entry in spec["state"]:
        initial = np.load(directory / entry["initial"])
        got = arrays[entry["input"]]
        assert (got["dtype"], got["shape"]) == (initial.dtype.str, list(initial.shape))
    flat, start = np.array(arrays["realm.params"]["data"], np.float32), 0
    momentum = np.array(arrays["realm.velocity"]["data"], np.float32)
    values, buffers, state = rt.trainable_parameters(), rt.momentum_buffers(), rt.state
    for slot in header["layout"]:
        n = int(np.prod(slot["shape"], dtype=np.int64))
        if slot["name"] in values:
            want, want_m = values[slot["name"]].ravel(), buffers[slot["name"]].ravel()
        else:  # α, λ last
            alpha = slot["name"] == "realm.alpha"
            want = np.float32([state.alpha if alpha else state.lam])
            want_m = np.float32([state.alpha_momentum if alpha else state.lam_momentum])
        np.testing.assert_array_equal(flat[start : start + n], want, err_msg=slot["name"])
        np.testing.assert_array_equal(momentum[start : start + n], want_m, err_msg=slot["name"])
        start += n
    assert start == flat.size
    counters = dict(zip(COUNTERS, arrays["realm.counters"]["data"], strict=True))
    assert counters == {c: getattr(state, c) for c in COUNTERS}
    np.testing.assert_array_equal(np.array(arrays["realm.ema"]["data"], np.float32), state.ema)


def test_python_restores_what_node_wrote(digits_artifacts, digits_model, digits_stream, tmp_path):
    from realm_sdk import RealmAdapter

    rt = _adapted(digits_artifacts[0], digits_stream[0])
    rt.save(tmp_path / "python.npz")
    _node_round_trip(tmp_path / "python.npz", tmp_path / "node.npz")

    back = RealmRuntime(digits_artifacts[0], threads=1)
    back.restore(tmp_path / "node.npz")
    for name, value in rt.trainable_parameters().items():
        np.testing.assert_array_equal(back.trainable_parameters()[name], value)
    for name, value in rt.momentum_buffers().items():
        np.testing.assert_array_equal(back.momentum_buffers()[name], value)
    a, b = rt.state, back.state
    assert (a.alpha, a.lam, a.updates, a.samples) == (b.alpha, b.lam, b.updates, b.samples)
    np.testing.assert_array_equal(a.ema, b.ema)
    # The SDK reads the same file (the state format is shared).
    sdk = RealmAdapter(copy.deepcopy(digits_model), digits_artifacts[1])
    sdk.restore(tmp_path / "node.npz")
    for name, value in rt.trainable_parameters().items():
        np.testing.assert_array_equal(sdk.trainable_parameters()[name].numpy(), value)
    # And both continue alike from it.
    x = np.ascontiguousarray(digits_stream[0][40:41])
    np.testing.assert_allclose(
        back.adapt(x).logits, sdk.adapt(torch.from_numpy(x)).logits.numpy(), atol=1e-5
    )
