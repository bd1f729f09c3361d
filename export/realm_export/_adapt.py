"""The one adapt graph: a sample and the adaptation state in, the prediction and the next state out.

``adapt_model.onnx`` is SPEC §3's whole online step for one sample, so that a client in any
ONNX Runtime binding is a loop of ``run`` and swap (the manifest's ``adapt`` section):

1. the forward of the portable step graph, once, at the top level: ``logits``;
2. the decision of :mod:`._decide` (finite logits, EATA's and SAR's entropy cut, S_div against
   the EMA), inlined;
3. the rest of the step graph (backward, SGD with momentum, the α/λ projection, relax and
   anchor) inside an ``If`` that runs only for a selected sample; it reads the forward's
   activations from the outer scope, so a skipped sample costs a forward;
4. the commit (parameters, momentum, EMA only when the step is selected and finite), the drift
   bound, SAR's recovery, the watch EMAs, the collapse guard, the episodic reset and the
   counters, each as a few element-wise nodes on the state.

Optional values of the twins (no EMA yet, no watch figure yet) are a value beside a flag in
``realm.known``: a NaN sentinel would rest on NaN semantics that GPU shader compilers do not
keep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import TensorProto, helper

from realm_runtime import RealmConfig
from realm_runtime.contract import (
    ADAPT_KNOWN,
    ADAPT_LOSS_NAME,
    ADAPT_MODEL,
    ADAPT_REASON_NAME,
    ADAPT_REASONS,
    ADAPT_SECTION_VERSION,
    ADAPT_SELECTED_NAME,
    ADAPT_UPDATED_NAME,
    ADAPT_WATCH,
    COUNTERS,
    COUNTERS_NAME,
    EMA_NAME,
    FINITE_NAME,
    KEPT_NAME,
    KNOWN_NAME,
    LOSS_NAME,
    MARGINAL_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    PARAMS_NAME,
    SAMPLE_WEIGHT_NAME,
    SEEN_NAME,
    SOURCE_PARAMS,
    VELOCITY_NAME,
    WATCH_NAME,
    next_name,
    step_settings,
)

from ._decide import decide_model
from ._graph import INPUT_NAME, LOGITS_NAME
from ._onnx_builder import GraphBuilder

WATCH_BETA = 0.99  # the twins' watch EMAs: about the last 100 samples (realm_runtime.Watch)
WATCH_WINDOW = 100  # samples seen before the collapse guard may act
SAR_LOSS_BETA = 0.9  # SAR's EMA coefficient of its second-pass loss


@dataclass(frozen=True)
class StateTensor:
    """One entry of the adapt graph's state: its input, its next value, its initial value."""

    name: str  # the graph input; the output is next_name(name)
    initial: np.ndarray  # the value a fresh (or reset) adapter starts from


def adapt_state(config: RealmConfig, source: np.ndarray) -> list[StateTensor]:
    """The state the adapt graph carries, in the manifest's order, with its initial values."""
    c = config.num_classes
    return [
        StateTensor(PARAMS_NAME, source.astype(np.float32)),
        StateTensor(VELOCITY_NAME, np.zeros_like(source, dtype=np.float32)),
        StateTensor(EMA_NAME, np.zeros(c, np.float32)),
        StateTensor(MARGINAL_NAME, np.zeros(c, np.float32)),
        StateTensor(WATCH_NAME, np.zeros(len(ADAPT_WATCH), np.float32)),
        StateTensor(KNOWN_NAME, np.zeros(len(ADAPT_KNOWN), np.bool_)),
        StateTensor(SEEN_NAME, np.array(0, np.int64)),
        StateTensor(COUNTERS_NAME, np.zeros(len(COUNTERS), np.int64)),
    ]


