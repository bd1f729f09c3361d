"""``realm bench memory``'s instruments: the graphs' live-tensor peak and the probe process."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from realm_tools.bench import (
    browser_missing,
    browser_peak,
    live_peak_mb,
    node_missing,
    node_peak,
    probe,
)

MB = 1 << 20


def test_live_peak_counts_what_is_alive_at_once(tmp_path):
    # x (input) → a = Relu(x) → b = Neg(a) → c = Add(a, b) → d = Neg(c), each one mebibyte.
    # While Add runs, a, b and c are alive (three); a and b die there, then d joins c (two).
    n = MB // 4
    vec = [n]

    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, vec)

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Neg", ["a"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["c"]),
            helper.make_node("Neg", ["c"], ["d"]),
        ],
        "chain",
        [info("x")],
        [info("d")],
    )
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph), path)
    assert live_peak_mb(path) == 3.0


def test_live_peak_never_releases_what_no_node_made(tmp_path):
    # w, an initializer shape inference lists among the values, is read once: alive all
    # along, it was never counted, so its last reader must not take it off the sum.
    n = MB // 4
    vec = [n]
    info = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, vec)  # noqa: E731
    w = helper.make_tensor("w", TensorProto.FLOAT, vec, np.zeros(n, np.float32))
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Add", ["a", "w"], ["b"]),
            helper.make_node("Neg", ["a"], ["c"]),
            helper.make_node("Add", ["b", "c"], ["d"]),
        ],
        "weighted",
        [info("x")],
        [info("d")],
        initializer=[w],
        value_info=[info("w")],
    )
    path = tmp_path / "weighted.onnx"
    onnx.save(helper.make_model(graph), path)
    assert live_peak_mb(path) == 3.0  # a, b and c while the last Neg runs


def test_the_probe_reports_each_role_without_torch(digits_artifacts, tmp_path):
    stream = tmp_path / "stream.npy"
    np.save(stream, np.random.default_rng(0).standard_normal((4, 1, 32, 32)).astype(np.float32))
    bare = probe(digits_artifacts[0], "bare", stream, 1)
    update = probe(digits_artifacts[0], "update", stream, 1, None, {"realm.cpu_arena": "0"})
    inference = probe(digits_artifacts[0], "inference", stream, 1)
    assert bare["ms"] is None and update["ms"] > 0 and inference["ms"] > 0
    assert 0 < bare["peak"] < update["peak"] and bare["peak"] < inference["peak"]


def test_the_node_app_is_measured_updating(digits_artifacts):
    missing = node_missing()
    if missing is not None:
        pytest.skip(missing)
    directory, config = digits_artifacts
    stream = np.random.default_rng(0).standard_normal((3, 1, 32, 32)).astype(np.float32)
    peak = node_peak(directory, stream, 1, config.num_classes)
    # A whole node process with onnxruntime-node and the graphs loaded: more than node alone.
    bare = subprocess.run(
        ["node", "-e", "console.log(process.memoryUsage().rss / 2 ** 20)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(bare.stdout) < peak


def test_the_browser_page_is_measured_updating(digits_artifacts):
    missing = browser_missing()
    if missing is not None:
        pytest.skip(missing)
    directory, config = digits_artifacts
    stream = np.random.default_rng(0).standard_normal((3, 1, 32, 32)).astype(np.float32)
    page = browser_peak(directory, stream, 1, config.num_classes)
    # onnxruntime-web's memory holds the weights at least; the renderer holds that memory.
    weights = sum(f.stat().st_size for f in directory.glob("*.bin")) / MB
    assert weights < page.wasm < page.renderer
    assert page.js_heap is not None and 0 < page.js_heap < page.renderer


def test_a_row_that_fails_keeps_the_others(tmp_path, capsys):
    from realm_tools.cli import main

    out = tmp_path / "memory"
    argv = ["bench", "memory", "--models", "timm:resnet18", "--image-size", "32"]
    argv += ["--adapt-stages", "99", "--samples", "3", "--threads", "1", "--out", str(out)]
    code = main(argv)
    assert code == 1  # one row failed ...
    assert "timm:resnet18, last 99 failed" in capsys.readouterr().err
    written = (out / "memory.md").read_text()
    assert "| timm:resnet18 | 3×32×32 |" in written  # ... and the other was measured and kept
    assert "Not measured:\n\n- timm:resnet18, last 99: adapt_stages=99, but" in written
