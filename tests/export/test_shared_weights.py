"""The one shared weights file (``weights.bin``) of an export: the step, forward, adapt and
inference graphs point to the same bytes for a tensor they share, each tensor is stored once
(a classifier held transposed too), sessions that read the file themselves and lean ones fed
from one buffer compute the same logits, a standalone inference model is the one copy that
travels alone, and a weights table that does not fit the file is refused in one sentence.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import adapt_stream as _stream
from helpers import edit_manifest
from torch import nn

from realm_runtime import ArtifactError, RealmRuntime
from realm_sdk import RealmConfig


def test_graphs_keep_their_weights_once_in_a_shared_file(digits_artifacts, digits_stream):
    """The portable graphs' weights are stored once, in weights.bin (external data).

    The step, forward and adapt graphs point to the same bytes for a tensor they share; a
    plain InferenceSession given the forward graph's path reads them itself, and its logits
    are the runtime's: sessions that read the file themselves, and lean ones that got the
    tensors from one buffer (``add_initializer``).
    """
    directory = digits_artifacts[0]
    weights = RealmRuntime(directory).manifest.portable["weights"]
    assert weights["file"] == "weights.bin" and weights["gemm_bytes"] >= 0
    tables = {role: {n: (o, s) for n, o, s in t} for role, t in weights["graphs"].items()}
    assert set(tables) == {"step_model", "forward_model", "adapt_model", "inference_model"}
    assert tables["forward_model"] and tables["adapt_model"] == tables["step_model"]
    # The inference graph (TorchScript-exported, its own tensor names) reads the same bytes.
    offsets = {o for role in ("step_model", "forward_model") for o, _ in tables[role].values()}
    assert {o for o, _ in tables["inference_model"].values()} <= offsets
    for role, table in tables.items():
        graph = onnx.load(str(directory / f"{role}.onnx"), load_external_data=False)
        external = {
            t.name: t
            for t in graph.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL
        }
        assert set(external) == set(table), role
        for name, tensor in external.items():
            assert not tensor.raw_data and list(tensor.dims) == table[name][1]
    shared = set(tables["step_model"]) & set(tables["forward_model"])
    assert shared and all(tables["step_model"][n] == tables["forward_model"][n] for n in shared)
    stored = {o: 4 * int(np.prod(s)) for t in tables.values() for o, s in t.values()}
    end = max(o + n for o, n in stored.items())
    assert (directory / "weights.bin").stat().st_size == end  # nothing stored twice or after
    data = np.fromfile(directory / "weights.bin", dtype="<f4")
    loaded = onnx.load(str(directory / "forward_model.onnx"))  # resolves the external data
    for tensor in loaded.graph.initializer:
        if tensor.name in tables["forward_model"]:
            offset, shape = tables["forward_model"][tensor.name]
            expected = data[offset // 4 : offset // 4 + int(np.prod(shape))].reshape(shape)
            assert np.array_equal(onnx.numpy_helper.to_array(tensor), expected)
    # Sessions that read the file themselves (pre-packing on), and lean ones on one buffer.
    lean = {"session.disable_prepacking": "1"}
    runtimes = [RealmRuntime(directory, backend="onnx", session_config=c) for c in (None, lean)]
    x = digits_stream[0][:3]
    plain = ort.InferenceSession(str(directory / "forward_model.onnx"))
    plain_lean = ort.InferenceSession(str(directory / "forward_model.onnx"), _options(lean))
    params = np.load(directory / "source_params.npy")
    for i in range(len(x)):
        feeds = {"input": x[i : i + 1], "realm.params": params}
        assert np.array_equal(runtimes[0].predict(x[i : i + 1]), plain.run(None, feeds)[0])
        assert np.array_equal(runtimes[1].predict(x[i : i + 1]), plain_lean.run(None, feeds)[0])


def _options(config):
    options = ort.SessionOptions()
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return options


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda w: w.update(file="../weights.bin"), r"portable\.weights\.file must be a file name"),
        (
            lambda w: w["graphs"]["step_model"][0].__setitem__(1, 1 << 40),
            r"weights\.bin: .* outside",
        ),
        (lambda w: w["graphs"]["forward_model"].append("x"), r"\[name, offset, shape\] entries"),
        (lambda w: w.update(file="missing.bin"), r"missing\.bin: cannot read the shared weights"),
        (lambda w: w.update(gemm_bytes=-1), r"gemm_bytes must be a byte count, got -1"),
    ],
)
def test_a_wrong_weights_table_is_named(digits_artifacts, tmp_path, edit, message):
    """A re-sealed manifest whose weights table does not fit the file: one clear error."""
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    edit_manifest(copy, lambda m: edit(m["portable"]["weights"]))
    with pytest.raises(ArtifactError, match=message):
        RealmRuntime(copy, backend="onnx")


def test_one_copy_of_the_weights_unless_a_standalone_inference_model_is_asked_for(
    digits_model, digits_artifacts, digits, tmp_path
):
    import onnxruntime

    from realm_export import ExportOptions, export_realm_artifacts

    x = _stream(digits, "shifted", overflow=False)[:1]
    logits = {}
    for standalone in (False, True):
        directory = digits_artifacts[0]  # the default export of the same model
        if standalone:
            directory = tmp_path / "standalone"
            export_realm_artifacts(
                digits_model,
                directory,
                ExportOptions(
                    config=digits_artifacts[1],
                    input_shape=(1, 1, 32, 32),
                    standalone_inference=True,
                    training=False,
                ),
            )
        path = directory / "inference_model.onnx"
        model = onnx.load(str(path), load_external_data=False)
        external = [
            t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
        ]
        assert bool(external) != standalone
        # Copied apart from the directory, only the standalone one still loads.
        apart = tmp_path / f"apart-{standalone}" / "inference_model.onnx"
        apart.parent.mkdir()
        apart.write_bytes(path.read_bytes())
        if standalone:
            onnxruntime.InferenceSession(str(apart))
        else:
            with pytest.raises(Exception, match=re.escape("weights.bin")):
                onnxruntime.InferenceSession(str(apart))
        logits[standalone] = onnxruntime.InferenceSession(str(path)).run(None, {"input": x})[0]
        if not standalone:
            _no_tensor_twice(directory)
    np.testing.assert_allclose(logits[False], logits[True], atol=1e-6)


def test_a_classifier_held_transposed_is_stored_once(tmp_path):
    """The step graph holds a linear layer's weight as Wᵀ, the inference graph as W: once."""
    import onnxruntime

    from realm_export import ExportOptions, export_realm_artifacts

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3), nn.GroupNorm(4, 16), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 36, 40)
    ).eval()
    config = RealmConfig.preset("cifar", num_classes=40)
    directory = tmp_path / "a"
    shape = (1, 3, 8, 8)
    export_realm_artifacts(
        model, directory, ExportOptions(config=config, input_shape=shape, training=False)
    )
    _no_tensor_twice(directory)
    inference = onnx.load(str(directory / "inference_model.onnx"), load_external_data=False)
    assert [n.op_type for n in inference.graph.node].count("Transpose") == 1
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(directory / "inference_model.onnx"))
    got = session.run(None, {"input": x})
    want = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-5)


def _no_tensor_twice(directory: Path) -> None:
    """weights.bin holds each tensor once: no two stored tensors equal, or equal transposed."""
    section = json.loads((directory / "realm.json").read_text())["portable"]["weights"]
    raw = (directory / section["file"]).read_bytes()
    stored = {
        (offset, tuple(shape)) for table in section["graphs"].values() for _, offset, shape in table
    }
    seen: dict[bytes, int] = {}
    for offset, shape in sorted(stored):
        size = 4 * int(np.prod(shape))
        array = np.frombuffer(raw[offset : offset + size], "<f4").reshape(shape)
        for layout in (array, array.T) if array.ndim == 2 else (array,):
            key = np.ascontiguousarray(layout).tobytes()
            assert seen.setdefault(key, offset) == offset, (offset, shape, seen[key])