def adapt_model(step: onnx.ModelProto, config: RealmConfig, source: np.ndarray) -> onnx.ModelProto:
    """The adapt graph of ``step`` (the validated portable step graph, weights still inside).

    Args:
        step: the step graph proto (``realm_export._portable``), not modified.
        config: the export's configuration: the method, the hyper-parameters and the
            guardrails become constants of the graph.
        source: ``(P,)`` float32, the source values of ``realm.params``.

    Returns:
        The model: inputs ``input`` and the state; outputs ``logits``, ``realm.updated``,
        ``realm.selected``, ``realm.reason``, ``realm.loss`` and each state's next value.
    """
    model = onnx.ModelProto()
    model.CopyFrom(step)
    graph = model.graph
    realm = config.learns_alpha_lambda
    sar = config.method == "sar"
    outputs = {o.name: o for o in graph.output}
    forward, branch = _split(graph, LOGITS_NAME)

    b = _Builder("adapt.const.")
    _hyper_parameters(b, config)
    state = adapt_state(config, source)
    decision = _inline_decision(b, config)
    step_out = _step_branch(b, branch, outputs, decision["keep"], sar)
    u = _commit_flags(b, decision, step_out)
    _reason(b, decision, step_out)
    _state_next(b, config, source, state, decision, step_out, u, realm)

    del graph.node[:]
    graph.node.extend([*forward, *b.nodes])
    graph.initializer.extend(b.initializers)
    sample = [i for i in graph.input if i.name == INPUT_NAME]
    del graph.input[:]
    graph.input.extend([*sample, *(_info(s.name, s.initial) for s in state)])
    logits = outputs[LOGITS_NAME]
    del graph.output[:]
    graph.output.extend(
        [
            logits,
            helper.make_tensor_value_info(ADAPT_UPDATED_NAME, TensorProto.BOOL, []),
            helper.make_tensor_value_info(ADAPT_SELECTED_NAME, TensorProto.BOOL, []),
            helper.make_tensor_value_info(ADAPT_REASON_NAME, TensorProto.INT64, []),
            helper.make_tensor_value_info(ADAPT_LOSS_NAME, TensorProto.FLOAT, []),
            *(_info(next_name(s.name), s.initial) for s in state),
        ]
    )
    del graph.value_info[:]
    graph.name = "realm_adapt"
    _drop_unused_initializers(graph)
    return model


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the initializers no node reads (the step's inputs the decision made constant)."""
    used: set[str] = set()

    def read(g: onnx.GraphProto) -> None:
        for node in g.node:
            used.update(node.input)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    read(attr.g)

    read(graph)
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


class _Builder(GraphBuilder):
    """A builder whose constants and state reads are written once, however often asked for."""

    def __init__(self, const_prefix: str) -> None:
        super().__init__(const_prefix)
        self._written: dict[str, str] = {}
        self._count = 0  # names handed out by step()

    def const(self, name: str, value: object, dtype: DTypeLike = np.float32) -> str:
        """As :meth:`GraphBuilder.const`; the same name again returns the first constant."""
        if name not in self._written:
            self._written[name] = super().const(name, value, dtype)
        return self._written[name]

    def step(self, kind: str, inputs: Sequence[str], what: str, **attrs: object) -> str:
        """One node whose output gets a fresh name ``adapt.<what>.<k>``."""
        self._count += 1
        return self.op(kind, list(inputs), f"adapt.{what}.{self._count}", **attrs)

    def once(self, output: str, write: Callable[[], str]) -> str:
        """``write()``'s output, written the first time ``output`` is asked for."""
        if output not in self._written:
            self._written[output] = write()
        return self._written[output]


# ---------------------------------------------------------------------------- the split


def _split(
    graph: onnx.GraphProto, logits: str
) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """The step graph's nodes: those ``logits`` needs (the forward), and all the others."""
    producer = {out: node for node in graph.node for out in node.output}
    needed: set[int] = set()
    todo = [logits]
    while todo:
        node = producer.get(todo.pop())
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        todo.extend(node.input)
    forward = [node for node in graph.node if id(node) in needed]
    rest = [node for node in graph.node if id(node) not in needed]
    return forward, rest


def _step_branch(
    b: _Builder,
    nodes: Sequence[onnx.NodeProto],
    outputs: dict[str, onnx.ValueInfoProto],
    keep: str,
    sar: bool,
) -> dict[str, str]:
    """The backward and the update inside ``If(keep)``; the else branch changes nothing.

    Returns:
        The ``If``'s outputs by the step graph's names, and for SAR ``"any_kept"``.
    """
    names = [
        LOSS_NAME,
        FINITE_NAME,
        NEW_PARAMS_NAME,
        NEW_VELOCITY_NAME,
        *([KEPT_NAME] if sar else []),
    ]
    then = helper.make_graph(
        list(nodes), "adapt_step", [], [_renamed(outputs[name], name) for name in names]
    )
    e = GraphBuilder()
    else_values = {
        LOSS_NAME: e.constant("adapt.else.loss", 0.0, np.float32),
        FINITE_NAME: e.constant("adapt.else.finite", False, np.bool_),
        NEW_PARAMS_NAME: e.op("Identity", [PARAMS_NAME], "adapt.else.params"),
        NEW_VELOCITY_NAME: e.op("Identity", [VELOCITY_NAME], "adapt.else.velocity"),
    }
    if sar:
        else_values[KEPT_NAME] = e.constant("adapt.else.kept", 0.0, np.float32)
    otherwise = helper.make_graph(
        e.nodes, "adapt_skip", [], [_renamed(outputs[n], else_values[n]) for n in names]
    )
    results = {name: f"adapt.step.{name}" for name in names}
    b.nodes.append(
        helper.make_node(
            "If",
            [keep],
            [results[name] for name in names],
            name="adapt.step",
            then_branch=then,
            else_branch=otherwise,
        )
    )
    if sar:  # how many passed the cut again at θ + ε: none means no update
        zero = b.const("zero", 0.0)
        results["any_kept"] = b.op("Greater", [results[KEPT_NAME], zero], "adapt.any_kept")
    return results


def _renamed(info: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(info)
    out.name = name
    return out


def _info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    kind = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, kind, list(value.shape))


# ---------------------------------------------------------------------------- the decision


def _hyper_parameters(b: GraphBuilder, config: RealmConfig) -> None:
    """The step graph's hyper-parameter inputs, now constants of the export's configuration.

    (Those the method's graph does not read are dropped with the other unused initializers.)
    """
    b.initializer(SAMPLE_WEIGHT_NAME, [1.0])  # a kept sample's weight; EATA's factor is inside
    for name, value in step_settings(config).items():
        b.initializer(name, value)


def _inline_decision(b: _Builder, config: RealmConfig) -> dict[str, str]:
    """:func:`._decide.decide_model`'s nodes on ``logits`` and the EMA, as scalars where 1-wide."""
    decide = decide_model(config, ir_version=8).graph
    prefix = "adapt.decide."
    known_ema = _known(b, "ema")
    outer = {"logits": LOGITS_NAME, "ema": EMA_NAME, "has_ema": known_ema}
    produced = {i.name for i in decide.initializer} | {o for n in decide.node for o in n.output}

    def rename(name: str) -> str:
        if name in outer:
            return outer[name]
        return prefix + name if name in produced else name

    for tensor in decide.initializer:
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
    vector = b.const("class_shape", [config.num_classes], np.int64)
    out = {"known_ema": known_ema}
    for name in ("keep", "passed_entropy", "finite", "entropy"):
        out[name] = b.op("Reshape", [prefix + name, scalar], f"adapt.{name}")
    out["probs"] = b.op("Reshape", [prefix + "probs", vector], "adapt.probs")
    out["next_ema"] = prefix + "next_ema"
    return out


def _known(b: _Builder, what: str) -> str:
    """The flag ``realm.known[what]`` as a bool scalar."""
    index = b.const(f"known_{what}", ADAPT_KNOWN.index(what), np.int64)
    out = f"adapt.known.{what}"
    return b.once(out, lambda: b.op("Gather", [KNOWN_NAME, index], out, axis=0))


def _watched(b: _Builder, what: str) -> str:
    """The figure ``realm.watch[what]`` as a float scalar."""
    index = b.const(f"watch_{what}", ADAPT_WATCH.index(what), np.int64)
    out = f"adapt.watch.{what}"
    return b.once(out, lambda: b.op("Gather", [WATCH_NAME, index], out, axis=0))


# ---------------------------------------------------------------------------- the commit


def _commit_flags(b: _Builder, decision: dict[str, str], step: dict[str, str]) -> str:
    """``adapt.updated``: selected, and the step finite (and, for SAR, a sample kept at θ + ε)."""
    b.op("Identity", [decision["keep"]], ADAPT_SELECTED_NAME)
    ok = b.step("And", [decision["keep"], step[FINITE_NAME]], "kept_and_finite")
    if "any_kept" in step:
        ok = b.step("And", [ok, step["any_kept"]], "kept_again_and_finite")
    b.op("Where", [decision["keep"], step[LOSS_NAME], b.const("zero", 0.0)], ADAPT_LOSS_NAME)
    return b.op("Identity", [ok], ADAPT_UPDATED_NAME)


def _reason(b: _Builder, decision: dict[str, str], step: dict[str, str]) -> str:
    """``realm.reason``, the twins' reason as its index in :data:`ADAPT_REASONS`."""
    code = {r: b.const(f"reason_{r}", ADAPT_REASONS.index(r), np.int64) for r in ADAPT_REASONS}
    r = b.step("Where", [step[FINITE_NAME], code["updated"], code["nonfinite"]], "reason")
    if "any_kept" in step:
        r = b.step("Where", [step["any_kept"], r, code["entropy"]], "reason")
    r = b.step("Where", [decision["keep"], r, code["diversity"]], "reason")
    r = b.step("Where", [decision["passed_entropy"], r, code["entropy"]], "reason")
    return b.op("Where", [decision["finite"], r, code["nonfinite"]], ADAPT_REASON_NAME)


def _stack(b: _Builder, scalars: Sequence[str], output: str, to: int | None = None) -> str:
    """Scalars (cast to ``to`` first, if given) as one 1-D tensor named ``output``."""
    axis = b.const("axis0", [0], np.int64)
    parts = []
    for value in scalars:
        if to is not None:
            value = b.step("Cast", [value], "cast", to=to)
        parts.append(b.step("Unsqueeze", [value, axis], "part"))
    return b.op("Concat", parts, output, axis=0)


def _state_next(
    b: _Builder,
    config: RealmConfig,
    source: np.ndarray,
    state: list[StateTensor],
    decision: dict[str, str],
    step: dict[str, str],
    u: str,
    realm: bool,
) -> None:
    """Every state's next value, in the twins' order (``OnlineAdaptation._step``)."""
    guard = config.guard
    finite = decision["finite"]
    op = b.step
    false, true = b.const("false", False, np.bool_), b.const("true", True, np.bool_)
    initial = {s.name: b.const("initial." + s.name, s.initial, s.initial.dtype) for s in state}
    src = initial[PARAMS_NAME]
    norm_mask = np.ones(source.shape[0], np.bool_)
    if realm:
        norm_mask[-2:] = False  # α and λ: no part of the drift
    mask = b.const("norm_mask", norm_mask, np.bool_)
    maskf = b.const("norm_maskf", norm_mask.astype(np.float32))
    norm0 = float(np.sqrt(np.square(source[norm_mask].astype(np.float64)).sum()))

    def ema(old: str, new: str, known: str, beta: float) -> str:
        scaled_old = op("Mul", [old, b.const(f"beta_{beta}", beta)], "b_old")
        scaled_new = op("Mul", [new, b.const(f"one_minus_{beta}", 1 - beta)], "b_new")
        return op("Where", [known, op("Add", [scaled_old, scaled_new], "mix"), new], "ema")

    def drift(p: str) -> str:
        moved = op("Mul", [op("Sub", [p, src], "moved"), maskf], "moved_norm")
        squares = op("Mul", [moved, moved], "sq")
        sq = op("ReduceSum", [squares, b.const("axis0", [0], np.int64)], "sumsq", keepdims=0)
        return op("Div", [op("Sqrt", [sq], "norm"), b.const("norm0", max(norm0, 1e-30))], "drift")

    # 1. the watch sees the sample's finite logits
    known_w = _known(b, "watch")
    old_entropy = _watched(b, "entropy_ema")
    seen_entropy = ema(old_entropy, decision["entropy"], known_w, WATCH_BETA)
    ent = op("Where", [finite, seen_entropy, old_entropy], "entropy_ema")
    seen_probs = ema(MARGINAL_NAME, decision["probs"], known_w, WATCH_BETA)
    marginal = op("Where", [finite, seen_probs, MARGINAL_NAME], "marginal")
    one_seen = op("Cast", [finite], "seen_inc", to=TensorProto.INT64)  # (1,): the logits' rows
    scalar = b.const("scalar_shape", [], np.int64)
    seen = op("Add", [SEEN_NAME, op("Reshape", [one_seen, scalar], "seen_inc0")], "seen")
    known_w = op("Or", [known_w, finite], "known_watch")

    # 2. the commit: parameters, momentum, EMA
    params = op("Where", [u, step[NEW_PARAMS_NAME], PARAMS_NAME], "params")
    velocity = op("Where", [u, step[NEW_VELOCITY_NAME], VELOCITY_NAME], "velocity")
    ema_next = op("Where", [u, decision["next_ema"], EMA_NAME], "ema_next")
    known_ema = op("Or", [decision["known_ema"], u], "known_ema")

    # 3. the drift bound, after an applied update
    clip = false
    if guard.max_drift is not None and norm0 > 0:
        d = drift(params)
        bound = b.const("max_drift", guard.max_drift)
        clip = op("And", [u, op("Greater", [d, bound], "over")], "clip")
        share = op("Div", [bound, op("Max", [d, b.const("tiny", 1e-30)], "d_safe")], "share")
        scaled = op("Mul", [share, op("Sub", [params, src], "away")], "scaled")
        pulled = op("Add", [src, scaled], "pulled")
        params = op("Where", [op("And", [clip, mask], "clip_mask"), pulled, params], "clipped")

    # 4. SAR's recovery: the EMA of its second-pass loss
    loss_ema, known_loss = _watched(b, "loss_ema"), _known(b, "loss_ema")
    recover = false
    if "any_kept" in step:
        moved = ema(loss_ema, step[LOSS_NAME], known_loss, SAR_LOSS_BETA)
        loss_ema = op("Where", [u, moved, loss_ema], "loss_ema")
        known_loss = op("Or", [known_loss, u], "known_loss")
        low = op("Less", [moved, b.const("recovery_loss", config.recovery_loss)], "low")
        recover = op("And", [u, low], "recover")

    resettable = {
        PARAMS_NAME: params,
        VELOCITY_NAME: velocity,
        EMA_NAME: ema_next,
        MARGINAL_NAME: marginal,
        SEEN_NAME: seen,
    }
    flags = {"ema": known_ema, "watch": known_w, "loss_ema": known_loss}
    figures = {"entropy_ema": ent, "loss_ema": loss_ema}

    def reset(when: str) -> None:
        for name, value in resettable.items():
            resettable[name] = op("Where", [when, initial[name], value], "reset")
        no = op("Not", [when], "keep_state")
        for name, flag in flags.items():
            flags[name] = op("And", [flag, no], "reset_flag")

    reset(recover)

    # 5. the update rate, after the recovery (a reset's first figure is this call's)
    not_recovered = op("Not", [recover], "not_recovered")
    known_rate = op("And", [_known(b, "update_rate"), not_recovered], "known_rate")
    uf = op("Cast", [u], "uf", to=TensorProto.FLOAT)
    figures["update_rate"] = ema(_watched(b, "update_rate"), uf, known_rate, WATCH_BETA)
    flags["update_rate"] = true

    # 6. the collapse guard, on the watch after this sample
    collapse = false
    if guard.collapse is not None:
        m = resettable[MARGINAL_NAME]
        logm = op("Log", [op("Max", [m, b.const("tiny_p", 1e-12)], "m_safe")], "log_m")
        m_logm = op("Mul", [m, logm], "m_logm")
        summed = op("ReduceSum", [m_logm, b.const("axis0", [0], np.int64)], "sum", keepdims=0)
        spread = op("Neg", [summed], "spread")
        limit = guard.collapse * math.log(config.num_classes)
        narrow = op("Less", [spread, b.const("collapse_limit", limit)], "narrow")
        window_size = b.const("window", WATCH_WINDOW, np.int64)
        window = op("GreaterOrEqual", [resettable[SEEN_NAME], window_size], "window")
        moved = op("Greater", [drift(resettable[PARAMS_NAME]), b.const("zero", 0.0)], "moved")
        watched = op("And", [finite, flags["watch"]], "c1")
        collapse = op(
            "And", [watched, op("And", [op("And", [narrow, window], "c2"), moved], "c3")], "c4"
        )
        reset(collapse)
        flags["update_rate"] = op("Not", [collapse], "rate_known")

    if config.episodic:  # back to the source after every call (not the counters)
        reset(true)
        flags["update_rate"] = false

    # the state's next values
    shapes = {s.name: s.initial.shape for s in state}
    for name, value in resettable.items():
        if shapes[name] == ():  # the (1,) conditions broadcast a scalar: back to its 0-d shape
            b.op("Reshape", [value, b.const("scalar_shape", [], np.int64)], next_name(name))
        else:
            b.op("Identity", [value], next_name(name))
    _stack(b, [figures[w] for w in ADAPT_WATCH], next_name(WATCH_NAME))
    _stack(b, [flags[k] for k in ADAPT_KNOWN], next_name(KNOWN_NAME))
    _counters(b, decision, step, u, recover, collapse, clip)


def _counters(
    b: _Builder,
    decision: dict[str, str],
    step: dict[str, str],
    u: str,
    recover: str,
    collapse: str,
    clip: str,
) -> None:
    """``realm.counters`` plus this call's increments, in :data:`COUNTERS` order."""
    op = b.step
    finite, keep, passed = decision["finite"], decision["keep"], decision["passed_entropy"]
    no_finite = op("Not", [finite], "nonfinite_logits")
    not_keep = op("Not", [keep], "not_keep")
    similar = op("And", [op("And", [finite, passed], "f_p"), not_keep], "similar")
    uncertain = op("And", [finite, op("Not", [passed], "not_passed")], "uncertain")
    bad_step = op("And", [keep, op("Not", [step[FINITE_NAME]], "step_bad")], "bad_step")
    if "any_kept" in step:  # SAR: none kept at θ + ε counts as refused by the cut
        none_kept = op("And", [keep, op("Not", [step["any_kept"]], "no_kept")], "none_kept")
        bad_step = op("And", [bad_step, op("Not", [none_kept], "some_kept")], "bad_step_kept")
        uncertain = op("Or", [uncertain, none_kept], "uncertain_again")
    flag = {
        "samples": b.const("true", True, np.bool_),
        "updates": u,
        "updated_samples": u,
        "skipped_diversity": similar,
        "skipped_entropy": uncertain,
        "skipped_nonfinite": op("Or", [no_finite, bad_step], "skipped_nonfinite"),
        "resets_recovery": recover,
        "resets_collapse": collapse,
        "drift_clips": clip,
    }
    increments = _stack(b, [flag[c] for c in COUNTERS], "adapt.increments", TensorProto.INT64)
    b.op("Add", [COUNTERS_NAME, increments], next_name(COUNTERS_NAME))


def write_adapt(
    step: onnx.ModelProto, config: RealmConfig, source: np.ndarray, directory: Path
) -> dict[str, Any]:
    """Write ``adapt_model.onnx`` and its initial state into ``directory``.

    Args:
        step: the step graph as written (its weights already point into ``weights.bin``;
            the adapt graph points to the same bytes).
        config: the export's configuration.
        source: ``(P,)`` float32 source values of ``realm.params`` (``source_params.npy``,
            which is also their initial state).
        directory: the artifact directory being written.

    Returns:
        The manifest's ``adapt`` section.
    """
    onnx.save_model(adapt_model(step, config, source), str(directory / ADAPT_MODEL))
    entries = []
    for s in adapt_state(config, source):
        if s.name == PARAMS_NAME:
            file = SOURCE_PARAMS
        else:
            file = f"initial_{s.name}.npy"
            np.save(directory / file, s.initial, allow_pickle=False)
        entries.append({"input": s.name, "output": next_name(s.name), "initial": file})
    return {
        "version": ADAPT_SECTION_VERSION,
        "file": ADAPT_MODEL,
        "input": INPUT_NAME,
        "logits": LOGITS_NAME,
        "updated": ADAPT_UPDATED_NAME,
        "selected": ADAPT_SELECTED_NAME,
        "reason": ADAPT_REASON_NAME,
        "reasons": list(ADAPT_REASONS),
        "loss": ADAPT_LOSS_NAME,
        "counters": list(COUNTERS),
        "watch": list(ADAPT_WATCH),
        "known": list(ADAPT_KNOWN),
        "state": entries,
    }
