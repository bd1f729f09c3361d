"""Graphs for clients in other ORT bindings (the browser): the step's math as ONNX.

onnxruntime-web's training API has no gradient getter and its SGD has no momentum, so a web
client cannot do what the Python runtime does in numpy. Instead of re-writing SPEC §3 in
JavaScript, the export writes two more graphs that every ORT binding runs:

* ``web_training_model.onnx``: the training model plus the update. It takes the flat momentum
  buffer as an extra input and returns the new flat parameters (SGD with momentum, the two
  learning rates, α/λ projection) and momentum, both left unchanged unless the loss and every
  gradient are finite. The client writes the parameters back with ``loadParametersBuffer``.
* ``web_decide.onnx``: S_div and EATA's entropy cut from the pre-update logits, the sample's
  loss weight, and the EMA the step would commit.

The flat vectors follow ORT's contiguous-parameter order (the training graph's input order
of the trainable tensors), recorded in the manifest's ``web.layout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from realm_runtime._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig
from realm_runtime._manifest import ALPHA_NAME, LAMBDA_NAME, LOSS_NAME, TRAINING_MODEL

WEB_TRAINING_MODEL = "web_training_model.onnx"
WEB_DECIDE_MODEL = "web_decide.onnx"
MOMENTUM_INPUT = "realm.momentum"
NEW_PARAMS = "realm.new_params"
NEW_MOMENTUM = "realm.new_momentum"
STEP_OK = "realm.step_ok"
DECIDE_OPSET = 17


@dataclass(frozen=True)
class WebLayout:
    """Where each trainable tensor lies in ORT's contiguous parameter buffer."""

    names: list[str]  # trainable tensors in ORT's buffer order
    offsets: list[int]  # first element of each tensor in the flat buffer
    sizes: list[int]  # elements of each tensor
    total: int  # length of the flat buffer


def _gradient_names(graph: onnx.GraphProto) -> dict[str, str]:
    """Parameter name → its gradient tensor (the input of its gradient accumulator)."""
    suffix = "_grad.accumulation.buffer"
    grads = {}
    for node in graph.node:
        if node.op_type.startswith("InPlaceAccumulator") and node.input[0].endswith(suffix):
            grads[node.input[0][: -len(suffix)]] = node.input[1]
    return grads


def buffer_layout(training: onnx.ModelProto, trainable: Sequence[str]) -> WebLayout:
    """ORT's contiguous order of ``trainable``: the order of the training graph's inputs."""
    wanted = set(trainable)
    names, offsets, sizes, total = [], [], [], 0
    for value in training.graph.input:
        if value.name not in wanted:
            continue
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        size = int(np.prod(dims)) if dims else 1
        names.append(value.name)
        offsets.append(total)
        sizes.append(size)
        total += size
    missing = wanted - set(names)
    if missing:
        raise ValueError(f"trainable tensors not among the training graph inputs: {missing}")
    return WebLayout(names, offsets, sizes, total)


