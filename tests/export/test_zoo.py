"""Every model a user brings exports, validates and adapts, or is refused in a sentence.

One regression test per root cause at the op level (tiny modules, seconds each), then one
small timm model per fixed failure class at 64 px through ``RealmRuntime``; the whole
coverage list runs in the slow tier (test_coverage.py). Which norm layers a model adapts is in
test_last_block.py; how the validation's tolerances are set in test_validation_tolerance.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from realm_export import ExportOptions, UnsupportedModelError, export_realm_artifacts
from realm_runtime import ArtifactError, Manifest, RealmRuntime
from realm_sdk import RealmAdapter, RealmConfig

timm = pytest.importorskip("timm")


CFG5 = RealmConfig.preset("cifar", num_classes=5)


def _training_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime.training") is not None


def _adapts(directory, model, config, shape, steps=4):
    """A few samples through RealmRuntime agree with the SDK in decisions and logits."""
    rt = RealmRuntime(directory, threads=1, backend="onnx")
    adapter = RealmAdapter(model, config)
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x = torch.randn(shape, generator=gen)
        mine, ref = rt.adapt(x.numpy()), adapter.adapt(x)
        assert mine.updated == ref.updated and mine.reason == ref.reason
        scale = 1.0 + float(ref.logits.abs().max())
        assert np.abs(mine.logits - ref.logits.numpy()).max() < 1e-4 * scale
    return rt


# --------------------------------------------------------------------- convolution → convolution


class _ConvChain(nn.Module):
    """Two convolutions with no norm between them (EfficientViT's attention aggregation)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.depthwise = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False)
        self.pointwise = nn.Conv2d(8, 8, 1, groups=2, bias=False)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pointwise(self.depthwise(self.norm(self.conv(x))))
        return self.fc(x.mean((2, 3)))


def test_a_convolution_feeding_a_convolution_keeps_its_shape(tmp_path):
    """The input gradient of the second convolution is a rewritten node; the first one's
    rewrite reads its shape ("no shape recorded for convolution_default_N" before)."""
    torch.manual_seed(0)
    model = _ConvChain().eval()
    info = export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=CFG5, input_shape=(1, 3, 16, 16), training=False),
    )
    assert info.portable_validation.passed, info.portable_validation.table()
    _adapts(tmp_path / "a", model, CFG5, (1, 3, 16, 16))


# --------------------------------------------------------------------- in-place into a slice


class _GhostSlice(nn.Module):
    """GhostNet's pattern: ``y = cat(...)[:, :k]`` then ``y += shortcut``, in place."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.cheap = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.fc = nn.Linear(keep, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.norm(self.conv(x))
        y = torch.cat([x1, self.cheap(x1)], 1)[:, : self.keep]
        y += torch.cat([x1, x1], 1)[:, : self.keep]
        return self.fc(y.mean((2, 3)))


@pytest.mark.parametrize("keep", [8, 6], ids=["whole", "partial"])
def test_an_in_place_add_into_a_slice_exports(keep, tmp_path):
    """Its backward wrote into strided views of a buffer (as_strided_scatter: no ONNX form)."""
    torch.manual_seed(0)
    model = _GhostSlice(keep).eval()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 8, 8), training=False)
    )
    assert info.portable_validation.passed, info.portable_validation.table()
    _adapts(tmp_path / "a", model, CFG5, (1, 3, 8, 8))


# --------------------------------------------------------------------- an affine-only norm


class _Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from timm.models.mlp_mixer import Affine

        self.proj = nn.Linear(12, 8)
        self.norm = Affine(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(x.flatten(2).transpose(1, 2))
        return self.fc(self.norm(tokens).mean(1))


def test_an_affine_only_norm_exports(tmp_path):
    torch.manual_seed(0)
    model = _Affine().eval()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 12, 2, 2), training=False)
    )
    assert info.trainable[:2] == ["norm.alpha", "norm.beta"]
    assert info.portable_validation.passed
    _adapts(tmp_path / "a", model, CFG5, (1, 12, 2, 2))


# --------------------------------------------------------------------- the legacy path never vetoes


class _HardSwish(nn.Module):
    """MobileNetV3's activation: no gradient in onnxruntime-training 1.19.2."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(nn.functional.hardswish(self.norm(self.conv(x))).mean((2, 3)))


