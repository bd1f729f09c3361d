"""The portable step graph — export on hard cases, backend choice, bad input,
and its ORT-format copies for mobile builds.

The parity of both backends with the SDK over whole streams is in test_parity.py; the
torch-free run on the newest onnxruntime in test_runtime_without_torch.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import edit_manifest, follow
from torch import nn

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import ArtifactError, RealmRuntime
from realm_sdk import RealmAdapter, RealmConfig
from realm_tools.parity import state_arrays

timm = pytest.importorskip("timm")


def _steps_agree(directory, model, config, steps=12, shape=(1, 3, 32, 32), backend="onnx"):
    """A few adapt steps on both sides agree in decisions, logits and parameters."""
    rt = RealmRuntime(directory, threads=1, backend=backend)
    adapter = RealmAdapter(model, config)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(shape, generator=gen) * 1.5
        r = rt.adapt(x.numpy())
        s = adapter.adapt(x)
        assert r.updated == s.updated and r.reason == s.reason
        assert abs(r.logits - s.logits.numpy()).max() < 1e-4
    mine, ref = rt.trainable_parameters(), adapter.trainable_parameters()
    assert max(abs(mine[n] - ref[n].numpy()).max() for n in ref) < 1e-5
    return rt


def test_resnet_d_exports_on_both_paths(tmp_path):
    """ResNet-D: AvgPool2d(ceil_mode=True, count_include_pad=False) shortcuts, GroupNorm.

    onnxruntime-training's AveragePoolGrad gave an empty gradient there (a Reshape error in
    validation); both graphs now write average pooling as a convolution.
    """
    from timm.layers import GroupNorm

    torch.manual_seed(0)
    # One block per stage keeps its three avg-pool shortcuts at a fraction of the cost.
    model = timm.create_model(
        "resnet18d", pretrained=False, norm_layer=GroupNorm, num_classes=10, layers=(1, 1, 1, 1)
    )
    config = RealmConfig.preset("imagenet", num_classes=10)
    options = ExportOptions(config=config, input_shape=(1, 3, 64, 64), training=True)
    info = export_realm_artifacts(model, tmp_path / "a", options)
    assert info.validation.passed and info.portable_validation.passed
    assert info.portable_error is None
    print(info.validation.table(), info.portable_validation.table(), sep="\n")


class _Pool1dNet(nn.Module):
    """Next-ViT's attention pools its tokens with AvgPool1d (2-D pooling inside torch)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.pool = nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.norm(self.conv(x)).flatten(2)  # (N, C, H·W)
        return self.fc(self.pool(tokens).mean(2))


def test_one_dimensional_average_pooling_exports_on_both_paths(tmp_path):
    torch.manual_seed(0)
    config = RealmConfig.preset("cifar", num_classes=5)
    options = ExportOptions(config=config, input_shape=(1, 3, 9, 9), training=True)
    info = export_realm_artifacts(_Pool1dNet(), tmp_path / "a", options)
    assert info.portable_error is None and info.portable_validation.passed
    assert info.validation.passed


class _UnfoldNet(nn.Module):
    """HaloNet's blocked attention cuts overlapping windows with ``Tensor.unfold``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        windows = self.norm(self.conv(x)).unfold(2, 4, 2).unfold(3, 4, 2)  # (N, C, 3, 3, 4, 4)
        return self.fc(windows.amax((-1, -2)).mean((2, 3)))


def test_overlapping_windows_export_with_int64_scatter_indices(tmp_path):
    """``unfold``'s backward is an index_put whose indices torch builds as int32; ONNX's
    ScatterND takes int64 only, and ONNX Runtime refused the graph."""
    torch.manual_seed(0)
    model = _UnfoldNet()
    config = RealmConfig.preset("cifar", num_classes=5)
    options = ExportOptions(config=config, input_shape=(1, 3, 8, 8), training=False)
    info = export_realm_artifacts(model, tmp_path / "a", options)
    assert info.portable_error is None and info.portable_validation.passed
    step = onnx.shape_inference.infer_shapes(onnx.load(str(info.files["step_model"])))
    types = {v.name: v.type.tensor_type.elem_type for v in step.graph.value_info}
    scatters = [n for n in step.graph.node if n.op_type == "ScatterND"]
    assert scatters
    assert {types.get(n.input[1], onnx.TensorProto.INT64) for n in scatters} == {
        onnx.TensorProto.INT64
    }
    _steps_agree(tmp_path / "a", model, config, shape=(1, 3, 8, 8))


class _BatchStatsNet(nn.Module):
    """BatchNorm without running statistics: normalises each batch by itself in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, track_running_stats=False)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def test_batchnorm_with_batch_statistics_is_exact(tmp_path):
    """Exported in inference mode it would use running statistics silently; here it is exact."""
    torch.manual_seed(0)
    model = _BatchStatsNet().eval()
    config = RealmConfig.preset("cifar", num_classes=5, diversity_margin=0.95)
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=config, input_shape=(1, 3, 32, 32))
    )
    assert info.portable_error is None and info.portable_validation.passed
    rt = _steps_agree(tmp_path / "a", model, config)
    assert rt.state.updates > 0