def add_update(
    training: onnx.ModelProto, layout: WebLayout, config: RealmConfig
) -> onnx.ModelProto:
    """A copy of ``training`` that also outputs the SGD-with-momentum update (SPEC §3).

    ``v ← μ·v + g``, ``θ ← θ − lr·v`` with ``lr_αλ`` for α, λ, then α into [α_min, α_max] and
    λ ≥ λ_min; the same float32 operations in the same order as the Python runtime's numpy.
    """
    model = onnx.ModelProto()
    model.CopyFrom(training)
    graph = model.graph
    grads = _gradient_names(graph)
    absent = [n for n in layout.names if n not in grads]
    if absent:
        raise ValueError(f"no gradient tensor found in the training graph for {absent}")
    nodes: list[onnx.NodeProto] = []

    def op(kind: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], name=f"realm.web.{output}", **attrs))
        return output

    lr = np.empty(layout.total, dtype=np.float32)
    lo = np.full(layout.total, -np.inf, dtype=np.float32)
    hi = np.full(layout.total, np.inf, dtype=np.float32)
    for name, start, size in zip(layout.names, layout.offsets, layout.sizes, strict=True):
        rate = config.lr_alpha_lambda if name in (ALPHA_NAME, LAMBDA_NAME) else config.lr
        lr[start : start + size] = np.float32(rate)
        if name == ALPHA_NAME:
            lo[start], hi[start] = np.float32(ALPHA_MIN), np.float32(ALPHA_MAX)
        elif name == LAMBDA_NAME:
            lo[start] = np.float32(LAMBDA_MIN)
    consts = {
        "realm.web.lr": lr,
        "realm.web.lo": lo,
        "realm.web.hi": hi,
        "realm.web.mu": np.array(config.momentum, dtype=np.float32),
        "realm.web.flat": np.array([-1], dtype=np.int64),
        "realm.web.zero": np.array(0.0, dtype=np.float32),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())

    flat_w = [op("Reshape", [n, "realm.web.flat"], f"realm.web.w.{n}") for n in layout.names]
    flat_g = [op("Reshape", [grads[n], "realm.web.flat"], f"realm.web.g.{n}") for n in layout.names]
    w = op("Concat", flat_w, "realm.web.w", axis=0)
    g = op("Concat", flat_g, "realm.web.g", axis=0)
    v = op("Add", [op("Mul", ["realm.web.mu", MOMENTUM_INPUT], "realm.web.mv"), g], "realm.web.v")
    stepped = op("Sub", [w, op("Mul", ["realm.web.lr", v], "realm.web.lrv")], "realm.web.w1")
    projected = op(
        "Max",
        [op("Min", [stepped, "realm.web.hi"], "realm.web.w2"), "realm.web.lo"],
        "realm.web.w3",
    )
    # Finite check: the loss and every gradient entry (what the Python runtime checks).
    all_g = op(
        "Concat",
        [g, op("Reshape", [LOSS_NAME, "realm.web.flat"], "realm.web.l")],
        "realm.web.gl",
        axis=0,
    )
    bad = op(
        "Or",
        [op("IsNaN", [all_g], "realm.web.nan"), op("IsInf", [all_g], "realm.web.inf")],
        "realm.web.bad",
    )
    worst = op(
        "ReduceMax",
        [op("Cast", [bad], "realm.web.badf", to=TensorProto.FLOAT)],
        "realm.web.worst",
        keepdims=0,
    )
    ok = op("Equal", [worst, "realm.web.zero"], STEP_OK)
    op("Where", [ok, projected, w], NEW_PARAMS)
    op("Where", [ok, v, MOMENTUM_INPUT], NEW_MOMENTUM)
    graph.node.extend(nodes)
    graph.input.append(
        helper.make_tensor_value_info(MOMENTUM_INPUT, TensorProto.FLOAT, [layout.total])
    )
    graph.output.extend(
        [
            helper.make_tensor_value_info(NEW_PARAMS, TensorProto.FLOAT, [layout.total]),
            helper.make_tensor_value_info(NEW_MOMENTUM, TensorProto.FLOAT, [layout.total]),
            helper.make_tensor_value_info(STEP_OK, TensorProto.BOOL, []),
        ]
    )
    return model


