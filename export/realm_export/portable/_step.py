"""The portable step graph: one REALM step in standard ai.onnx ops, for any ONNX Runtime.

Two graphs: the step traced from torch (:mod:`._trace`) and written by torch.onnx's
translator (:mod:`._to_onnx`; opset 18, IR ≤ 10), and the forward cut out of it:

``step_model.onnx`` — the whole update of SPEC §3 in one call::

    inputs:  input (1, …), realm.sample_weight (1,), realm.lr, realm.lr_alpha_lambda,
             realm.lr_batch_norm, realm.momentum,
             realm.entropy_margin (scalars), realm.params (P,), realm.velocity (P,)
    outputs: realm.loss (scalar), logits (1, C), realm.finite (bool scalar),
             realm.new_params (P,), realm.new_velocity (P,)

  ``realm.params`` holds every trainable tensor flattened, in the manifest's order (norm
  parameters, then realm.alpha and realm.lambda), ``realm.velocity`` their momentum buffers.
  ``v' = μ·v + g``, ``w' = w − lr·v'`` (``lr_batch_norm`` for BatchNorm's θ where it is
  above 0, ``lr_alpha_lambda`` for α, λ, which are then projected into their bounds), the
  loss being ``Σ w_i L_i`` as in the training graph; EATA's detached weight
  ``exp(−(H − e0))`` is computed inside the graph. Nothing is committed by the graph: the
  runtime adopts the new vectors only when S_div and ``realm.finite`` allow, which costs no
  copy (it swaps two references), also on a GPU.
  One flat vector keeps the update, the projection and the finiteness test at a handful of
  nodes instead of four per tensor. With ``μ = 0`` and a zero buffer,
  ``realm.new_velocity`` *is* the gradient: that is how validation reads the gradients.
  SAR's graph also takes ``realm.sam_rho`` and returns ``realm.kept``: its loss is the
  entropy at θ + ρ·g/‖g‖ of the samples that pass the cut ``H < e0`` there too. DeYO's
  takes ``realm.plpd_threshold`` and returns ``realm.kept``: its loss weighs the samples
  whose PLPD under the patch shuffle passes the threshold, and ``realm.sample_index`` (int64:
  the samples before this one), from which it draws the sample's patch order.
  ``realm.kept`` counts the samples the step kept (none: the runtime skips the sample).

``forward_model.onnx`` — ``input`` and the same ``realm.params`` (α, λ unused; a required
input with no default: ONNX Runtime's JavaScript bindings cannot feed an input that also has
an initializer) → ``logits``: prediction, and the infer-first schedule.
Every step graph also takes ``realm.entropy_margin`` (EATA's e0, unused by the other
methods), so the runtime can override it without re-export.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from torch import Tensor, nn
from torch.func import functional_call

from realm_runtime.contract import (
    ALPHA_NAME,
    ANCHOR_NAME,
    ENTROPY_MARGIN_NAME,
    FINITE_NAME,
    INPUT_NAME,
    KEPT_NAME,
    LAMBDA_NAME,
    LOGITS_NAME,
    LOSS_NAME,
    LR_ALPHA_LAMBDA_NAME,
    LR_BATCH_NORM_NAME,
    LR_NAME,
    MOMENTUM_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    PARAMS_NAME,
    PART_BACKWARD,
    PART_FORWARD,
    PART_LOSS,
    PART_UPDATE,
    RELAX_NAME,
    SAMPLE_INDEX_NAME,
    SAMPLE_WEIGHT_NAME,
    VELOCITY_NAME,
    TensorSlot,
    method_input,
)
from realm_runtime.methods.realm import alpha_lambda_start
from realm_sdk import FlatUpdate, RealmConfig, batch_norm_names, entropy
from realm_sdk.methods import StepInputs, torch_form

from .._errors import UnsupportedModelError
from .._onnx_builder import GraphBuilder
from .._provenance import part as step_part
from .._trace import count_ops, trace
from ._checks import check_portable
from ._to_onnx import to_onnx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PortableGraphs:
    """The two portable graphs and what their traces held."""

    step: onnx.ModelProto  # step_model.onnx
    source: np.ndarray  # (P,) float32 realm.params of the source model
    forward: onnx.ModelProto  # forward_model.onnx
    layout: list[TensorSlot]  # where each trainable tensor lies in realm.params
    step_nodes: int  # ONNX nodes of the step graph
    forward_nodes: int  # ONNX nodes of the forward graph
    aten_ops: dict[str, int]  # aten op counts of the traced step (before ONNX)


def build_portable_graphs(
    model: nn.Module,
    config: RealmConfig,
    norm_names: Sequence[str],
    example: Tensor,
    *,
    lean: bool = True,
    fisher: Mapping[str, Tensor] | None = None,
) -> PortableGraphs:
    """Trace and export the portable step and forward graphs of ``model``.

    Args:
        model: the classifier in eval mode, parameters frozen (a private copy).
        config: the export's configuration (method, preset, α0/λ0, e0).
        norm_names: the SDK's adapted norm parameters, in order.
        example: an input of the export shape; its batch must be 1.
        lean: translate with :func:`._to_onnx.to_onnx`'s lean path where it works; False:
            torch.onnx's public exporter.
        fisher: λ_F·F by norm parameter, for a method with clean state (EATA's
            regulariser): baked into the step as a constant beside θ0.

    Returns:
        The graphs as ONNX protos, checked for standard ops, opset and IR version.

    Raises:
        UnsupportedModelError: the step could not be traced, rewritten or exported, with
            the reason in one sentence.
    """
    if example.shape[0] != 1:
        raise UnsupportedModelError(
            f"the portable step graph is written for batch 1 (the on-device protocol), the "
            f"export shape has batch {example.shape[0]}"
        )
    rules, form = config.rules, torch_form(config)
    realm = rules.learns_alpha_lambda
    try:
        form.check_input(example, config)
    except ValueError as exc:
        raise UnsupportedModelError(str(exc)) from None
    names = [*norm_names, *((ALPHA_NAME, LAMBDA_NAME) if realm else ())]
    n_norm = len(norm_names)
    named = dict(model.named_parameters())
    values = [named[n].detach().clone() for n in norm_names]
    if realm:
        values += [torch.tensor(v, dtype=torch.float32) for v in alpha_lambda_start(config)]

    # The update, the projection of α and λ and the shares given back: the SDK's own code.
    batch_norm = set(batch_norm_names(model, norm_names))
    update = FlatUpdate(values, [name in batch_norm for name in names], learns_alpha_lambda=realm)
    sizes, shapes = update.sizes, update.shapes
    # EATA's regulariser: θ0 and λ_F·F, flat like θ, constants of the graph.
    origin, weights = (
        ([update.initial.clone()], [torch.cat([fisher[n].reshape(-1) for n in norm_names])])
        if fisher is not None and rules.clean_state
        else ((), ())
    )

    def unflatten(flat: Tensor) -> list[Tensor]:
        return [
            part.reshape(shape) for part, shape in zip(split_tree(flat, sizes), shapes, strict=True)
        ]

    def logits_of(x: Tensor, params: Sequence[Tensor]) -> Tensor:
        return functional_call(model, dict(zip(norm_names, params[:n_norm], strict=True)), (x,))

    def logits_at(x: Tensor, theta: Sequence[Tensor]) -> Tensor:
        (flat,) = theta
        return logits_of(x, unflatten(flat))

    def step(
        x: Tensor,
        weight: Tensor,
        lr: Tensor,
        lr_al: Tensor,
        lr_bn: Tensor,
        mu: Tensor,
        e0: Tensor,
        flat: Tensor,
        velocity: Tensor,
        anchor: Tensor,
        knob: Tensor,
        *drawn: Tensor,
    ) -> tuple[Tensor, ...]:
        # knob: Method.step_input (REALM's relax, SAR's ρ, DeYO's τ); else unused
        # drawn: the sample's index in the stream, for a method that draws (DeYO); else none
        sample = drawn[0] if drawn else 0
        params = unflatten(flat)
        with step_part(PART_FORWARD):
            logits = logits_of(x, params)
        learned = params[n_norm:]  # REALM's α, λ; empty for the others
        with step_part(PART_LOSS):
            inputs = StepInputs(
                logits_at,
                x,
                [flat],
                logits,
                entropy(logits),
                weight,
                learned,
                e0,
                knob,
                config,
                sample=sample,
                origin=origin,
                fisher=weights,
            )
            out = form.step_loss(inputs)
        with step_part(PART_BACKWARD):
            (grad,) = torch.autograd.grad(out.loss, [flat])
        with step_part(PART_UPDATE):
            # g·0 is 0 for every finite g and NaN otherwise: a finiteness test that cannot
            # overflow, in two nodes over the whole parameter vector.
            checked = out.loss + (grad * 0).sum()
            if out.checked is not None:
                checked = checked + out.checked
            finite = torch.isfinite(checked)
            p_new, v_new = update.step(
                flat,
                velocity,
                grad,
                lr=lr,
                lr_alpha_lambda=lr_al,
                lr_batch_norm=lr_bn,
                momentum=mu,
                anchor=anchor,
                relax=knob,  # REALM's knob is relax; the update reads it only where α, λ learn
            )
        kept = () if out.kept is None else (out.kept,)
        return out.loss, logits, finite, p_new, v_new, *kept

    source = update.initial.clone()
    scalar = torch.tensor(0.0)
    step_args = [
        example,
        torch.ones(1),
        scalar,
        scalar.clone(),
        scalar.clone(),
        scalar.clone(),
        torch.tensor(config.e0),
        source.clone().requires_grad_(True),
        torch.zeros_like(source),
        torch.tensor(0.0),
        torch.tensor(method_input(config)),
        *([torch.tensor(0, dtype=torch.int64)] if rules.draws else []),
    ]
    step_gm = trace(step, step_args)
    step_inputs = [
        INPUT_NAME,
        SAMPLE_WEIGHT_NAME,
        LR_NAME,
        LR_ALPHA_LAMBDA_NAME,
        LR_BATCH_NORM_NAME,
        MOMENTUM_NAME,
        ENTROPY_MARGIN_NAME,
        PARAMS_NAME,
        VELOCITY_NAME,
        ANCHOR_NAME,
        rules.step_input or RELAX_NAME,  # Tent's and EATA's: unused, no input of the graph
        *([SAMPLE_INDEX_NAME] if rules.draws else []),  # a method that draws (DeYO)
    ]
    step_outputs = [LOSS_NAME, LOGITS_NAME, FINITE_NAME, NEW_PARAMS_NAME, NEW_VELOCITY_NAME]
    if rules.step_cut:
        step_outputs.append(KEPT_NAME)
    step_proto = _portable(step_gm, step_args, step_inputs, step_outputs, lean)
    # The forward is the step's own: the nodes its logits need, from the input and θ.
    forward_proto = forward_of(step_proto)
    layout = []
    offset = 0
    for name, size, shape in zip(names, sizes, shapes, strict=True):
        layout.append(TensorSlot(name, offset, list(shape)))
        offset += size
    return PortableGraphs(
        step=step_proto,
        source=source.numpy().astype(np.float32),
        forward=forward_proto,
        layout=layout,
        step_nodes=len(step_proto.graph.node),
        forward_nodes=len(forward_proto.graph.node),
        aten_ops=count_ops(step_gm),
    )


def forward_of(step: onnx.ModelProto) -> onnx.ModelProto:
    """The step graph's forward: ``input``, ``realm.params`` → ``logits``, by graph surgery.

    The nodes the step's logits depend on, with the initializers they read, in the step's
    order: the same computation as a separate trace of the forward, for no second trace and
    export. The whole parameter vector goes in (α and λ unused: one OrtValue for both).

    Raises:
        UnsupportedModelError: the step's logits depend on another of its inputs.
    """
    graph = step.graph
    producer = {out: node for node in graph.node for out in node.output}
    needed: set[str] = set()
    wanted = [LOGITS_NAME]
    while wanted:
        name = wanted.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is not None:
            wanted.extend(i for i in node.input if i)
    inputs = {i.name: i for i in graph.input}
    extra = sorted(needed & set(inputs) - {INPUT_NAME, PARAMS_NAME})
    if extra:
        raise UnsupportedModelError(f"the step graph's logits depend on its inputs {extra}")
    nodes = [n for n in graph.node if any(o in needed for o in n.output)]
    outputs = [o for o in graph.output if o.name == LOGITS_NAME]
    forward = onnx.helper.make_graph(
        nodes,
        "forward",
        [inputs[INPUT_NAME], inputs[PARAMS_NAME]],
        outputs,
        [i for i in graph.initializer if i.name in needed],
        value_info=[v for v in graph.value_info if v.name in needed],
    )
    model = onnx.helper.make_model(
        forward, opset_imports=list(step.opset_import), ir_version=step.ir_version
    )
    model.producer_name, model.producer_version = step.producer_name, step.producer_version
    check_portable(model)
    return model


def _portable(
    gm: torch.fx.GraphModule,
    args: Sequence[Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    lean: bool,
) -> onnx.ModelProto:
    """The traced graph as ONNX, its GEMM weights read in place, checked for ORT.

    Raises:
        UnsupportedModelError: the exporter failed, or the graph is not portable.
    """
    proto = to_onnx(gm, args, input_names, output_names, lean=lean)
    untranspose_weights(proto)
    check_portable(proto)
    return proto


def untranspose_weights(proto: onnx.ModelProto) -> int:
    """Feed constant 2-D weights to their GEMMs as they are, not through ``Transpose``.

    A linear layer's forward uses ``W`` and its input gradient ``Wᵀ`` (or the other way
    round); the exporter writes ``Transpose(W)``, which ONNX Runtime folds into a second
    copy of every weight at session start (as much memory again). ``Gemm``'s ``transB``
    reads ``W`` in place; a ``MatMul`` with a higher-rank left operand becomes
    ``Reshape → Gemm → Reshape`` (the shapes are fixed per export).

    Returns:
        How many Transpose nodes were removed.
    """
    graph = proto.graph
    weights = {i.name for i in graph.initializer if len(i.dims) == 2}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    shapes = _static_shapes(proto, _matmul_operands(graph, weights, consumers))
    removed = 0
    new_nodes: list[onnx.NodeProto] = []
    replaced: dict[int, list[onnx.NodeProto]] = {}
    drop: set[int] = set()
    for node in graph.node:
        perm = [a.ints for a in node.attribute if a.name == "perm"]
        if node.op_type != "Transpose" or node.input[0] not in weights or list(perm[0]) != [1, 0]:
            continue
        users = consumers.get(node.output[0], [])
        plans = [_gemm_plan(user, node.output[0], node.input[0], shapes) for user in users]
        if not users or any(plan is None for plan in plans):
            continue
        for user, plan in zip(users, plans, strict=True):
            replaced[id(user)] = plan  # type: ignore[assignment]
        drop.add(id(node))
        removed += 1
    for node in graph.node:
        if id(node) in drop:
            continue
        new_nodes.extend(replaced.get(id(node), [node]))
    del graph.node[:]
    graph.node.extend(new_nodes)
    return removed


def _matmul_operands(
    graph: onnx.GraphProto, weights: set[str], consumers: dict[str, list[onnx.NodeProto]]
) -> set[str]:
    """The left operands and outputs of the MatMuls that read a transposed weight."""
    names: set[str] = set()
    for node in graph.node:
        if node.op_type == "Transpose" and node.input[0] in weights:
            for user in consumers.get(node.output[0], []):
                if user.op_type == "MatMul":
                    names.update((user.input[0], user.output[0]))
    return names


def _static_shapes(proto: onnx.ModelProto, names: set[str]) -> dict[str, list[int]]:
    """The fixed shapes of ``names``: from the graph's value infos, inferred where they lack one.

    Shape inference copies the whole model (weights included), so it runs only when needed.
    """
    shapes: dict[str, list[int]] = {}
    if not names:
        return shapes

    def read(graph: onnx.GraphProto) -> None:
        for info in [*graph.value_info, *graph.input, *graph.output]:
            dims = info.type.tensor_type.shape.dim
            if info.name in names and all(d.HasField("dim_value") for d in dims):
                shapes[info.name] = [d.dim_value for d in dims]

    read(proto.graph)
    if not names <= set(shapes):
        read(onnx.shape_inference.infer_shapes(proto).graph)
    return shapes


def _gemm_plan(
    user: onnx.NodeProto, transposed: str, weight: str, shapes: dict[str, list[int]]
) -> list[onnx.NodeProto] | None:
    """Nodes that compute ``user`` from ``weight`` directly, or None where that is not simple."""
    if user.op_type == "Gemm" and list(user.input).index(transposed) == 1:
        node = onnx.NodeProto()
        node.CopyFrom(user)
        node.input[1] = weight
        attrs = {a.name: a for a in node.attribute}
        if "transB" in attrs:
            attrs["transB"].i = 1 - attrs["transB"].i
        else:
            node.attribute.append(onnx.helper.make_attribute("transB", 1))
        return [node]
    if user.op_type != "MatMul" or list(user.input).index(transposed) != 1:
        return None
    left, out = user.input[0], user.output[0]
    if left not in shapes or out not in shapes:
        return None
    left_shape, out_shape = shapes[left], shapes[out]
    b = GraphBuilder()
    gemm = f"{user.name}.gemm"
    if len(left_shape) == 2:
        b.op("Gemm", [left, weight], out, node_name=gemm, transB=1)
        return b.nodes
    # Gemm is 2-D: fold the leading axes of the left operand into one and back.
    shape_in, shape_out = f"{user.name}.shape_in", f"{user.name}.shape_out"
    b.constant(shape_in, [-1, left_shape[-1]], node_name="", tensor_name=shape_in)
    flat = b.op("Reshape", [left, shape_in], f"{user.name}.flat", node_name="")
    flat_out = b.op("Gemm", [flat, weight], f"{user.name}.flat_out", node_name=gemm, transB=1)
    b.constant(shape_out, out_shape, node_name="", tensor_name=shape_out)
    b.op("Reshape", [flat_out, shape_out], out, node_name="")
    return b.nodes


# WebGPU guarantees 8 storage buffers per shader stage (maxStorageBuffersPerShaderStage) and
# software adapters (SwiftShader) give no more: a Split may have 7 outputs, and its gradient,
# a Concat, 7 inputs. One Split of realm.params into 19 tensors failed on onnxruntime-web's
# WebGPU execution provider in headless Chromium.
MAX_FANOUT = 7


def split_tree(flat: Tensor, sizes: list[int]) -> list[Tensor]:
    """``torch.split(flat, sizes)`` as a tree of splits with at most :data:`MAX_FANOUT` parts.

    The pieces are the same views; only the graph changes (and its backward's concatenations).
    """
    if len(sizes) <= MAX_FANOUT:
        return list(torch.split(flat, sizes))
    per = math.ceil(len(sizes) / MAX_FANOUT)
    groups = [sizes[i : i + per] for i in range(0, len(sizes), per)]
    parts = torch.split(flat, [sum(group) for group in groups])
    out: list[Tensor] = []
    for part, group in zip(parts, groups, strict=True):
        out.extend(split_tree(part, group) if len(group) > 1 else [part])
    return out
