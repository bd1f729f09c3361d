"""The per-sample decision as an ONNX graph, for clients in other ONNX Runtime bindings.

SPEC §3's step 2 (S_div against the EMA of past predictions, EATA's entropy cut and weight,
the EMA the step would commit) from one sample's pre-update logits. `RealmRuntime` does this
in numpy; the JavaScript clients (examples/web in a page, examples/node) run this graph
instead of re-writing the float32 math in JavaScript's float64, so that a decision near a
margin falls the same way on every client.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from realm_runtime._config import RealmConfig

DECIDE_MODEL = "decide_model.onnx"
DECIDE_OPSET = 17


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
