"""The adapt graph's middle: the inlined decision, then the step and its commit inside If(keep)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from realm_runtime import RealmConfig
from realm_runtime.contract import (
    ADAPT_LOSS_NAME,
    ADAPT_REASON_NAME,
    ADAPT_REASONS,
    ADAPT_SELECTED_NAME,
    ADAPT_UPDATED_NAME,
    DIVERSITY_MARGIN_NAME,
    EMA_BETA_NAME,
    EMA_NAME,
    EMA_NEW_NAME,
    ENTROPY_MARGIN_NAME,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    FINITE_NAME,
    FULL_RATE_NAME,
    KEPT_NAME,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_UPDATE_RATE,
    LOGITS_NAME,
    LOSS_NAME,
    MAX_DRIFT_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    PARAMS_NAME,
    REASON_DIVERSITY,
    REASON_ENTROPY,
    REASON_NONFINITE,
    REASON_UPDATED,
    RECOVERY_LOSS_NAME,
    VELOCITY_NAME,
)
from realm_runtime.methods.sar import LOSS_EMA_BETA

from .._onnx_builder import GraphBuilder
from ._adapt_builder import AdaptBuilder, DriftNorm, ema_of, read_figure, read_flag, renamed
from ._decide import decision_model


def step_branch(
    b: AdaptBuilder,
    nodes: Sequence[onnx.NodeProto],
    outputs: dict[str, onnx.ValueInfoProto],
    decision: dict[str, str],
    config: RealmConfig,
    drift: DriftNorm,
) -> dict[str, str]:
    """The step and its commit inside ``If(keep)``; a skipped sample passes its state through.

    The then branch runs the rest of the step graph (backward, SGD, projections, relax and
    anchor), then commits: θ, momentum and the EMA when the step is finite (and, where the
    step cuts, a sample passed that cut: SAR's at θ + ε, DeYO's PLPD), the drift bound, the
    loss EMA and recovery.

    Returns:
        The ``If``'s outputs by role: ``loss``, ``finite``, ``any_kept``, ``updated``,
        ``clip``, ``recover``, ``params``, ``velocity``, ``ema``, ``loss_ema``,
        ``known_loss``.
    """
    cuts, recovers = config.rules.step_cut, config.rules.recovery
    guard_drift = drift.norm0 > 0
    zero = b.const("zero", 0.0)
    false = b.const("false", False, np.bool_)
    loss_ema, known_loss = read_figure(b, FIGURE_LOSS_EMA), read_flag(b, KNOWN_LOSS_EMA)
    bound = drift_bound(b) if guard_drift else zero  # outside the branch: read, not written

    def commit() -> dict[str, str]:
        op = b.step
        any_kept = op("Greater", [KEPT_NAME, zero], "any_kept") if cuts else None
        u = FINITE_NAME if any_kept is None else op("And", [FINITE_NAME, any_kept], "u")
        params = op("Where", [u, NEW_PARAMS_NAME, PARAMS_NAME], "params")
        velocity = op("Where", [u, NEW_VELOCITY_NAME, VELOCITY_NAME], "velocity")
        ema = op("Where", [u, decision["next_ema"], EMA_NAME], "ema_next")
        clip = false
        if guard_drift:  # the bound, after an applied update (MAX_DRIFT_NAME 0: off)
            d = drift(params)
            on = op("Greater", [MAX_DRIFT_NAME, zero], "drift_on")
            clip = op("And", [u, op("And", [on, op("Greater", [d, bound], "over")], "o")], "clip")
            share = op("Div", [bound, op("Max", [d, b.const("tiny", 1e-30)], "d_safe")], "share")
            scaled = op("Mul", [share, op("Sub", [params, drift.src], "away")], "scaled")
            pulled = op("Add", [drift.src, scaled], "pulled")
            clip_mask = op("And", [clip, drift.mask], "clip_mask")
            params = op("Where", [clip_mask, pulled, params], "clipped")
        out = {
            "loss": LOSS_NAME,
            "finite": FINITE_NAME,
            "any_kept": any_kept or b.const("true", True, np.bool_),
            "updated": u,
            "clip": clip,
            "params": params,
            "velocity": velocity,
            "ema": ema,
            "recover": false,
            "loss_ema": loss_ema,
            "known_loss": known_loss,
        }
        if recovers:  # SAR's recovery: the EMA of its second-pass loss
            moved = ema_of(b, loss_ema, LOSS_NAME, known_loss, LOSS_EMA_BETA)
            out["loss_ema"] = op("Where", [u, moved, loss_ema], "loss_ema")
            out["known_loss"] = op("Or", [known_loss, u], "known_loss")
            low = op("Less", [moved, RECOVERY_LOSS_NAME], "low")
            out["recover"] = op("And", [u, low], "recover")
        return {k: op("Identity", [v], f"then_{k}") for k, v in out.items()}

    then_nodes, then_out = b.branch(commit)
    e = GraphBuilder()
    else_out = {
        "loss": e.op("Identity", [zero], "adapt.else.loss"),
        "finite": e.op("Identity", [false], "adapt.else.finite"),
        "any_kept": e.op("Identity", [false], "adapt.else.any_kept"),
        "updated": e.op("Identity", [false], "adapt.else.updated"),
        "clip": e.op("Identity", [false], "adapt.else.clip"),
        "params": e.op("Identity", [PARAMS_NAME], "adapt.else.params"),
        "velocity": e.op("Identity", [VELOCITY_NAME], "adapt.else.velocity"),
        "ema": e.op("Identity", [EMA_NAME], "adapt.else.ema"),
        "recover": e.op("Identity", [false], "adapt.else.recover"),
        "loss_ema": e.op("Identity", [loss_ema], "adapt.else.loss_ema"),
        "known_loss": e.op("Identity", [known_loss], "adapt.else.known_loss"),
    }
    roles = list(then_out)
    p = outputs[NEW_PARAMS_NAME]
    infos = {
        "params": renamed(p, ""),
        "velocity": renamed(outputs[NEW_VELOCITY_NAME], ""),
        "ema": helper.make_tensor_value_info("", TensorProto.FLOAT, [config.num_classes]),
        "loss": helper.make_tensor_value_info("", TensorProto.FLOAT, []),
        "loss_ema": helper.make_tensor_value_info("", TensorProto.FLOAT, []),
    }

    def info(role: str, name: str) -> onnx.ValueInfoProto:
        if role in infos:
            return renamed(infos[role], name)
        return helper.make_tensor_value_info(name, TensorProto.BOOL, [])

    then = helper.make_graph(
        [*nodes, *then_nodes], "adapt_step", [], [info(r, then_out[r]) for r in roles]
    )
    otherwise = helper.make_graph(e.nodes, "adapt_skip", [], [info(r, else_out[r]) for r in roles])
    results = {role: f"adapt.step.{role}" for role in roles}
    b.nodes.append(
        helper.make_node(
            "If",
            [decision["keep"]],
            [results[r] for r in roles],
            name="adapt.step",
            then_branch=then,
            else_branch=otherwise,
        )
    )
    return results


def drift_bound(b: AdaptBuilder) -> str:
    """The drift bound in force: ``max_drift·min(1, rate / full_rate)`` (SPEC §10).

    ``rate`` is the update rate before this call; with ``full_rate`` 0 (off), or no rate
    known yet, the bound is ``max_drift``.
    """
    op = b.step
    one, tiny = b.const("one", 1.0), b.const("tiny", 1e-30)
    scaled = op("Greater", [FULL_RATE_NAME, b.const("zero", 0.0)], "rate_scaled")
    scaled = op("And", [read_flag(b, KNOWN_UPDATE_RATE), scaled], "rate_known")
    full = op("Max", [FULL_RATE_NAME, tiny], "full_safe")
    share = op(
        "Min", [one, op("Div", [read_figure(b, FIGURE_UPDATE_RATE), full], "rate_share")], "s"
    )
    return op("Mul", [MAX_DRIFT_NAME, op("Where", [scaled, share, one], "bound_share")], "bound")


# ---------------------------------------------------------------------------- the decision


_DECISION_SETTINGS = {  # the decision graph's constants that are settings of the adapt graph
    "margin": DIVERSITY_MARGIN_NAME,
    "beta": EMA_BETA_NAME,
    "one_minus_beta": EMA_NEW_NAME,
    "e0": ENTROPY_MARGIN_NAME,
}


def inline_decision(b: AdaptBuilder, config: RealmConfig) -> dict[str, str]:
    """:func:`._decide.decision_model`'s nodes on ``logits`` and the EMA, scalars where 1-wide."""
    decide = decision_model(config, ir_version=8).graph
    prefix = "adapt.decide."
    known_ema = read_flag(b, KNOWN_EMA)
    outer = {"logits": LOGITS_NAME, "ema": EMA_NAME, "has_ema": known_ema, **_DECISION_SETTINGS}
    produced = {i.name for i in decide.initializer} | {o for n in decide.node for o in n.output}

    def rename(name: str) -> str:
        if name in outer:
            return outer[name]
        return prefix + name if name in produced else name

    for tensor in decide.initializer:
        if tensor.name in _DECISION_SETTINGS:
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = rename(tensor.name)
        b.initializers.append(copy)
    for node in decide.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = prefix + node.name if node.name else ""
        copy.input[:] = [rename(i) for i in node.input]
        copy.output[:] = [rename(o) for o in node.output]
        b.nodes.append(copy)
    scalar = b.const("scalar_shape", [], np.int64)
    out = {"known_ema": known_ema}
    for name in ("keep", "passed_entropy", "finite", "entropy"):
        out[name] = b.op("Reshape", [prefix + name, scalar], f"adapt.{name}")
    out["probs"] = prefix + "probs"  # (1, C)
    out["next_ema"] = prefix + "next_ema"
    return out


