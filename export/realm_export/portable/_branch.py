"""The adapt graph's updating branch as ONNX Runtime runs it fastest and smallest.

Two rewrites: its convolution weights made constants of the branch
(:func:`local_weights_in_branches`), and the forward's cheap values computed again inside it
rather than held (:func:`recompute_in_branches`).

ONNX Runtime keeps every outer value an ``If`` branch reads alive until the branch ends: the
forward's activations the backward reads are all held at once, where the step graph frees
each after its last reader. Values the forward made by elementwise arithmetic from values
the branch holds anyway (a frozen BatchNorm's affine output from the convolution's, a ReLU's
output from that) are made again inside the branch, at the price of one elementwise pass
per update, and the forward's copy is freed as soon as the forward is done with it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .._subgraphs import graphs_within, value_bytes

# Elementwise operators, each reading its inputs once and writing one output of their shape:
# computed again, they cost a memory pass, far less than holding the output for the update.
CHEAP_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Neg",
        "Max",
        "Min",
        "Relu",
        "LeakyRelu",
        "Clip",
        "HardSigmoid",
        "HardSwish",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Identity",
        "Reshape",
    }
)
# A value this small (per-channel scales, shapes) costs nothing to hold beside the rest.
SMALL_BYTES = 16 << 10
# How many cheap operators deep a value is made again (BatchNorm's two, an activation).
MAX_DEPTH = 4
AGAIN_PREFIX = "adapt.again."
LOCAL_PREFIX = "adapt.local."  # a branch's own copy of an outer initializer


def recompute_in_branches(model: onnx.ModelProto) -> None:
    """Make each cheap outer value a top-level ``If`` branch reads again inside the branch.

    A value is made again only from values the branch holds anyway, small values, the
    graph's inputs and its initializers, so that what the branch holds only shrinks.

    Args:
        model: the adapt graph, changed in place.
    """
    graph = model.graph
    size = value_bytes(onnx.shape_inference.infer_shapes(model).graph)
    producer = {out: node for node in graph.node for out in node.output}
    order = {id(node): k for k, node in enumerate(graph.node)}
    free = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    free |= {name for name, n in size.items() if n <= SMALL_BYTES}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            branch = attr.g
            held = {v for v in names_read(branch) if v in producer and v not in free}
            chains: dict[int, onnx.NodeProto] = {}
            for value in sorted(held, key=lambda v: (-size.get(v, 0), v)):
                chain = _chain(value, producer, free | (held - {value}), MAX_DEPTH)
                if chain is None or value not in size:
                    continue
                held.discard(value)
                chains.update((id(n), n) for n in chain)
            if chains:
                _place_copies(branch, sorted(chains.values(), key=lambda n: order[id(n)]))


def local_weights_in_branches(graph: onnx.GraphProto) -> None:
    """Read each convolution weight that only one branch reads through a copy in that branch.

    ONNX Runtime lays a convolution out for its fast (NCHWc) kernels only where its weight
    is a constant of the convolution's own graph: read from the outer scope, the backward's
    convolutions in the updating branch ran its generic kernels, several times slower (a
    depthwise one up to seven times). A ``Reshape`` to its own shape in the branch is folded
    into such a constant when the session loads (an ``Identity`` is removed before folding);
    the tensor itself stays in the outer graph, where every client reads external data
    (onnxruntime-web reads none in a branch). Other tensors are left as they are: a copy of
    them would buy nothing and cost memory.
    """
    readers: dict[str, set[tuple[int, int]]] = {}  # name -> {(node, attribute)}; -1: the graph
    for k, node in enumerate(graph.node):
        for name in node.input:
            readers.setdefault(name, set()).add((k, -1))
        for a, attr in enumerate(node.attribute):
            if attr.type == onnx.AttributeProto.GRAPH:
                for name in names_read(attr.g):
                    readers.setdefault(name, set()).add((k, a))
    local: dict[tuple[int, int], dict[str, str]] = {}
    weights: dict[tuple[int, int], set[str]] = {}
    for tensor in graph.initializer:
        owners = readers.get(tensor.name, set())
        if len(owners) != 1 or next(iter(owners))[1] < 0:
            continue
        k, a = owner = next(iter(owners))
        if owner not in weights:
            weights[owner] = _conv_weights(graph.node[k].attribute[a].g)
        if tensor.name in weights[owner]:
            local.setdefault(owner, {})[tensor.name] = LOCAL_PREFIX + tensor.name
    for (k, a), renamed in local.items():
        branch = graph.node[k].attribute[a].g
        _rename_reads(branch, renamed)
        dims = {t.name: list(t.dims) for t in graph.initializer if t.name in renamed}
        copies = []
        for name, copy in renamed.items():
            shape = numpy_helper.from_array(np.array(dims[name], np.int64), copy + ".shape")
            branch.initializer.append(shape)
            copies.append(helper.make_node("Reshape", [name, shape.name], [copy], name=copy))
        rest = list(branch.node)
        del branch.node[:]
        branch.node.extend([*copies, *rest])


def _conv_weights(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph``'s convolutions (its subgraphs' included) read as their weight."""
    return {
        n.input[1]
        for g in graphs_within(graph)
        for n in g.node
        if n.op_type in ("Conv", "ConvTranspose")
    }


def _chain(
    value: str, producer: dict[str, onnx.NodeProto], free: set[str], depth: int
) -> list[onnx.NodeProto] | None:
    """The cheap nodes that make ``value`` from ``free`` values, or None where none do."""
    node = producer.get(value)
    if node is None or node.op_type not in CHEAP_OPS or len(node.output) != 1 or node.domain:
        return None
    nodes = [node]
    for name in node.input:
        if not name or name in free:
            continue
        if depth <= 1:
            return None
        inner = _chain(name, producer, free, depth - 1)
        if inner is None:
            return None
        nodes.extend(inner)
    return nodes


def _place_copies(branch: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """Put copies of ``nodes`` in ``branch``, each just before its first reader there.

    The backward reads the forward's values in reverse: made at the branch's start, the
    first layers' values would be alive through the whole backward, as before.
    """
    renamed = {out: AGAIN_PREFIX + out for node in nodes for out in node.output}
    maker: dict[str, onnx.NodeProto] = {}
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = AGAIN_PREFIX + node.name
        _rename(copy.input, renamed)
        _rename(copy.output, renamed)
        maker[copy.output[0]] = copy
    _rename_reads(branch, renamed)
    placed: list[onnx.NodeProto] = []
    done: set[str] = set()

    def place(names: Iterable[str]) -> None:
        for name in names:
            copy = maker.get(name)
            if copy is not None and name not in done:
                done.add(name)
                place(copy.input)  # a copy's own inputs first
                placed.append(copy)

    for node in list(branch.node):
        place(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                place(sorted(names_read(attr.g)))
        placed.append(node)
    place(out.name for out in branch.output)
    del branch.node[:]
    branch.node.extend(placed)


def _rename_reads(graph: onnx.GraphProto, renamed: dict[str, str]) -> None:
    for g in graphs_within(graph):
        for node in g.node:
            _rename(node.input, renamed)
        for out in g.output:
            if out.name in renamed:
                out.name = renamed[out.name]


def _rename(names: Iterable[str] | list[str], renamed: dict[str, str]) -> None:
    for k, name in enumerate(names):
        if name in renamed:
            names[k] = renamed[name]  # type: ignore[index]


def names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` or of its subgraphs reads, and their outputs."""
    used: set[str] = set()
    for g in graphs_within(graph):
        for node in g.node:
            used.update(node.input)
        used.update(out.name for out in g.output)  # a branch may pass an outer value through
    return used
