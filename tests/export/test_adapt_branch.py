"""The adapt graph's updating branch as ONNX Runtime runs it fastest and smallest.

Its weights are its own initializers (ONNX Runtime's blocked convolutions need that), and the
forward's cheap values are made again inside it rather than held while it runs; neither may
change a single output bit.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import adapt_graphs_side_by_side
from torch import nn

from realm_export import ExportOptions, export_realm_artifacts
from realm_export.portable import _adapt
from realm_runtime import RealmConfig

SHAPE = (1, 3, 48, 48)


class _Mobile(nn.Module):
    """Conv-BN-ReLU, a strided depthwise Conv-BN-hard-swish, a pointwise Conv-BN, a head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            nn.Conv2d(16, 24, 1, bias=False),
            nn.BatchNorm2d(24),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(24, 10),
        )
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    directory = tmp_path_factory.mktemp("branch") / "a"
    config = RealmConfig.preset("cifar", num_classes=10)
    export_realm_artifacts(_Mobile(), directory, ExportOptions(config=config, input_shape=SHAPE))
    return directory


def _step_branch(model: onnx.ModelProto) -> onnx.GraphProto:
    return next(
        a.g
        for n in model.graph.node
        for a in n.attribute
        if a.type == onnx.AttributeProto.GRAPH and a.g.name == "adapt_step"
    )


def _outer_reads(model: onnx.ModelProto) -> set[str]:
    """The main graph's node outputs the step branch reads."""
    produced = {o for n in model.graph.node for o in n.output}
    return {i for n in _step_branch(model).node for i in n.input} & produced


def test_the_branch_convolutions_take_the_blocked_kernels(artifacts, tmp_path):
    model = onnx.load(artifacts / "adapt_model.onnx", load_external_data=False)
    outer = {t.name for t in model.graph.initializer}
    weights = [n.input[1] for n in _step_branch(model).node if n.op_type == "Conv"]
    assert weights, "the backward has input-gradient convolutions"
    assert not [w for w in weights if w in outer], "outer-scope weights: no blocked kernels"
    # As ONNX Runtime optimises it: every convolution of the branch as the forward's are.
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(artifacts / "adapt_model.onnx"), options)
    optimized = onnx.load(tmp_path / "optimized.onnx", load_external_data=False)
    forward = {n.domain for n in optimized.graph.node if n.op_type == "Conv"}
    if forward != {"com.microsoft.nchwc"}:
        pytest.skip(f"this CPU's ONNX Runtime lays no convolution out blocked: {forward}")
    branch = {n.domain for n in _step_branch(optimized).node if n.op_type == "Conv"}
    assert branch == {"com.microsoft.nchwc"}


def test_recomputing_holds_less_and_changes_no_bit(artifacts, monkeypatch):
    manifest = json.loads((artifacts / "realm.json").read_text())
    step = onnx.load(artifacts / "step_model.onnx", load_external_data=False)
    source = np.load(artifacts / "source_params.npy")
    config = RealmConfig.from_dict(manifest["config"])
    again = _adapt.adapt_model(step, config, source)
    monkeypatch.setattr(_adapt, "recompute_in_branches", lambda model: None)
    held = _adapt.adapt_model(step, config, source)

    # The ReLUs' outputs and the BatchNorms' (hard-swish's input) are no longer held; the
    # convolutions' outputs, which the BatchNorms' gradients read, still are.
    produced = {o: n.op_type for n in held.graph.node for o in n.output}
    dropped = _outer_reads(held) - _outer_reads(again)
    assert {produced[v] for v in dropped} >= {"Relu", "Add"}
    assert "Conv" in {produced[v] for v in _outer_reads(again)}

    xs = np.random.default_rng(0).standard_normal((6, *SHAPE)).astype(np.float32)
    steps = adapt_graphs_side_by_side(artifacts, {"again": again, "held": held}, xs)
    for outs in steps:
        for name in outs[0]:
            np.testing.assert_array_equal(outs[0][name], outs[1][name], err_msg=name)
    updates = sum(bool(outs[0][manifest["adapt"]["updated"]]) for outs in steps)
    assert updates == len(xs), "the comparison must cover updating steps"