class _Volumetric(nn.Module):
    """A 3-D CNN: max pooling over volumes after a norm layer.

    The portable trace rewrites 2-d max-pooling backward only (a scatter at the indices);
    ``max_pool3d_with_indices_backward`` has no ONNX translation, while onnxruntime-training
    has a MaxPool gradient for any rank.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(1, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.max_pool3d(self.norm(self.conv(x)), 2)
        return self.fc(pooled.mean((2, 3, 4)))


def test_a_model_the_portable_export_cannot_handle_keeps_the_training_path(tmp_path, caplog):
    """With the training artifacts asked for they stand in for the portable graph; without,
    the export fails, naming both."""
    from realm_export import UnsupportedModelError

    torch.manual_seed(0)
    model = _Volumetric().eval()
    config = RealmConfig.preset("cifar", num_classes=5)
    shape = (1, 1, 8, 8, 8)
    with pytest.raises(UnsupportedModelError) as caught:
        export_realm_artifacts(
            model, tmp_path / "b", ExportOptions(config=config, input_shape=shape)
        )
    first = str(caught.value).splitlines()[0]
    assert first.startswith("no artifact for this model: ") and "max_pool3d" in first
    assert first.endswith(
        "(and the legacy training artifacts are not asked for "
        "(ExportOptions(training=True), realm export --training))"
    )
    assert not (tmp_path / "b").exists()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=config, input_shape=shape, training=True)
    )
    reason = info.portable_error
    assert reason is not None and "max_pool3d_with_indices_backward" in reason, reason
    assert "\n" not in reason  # one sentence
    assert "no portable step graph" in caplog.text
    assert info.validation.passed  # the training artifacts are written and validated
    assert info.manifest.portable == {"error": reason}
    assert not (tmp_path / "a" / "step_model.onnx").exists()
    assert RealmRuntime(tmp_path / "a").backend == "ort-training"  # auto falls back
    with pytest.raises(ArtifactError, match=r"no portable step graph.*max_pool3d"):
        RealmRuntime(tmp_path / "a", backend="onnx")


class _Upsampler(nn.Module):
    """A transposed convolution after a norm layer (a decoder, a segmentation head)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.up(self.norm(self.conv(x))).mean((2, 3)))


def test_training_graph_errors_are_named_not_raw(tmp_path):
    """onnxruntime-training 1.19.2 has no ConvTransposeGrad kernel: one clear sentence, the
    export's own error where the training artifacts were asked for (training=True); not asked
    for, they are not tried, and the portable graph is the export."""
    from realm_export import UnsupportedModelError

    model = _Upsampler().eval()
    config = RealmConfig.preset("cifar", num_classes=5)
    shape = (1, 3, 16, 16)
    with pytest.raises(UnsupportedModelError, match="ConvTransposeGrad") as caught:
        export_realm_artifacts(
            model, tmp_path / "a", ExportOptions(config=config, input_shape=shape, training=True)
        )
    assert "\n" not in str(caught.value) and "onnxruntime_src" not in str(caught.value)
    assert not (tmp_path / "a").exists() and not list(tmp_path.iterdir())
    info = export_realm_artifacts(
        model, tmp_path / "b", ExportOptions(config=config, input_shape=shape)
    )
    assert info.training_error == (
        "not asked for (ExportOptions(training=True), realm export --training)"
    )
    assert info.manifest.training == {"written": False, "reason": info.training_error}
    assert info.portable_validation.passed
    _steps_agree(tmp_path / "b", model, config, steps=4, shape=shape)


