"""REALM's loss on the TorchScript forward graph: the legacy training graph (SPEC §2)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from realm_runtime.contract import ALPHA_NAME, LAMBDA_NAME, LOSS_NAME, SAMPLE_WEIGHT_NAME
from realm_runtime.methods.realm import alpha_lambda_start
from realm_sdk import RealmConfig

from .._onnx_builder import GraphBuilder
from .._onnx_entropy import entropy_nodes
from ..methods import ONNX_LOSSES


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
    realm = config.rules.learns_alpha_lambda
    if realm:  # first, so that α and λ come before the loss's constants among the initializers
        alpha0, lambda0 = alpha_lambda_start(config)
        b.initializer(ALPHA_NAME, alpha0)
        b.initializer(LAMBDA_NAME, lambda0)
    axis, one = b.const("axis1", [1], np.int64), b.const("one", 1.0)
    h = entropy_nodes(b, graph.output[0].name, axis, prefix="realm.").entropy
    # Without an ONNX form, L is the entropy itself (EATA's weight arrives through w).
    nodes = ONNX_LOSSES.get(config.method)
    per_sample = nodes(b, h, one, config) if nodes is not None else h
    weighted = b.op("Mul", [per_sample, SAMPLE_WEIGHT_NAME], "realm.weighted")
    b.op("ReduceSum", [weighted], LOSS_NAME, keepdims=0)
    b.append_to(graph)
    _loss_io(graph)
    onnx.checker.check_model(model)
    return model


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
