"""The ORT-format copies of the portable graphs, for mobile (minimal) ONNX Runtime builds:
the export writes checked ``.ort`` graphs and the operator config a build needs, the ``.ort``
graphs take the same steps as the ``.onnx`` ones, and requests that cannot be met (no ``.ort``
graphs, no portable graph, a crashing converter, a changed byte) are refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import follow

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import ArtifactError, RealmRuntime
from realm_sdk import RealmConfig
from realm_tools.parity import state_arrays


def test_ort_format_export_writes_checked_graphs_and_the_operator_config(digits_ort_artifacts):
    from realm_runtime import load_manifest

    directory = digits_ort_artifacts[0]
    manifest = load_manifest(directory)
    section = manifest.portable["ort_format"]
    for role in ("step_model", "forward_model", "adapt_model", "operators_config"):
        assert (directory / section[role]).is_file()
        assert section[role] in manifest.files  # checksummed like every other file
    assert section["validation"]["passed"] is True  # the .ort graphs against torch
    assert section["target_platform"] == "arm" and section["optimization_style"] == "Fixed"
    config = (directory / section["operators_config"]).read_text().splitlines()
    ops = [line for line in config if line and not line.startswith("#")]
    assert any(line.startswith("ai.onnx;") and "Conv" in line for line in ops), config
    # The converter's header names the graphs it read: by file name, not a build path.
    named = [line for line in config if line.startswith("# - ")]
    assert sorted(named) == [
        "# - adapt_model.ort",
        "# - forward_model.ort",
        "# - step_model.ort",
    ], config


def test_ort_graphs_take_the_same_steps_as_the_onnx_graphs(
    digits_ort_artifacts, digits_model, digits_stream, tmp_path
):
    directory = digits_ort_artifacts[0]
    from_ort = RealmRuntime(directory, threads=1)
    from_onnx = RealmRuntime(directory, threads=1, graph_format="onnx")
    assert (from_ort.graph_format, from_onnx.graph_format) == ("ort", "onnx")
    xs = digits_stream[0][:80]

    def other(first: int, last: int, state: Path | None) -> list:
        if state is not None:
            from_ort.restore(state)
        rows = []
        for x in xs[first:last]:
            r = from_ort.adapt(np.ascontiguousarray(x[None]))
            from_ort.save(tmp_path / "step.npz")  # its file's vectors: α and λ too
            rows.append((r.reason, r.updated, r.logits[0], state_arrays(tmp_path / "step.npz")))
        return rows

    follow(other, from_onnx, xs, source=digits_model, where="the .ort graphs")
    sa, sb = from_ort.state, from_onnx.state
    assert sa.updates == sb.updates > 0 and sa.skipped_diversity > 0
    pa, pb = from_ort.trainable_parameters(), from_onnx.trainable_parameters()
    for name in pb:
        np.testing.assert_allclose(pa[name], pb[name], rtol=0, atol=1e-6)
    va, vb = from_ort.momentum_buffers(), from_onnx.momentum_buffers()
    for name in vb:
        np.testing.assert_allclose(va[name], vb[name], rtol=0, atol=1e-5)
    assert sa.alpha == pytest.approx(sb.alpha, abs=1e-6)
    assert sa.lam == pytest.approx(sb.lam, abs=1e-6)
    np.testing.assert_allclose(sa.ema, sb.ema, rtol=0, atol=1e-6)


def test_ort_format_requests_that_cannot_be_met(digits_artifacts, digits_ort_artifacts, tmp_path):
    with pytest.raises(ArtifactError, match="no ORT-format graphs"):
        RealmRuntime(digits_artifacts[0], graph_format="ort")
    with pytest.raises(ValueError, match="graph_format must be"):
        RealmRuntime(digits_ort_artifacts[0], graph_format="flatbuffer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the onnx backend"):
        RealmRuntime(digits_ort_artifacts[0], backend="ort-training", graph_format="ort")
    # A changed byte in an .ort graph is refused like any other artifact file.
    copy = tmp_path / "copy"
    shutil.copytree(digits_ort_artifacts[0], copy)
    graph = copy / "step_model.ort"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"step_model\.ort"):
        RealmRuntime(copy)


def test_ort_format_needs_the_portable_graph_and_a_working_converter(
    digits_model, tmp_path, monkeypatch
):
    config = RealmConfig.preset("cifar", num_classes=10)
    with pytest.raises(ValueError, match="needs portable=True"):
        export_realm_artifacts(
            digits_model,
            tmp_path / "a",
            ExportOptions(
                config=config, input_shape=(1, 1, 32, 32), portable=False, ort_format=True
            ),
        )
    import subprocess

    from realm_export import UnsupportedModelError

    real_run = subprocess.run

    def crashing_converter(command, *args, **kwargs):
        if "onnxruntime.tools.convert_onnx_models_to_ort" not in command:
            return real_run(command, *args, **kwargs)
        return subprocess.CompletedProcess(command, 3, "", "simulated converter crash")

    monkeypatch.setattr(subprocess, "run", crashing_converter)
    with pytest.raises(UnsupportedModelError, match="exit code 3:\nsimulated converter crash"):
        export_realm_artifacts(
            digits_model,
            tmp_path / "b",
            ExportOptions(config=config, input_shape=(1, 1, 32, 32), ort_format=True),
        )
    assert not (tmp_path / "b").exists()  # nothing half-written
    assert [p.name for p in tmp_path.iterdir()] == []