def test_backend_choice_and_errors(digits_artifacts):
    directory, _ = digits_artifacts
    assert RealmRuntime(directory).backend == "onnx"  # auto: the portable graph
    assert RealmRuntime(directory, backend="ort-training").backend == "ort-training"
    with pytest.raises(ValueError, match="backend must be one of"):
        RealmRuntime(directory, backend="tensorrt")
    rt = RealmRuntime(directory, backend="onnx")
    x = torch.randn(3, 1, 32, 32).numpy()
    with pytest.raises(ValueError, match=r"at most 1 sample.*backend=.ort-training."):
        rt.adapt(x)
    assert rt.state.samples == 0  # refused before anything changed
    assert rt.predict(x).shape == (3, 10)  # prediction takes any batch, one sample at a time
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RuntimeError, match="onnxruntime-gpu"):
            RealmRuntime(directory, backend="onnx", device="cuda")
    with pytest.raises(ValueError, match="device must be"):
        RealmRuntime(directory, backend="onnx", device="tpu")


def test_portable_export_can_be_switched_off(tmp_path):
    model = _BatchStatsNet().eval()
    config = RealmConfig.preset("cifar", num_classes=5)
    info = export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=config, input_shape=(1, 3, 8, 8), portable=False, training=True),
    )
    assert info.manifest.portable == {} and "step_model" not in info.files
    assert RealmRuntime(tmp_path / "a").backend == "ort-training"
    with pytest.raises(ArtifactError, match="no portable step graph"):
        RealmRuntime(tmp_path / "a", backend="onnx")


def test_inference_model_of_the_onnx_backend(digits_artifacts, digits_stream, tmp_path):
    rt = RealmRuntime(digits_artifacts[0], backend="onnx", threads=1)
    xs = digits_stream[0][:30]
    for i in range(30):
        rt.adapt(xs[i : i + 1])
    assert rt.state.updates > 0
    rt.export_inference_model(tmp_path / "adapted.onnx")
    session = ort.InferenceSession(str(tmp_path / "adapted.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input"]  # parameters baked in
    (logits,) = session.run(None, {"input": xs[:1]})
    assert abs(logits - rt.predict(xs[:1])).max() < 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="needs onnxruntime-gpu (CUDAExecutionProvider) and an NVIDIA GPU",
)
def test_onnx_backend_on_cuda_keeps_state_on_the_gpu(digits_artifacts, digits_stream):
    rt = RealmRuntime(digits_artifacts[0], backend="onnx", device="cuda")
    cpu = RealmRuntime(digits_artifacts[0], backend="onnx", threads=1)
    xs = digits_stream[0][:40]
    for i in range(40):
        a, b = rt.adapt(xs[i : i + 1]), cpu.adapt(xs[i : i + 1])
        assert a.updated == b.updated
    # The whole adapt graph's state, never copied to the host per step.
    assert {v.device_name() for v in rt._backend._state.values()} == {"cuda"}
    options = rt._backend._adapt.get_provider_options()["CUDAExecutionProvider"]
    assert options["use_tf32"] == "0"  # float32 as the SDK; TF32 put logits 1e-3 off
    mine, ref = rt.trainable_parameters(), cpu.trainable_parameters()
    assert max(abs(mine[n] - ref[n]).max() for n in ref) < 1e-4


def test_step_graph_reports_a_non_finite_step(digits_artifacts, digits_stream):
    """realm.finite: true on a normal step, false when the loss or a gradient is not finite.

    λ = 0 in the fed parameter vector makes t = H/λ infinite: the loss and the α, λ
    gradients are NaN/inf while the logits stay finite, which only the flag can tell.
    """
    import numpy as np

    from realm_runtime import load_manifest

    directory = digits_artifacts[0]
    manifest = load_manifest(directory)
    session = ort.InferenceSession(str(directory / manifest.portable["step_model"]))
    source = np.load(directory / manifest.portable["source_params"])
    feeds = {
        "input": digits_stream[0][:1],
        "realm.sample_weight": np.ones(1, np.float32),
        "realm.lr": np.array(0.005, np.float32),
        "realm.lr_alpha_lambda": np.array(0.01, np.float32),
        "realm.lr_batch_norm": np.array(0.0, np.float32),
        "realm.momentum": np.array(0.0, np.float32),
        "realm.entropy_margin": np.array(1.0, np.float32),
        "realm.params": source,
        "realm.velocity": np.zeros_like(source),
        "realm.anchor": np.array(0.0, np.float32),
        "realm.relax": np.array(0.0, np.float32),
    }
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, feeds), strict=True))
    assert bool(out["realm.finite"]) and np.isfinite(out["realm.new_params"]).all()
    broken = source.copy()
    broken[-1] = 0.0  # λ, the last slot of the layout
    assert manifest.portable["layout"][-1]["name"] == "realm.lambda"
    out = dict(zip(names, session.run(None, {**feeds, "realm.params": broken}), strict=True))
    assert np.isfinite(out["logits"]).all()
    assert not bool(out["realm.finite"])