@pytest.mark.skipif(not _training_installed(), reason="needs onnxruntime-training (Python 3.11)")
def test_training_artifacts_that_cannot_be_built_fail_only_where_asked_for(tmp_path):
    """onnxruntime-training has no HardSwish gradient: the default export does not try, and
    is the portable graph; asked for, the export fails, naming the op."""
    torch.manual_seed(0)
    model = _HardSwish().eval()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 8, 8))
    )
    assert info.portable_validation.passed and info.validation is None
    assert info.training_error.startswith("not asked for")
    manifest = Manifest.from_dict(__import__("json").loads((tmp_path / "a/realm.json").read_text()))
    assert manifest.training == {"written": False, "reason": info.training_error}
    assert not {"training_model.onnx", "checkpoint"} & set(manifest.files)
    assert not any(p.name.startswith(".") for p in (tmp_path / "a").iterdir())
    _adapts(tmp_path / "a", model, CFG5, (1, 3, 8, 8))
    with pytest.raises(ArtifactError, match="no training artifacts"):
        RealmRuntime(tmp_path / "a", backend="ort-training")
    with pytest.raises(UnsupportedModelError, match="HardSwish"):
        export_realm_artifacts(
            model,
            tmp_path / "b",
            ExportOptions(config=CFG5, input_shape=(1, 3, 8, 8), training=True),
        )
    assert not (tmp_path / "b").exists()


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm, self.fc = nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x))
        if x.mean() > 0:
            x = 3 * x
        return self.fc(x.mean((2, 3)))


def test_a_refusal_says_what_was_asked_and_what_failed(tmp_path):
    with pytest.raises(UnsupportedModelError) as err:
        export_realm_artifacts(
            _Branchy(),
            tmp_path / "a",
            ExportOptions(config=CFG5, input_shape=(1, 3, 16, 16), training=False),
        )
    message = str(err.value)
    assert "data-dependent control flow" in message and "torch.where" in message
    assert "not asked for (ExportOptions(training=True)" in message
    assert "not installed" not in message
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []


def test_an_unexpected_library_error_becomes_a_sentence(tmp_path, monkeypatch):
    """Whatever torch, onnxscript or ONNX Runtime raise, the user reads one sentence with the
    stage, and nothing is written."""
    import onnx

    def broken(*_args, **_kwargs):
        raise RuntimeError("Internal assert failed at some/file.cpp:123\nC++ stack follows")

    monkeypatch.setattr(onnx, "save", broken)
    with pytest.raises(UnsupportedModelError) as err:
        export_realm_artifacts(
            _HardSwish().eval(),
            tmp_path / "a",
            ExportOptions(config=CFG5, input_shape=(1, 3, 8, 8), training=False),
        )
    message = str(err.value)
    assert "writing the inference graph" in message and "RuntimeError" in message
    assert "\n" not in message and "C++ stack" not in message
    assert list(tmp_path.iterdir()) == []


def test_a_model_that_does_not_run_at_the_size_is_told_its_size(tmp_path):
    model = timm.create_model("efficientformerv2_s0", pretrained=False, num_classes=5)
    with pytest.raises(UnsupportedModelError, match=r"does not run on an input of shape.*224"):
        export_realm_artifacts(
            model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 64, 64))
        )


# --------------------------------------------------------------------- one timm model per class


# The op-level tests above guard each class in the fast tier; the timm models that showed it
# run in the slow one (and at 128 px in the coverage list).
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("mobilenetv2_050", marks=_SLOW),  # class 1: ReLU6 kinks, random-init BN
        pytest.param("efficientvit_b0", marks=_SLOW),  # class 2: a convolution into a convolution
        pytest.param("ghostnet_050", marks=_SLOW),  # class 3: an in-place add into a slice
        pytest.param("regnetx_002", marks=_SLOW),  # class 4: the last block of stage groups
    ],
)
def test_a_small_model_of_each_fixed_class_exports_and_adapts(name, tmp_path):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10).eval()
    config = RealmConfig.preset("imagenet", num_classes=10)
    info = export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=config, input_shape=(1, 3, 64, 64), training=False),
    )
    print(info.portable_validation.table())
    assert info.portable_error is None and info.portable_validation.passed
    _adapts(tmp_path / "a", model, config, (1, 3, 64, 64), steps=3)


