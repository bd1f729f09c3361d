"""REALM's loss on the TorchScript forward graph: the legacy training graph (SPEC §2)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from realm_runtime.contract import ALPHA_NAME, LAMBDA_NAME, LOSS_NAME, SAMPLE_WEIGHT_NAME
from realm_sdk import RealmConfig

from .._onnx_builder import GraphBuilder


def append_loss(proto: onnx.ModelProto, config: RealmConfig) -> onnx.ModelProto:
    """Add the per-sample loss of ``config.method`` and its weighted sum as output 0.

    ``realm.loss = Σ_i w_i · L(H_i)`` with ``H_i`` the entropy of ``softmax(logits_i)``
    (from LogSoftmax) and ``w = realm.sample_weight`` (B,), an input. The runtime sets
    ``w_i = S_i / Σ S`` for the S_div-selected samples (EATA: times its detached weight
    ``exp(−(H_i − e0))``), so the loss is SPEC §3's mean over the selected samples and one
    graph serves every schedule. ``L`` is ρ(H; α, λ) for REALM, with α and λ the trainable
    scalar initializers ``realm.alpha``/``realm.lambda`` and the power written as
    ``exp(α/2 · log b)`` (ORT's Pow passes no gradient to its exponent); H for Tent and EATA.

    Returns:
        A new model: outputs ``realm.loss`` (scalar), then ``logits``.
    """
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    b = GraphBuilder(const_prefix="realm.const.")
    realm = config.method == "realm"
    if realm:  # first, so that α and λ come before the loss's constants among the initializers
        b.initializer(ALPHA_NAME, config.alpha0)
        b.initializer(LAMBDA_NAME, config.lambda0)
    axis, one = b.const("axis1", [1], np.int64), b.const("one", 1.0)
    h = _entropy(b, graph.output[0].name, axis)
    # Tent, EATA: the entropy itself (EATA's sample weight arrives through w).
    per_sample = _rho(b, h, one, config) if realm else h
    weighted = b.op("Mul", [per_sample, SAMPLE_WEIGHT_NAME], "realm.weighted")
    b.op("ReduceSum", [weighted], LOSS_NAME, keepdims=0)
    b.append_to(graph)
    _loss_io(graph)
    onnx.checker.check_model(model)
    return model


def _entropy(b: GraphBuilder, logits: str, axis: str) -> str:
    """Nodes of ``H = −Σ_c p_c log p_c`` per sample, from LogSoftmax; returns H (B,)."""
    log_p = b.op("LogSoftmax", [logits], "realm.log_p", axis=1)  # (B, C)
    p = b.op("Exp", [log_p], "realm.p")
    p_log_p = b.op("Mul", [p, log_p], "realm.p_log_p")
    neg_h = b.op("ReduceSum", [p_log_p, axis], "realm.neg_h", keepdims=0)
    return b.op("Neg", [neg_h], "realm.entropy")


def _rho(b: GraphBuilder, h: str, one: str, config: RealmConfig) -> str:
    """Nodes of REALM's ``ρ(H; α, λ)`` (times λ with ``loss_scale="lambda"``); returns ρ (B,).

    ``ρ = |α−2|/α · ((H / (λ·|α−2|) + 1)^(α/2) − 1)``, the power written as
    ``exp(α/2 · log b)``: ORT's Pow passes no gradient to its exponent.
    """
    alpha_m2 = b.op("Sub", [ALPHA_NAME, b.const("two", 2.0)], "realm.alpha_m2")
    eps = b.op("Abs", [alpha_m2], "realm.eps")
    t = b.op("Div", [h, LAMBDA_NAME], "realm.t")
    t_over_eps = b.op("Div", [t, eps], "realm.t_over_eps")
    base = b.op("Add", [t_over_eps, one], "realm.base")  # ≥ 1
    half_alpha = b.op("Mul", [ALPHA_NAME, b.const("half", 0.5)], "realm.half_alpha")
    log_base = b.op("Log", [base], "realm.log_base")
    exponent = b.op("Mul", [half_alpha, log_base], "realm.exponent")
    power = b.op("Exp", [exponent], "realm.power")
    eps_over_alpha = b.op("Div", [eps, ALPHA_NAME], "realm.eps_over_alpha")
    power_m1 = b.op("Sub", [power, one], "realm.power_m1")
    rho = b.op("Mul", [eps_over_alpha, power_m1], "realm.rho")
    if config.loss_scale == "lambda":
        rho = b.op("Mul", [rho, LAMBDA_NAME], "realm.rho_scaled")
    return rho


def _loss_io(graph: onnx.GraphProto) -> None:
    """Add the input ``realm.sample_weight`` (B,) and put ``realm.loss`` before the outputs."""
    batch = graph.input[0].type.tensor_type.shape.dim[0]
    batch_dim = batch.dim_param or batch.dim_value
    graph.input.append(
        helper.make_tensor_value_info(SAMPLE_WEIGHT_NAME, TensorProto.FLOAT, [batch_dim])
    )
    outputs = list(graph.output)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(LOSS_NAME, TensorProto.FLOAT, []))
    graph.output.extend(outputs)
