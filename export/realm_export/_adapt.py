"""The one adapt graph: a sample and the adaptation state in, the prediction and the next state out.

``adapt_model.onnx`` is SPEC §3's whole online step for one sample, so that a client in any
ONNX Runtime binding is a loop of ``run`` and swap (the manifest's ``adapt`` section):

1. the forward of the portable step graph, once, at the top level: ``logits``;
2. the decision of :mod:`._decide` (finite logits, EATA's and SAR's entropy cut, S_div against
   the EMA), inlined;
3. the rest of the step graph (backward, SGD with momentum, the α/λ projection, relax and
   anchor) and its commit (θ, momentum and the EMA only when the step is finite, the drift
   bound, SAR's loss EMA and recovery) inside an ``If`` that runs only for a selected sample;
   it reads the forward's activations from the outer scope, so a skipped sample costs a
   forward and a few scalar nodes;
4. the watch EMAs, the collapse guard, the counters, and the resets (SAR's recovery, the
   collapse guard, episodic) as one ``If`` that only a reset runs.

The settings (learning rates, momentum, d, β, e0, ρ, the guardrails, episodic) are one more
state tensor, ``realm.settings``, that the graph passes through: a client that loops over the
state runs the export's configuration, and one that writes a slot changes that setting
without re-exporting.

Optional values of the twins (no EMA yet, no watch figure yet) are a value beside a flag in
``realm.known``: a NaN sentinel would rest on NaN semantics that GPU shader compilers do not
keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import TensorProto, helper, numpy_helper

from realm_runtime import RealmConfig
from realm_runtime.contract import (
    ADAPT_COUNTERS_KEY,
    ADAPT_INPUT_KEY,
    ADAPT_KNOWN,
    ADAPT_KNOWN_KEY,
    ADAPT_LOGITS_KEY,
    ADAPT_LOSS_KEY,
    ADAPT_LOSS_NAME,
    ADAPT_MODEL,
    ADAPT_REASON_KEY,
    ADAPT_REASON_NAME,
    ADAPT_REASONS,
    ADAPT_REASONS_KEY,
    ADAPT_SECTION_VERSION,
    ADAPT_SELECTED_KEY,
    ADAPT_SELECTED_NAME,
    ADAPT_SETTINGS,
    ADAPT_SETTINGS_KEY,
    ADAPT_STATE_KEY,
    ADAPT_UPDATED_KEY,
    ADAPT_UPDATED_NAME,
    ADAPT_WATCH,
    ADAPT_WATCH_KEY,
    COLLAPSE_LIMIT_NAME,
    COUNTER_DRIFT_CLIPS,
    COUNTER_RESETS_COLLAPSE,
    COUNTER_RESETS_RECOVERY,
    COUNTER_SAMPLES,
    COUNTER_SKIPPED_DIVERSITY,
    COUNTER_SKIPPED_ENTROPY,
    COUNTER_SKIPPED_NONFINITE,
    COUNTER_UPDATED_SAMPLES,
    COUNTER_UPDATES,
    COUNTERS,
    COUNTERS_NAME,
    DIVERSITY_MARGIN_NAME,
    EMA_BETA_NAME,
    EMA_NAME,
    EMA_NEW_NAME,
    ENTROPY_MARGIN_NAME,
    EPISODIC_NAME,
    FIGURE_ENTROPY_EMA,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    FILE_KEY,
    FINITE_NAME,
    FULL_RATE_NAME,
    INPUT_NAME,
    KEPT_NAME,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_NAME,
    KNOWN_UPDATE_RATE,
    KNOWN_WATCH,
    LOGITS_NAME,
    LOSS_NAME,
    MARGINAL_NAME,
    MAX_DRIFT_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    PARAMS_NAME,
    REASON_DIVERSITY,
    REASON_ENTROPY,
    REASON_NONFINITE,
    REASON_UPDATED,
    RECOVERY_LOSS_NAME,
    SAMPLE_WEIGHT_NAME,
    SEEN_NAME,
    SETTINGS_NAME,
    SOURCE_PARAMS,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
    VELOCITY_NAME,
    WATCH_NAME,
    adapt_settings,
    fresh_watch_tensors,
    next_name,
)

from ._decide import decide_model
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
    watch = fresh_watch_tensors(config.num_classes)  # the runtime's layout of the rest
    return [
        StateTensor(PARAMS_NAME, source.astype(np.float32)),
        StateTensor(VELOCITY_NAME, np.zeros_like(source, dtype=np.float32)),
        *(StateTensor(name, value) for name, value in watch.items()),
        StateTensor(SETTINGS_NAME, adapt_settings(config)),  # passed through unchanged
    ]


def adapt_model(step: onnx.ModelProto, config: RealmConfig, source: np.ndarray) -> onnx.ModelProto:
    """The adapt graph of ``step`` (the validated portable step graph, weights still inside).

    Args:
        step: the step graph proto (``realm_export._portable``), not modified.
        config: the export's configuration: the method is the graph's; its settings
            (:func:`realm_runtime.contract.adapt_settings`) are ``realm.settings``'s initial
            value.
        source: ``(P,)`` float32, the source values of ``realm.params``.

    Returns:
        The model: inputs ``input`` and the state; outputs ``logits``, ``realm.updated``,
        ``realm.selected``, ``realm.reason``, ``realm.step_loss`` and each state's next value.
    """
    model = onnx.ModelProto()
    model.CopyFrom(step)
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    forward, branch = _split(graph, LOGITS_NAME)
    forward, branch = _indices_in_the_branch(forward, branch)

    b = _Builder("adapt.const.")
    b.initializer(SAMPLE_WEIGHT_NAME, [1.0])  # a kept sample's weight; EATA's factor is inside
    state = adapt_state(config, source)
    initial = {s.name: b.const("initial." + s.name, s.initial, s.initial.dtype) for s in state}
    decision = _inline_decision(b, config)
    norm = _DriftNorm(b, config, source, initial[PARAMS_NAME])
    step_out = _step_branch(b, branch, outputs, decision, config, norm)
    _reason(b, decision, step_out)
    _state_next(b, config, state, initial, decision, step_out, norm)

    del graph.node[:]
    graph.node.extend([*forward, *b.nodes])
    graph.initializer.extend(b.initializers)
    sample = [i for i in graph.input if i.name == INPUT_NAME]
    del graph.input[:]
    _settings(graph)
    _drop_unused_initializers(graph)
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
    return model


def _settings(graph: onnx.GraphProto) -> None:
    """Each setting the graph reads, gathered from ``realm.settings`` by its name.

    The graph's nodes (its branches' included) read the settings by name; a node per setting
    read takes it out of the vector, so a client changes a setting by writing its slot.
    """
    used = _names_read(graph)
    nodes = []
    for k, name in enumerate(ADAPT_SETTINGS):
        if name not in used:
            continue
        index = numpy_helper.from_array(np.array(k, np.int64), f"adapt.const.setting_{k}")
        graph.initializer.append(index)
        value = name if name != EPISODIC_NAME else "adapt.episodic_value"
        nodes.append(helper.make_node("Gather", [SETTINGS_NAME, index.name], [value], axis=0))
        if name == EPISODIC_NAME:
            nodes.append(helper.make_node("Cast", [value], [name], to=TensorProto.BOOL))
    nodes.append(helper.make_node("Identity", [SETTINGS_NAME], [next_name(SETTINGS_NAME)]))
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *rest])  # first: the forward reads none, the rest may


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the initializers no node reads (the step's inputs the decision made constant)."""
    used = _names_read(graph)
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` or of its subgraphs reads."""
    used: set[str] = set()
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                used |= _names_read(attr.g)
    return used


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

    def branch(self, write: Callable[[], dict[str, str]]) -> tuple[list[onnx.NodeProto], dict]:
        """The nodes ``write()`` adds, taken out for a subgraph, and what it returned.

        Constants stay in the outer graph (a subgraph reads them from the outer scope); a
        value first written inside is forgotten afterwards, so it is not read from outside.
        """
        mark, written = len(self.nodes), dict(self._written)
        out = write()
        nodes = self.nodes[mark:]
        del self.nodes[mark:]
        consts = {k: v for k, v in self._written.items() if v.startswith(self.const_prefix)}
        self._written = {**written, **consts}
        return nodes, out


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


class _DriftNorm:
    """``‖θ − θ0‖ / ‖θ0‖`` over the norm tensors (α and λ are no part of the drift)."""

    def __init__(self, b: _Builder, config: RealmConfig, source: np.ndarray, src: str) -> None:
        mask = np.ones(source.shape[0], np.bool_)
        if config.rules.learns_alpha_lambda:
            mask[-2:] = False
        self.b, self.src = b, src
        self.mask = b.const("norm_mask", mask, np.bool_)
        self.maskf = b.const("norm_maskf", mask.astype(np.float32))
        self.norm0 = float(np.sqrt(np.square(source[mask].astype(np.float64)).sum()))

    def __call__(self, params: str) -> str:
        b, op = self.b, self.b.step
        moved = op("Mul", [op("Sub", [params, self.src], "moved"), self.maskf], "moved_norm")
        squares = op("Mul", [moved, moved], "sq")
        sq = op("ReduceSum", [squares, b.const("axis0", [0], np.int64)], "sumsq", keepdims=0)
        norm0 = b.const("norm0", max(self.norm0, 1e-30))
        return op("Div", [op("Sqrt", [sq], "norm"), norm0], "drift")


def _indices_in_the_branch(
    forward: list[onnx.NodeProto], branch: list[onnx.NodeProto]
) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """A max pooling's argmax indices, needed only by the backward, computed in the branch.

    ONNX Runtime's ``MaxPool`` with its ``Indices`` output runs a generic kernel outside the
    blocked (NCHWc) layout of the convolutions around it; without it, the forward's pooling
    is the forward-only graph's. So the forward pools without indices, and the updating
    branch pools again, with them, from the same input.
    """
    top, inside = [], []
    for node in forward:
        if node.op_type != "MaxPool" or len(node.output) < 2 or not node.output[1]:
            top.append(node)
            continue
        pooled = onnx.NodeProto()
        pooled.CopyFrom(node)
        del pooled.output[1:]
        top.append(pooled)
        again = onnx.NodeProto()
        again.CopyFrom(node)
        again.name = f"{node.name}.with_indices"
        again.output[0] = f"adapt.unused.{node.output[0]}"  # the same values as the forward's
        inside.append(again)
    return top, [*inside, *branch]


def _step_branch(
    b: _Builder,
    nodes: Sequence[onnx.NodeProto],
    outputs: dict[str, onnx.ValueInfoProto],
    decision: dict[str, str],
    config: RealmConfig,
    drift: _DriftNorm,
) -> dict[str, str]:
    """The step and its commit inside ``If(keep)``; a skipped sample passes its state through.

    The then branch runs the rest of the step graph (backward, SGD, projections, relax and
    anchor), then commits: θ, momentum and the EMA when the step is finite (and, for SAR, a
    sample passed the cut again at θ + ε), the drift bound, the loss EMA and recovery.

    Returns:
        The ``If``'s outputs by role: ``loss``, ``finite``, ``any_kept``, ``updated``,
        ``clip``, ``recover``, ``params``, ``velocity``, ``ema``, ``loss_ema``,
        ``known_loss``.
    """
    sharp, recovers = config.rules.sharpness, config.rules.recovery
    guard_drift = drift.norm0 > 0
    zero = b.const("zero", 0.0)
    false = b.const("false", False, np.bool_)
    loss_ema, known_loss = _watched(b, FIGURE_LOSS_EMA), _known(b, KNOWN_LOSS_EMA)
    bound = _drift_bound(b) if guard_drift else zero  # outside the branch: read, not written

    def commit() -> dict[str, str]:
        op = b.step
        any_kept = op("Greater", [KEPT_NAME, zero], "any_kept") if sharp else None
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
            moved = _ema(b, loss_ema, LOSS_NAME, known_loss, SAR_LOSS_BETA)
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
        "params": _renamed(p, ""),
        "velocity": _renamed(outputs[NEW_VELOCITY_NAME], ""),
        "ema": helper.make_tensor_value_info("", TensorProto.FLOAT, [config.num_classes]),
        "loss": helper.make_tensor_value_info("", TensorProto.FLOAT, []),
        "loss_ema": helper.make_tensor_value_info("", TensorProto.FLOAT, []),
    }

    def info(role: str, name: str) -> onnx.ValueInfoProto:
        if role in infos:
            return _renamed(infos[role], name)
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


def _drift_bound(b: _Builder) -> str:
    """The drift bound in force: ``max_drift·min(1, rate / full_rate)`` (SPEC §10).

    ``rate`` is the update rate before this call; with ``full_rate`` 0 (off), or no rate
    known yet, the bound is ``max_drift``.
    """
    op = b.step
    one, tiny = b.const("one", 1.0), b.const("tiny", 1e-30)
    scaled = op("Greater", [FULL_RATE_NAME, b.const("zero", 0.0)], "rate_scaled")
    scaled = op("And", [_known(b, KNOWN_UPDATE_RATE), scaled], "rate_known")
    full = op("Max", [FULL_RATE_NAME, tiny], "full_safe")
    share = op("Min", [one, op("Div", [_watched(b, FIGURE_UPDATE_RATE), full], "rate_share")], "s")
    return op("Mul", [MAX_DRIFT_NAME, op("Where", [scaled, share, one], "bound_share")], "bound")


def _renamed(info: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(info)
    out.name = name
    return out


def _info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    kind = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, kind, list(value.shape))


def _ema(b: _Builder, old: str, new: str, known: str, beta: float) -> str:
    """``β·old + (1 − β)·new`` where ``known``, else ``new`` (a constant β, the watch's)."""
    op = b.step
    scaled_old = op("Mul", [old, b.const(f"beta_{beta}", beta)], "b_old")
    scaled_new = op("Mul", [new, b.const(f"one_minus_{beta}", 1 - beta)], "b_new")
    return op("Where", [known, op("Add", [scaled_old, scaled_new], "mix"), new], "ema")


# ---------------------------------------------------------------------------- the decision


_DECISION_SETTINGS = {  # the decision graph's constants that are settings of the adapt graph
    "margin": DIVERSITY_MARGIN_NAME,
    "beta": EMA_BETA_NAME,
    "one_minus_beta": EMA_NEW_NAME,
    "e0": ENTROPY_MARGIN_NAME,
}


def _inline_decision(b: _Builder, config: RealmConfig) -> dict[str, str]:
    """:func:`._decide.decide_model`'s nodes on ``logits`` and the EMA, as scalars where 1-wide."""
    decide = decide_model(config, ir_version=8).graph
    prefix = "adapt.decide."
    known_ema = _known(b, KNOWN_EMA)
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


def _reason(b: _Builder, decision: dict[str, str], step: dict[str, str]) -> str:
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


def _stack(b: _Builder, scalars: Sequence[str], output: str, to: int | None = None) -> str:
    """Scalars (of one type) as one 1-D tensor named ``output``, cast to ``to`` if given."""
    axis = b.const("axis0", [0], np.int64)
    parts = [b.step("Unsqueeze", [value, axis], "part") for value in scalars]
    if to is None:
        return b.op("Concat", parts, output, axis=0)
    return b.op("Cast", [b.step("Concat", parts, "stacked", axis=0)], output, to=to)


def _state_next(
    b: _Builder,
    config: RealmConfig,
    state: list[StateTensor],
    initial: dict[str, str],
    decision: dict[str, str],
    step: dict[str, str],
    drift: _DriftNorm,
) -> None:
    """Every state's next value, as the twins compute it (``OnlineAdaptation._step``).

    The twins reset in turn (SAR's recovery, the collapse guard, the episodic reset); each
    reset empties the watch (``seen`` 0), so a recovery rules out a collapse in the same call,
    and the graph applies the three as one reset, in one ``If`` that only a reset runs.
    """
    finite, u = decision["finite"], step["updated"]
    op = b.step
    false = b.const("false", False, np.bool_)
    zero = b.const("zero", 0.0)

    # 1. the watch sees the sample's finite logits
    known_w = _known(b, KNOWN_WATCH)
    old_entropy = _watched(b, FIGURE_ENTROPY_EMA)
    seen_entropy = _ema(b, old_entropy, decision["entropy"], known_w, WATCH_BETA)
    ent = op("Where", [finite, seen_entropy, old_entropy], "entropy_ema")
    probs = op(
        "Reshape",
        [decision["probs"], b.const("class_shape", [config.num_classes], np.int64)],
        "probs",
    )
    seen_probs = _ema(b, MARGINAL_NAME, probs, known_w, WATCH_BETA)
    marginal = op("Where", [finite, seen_probs, MARGINAL_NAME], "marginal")
    seen = op("Add", [SEEN_NAME, op("Cast", [finite], "seen_inc", to=TensorProto.INT64)], "seen")
    known_w = op("Or", [known_w, finite], "known_watch")
    known_ema = op("Or", [decision["known_ema"], u], "known_ema")
    recover = step["recover"]

    # 2. the update rate, after the recovery (a reset's first figure is this call's)
    not_recovered = op("Not", [recover], "not_recovered")
    known_rate = op("And", [_known(b, KNOWN_UPDATE_RATE), not_recovered], "known_rate")
    uf = op("Cast", [u], "uf", to=TensorProto.FLOAT)
    rate = _ema(b, _watched(b, FIGURE_UPDATE_RATE), uf, known_rate, WATCH_BETA)

    # 3. the collapse guard, on the watch after this sample (COLLAPSE_LIMIT_NAME 0: off)
    collapse = false
    if drift.norm0 > 0:
        on = op("Greater", [COLLAPSE_LIMIT_NAME, zero], "collapse_on")
        logm = op("Log", [op("Max", [marginal, b.const("tiny_p", 1e-12)], "m_safe")], "log_m")
        summed = op(
            "ReduceSum",
            [op("Mul", [marginal, logm], "m_logm"), b.const("axis0", [0], np.int64)],
            "sum",
            keepdims=0,
        )
        narrow = op("Less", [op("Neg", [summed], "spread"), COLLAPSE_LIMIT_NAME], "narrow")
        window = op("GreaterOrEqual", [seen, b.const("window", WATCH_WINDOW, np.int64)], "win")
        watched = op("And", [finite, known_w], "watched")
        maybe = op("And", [op("And", [on, narrow], "c1"), op("And", [window, watched], "c2")], "c3")
        nodes, moved = b.branch(
            lambda: {"moved": op("Greater", [drift(step["params"]), zero], "moved")}
        )
        collapse = "adapt.collapse"
        b.nodes.append(
            helper.make_node(
                "If",
                [maybe],
                [collapse],
                name="adapt.collapse_if",
                then_branch=helper.make_graph(
                    nodes, "adapt_moved", [], [_bool_info(moved["moved"])]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Identity", [false], ["adapt.collapse.no"])],
                    "adapt_not_narrow",
                    [],
                    [_bool_info("adapt.collapse.no")],
                ),
            )
        )
        collapse = op("And", [collapse, not_recovered], "collapse")  # the twins: one or other

    # 4. one reset for all three
    reset = op("Or", [op("Or", [recover, collapse], "r1"), EPISODIC_NAME], "reset")
    current = {
        PARAMS_NAME: step["params"],
        VELOCITY_NAME: step["velocity"],
        EMA_NAME: step["ema"],
        MARGINAL_NAME: marginal,
        SEEN_NAME: seen,
    }
    shapes = {s.name: s.initial for s in state}
    e = GraphBuilder()
    then = helper.make_graph(
        [helper.make_node("Identity", [initial[n]], [f"adapt.reset.{n}"]) for n in current],
        "adapt_reset",
        [],
        [_info(f"adapt.reset.{n}", shapes[n]) for n in current],
    )
    for n, v in current.items():
        e.op("Identity", [v], f"adapt.keep.{n}")
    otherwise = helper.make_graph(
        e.nodes, "adapt_keep", [], [_info(f"adapt.keep.{n}", shapes[n]) for n in current]
    )
    b.nodes.append(
        helper.make_node(
            "If",
            [reset],
            [next_name(n) for n in current],
            name="adapt.reset",
            then_branch=then,
            else_branch=otherwise,
        )
    )
    kept = op("Not", [reset], "no_reset")
    figures = {FIGURE_ENTROPY_EMA: ent, FIGURE_LOSS_EMA: step["loss_ema"], FIGURE_UPDATE_RATE: rate}
    flags = {
        KNOWN_EMA: op("And", [known_ema, kept], "known_ema_kept"),
        KNOWN_WATCH: op("And", [known_w, kept], "known_watch_kept"),
        KNOWN_LOSS_EMA: op("And", [step["known_loss"], kept], "known_loss_kept"),
        KNOWN_UPDATE_RATE: op(
            "Not", [op("Or", [collapse, EPISODIC_NAME], "rate_reset")], "rate_known"
        ),
    }
    _stack(b, [figures[w] for w in ADAPT_WATCH], next_name(WATCH_NAME))
    _stack(b, [flags[k] for k in ADAPT_KNOWN], next_name(KNOWN_NAME))
    _counters(b, decision, step, collapse)


def _bool_info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.BOOL, [])


def _counters(b: _Builder, decision: dict[str, str], step: dict[str, str], collapse: str) -> None:
    """``realm.counters`` plus this call's increments, in :data:`COUNTERS` order."""
    op = b.step
    finite, keep, passed = decision["finite"], decision["keep"], decision["passed_entropy"]
    no_finite = op("Not", [finite], "nonfinite_logits")
    not_keep = op("Not", [keep], "not_keep")
    similar = op("And", [op("And", [finite, passed], "f_p"), not_keep], "similar")
    uncertain = op("And", [finite, op("Not", [passed], "not_passed")], "uncertain")
    # selected, but none kept at θ + ε (SAR): refused by the cut; else a non-finite step
    none_kept = op("And", [keep, op("Not", [step["any_kept"]], "no_kept")], "none_kept")
    uncertain = op("Or", [uncertain, none_kept], "uncertain_again")
    bad = op(
        "And",
        [op("And", [keep, step["any_kept"]], "k"), op("Not", [step["finite"]], "nf")],
        "bad_step",
    )
    flag = {
        COUNTER_SAMPLES: b.const("true", True, np.bool_),
        COUNTER_UPDATES: step["updated"],
        COUNTER_UPDATED_SAMPLES: step["updated"],
        COUNTER_SKIPPED_DIVERSITY: similar,
        COUNTER_SKIPPED_ENTROPY: uncertain,
        COUNTER_SKIPPED_NONFINITE: op("Or", [no_finite, bad], "skipped_nonfinite"),
        COUNTER_RESETS_RECOVERY: step["recover"],
        COUNTER_RESETS_COLLAPSE: collapse,
        COUNTER_DRIFT_CLIPS: step["clip"],
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
        entries.append(
            {STATE_INPUT_KEY: s.name, STATE_OUTPUT_KEY: next_name(s.name), STATE_INITIAL_KEY: file}
        )
    return {
        "version": ADAPT_SECTION_VERSION,
        FILE_KEY: ADAPT_MODEL,
        ADAPT_INPUT_KEY: INPUT_NAME,
        ADAPT_LOGITS_KEY: LOGITS_NAME,
        ADAPT_UPDATED_KEY: ADAPT_UPDATED_NAME,
        ADAPT_SELECTED_KEY: ADAPT_SELECTED_NAME,
        ADAPT_REASON_KEY: ADAPT_REASON_NAME,
        ADAPT_REASONS_KEY: list(ADAPT_REASONS),
        ADAPT_LOSS_KEY: ADAPT_LOSS_NAME,
        ADAPT_COUNTERS_KEY: list(COUNTERS),
        ADAPT_WATCH_KEY: list(ADAPT_WATCH),
        ADAPT_KNOWN_KEY: list(ADAPT_KNOWN),
        ADAPT_STATE_KEY: entries,
        ADAPT_SETTINGS_KEY: list(ADAPT_SETTINGS),  # the slots of realm.settings
    }
