"""The step's ONNX export: the lean translation against torch.onnx's public path, and the
forward cut out of the step graph against the step's own logits."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import timm
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from realm_export import UnsupportedModelError
from realm_export.portable import (
    build_portable_graphs,
    check_written,
    forward_of,
    functionalize_in_place,
    to_onnx,
)
from realm_runtime.contract import INPUT_NAME, LOGITS_NAME, PARAMS_NAME
from realm_sdk import RealmAdapter, RealmConfig


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_in_place_ops_become_functional_and_compute_the_same():
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x * 2
        h.relu_()
        h.add_(y)  # a later reader of h must read the sum
        return h * y + h

    args = (torch.randn(3, 4), torch.randn(3, 4))
    gm = make_fx(f)(*args)
    before = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.relu_.default" in before and "aten.add_.Tensor" in before
    assert functionalize_in_place(gm)
    after = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert not any(t._schema.is_mutable for t in after)
    torch.testing.assert_close(gm(*args), f(*args), rtol=0, atol=0)


def test_a_mutation_through_a_view_is_left_to_the_exporter():
    def f(x: torch.Tensor) -> torch.Tensor:
        h = x * 2
        h[:, :2].relu_()  # writes into h through a view: not a local rewrite
        return h

    gm = make_fx(f)(torch.randn(3, 4))
    assert not functionalize_in_place(gm)


@pytest.mark.parametrize(
    "name",
    [
        "resnet18",
        # the public path's second decomposition is the slow side: a minute each
        pytest.param("mobilevit_xxs", marks=pytest.mark.slow),
        pytest.param("vit_tiny_patch16_224", marks=pytest.mark.slow),
    ],
    ids=["bn", "mobilevit", "vit"],
)
def test_lean_and_public_exports_write_the_same_step(name, monkeypatch):
    torch.manual_seed(0)
    size = 32 if name.startswith("vit") else 64  # small inputs: the graphs, not the sizes
    kwargs = {"img_size": size} if name.startswith("vit") else {}
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).eval()
    config = RealmConfig.preset("imagenet", num_classes=10)
    names = RealmAdapter(model, config).trainable_names
    for p in model.parameters():
        p.requires_grad_(False)
    example = torch.randn(1, 3, size, size)
    public = build_portable_graphs(model, config, names, example, lean=False)

    def no_capture(*args, **kwargs):
        raise AssertionError("the lean path captured the traced graph again with torch.export")

    # The traced graph already is the program torch.export would capture: no second capture.
    monkeypatch.setattr(torch.export, "export", no_capture)
    lean = build_portable_graphs(model, config, names, example, lean=True)
    # The same computation: the lean graph may keep an op the exporter's decomposition
    # spells out (a resize as gathers), so the node counts differ a little, not the numbers.
    sizes = len(lean.step.graph.node), len(public.step.graph.node)
    assert abs(sizes[0] - sizes[1]) <= 0.1 * sizes[1], sizes
    feeds = _step_feeds(lean, example)
    for a, b in zip(_run(lean.step, feeds), _run(public.step, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _step_feeds(graphs, example: torch.Tensor) -> dict[str, np.ndarray]:
    feeds = {}
    for value in graphs.step.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name == INPUT_NAME:
            feeds[value.name] = example.numpy()
        elif value.name == PARAMS_NAME:
            feeds[value.name] = graphs.source
        elif value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            feeds[value.name] = np.full(dims, 0.5, np.float32)
    return feeds


def test_the_forward_cut_from_the_step_gives_the_steps_logits():
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).eval()
    config = RealmConfig.preset("cifar", num_classes=10)
    names = RealmAdapter(model, config).trainable_names
    for p in model.parameters():
        p.requires_grad_(False)
    example = torch.randn(1, 1, 32, 32)
    graphs = build_portable_graphs(model, config, names, example)
    assert [i.name for i in graphs.forward.graph.input] == [INPUT_NAME, PARAMS_NAME]
    assert len(graphs.forward.graph.node) < len(graphs.step.graph.node) / 2
    feeds = _step_feeds(graphs, example)
    step_out = dict(
        zip([o.name for o in graphs.step.graph.output], _run(graphs.step, feeds), strict=True)
    )
    (logits,) = _run(graphs.forward, {INPUT_NAME: feeds[INPUT_NAME], PARAMS_NAME: graphs.source})
    np.testing.assert_array_equal(logits, step_out[LOGITS_NAME])
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(example).numpy(), rtol=1e-4, atol=1e-5)


def test_a_forward_that_needs_another_step_input_is_refused():
    x = onnx.helper.make_tensor_value_info(INPUT_NAME, onnx.TensorProto.FLOAT, [1, 2])
    p = onnx.helper.make_tensor_value_info(PARAMS_NAME, onnx.TensorProto.FLOAT, [2])
    lr = onnx.helper.make_tensor_value_info("realm.lr", onnx.TensorProto.FLOAT, [])
    out = onnx.helper.make_tensor_value_info(LOGITS_NAME, onnx.TensorProto.FLOAT, [1, 2])
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Mul", [INPUT_NAME, PARAMS_NAME], ["h"]),
            onnx.helper.make_node("Mul", ["h", "realm.lr"], [LOGITS_NAME]),
        ],
        "step",
        [x, p, lr],
        [out],
    )
    step = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedModelError, match=r"depend on its inputs \['realm.lr'\]"):
        forward_of(step)


def test_the_lean_export_names_inputs_and_outputs():
    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).sum(dim=1)

    args = [torch.randn(2, 3)]
    gm = make_fx(Net())(*args)
    proto = to_onnx(gm, args, ["features"], ["total"])
    assert [i.name for i in proto.graph.input] == ["features"]
    assert [o.name for o in proto.graph.output] == ["total"]
    (got,) = _run(proto, {"features": args[0].numpy()})
    np.testing.assert_allclose(got, torch.relu(args[0]).sum(dim=1).numpy(), rtol=1e-6)


def test_a_written_graph_the_checker_refuses_is_named_with_the_reason(tmp_path):
    add = onnx.helper.make_node("Add", ["a", "missing"], ["y"])  # reads a value nobody makes
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [add],
        "g",
        [value("a", onnx.TensorProto.FLOAT, [1])],
        [value("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    model.ir_version = 8
    path = tmp_path / "step_model.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedModelError, match=r"step_model\.onnx fails the ONNX checker"):
        check_written(path)
    fine = tmp_path / "fine.onnx"
    model.graph.node[0].input[1] = "a"
    onnx.save(model, str(fine))
    check_written(fine)  # raises nothing


def test_only_a_method_that_draws_takes_the_samples_index():
    from realm_runtime.contract import SAMPLE_INDEX_NAME
    from realm_runtime.methods import EXPORTED, method_named

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.GroupNorm(2, 4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).eval()
    example = torch.randn(1, 1, 8, 8)
    drawing = set()
    for name in EXPORTED:
        config = RealmConfig.preset("cifar", num_classes=10).with_overrides(method=name)
        adapter = RealmAdapter(model, config, clean_images=torch.randn(4, 1, 8, 8))
        fisher = adapter.fisher or None  # EATA's regulariser, from those clean images
        graphs = build_portable_graphs(
            model, config, adapter.trainable_names, example, fisher=fisher
        )
        if SAMPLE_INDEX_NAME in {i.name for i in graphs.step.graph.input}:
            drawing.add(name)
    assert drawing == {n for n in EXPORTED if method_named(n).draws} == {"deyo"}