def test_the_default_export_is_the_portable_graph_alone(tmp_path):
    """Not asked for, the legacy training artifacts are not written, installed or not."""
    torch.manual_seed(0)
    model = _BatchStatsNet().eval()
    config = RealmConfig.preset("cifar", num_classes=5, diversity_margin=0.95)
    assert ExportOptions().training is False
    info = export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=config, input_shape=(1, 3, 16, 16)),
    )
    assert info.validation is None and info.portable_validation.passed
    names = set(info.manifest.files)
    assert {"step_model.onnx", "forward_model.onnx", "source_params.npy"} <= names
    assert not names & {"training_model.onnx", "eval_model.onnx", "checkpoint"}
    assert RealmRuntime(tmp_path / "a").backend == "onnx"
    with pytest.raises(ArtifactError, match=r"no training artifacts.*realm export --training"):
        RealmRuntime(tmp_path / "a", backend="ort-training")
    _steps_agree(tmp_path / "a", model, config, shape=(1, 3, 16, 16))
    with pytest.raises(ValueError, match="nothing to export"):
        export_realm_artifacts(
            model,
            tmp_path / "b",
            ExportOptions(config=config, input_shape=(1, 3, 8, 8), training=False, portable=False),
        )


@pytest.mark.parametrize("backend", ["onnx", "ort-training"])
def test_session_config_reaches_onnx_runtime(backend, digits_artifacts, digits_stream):
    """``session_config`` (e.g. pre-packing off, to save memory) changes nothing but cost."""
    import numpy as np

    plain = RealmRuntime(digits_artifacts[0], threads=1, backend=backend)
    lean = RealmRuntime(
        digits_artifacts[0],
        threads=1,
        backend=backend,
        session_config={"session.disable_prepacking": "1"},
    )
    xs = digits_stream[0][:30]
    for i in range(30):
        a, b = plain.adapt(xs[i : i + 1]), lean.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        np.testing.assert_allclose(a.logits, b.logits, rtol=0, atol=1e-5)
    assert plain.state.updates == lean.state.updates > 0
    key = "session.disable_prepacking"
    if backend == "onnx":
        assert _config_entry(lean, key, xs[:1]) == ["1", "1"]
        with pytest.raises(RuntimeError, match="does not have configuration"):
            _config_entry(plain, key, xs[:1])  # ORT's own answer for an entry never set
    else:  # ORT's training Module offers no read-back: the options it was handed
        assert lean._backend._module._session_options.get_session_config_entry(key) == "1"
    with pytest.raises(ValueError, match="session_config must map str to str"):
        RealmRuntime(digits_artifacts[0], session_config={"session.disable_prepacking": 1})


def _config_entry(rt, key, x):
    """``key`` as ONNX Runtime holds it for the onnx backend's two sessions: the adapt (or, for
    the twin, the step) graph's and the forward graph's."""
    rt.predict(x)  # makes the forward session, made on first use
    b = rt._backend  # white-box: ORT's own objects
    sessions = [s for s in (b._adapt, b._step, b._forward) if s is not None]
    assert len(sessions) == 2
    return [s.get_session_options().get_session_config_entry(key) for s in sessions]


def test_sessions_stop_spinning_after_a_run_unless_told_otherwise(digits_artifacts, digits_stream):
    """Both graphs' sessions carry DEFAULT_SESSION_CONFIG; session_config overrides it.

    ORT's workers spinning on after a Run took the cores from the runtime's next graph
    (docs/BENCHMARKS.md); the entry is read back from the sessions ONNX Runtime made.
    """
    key = "session.force_spinning_stop"
    assert dict(RealmRuntime.DEFAULT_SESSION_CONFIG) == {key: "1"}
    x = digits_stream[0][:1]
    assert _config_entry(RealmRuntime(digits_artifacts[0], backend="onnx"), key, x) == ["1", "1"]
    spinning = RealmRuntime(digits_artifacts[0], backend="onnx", session_config={key: "0"})
    assert _config_entry(spinning, key, x) == ["0", "0"]