# ---------------------------------------------------------------------------- the commit


def reason_of(b: AdaptBuilder, decision: dict[str, str], step: dict[str, str]) -> str:
    """``realm.reason``, the twins' reason as its index in :data:`ADAPT_REASONS`.

    Also the decision's outputs: ``realm.selected``, ``realm.updated``, ``realm.step_loss``.
    """
    b.op("Identity", [decision["keep"]], ADAPT_SELECTED_NAME)
    b.op("Identity", [step["updated"]], ADAPT_UPDATED_NAME)
    b.op("Identity", [step["loss"]], ADAPT_LOSS_NAME)
    code = {r: b.const(f"reason_{r}", ADAPT_REASONS.index(r), np.int64) for r in ADAPT_REASONS}
    r = b.step("Where", [step["finite"], code[REASON_UPDATED], code[REASON_NONFINITE]], "reason")
    r = b.step("Where", [step["any_kept"], r, code[REASON_ENTROPY]], "reason")
    r = b.step("Where", [decision["keep"], r, code[REASON_DIVERSITY]], "reason")
    r = b.step("Where", [decision["passed_entropy"], r, code[REASON_ENTROPY]], "reason")
    return b.op("Where", [decision["finite"], r, code[REASON_NONFINITE]], ADAPT_REASON_NAME)
