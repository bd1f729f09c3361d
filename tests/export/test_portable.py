"""The portable step graph on hard cases: what it exports, where it falls back, how it is
switched off.

Its backend choice and bad input are in test_portable_backend.py, its ONNX Runtime session
settings in test_session_config.py, its shared weights file in test_shared_weights.py and its
ORT-format copies for mobile builds in test_ort_format.py. The parity of both backends with the
SDK over whole streams is in test_parity.py; the torch-free run on the newest onnxruntime in
test_runtime_without_torch.py.
"""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import ArtifactError, RealmRuntime
from realm_sdk import RealmAdapter, RealmConfig

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