def decide_model(config: RealmConfig, ir_version: int) -> onnx.ModelProto:
    """SPEC §3 step 2 for one sample, from its pre-update logits (batch 1).

    Inputs ``logits`` (1, C), ``ema`` (C,), ``has_ema`` (bool); outputs ``probs``,
    ``entropy``, ``cosine``, ``keep`` (update this sample?), ``passed_entropy`` (EATA's cut;
    always true for the other methods), ``weight`` (its loss weight: 1, or EATA's
    ``exp(−(H − e0))``, 0 when not kept) and ``next_ema`` (the EMA to commit if the update
    happens). Non-finite logits are never kept.
    """
    c = config.num_classes
    nodes: list[onnx.NodeProto] = []

    def op(kind: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], name=output, **attrs))
        return output

    consts = {
        "axis1": np.array([1], dtype=np.int64),
        "eps": np.array(1e-8, dtype=np.float32),
        "beta": np.array(config.ema_beta, dtype=np.float32),
        "one_minus_beta": np.array(1 - config.ema_beta, dtype=np.float32),
        "one": np.array([1.0], dtype=np.float32),
        "zero": np.array([0.0], dtype=np.float32),
    }
    if config.uses_diversity:
        consts["margin"] = np.array(config.diversity_margin, dtype=np.float32)
    if config.method == "eata":
        consts["e0"] = np.array(config.e0, dtype=np.float32)
    # Softmax and entropy as the runtime's numpy computes them: from shifted logits.
    shifted = op(
        "Sub", ["logits", op("ReduceMax", ["logits"], "max", axes=[1], keepdims=1)], "shifted"
    )
    e = op("Exp", [shifted], "exp")
    total = op("ReduceSum", [e, "axis1"], "sum", keepdims=1)
    probs = op("Div", [e, total], "probs")
    log_p = op("Sub", [shifted, op("Log", [total], "log_sum")], "log_p")
    entropy = op(
        "Neg",
        [
            op(
                "ReduceSum",
                [op("Mul", [op("Exp", [log_p], "p_again"), log_p], "plogp"), "axis1"],
                "sum_plogp",
                keepdims=0,
            )
        ],
        "entropy",
    )
    # Cosine to the EMA, with torch's eps on the product of the norms. The dot product as
    # Mul + ReduceSum: onnxruntime-web's WebGPU MatMul refuses a 1-D operand ((1, C) @ (C,)).
    dot = op("ReduceSum", [op("Mul", [probs, "ema"], "p_times_m"), "axis1"], "dot", keepdims=0)
    norm_p = op(
        "Sqrt",
        [op("ReduceSum", [op("Mul", [probs, probs], "pp"), "axis1"], "sum_pp", keepdims=0)],
        "norm_p",
    )
    norm_m = op(
        "Sqrt", [op("ReduceSum", [op("Mul", ["ema", "ema"], "mm")], "sum_mm", keepdims=0)], "norm_m"
    )
    cosine = op(
        "Div", [dot, op("Max", [op("Mul", [norm_p, norm_m], "norms"), "eps"], "denom")], "cosine"
    )
    bad = op("Or", [op("IsNaN", ["logits"], "nan"), op("IsInf", ["logits"], "inf")], "bad")
    worst = op(
        "ReduceMax",
        [op("Cast", [bad], "badf", to=TensorProto.FLOAT)],
        "worst",
        axes=[1],
        keepdims=0,
    )
    keep = op("Equal", [worst, "zero"], "finite")
    if config.uses_diversity:
        diverse = op("Less", [op("Abs", [cosine], "abs_cos"), "margin"], "diverse")
        keep = op(
            "And",
            [keep, op("Or", [op("Not", ["has_ema"], "no_ema"), diverse], "div_ok")],
            "keep_div",
        )
    weight_if_kept = "one"
    if config.method == "eata":
        certain = op("Less", [entropy, "e0"], "certain")
        keep = op("And", [keep, certain], "keep_ent")
        weight_if_kept = op(
            "Exp", [op("Neg", [op("Sub", [entropy, "e0"], "h_minus_e0")], "neg_h")], "eata_w"
        )
    else:
        certain = op("Equal", ["one", "one"], "certain")  # no entropy cut: always true
    op("Identity", [certain], "passed_entropy")
    op("Identity", [keep], "keep")
    op("Where", ["keep", weight_if_kept, "zero"], "weight")
    moved = op(
        "Add",
        [op("Mul", ["beta", "ema"], "beta_ema"), op("Mul", ["one_minus_beta", probs], "new_part")],
        "moved",
    )
    op("Where", ["has_ema", moved, probs], "next_ema_2d")
    op(
        "Reshape",
        [
            "next_ema_2d",
            op(
                "Constant",
                [],
                "c_shape",
                value=numpy_helper.from_array(np.array([c], dtype=np.int64)),
            ),
        ],
        "next_ema",
    )
    graph = helper.make_graph(
        nodes,
        "realm_decide",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, c]),
            helper.make_tensor_value_info("ema", TensorProto.FLOAT, [c]),
            helper.make_tensor_value_info("has_ema", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, c]),
            helper.make_tensor_value_info("entropy", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("cosine", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, [1]),
            helper.make_tensor_value_info("passed_entropy", TensorProto.BOOL, [1]),
            helper.make_tensor_value_info("weight", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("next_ema", TensorProto.FLOAT, [c]),
        ],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DECIDE_OPSET)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def write_web_graphs(
    directory: Path, trainable: Sequence[str], config: RealmConfig
) -> dict[str, Any]:
    """Write both graphs beside the artifacts; return the manifest's ``web`` section."""
    training = onnx.load(str(directory / TRAINING_MODEL))
    layout = buffer_layout(training, trainable)
    onnx.save(add_update(training, layout, config), str(directory / WEB_TRAINING_MODEL))
    onnx.save(decide_model(config, training.ir_version), str(directory / WEB_DECIDE_MODEL))
    return {
        "training_model": WEB_TRAINING_MODEL,
        "decide_model": WEB_DECIDE_MODEL,
        "momentum_input": MOMENTUM_INPUT,
        "outputs": {"params": NEW_PARAMS, "momentum": NEW_MOMENTUM, "ok": STEP_OK},
        "layout": asdict(layout),
    }
