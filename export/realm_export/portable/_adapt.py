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

from pathlib import Path
from typing import Any

import numpy as np
import onnx
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
    COUNTER_SAMPLES,
    COUNTERS,
    COUNTERS_NAME,
    EPISODIC_NAME,
    FILE_KEY,
    INPUT_NAME,
    LOGITS_NAME,
    PARAMS_NAME,
    SAMPLE_INDEX_NAME,
    SAMPLE_WEIGHT_NAME,
    SETTINGS_NAME,
    SOURCE_PARAMS,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
    next_name,
)

from ._adapt_builder import AdaptBuilder, DriftNorm, value_info
from ._adapt_state import adapt_state, state_next
from ._adapt_step import inline_decision, reason_of, step_branch
from ._branch import local_weights_in_branches, names_read, recompute_in_branches
from ._matvec import one_weight_for_matvecs


def adapt_model(
    step: onnx.ModelProto,
    config: RealmConfig,
    source: np.ndarray,
    directory: Path | None = None,
) -> onnx.ModelProto:
    """The adapt graph of ``step`` (the validated portable step graph).

    Args:
        step: the step graph proto (``realm_export.portable._step``), not modified.
        config: the export's configuration: the method is the graph's; its settings
            (:func:`realm_runtime.contract.adapt_settings`) are ``realm.settings``'s initial
            value.
        source: ``(P,)`` float32, the source values of ``realm.params``.
        directory: where ``step``'s external data lies, if it has any: weights are compared
            by value there (:func:`._matvec.one_weight_for_matvecs`).

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

    b = AdaptBuilder("adapt.const.")
    b.initializer(SAMPLE_WEIGHT_NAME, [1.0])  # a kept sample's weight; EATA's factor is inside
    state = adapt_state(config, source)
    initial = {s.name: b.const("initial." + s.name, s.initial, s.initial.dtype) for s in state}
    decision = inline_decision(b, config)
    norm = DriftNorm(b, config, source, initial[PARAMS_NAME])
    step_out = step_branch(b, branch, outputs, decision, config, norm)
    reason_of(b, decision, step_out)
    state_next(b, config, state, initial, decision, step_out, norm)

    del graph.node[:]
    graph.node.extend([*forward, *b.nodes])
    graph.initializer.extend(b.initializers)
    sample = [i for i in graph.input if i.name == INPUT_NAME]
    del graph.input[:]
    _settings(graph)
    _drop_unused_initializers(graph)
    graph.input.extend([*sample, *(value_info(s.name, s.initial) for s in state)])
    logits = outputs[LOGITS_NAME]
    del graph.output[:]
    graph.output.extend(
        [
            logits,
            helper.make_tensor_value_info(ADAPT_UPDATED_NAME, TensorProto.BOOL, []),
            helper.make_tensor_value_info(ADAPT_SELECTED_NAME, TensorProto.BOOL, []),
            helper.make_tensor_value_info(ADAPT_REASON_NAME, TensorProto.INT64, []),
            helper.make_tensor_value_info(ADAPT_LOSS_NAME, TensorProto.FLOAT, []),
            *(value_info(next_name(s.name), s.initial) for s in state),
        ]
    )
    del graph.value_info[:]
    graph.name = "realm_adapt"
    one_weight_for_matvecs(model, directory)
    recompute_in_branches(model)
    local_weights_in_branches(graph)
    return model


def _settings(graph: onnx.GraphProto) -> None:
    """Each setting the graph reads, gathered from ``realm.settings`` by its name.

    The graph's nodes (its branches' included) read the settings by name; a node per setting
    read takes it out of the vector, so a client changes a setting by writing its slot. A
    method that draws reads ``realm.sample_index``: the counter of samples, before this one.
    """
    used = names_read(graph)
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
    if SAMPLE_INDEX_NAME in used:  # a method that draws: the samples before this one
        k = COUNTERS.index(COUNTER_SAMPLES)
        index = numpy_helper.from_array(np.array(k, np.int64), "adapt.const.counter_samples")
        graph.initializer.append(index)
        nodes.append(
            helper.make_node("Gather", [COUNTERS_NAME, index.name], [SAMPLE_INDEX_NAME], axis=0)
        )
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *rest])  # first: the forward reads none, the rest may


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the initializers no node reads (the step's inputs the decision made constant)."""
    used = names_read(graph)
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


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
    model = adapt_model(step, config, source, directory)
    onnx.save_model(model, str(directory / ADAPT_MODEL))
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
