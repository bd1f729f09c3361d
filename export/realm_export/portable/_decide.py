"""The per-sample decision as ONNX nodes, which the adapt graph inlines.

SPEC §3's step 2 (S_div against the EMA of past predictions, EATA's entropy cut and weight,
the EMA the step would commit) from one sample's pre-update logits, in float32 inside the
graph, so that a decision near a margin falls the same way on every client that runs it.
The host-step backends take the same decision in numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from realm_runtime import RealmConfig

from .._onnx_builder import GraphBuilder
from .._onnx_entropy import entropy_nodes

DECIDE_OPSET = 18  # the portable graphs' opset: the adapt graph inlines this one


def decision_model(config: RealmConfig, ir_version: int) -> onnx.ModelProto:
    """SPEC §3 step 2 for one sample, from its pre-update logits (batch 1), checked whole.

    Inputs ``logits`` (1, C), ``ema`` (C,), ``has_ema`` (bool); outputs ``probs``,
    ``entropy``, ``cosine``, ``keep`` (update this sample?), ``passed_entropy`` (EATA's and
    SAR's cut; always true for the other methods), ``weight`` (its loss weight: 1, or EATA's
    ``exp(−(H − e0))``, 0 when not kept) and ``next_ema`` (the EMA to commit if the update
    happens). Non-finite logits are never kept.
    """
    b = GraphBuilder()
    _constants(b, config)
    # As the runtime's numpy computes them: from the shifted logits.
    nodes = entropy_nodes(b, "logits", "axis1", shifted=True)
    probs, entropy = nodes.probs, nodes.entropy
    assert probs is not None  # the shifted form writes the softmax
    cosine = _cosine_to_ema(b, probs)
    keep = _finite(b)
    if config.rules.diversity:
        keep = _diversity_gate(b, keep, cosine)
    keep, certain, weight_if_kept = _entropy_cut(b, config, keep, entropy)
    b.op("Identity", [certain], "passed_entropy")
    b.op("Identity", [keep], "keep")
    b.op("Where", ["keep", weight_if_kept, "zero"], "weight")
    _next_ema(b, probs, config.num_classes)
    inputs, outputs = _signature(config.num_classes)
    model = helper.make_model(
        b.make_graph("realm_decide", inputs, outputs),
        opset_imports=[helper.make_opsetid("", DECIDE_OPSET)],
    )
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def _constants(b: GraphBuilder, config: RealmConfig) -> None:
    """The initializers the steps below read by name."""
    b.const("axis1", [1], np.int64)
    b.const("eps", 1e-8)
    b.const("beta", config.ema_beta)
    b.const("one_minus_beta", 1 - config.ema_beta)
    b.const("one", [1.0])
    b.const("zero", [0.0])
    if config.rules.diversity:
        b.const("margin", config.diversity_margin)
    if config.rules.entropy_cut:
        b.const("e0", config.e0)


def _cosine_to_ema(b: GraphBuilder, probs: str) -> str:
    """``cosine`` (1,) of ``probs`` and ``ema``, with torch's eps on the product of the norms.

    The dot product as Mul + ReduceSum: onnxruntime-web's WebGPU MatMul refuses a 1-D
    operand ((1, C) @ (C,)).
    """
    p_times_m = b.op("Mul", [probs, "ema"], "p_times_m")
    dot = b.op("ReduceSum", [p_times_m, "axis1"], "dot", keepdims=0)
    pp = b.op("Mul", [probs, probs], "pp")
    sum_pp = b.op("ReduceSum", [pp, "axis1"], "sum_pp", keepdims=0)
    norm_p = b.op("Sqrt", [sum_pp], "norm_p")
    mm = b.op("Mul", ["ema", "ema"], "mm")
    sum_mm = b.op("ReduceSum", [mm], "sum_mm", keepdims=0)
    norm_m = b.op("Sqrt", [sum_mm], "norm_m")
    norms = b.op("Mul", [norm_p, norm_m], "norms")
    denom = b.op("Max", [norms, "eps"], "denom")
    return b.op("Div", [dot, denom], "cosine")


def _finite(b: GraphBuilder) -> str:
    """Whether every logit is finite, (1,) bool: the first condition of ``keep``."""
    nan = b.op("IsNaN", ["logits"], "nan")
    inf = b.op("IsInf", ["logits"], "inf")
    bad = b.op("Or", [nan, inf], "bad")
    badf = b.op("Cast", [bad], "badf", to=TensorProto.FLOAT)
    worst = b.op("ReduceMax", [badf, "axis1"], "worst", keepdims=0)
    return b.op("Equal", [worst, "zero"], "finite")


def _diversity_gate(b: GraphBuilder, keep: str, cosine: str) -> str:
    """``keep`` and S_div: no EMA yet, or ``|cosine|`` under the margin."""
    abs_cos = b.op("Abs", [cosine], "abs_cos")
    diverse = b.op("Less", [abs_cos, "margin"], "diverse")
    no_ema = b.op("Not", ["has_ema"], "no_ema")
    div_ok = b.op("Or", [no_ema, diverse], "div_ok")
    return b.op("And", [keep, div_ok], "keep_div")


def _entropy_cut(
    b: GraphBuilder, config: RealmConfig, keep: str, entropy: str
) -> tuple[str, str, str]:
    """The cut ``H < e0`` (EATA, SAR) and EATA's weight ``exp(−(H − e0))``; else weight 1.

    Returns:
        ``keep`` with the cut, whether the cut passed, the weight of a kept sample.
    """
    if not config.rules.entropy_cut:
        certain = b.op("Equal", ["one", "one"], "certain")  # no entropy cut: always true
        return keep, certain, "one"
    certain = b.op("Less", [entropy, "e0"], "certain")
    keep = b.op("And", [keep, certain], "keep_ent")
    if not config.rules.entropy_weight:
        return keep, certain, "one"
    h_minus_e0 = b.op("Sub", [entropy, "e0"], "h_minus_e0")
    neg_h = b.op("Neg", [h_minus_e0], "neg_h")
    return keep, certain, b.op("Exp", [neg_h], "eata_w")


def _next_ema(b: GraphBuilder, probs: str, c: int) -> str:
    """``next_ema`` (C,): ``β·ema + (1−β)·probs``, or ``probs`` where there is no EMA yet."""
    beta_ema = b.op("Mul", ["beta", "ema"], "beta_ema")
    new_part = b.op("Mul", ["one_minus_beta", probs], "new_part")
    moved = b.op("Add", [beta_ema, new_part], "moved")
    next_2d = b.op("Where", ["has_ema", moved, probs], "next_ema_2d")
    shape = b.constant("c_shape", [c])
    return b.op("Reshape", [next_2d, shape], "next_ema")


def _signature(c: int) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """The graph's inputs and outputs, for ``c`` classes."""
    inputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, c]),
        helper.make_tensor_value_info("ema", TensorProto.FLOAT, [c]),
        helper.make_tensor_value_info("has_ema", TensorProto.BOOL, []),
    ]
    outputs = [
        helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, c]),
        helper.make_tensor_value_info("entropy", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("cosine", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("keep", TensorProto.BOOL, [1]),
        helper.make_tensor_value_info("passed_entropy", TensorProto.BOOL, [1]),
        helper.make_tensor_value_info("weight", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("next_ema", TensorProto.FLOAT, [c]),
    ]
    return inputs, outputs