def test_onnx_sessions_share_one_arena_unless_told_otherwise(digits_artifacts, digits_stream):
    """The onnx backend's sessions allocate from ORT's shared CPU arena (less peak memory).

    Two runtimes, one on the shared arena and one with an arena per session, run the same
    stream side by side (so the shared arena is in use by the other sessions meanwhile) and
    agree bit for bit: where memory comes from changes nothing in the numbers.
    """
    key = "session.use_env_allocators"
    xs = digits_stream[0][:40]
    shared = RealmRuntime(digits_artifacts[0], backend="onnx-steps")
    own = RealmRuntime(digits_artifacts[0], backend="onnx-steps", session_config={key: "0"})
    assert _config_entry(shared, key, xs[:1]) == ["1", "1"]
    assert _config_entry(own, key, xs[:1]) == ["0", "0"]
    for i in range(len(xs)):
        a, b = shared.adapt(xs[i : i + 1]), own.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        assert np.array_equal(a.logits, b.logits)
    assert shared.state.updates == own.state.updates > 0
    for name, value in shared.trainable_parameters().items():
        assert np.array_equal(value, own.trainable_parameters()[name]), name


def test_planner_and_arena_switches_reach_the_sessions_and_change_no_number(
    digits_artifacts, digits_stream
):
    """``realm.memory_pattern`` and ``realm.cpu_arena`` set the SessionOptions switches ORT
    keeps outside its entries; the runtime reads them and ORT never sees them."""
    entries = {"realm.memory_pattern": "0", "realm.cpu_arena": "0"}
    xs = digits_stream[0][:30]
    plain = RealmRuntime(digits_artifacts[0], backend="onnx")
    bare = RealmRuntime(digits_artifacts[0], backend="onnx", session_config=entries)
    for i in range(len(xs)):
        a, b = plain.adapt(xs[i : i + 1]), bare.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        assert np.array_equal(a.logits, b.logits)
    assert plain.state.updates == bare.state.updates > 0
    bare.predict(xs[:1])  # makes the forward session too
    b = bare._backend  # white-box: ORT's own options
    options = [s.get_session_options() for s in (b._adapt, b._forward)]
    assert [(o.enable_mem_pattern, o.enable_cpu_mem_arena) for o in options] == [(False, False)] * 2
    for o in options:
        assert o.get_session_config_entry("session.use_env_allocators") == "0"
        with pytest.raises(RuntimeError, match="does not have configuration"):
            o.get_session_config_entry("realm.cpu_arena")


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


def test_gemm_heavy_weights_make_lean_sessions(digits_artifacts, digits_stream, tmp_path):
    """Where many weights feed matrix products: no pre-packing (and, as everywhere, no
    memory-pattern planner unless session_config turns it on).

    ORT's pre-packed copies would double a transformer's weights per session. The rule reads
    the manifest's ``gemm_bytes``; the same stream takes the same decisions (plain and
    pre-packed GEMM kernels sum in another order: logits within 1e-5), and session_config
    still decides where it names the entry.
    """
    key = "session.disable_prepacking"
    copy = tmp_path / "gemm-heavy"
    shutil.copytree(digits_artifacts[0], copy)
    edit_manifest(copy, lambda m: m["portable"]["weights"].update(gemm_bytes=65 << 20))
    xs = digits_stream[0][:30]
    lean = RealmRuntime(copy, backend="onnx-steps")
    usual = RealmRuntime(digits_artifacts[0], backend="onnx-steps")
    asked = RealmRuntime(copy, backend="onnx-steps", session_config={key: "0"})
    assert _config_entry(lean, key, xs[:1]) == ["1", "1"]
    assert _config_entry(asked, key, xs[:1]) == ["0", "0"]
    assert RealmRuntime(digits_artifacts[0]).manifest.portable["weights"]["gemm_bytes"] < 1 << 20
    usual.predict(xs[:1])  # its forward session too
    planned = RealmRuntime(
        digits_artifacts[0], backend="onnx-steps", session_config={"realm.memory_pattern": "1"}
    )
    planned.predict(xs[:1])
    for rt, pattern in ((lean, False), (usual, False), (asked, False), (planned, True)):
        sessions = (rt._backend._step, rt._backend._forward)  # white-box: ORT's own objects
        assert [s.get_session_options().enable_mem_pattern for s in sessions] == [pattern] * 2
    for i in range(len(xs)):
        a, b = lean.adapt(xs[i : i + 1]), usual.adapt(xs[i : i + 1])
        assert a.updated == b.updated and abs(a.logits - b.logits).max() < 1e-5
    assert lean.state.updates == usual.state.updates > 0
    ours, theirs = lean.trainable_parameters(), usual.trainable_parameters()
    assert max(abs(ours[n] - theirs[n]).max() for n in ours) < 1e-6


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


# ------------------------------------------------------------------------------ ORT format


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
