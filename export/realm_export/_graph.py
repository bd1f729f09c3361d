"""ONNX graph building: the model's forward (torch → ONNX) and REALM's loss on top (SPEC §2)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from torch import nn

from realm_runtime.contract import ALPHA_NAME, LAMBDA_NAME, LOSS_NAME, SAMPLE_WEIGHT_NAME
from realm_sdk import RealmConfig

from ._onnx_builder import GraphBuilder
from ._rewrite import UnsupportedModelError, export_friendly_norms

OPSET = 17  # ≤ 21 (ORT 1.19.2); 17 is the first with LayerNormalization
MAX_IR_VERSION = 10  # ORT 1.19.2 refuses newer IR versions
MAX_OPSET = 21
INPUT_NAME = "input"
LOGITS_NAME = "logits"


def model_to_onnx(
    model: nn.Module, example: torch.Tensor, *, dynamic_batch: bool
) -> tuple[onnx.ModelProto, list[str]]:
    """Export the forward pass with every parameter kept as a named initializer.

    The TorchScript exporter with constant folding off and initializers kept as inputs is the
    recipe that keeps every parameter name (the default flags fold away or de-duplicate
    equal-valued norm parameters, e.g. freshly initialised ones; the dynamo exporter folds or
    emits CastLike, which has no gradient). The initializers are then dropped from the graph
    inputs so they are weights, not feeds.

    Args:
        model: the classifier, in eval mode.
        example: an input of the export shape.
        dynamic_batch: make the batch axis symbolic.

    Returns:
        The forward graph (input ``input``, output ``logits``), and the places where the
        tracer turned a tensor into a Python bool: data-dependent control flow, frozen into
        the branch that the example input took (reported if validation then fails).
    """
    buffer = io.BytesIO()
    axes = {INPUT_NAME: {0: "batch"}, LOGITS_NAME: {0: "batch"}} if dynamic_batch else None
    with export_friendly_norms(), torch.no_grad(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # recorded, not shown: the exporter is noisy
        try:
            torch.onnx.export(
                model,
                (example,),
                buffer,
                dynamo=False,
                opset_version=OPSET,
                do_constant_folding=False,
                keep_initializers_as_inputs=True,
                training=torch.onnx.TrainingMode.EVAL,
                input_names=[INPUT_NAME],
                output_names=[LOGITS_NAME],
                dynamic_axes=axes,
            )
        except UnsupportedModelError:
            raise
        except Exception as exc:  # the exporter's first sentence names the op; keep that
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            first = first.split(". ")[0].rstrip(".")[:300]
            raise UnsupportedModelError(
                f"torch.onnx.export (TorchScript, opset {OPSET}) failed on "
                f"{type(model).__name__}: {first}. Replace that layer, or export a model "
                "without data-dependent control flow"
            ) from exc
    branches = sorted(
        {
            f"{w.filename}:{w.lineno}"
            for w in seen
            if issubclass(w.category, torch.jit.TracerWarning)
            and "Python boolean" in str(w.message)
        }
    )
    proto = onnx.load_from_string(buffer.getvalue())
    initializers = {init.name for init in proto.graph.initializer}
    feeds = [i for i in proto.graph.input if i.name not in initializers]
    del proto.graph.input[:]
    proto.graph.input.extend(feeds)
    declare_layer_norm_outputs(proto)
    return proto, branches


def declare_layer_norm_outputs(proto: onnx.ModelProto) -> int:
    """Give every ``LayerNormalization`` node its Mean and InvStdDev outputs.

    onnxruntime-training builds the LayerNormalization gradient only when the node declares
    all three outputs; the exporter declares just Y.

    Returns:
        How many nodes were changed.
    """
    changed = 0
    for index, node in enumerate(proto.graph.node):
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            base = node.name or f"layernorm_{index}"
            node.output.extend([f"{base}.mean", f"{base}.inv_std_dev"])
            changed += 1
    return changed


def check_versions(proto: onnx.ModelProto) -> dict[str, int]:
    """IR version and ai.onnx opset, checked against what ORT 1.19.2 loads.

    Raises:
        UnsupportedModelError: an IR version above 10 or an opset above 21.
    """
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if proto.ir_version > MAX_IR_VERSION or opset > MAX_OPSET:
        raise UnsupportedModelError(
            f"the graph has IR version {proto.ir_version} and opset {opset}; onnxruntime-training "
            f"1.19.2 loads IR ≤ {MAX_IR_VERSION} and opset ≤ {MAX_OPSET} (is onnx newer than "
            "1.17.0 installed?)"
        )
    return {"ir_version": int(proto.ir_version), "opset": int(opset)}


def check_trainable_names(proto: onnx.ModelProto, names: Sequence[str]) -> None:
    """Every trainable parameter must be an initializer of the graph, under its torch name.

    Raises:
        UnsupportedModelError: listing the names that vanished (folded, de-duplicated or not
            used by the forward pass).
    """
    present = {init.name for init in proto.graph.initializer}
    missing = [n for n in names if n not in present]
    if missing:
        raise UnsupportedModelError(
            f"{len(missing)} of {len(names)} trainable parameters are not initializers of the "
            f"exported graph (unused by forward(), or folded/renamed by the exporter): "
            f"{missing[:8]}{' …' if len(missing) > 8 else ''}"
        )


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