# --------------------------------------------------------------------- upsampling's backward


class _Upsample(nn.Module):
    """HRNet's fusion (nearest ×2) and EfficientFormerV2's (bilinear to a size) after a norm."""

    def __init__(self, mode: str, align: bool | None) -> None:
        super().__init__()
        self.mode, self.align = mode, align
        self.conv, self.norm = nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.GroupNorm(2, 4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x))
        if self.mode == "nearest":
            up = nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        else:
            up = nn.functional.interpolate(
                y, size=(11, 7), mode=self.mode, align_corners=self.align
            )
        return self.fc((up * up.mean((2, 3), keepdim=True)).mean((2, 3)))


@pytest.mark.parametrize(
    ("mode", "align"),
    [("nearest", None), ("bilinear", False), ("bilinear", True), ("bicubic", False)],
)
def test_upsampling_backward_is_two_matrix_products(mode, align, tmp_path):
    """``upsample_*2d_backward`` has no ONNX form: the transposed interpolation matrices."""
    torch.manual_seed(0)
    model = _Upsample(mode, align).eval()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 9, 8), training=False)
    )
    assert info.portable_validation.passed, info.portable_validation.table()
    _adapts(tmp_path / "a", model, CFG5, (1, 3, 9, 8))


def test_a_model_with_cached_attention_biases_is_copied(tmp_path):
    """timm's LeViT/EfficientFormer cache bias tables after an eval forward (no graph leaves:
    deepcopy refuses them); the export copies the model without them and leaves it as it was."""
    from timm.models.efficientformer import Attention

    class _Attending(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64)
            self.attn, self.fc = Attention(64), nn.Linear(64, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.attn(self.norm(self.conv(x)).flatten(2).transpose(1, 2)).mean(1))

    torch.manual_seed(0)
    model = _Attending().eval()
    model(torch.randn(1, 3, 7, 7))  # fills the cache
    cached = dict(model.attn.attention_bias_cache)
    assert cached
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 7, 7), training=False)
    )
    assert info.portable_validation.passed, info.portable_validation.table()
    assert model.attn.attention_bias_cache.keys() == cached.keys()


class _AdaptivePool(nn.Module):
    """VGG's head at a small input: adaptive pooling to 7×7 from 4×4 (not a factor)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.pool, self.fc = nn.AdaptiveAvgPool2d((7, 7)), nn.Linear(4 * 49, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.norm(self.conv(x)))).flatten(1))


def test_the_torchscript_forward_graph_does_not_veto_the_portable_one(tmp_path):
    """TorchScript cannot export adaptive pooling to a size that does not divide the input;
    the portable graph can, and the inference model then comes from its forward graph."""
    import onnxruntime as ort

    torch.manual_seed(0)
    model = _AdaptivePool().eval()
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=CFG5, input_shape=(1, 3, 4, 4))
    )
    assert info.portable_validation.passed
    assert info.training_error.startswith("not asked for")
    x = torch.randn(1, 3, 4, 4)
    session = ort.InferenceSession(str(tmp_path / "a/inference_model.onnx"))
    (logits,) = session.run(None, {"input": x.numpy()})
    with torch.no_grad():
        assert np.abs(logits - model(x).numpy()).max() < 1e-5
    _adapts(tmp_path / "a", model, CFG5, (1, 3, 4, 4))
    with pytest.raises(UnsupportedModelError, match="adaptive_avg_pool2d"):
        export_realm_artifacts(
            model,
            tmp_path / "b",
            ExportOptions(config=CFG5, input_shape=(1, 3, 4, 4), training=True),
        )
