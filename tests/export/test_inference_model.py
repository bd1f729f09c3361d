"""``inference_model.onnx``: the model's own forward (its BatchNorm for ONNX Runtime to fold),
checked against torch at batch 1 and 2 before it is written; where it disagrees, the portable
forward bound to the source parameters stands in, and the manifest says which and why."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import load_manifest
from realm_sdk import RealmConfig

CFG = RealmConfig.preset("cifar", num_classes=5)
SHAPE = (1, 3, 8, 8)


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = _ConvBn()
    with torch.no_grad():  # running statistics of a trained net, not the identity
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _logits(path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path)).run(None, {"input": x})[0]


def test_the_inference_graph_keeps_the_model_s_batch_norm_and_any_batch(tmp_path):
    model = _model()
    export_realm_artifacts(model, tmp_path / "a", ExportOptions(config=CFG, input_shape=SHAPE))
    path = tmp_path / "a/inference_model.onnx"
    graph = onnx.load(str(path), load_external_data=False).graph
    batch_norms = [n for n in graph.node if n.op_type == "BatchNormalization"]
    assert len(batch_norms) == 1  # ONNX Runtime folds it into the convolution when it loads
    assert all(a.i == 0 for n in batch_norms for a in n.attribute if a.name == "training_mode")
    section = load_manifest(tmp_path / "a").inference
    assert section["graph"] == "torchscript"
    figures = section["validation"]
    assert figures["passed"] and figures["batch_sizes"] == [1, 2]
    assert figures["logits_max_abs_diff"] <= figures["logits_tolerance"]
    x = np.random.default_rng(1).standard_normal((3, *SHAPE[1:])).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_logits(path, x), expected, atol=1e-5)


class _OnnxSaysOtherwise(torch.autograd.Function):
    """The identity in torch; its ONNX form (what the TorchScript exporter writes) adds 0.5."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad

    @staticmethod
    def symbolic(g, x):
        return g.op("Add", x, g.op("Constant", value_t=torch.tensor(0.5)))


class _Misexported(_ConvBn):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _OnnxSaysOtherwise.apply(super().forward(x))


def test_a_torchscript_graph_that_disagrees_gives_way_to_the_portable_forward(tmp_path):
    torch.manual_seed(0)
    model = _Misexported().eval()
    export_realm_artifacts(model, tmp_path / "a", ExportOptions(config=CFG, input_shape=SHAPE))
    section = load_manifest(tmp_path / "a").inference
    assert section["graph"] == "portable forward"
    assert "disagrees with the PyTorch reference" in section["reason"]
    assert section["validation"]["logits_max_abs_diff"] == pytest.approx(0.5, abs=1e-4)
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_logits(tmp_path / "a/inference_model.onnx", x), expected, atol=1e-5)


def test_without_validation_the_inference_graph_is_written_unchecked(tmp_path):
    options = ExportOptions(config=CFG, input_shape=SHAPE, validate=False)
    export_realm_artifacts(_model(), tmp_path / "a", options)
    section = load_manifest(tmp_path / "a").inference
    assert section == {"graph": "torchscript"}
