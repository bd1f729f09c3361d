"""Batch-1 matrix–vector products read one copy of their weight in both directions.

A squeeze-excite's 1×1 convolutions and the linear head multiply a matrix by a vector at
batch 1; in the adapt graph the forward and the updating branch's input gradient both read
the weight as ``Gemm``'s A operand, which ONNX Runtime keeps as the export stores it, rather
than each a layout of its own. A 1×1 convolution on a larger map is a matrix product, and
stays a convolution.
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

SHAPE = (1, 3, 16, 16)
CLASSES = 64  # the head's matrix large enough for the shared weights file
CHANNELS, SQUEEZE = 32, 40  # so are the squeeze-excite's 1×1 kernels


class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, SQUEEZE, 1)
        self.expand = nn.Conv2d(SQUEEZE, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


class _Net(nn.Module):
    """Conv-BN-ReLU, a squeeze-excite, a pointwise Conv-BN on an 8×8 map, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(
            nn.Conv2d(3, CHANNELS, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(CHANNELS),
            nn.ReLU(),
        )
        self.se = _SqueezeExcite(CHANNELS)
        self.pointwise = nn.Sequential(nn.Conv2d(CHANNELS, 20, 1, bias=False), nn.BatchNorm2d(20))
        self.head = nn.Linear(20, CLASSES)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pointwise(self.se(self.stem(x)))
        return self.head(x.mean((2, 3)))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    directory = tmp_path_factory.mktemp("matvec") / "a"
    config = RealmConfig.preset("cifar", num_classes=CLASSES)
    export_realm_artifacts(_Net(), directory, ExportOptions(config=config, input_shape=SHAPE))
    return directory


def _weights(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {t.name: list(t.dims) for t in model.graph.initializer}


def _readers(model: onnx.ModelProto, name: str) -> list[tuple[str, str, int]]:
    """(where, operator, input index) of each node that reads ``name``; where: top or branch."""
    out = []

    def walk(graph: onnx.GraphProto, where: str) -> None:
        for node in graph.node:
            out.extend((where, node.op_type, k) for k, i in enumerate(node.input) if i == name)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g, "branch")

    walk(model.graph, "top")
    return out


def test_each_matvec_weight_is_the_a_operand_in_both_directions(artifacts):
    model = onnx.load(artifacts / "adapt_model.onnx", load_external_data=False)
    dims = _weights(model)
    # The squeeze-excite's two kernels and the head's matrix.
    matvec = {
        n: d for n, d in dims.items() if sorted(d) in (sorted([SQUEEZE, CHANNELS]), [20, CLASSES])
    }
    assert len(matvec) == 3, dims
    for name in matvec:
        assert sorted(_readers(model, name)) == [("branch", "Gemm", 0), ("top", "Gemm", 0)]
    # Each new node keeps the part of the step and the op it computes (the profile's groups).
    parts = {
        {p.key: p.value for p in n.metadata_props}.get("realm.part")
        for g in (model.graph, *(a.g for n in model.graph.node for a in n.attribute if a.g.node))
        for n in g.node
        if n.name.startswith("adapt.matvec.")
    }
    assert parts == {"forward", "backward"}
    # The pointwise convolution on the 8×8 map is a matrix product: it stays a convolution.
    pointwise = next(n for n, d in dims.items() if d == [20, CHANNELS, 1, 1])
    assert ("top", "Conv", 1) in _readers(model, pointwise)


def test_onnx_runtime_holds_each_matvec_weight_once(artifacts, tmp_path):
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(artifacts / "adapt_model.onnx"), options)
    optimized = onnx.load(tmp_path / "optimized.onnx", load_external_data=False)
    sizes = []

    def walk(graph: onnx.GraphProto) -> None:
        sizes.extend(sorted(t.dims) for t in graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(optimized.graph)
    # No layout of ONNX Runtime's own beside the stored matrix: one tensor of each.
    assert sizes.count(sorted([SQUEEZE, CHANNELS])) == 2, "the reduce and the expand kernel"
    assert sizes.count([20, CLASSES]) == 1, "the head's matrix, once"


def test_the_rewrite_keeps_every_output_within_float_rounding(artifacts, monkeypatch):
    manifest = json.loads((artifacts / "realm.json").read_text())
    step = onnx.load(artifacts / "step_model.onnx", load_external_data=False)
    source = np.load(artifacts / "source_params.npy")
    config = RealmConfig.from_dict(manifest["config"])
    rewritten = _adapt.adapt_model(step, config, source, artifacts)
    monkeypatch.setattr(_adapt, "one_weight_for_matvecs", lambda model, directory: 0)
    plain = _adapt.adapt_model(step, config, source, artifacts)
    assert sum(n.op_type == "Conv" for n in plain.graph.node) > sum(
        n.op_type == "Conv" for n in rewritten.graph.node
    )

    xs = np.random.default_rng(0).standard_normal((6, *SHAPE)).astype(np.float32)
    steps = adapt_graphs_side_by_side(artifacts, {"rewritten": rewritten, "plain": plain}, xs)
    for outs in steps:
        for name, value in outs[0].items():
            other = outs[1][name]
            if value.dtype.kind == "f":
                scale = max(float(np.abs(other).max(initial=0.0)), 1e-30)
                assert float(np.abs(value - other).max(initial=0.0)) <= 1e-5 * scale, name
            else:
                np.testing.assert_array_equal(value, other, err_msg=name)
    updates = sum(bool(outs[0][manifest["adapt"]["updated"]]) for outs in steps)
    assert updates == len(xs), "the comparison must cover updating steps"


def test_lean_sessions_read_a_kernel_as_a_matrix_from_the_one_buffer(artifacts):
    """Lean sessions take every weight from one buffer; the adapt graph may read a tensor
    the step graph reads too in another shape (a 1×1 kernel as a matrix): each its own."""
    from realm_runtime import RealmRuntime

    xs = np.random.default_rng(1).standard_normal((4, *SHAPE)).astype(np.float32)
    runs = []
    for config in (None, {"session.disable_prepacking": "1"}):
        runtime = RealmRuntime(artifacts, session_config=config)
        runs.append([runtime.adapt(x).logits for x in xs])
    for plain, lean in zip(*runs, strict=True):
        np.testing.assert_allclose(lean, plain, rtol=1e-5, atol=1e-6)
