"""Batch-1 matrix–vector products that read one copy of their weight in both directions.

At batch 1 a linear layer, and a 1×1 convolution on a 1×1 map (squeeze-excite, a pooled
head), multiply a matrix by a vector; the updating branch's input gradient multiplies the
same matrix, transposed, by a vector. ONNX Runtime keeps its own layout of a constant that a
kernel reads as the B operand (a pre-packed GEMM weight, an NCHWc convolution's blocked
weight) and folds the backward's transposed weight into a second constant when the session
loads: each such matrix is held twice. It never re-lays out the A operand of ``Gemm``: with
the weight as A in both directions (``transA`` for the transpose), and the vector as a
column, both read the one tensor the export stores.

A weight is rewritten only where every node that reads it is such a product and the graph
states batch 1 for its forward, so that no reader keeps the old layout alive beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .._subgraphs import graphs_within
from ._branch import names_read

PREFIX = "adapt.matvec."
# Operators a weight may pass through on its way to the backward's convolution (its transpose).
_LAYOUT_OPS = frozenset({"Reshape", "Transpose", "Identity"})


@dataclass(frozen=True)
class _Product:
    """One node that multiplies a stored matrix (or its transpose) by a vector."""

    graph: int  # which graph of ``graphs_within(model.graph)`` holds it
    node: int  # the Conv's, Gemm's or MatMul's index in that graph
    tensor: str  # the initializer it reads: the weight, or a stored transpose of it
    vector: str  # the value multiplied: (1, k), or (1, k, 1, 1) for a convolution
    output: str  # the product, as the node wrote it
    transposed: bool  # whether it multiplies by ``tensor``'s matrix transposed
    rows: int  # n, the product's length
    conv: bool  # a convolution's (1, n, 1, 1) rather than the vector's shape, n last
    bias: str | None = None  # a constant of n values added to the product
    alpha: float = 1.0  # Gemm's factors
    beta: float = 1.0
    layout: tuple[int, ...] = ()  # Reshape/Transpose nodes that fed the tensor to it
    batch_one: bool = False  # whether shape inference states the vector as one sample


# (graph, node) positions of a name's readers; node -1: the graph's output.
_Readers = dict[str, list[tuple[int, int]]]


def one_weight_for_matvecs(model: onnx.ModelProto, directory: Path | None = None) -> int:
    """Rewrite ``model``'s batch-1 matrix–vector products to read their weight as ``A``.

    A weight is rewritten where the top level (the forward) and a nested graph (the
    updating branch) both multiply by it, directly or through a stored transpose of it
    (which is then dropped): a weight one direction reads is held once already.

    Args:
        model: the adapt graph, changed in place.
        directory: where its external data lies, if it has any.

    Returns:
        How many weights now serve both directions from one tensor.
    """
    graphs = list(graphs_within(model.graph))
    shapes = _static_shapes(onnx.shape_inference.infer_shapes(model).graph)
    constants = {t.name: t for g in graphs for t in g.initializer}
    readers = _readers(graphs)
    products: dict[str, list[_Product]] = {}
    for t in constants.values():
        if t.data_type == TensorProto.FLOAT and _matrix_dims(t) is not None:
            found = [
                _product(t, graphs, g, i, readers, shapes, constants)
                for g, i in readers.get(t.name, [])
            ]
            if found and all(p is not None for p in found):
                products[t.name] = [p for p in found if p is not None]
    plan: list[tuple[onnx.TensorProto, list[tuple[_Product, bool]]]] = []
    claimed: set[str] = set()
    values = _Values(constants, directory)
    for weight in model.graph.initializer:
        if weight.name not in products or weight.name in claimed:
            continue
        aliases = _stored_transposes(weight, products, constants, claimed, values)
        family = {weight.name: False, **aliases}
        kept = [(p, p.transposed != flip) for name, flip in family.items() for p in products[name]]
        top = [p for p, _ in kept if p.graph == 0]
        if not top or len(top) == len(kept) or not all(p.batch_one for p in top):
            continue
        claimed.update(family)
        plan.append((weight, kept))
    return _apply(model, graphs, plan, constants, readers)


def _apply(
    model: onnx.ModelProto,
    graphs: list[onnx.GraphProto],
    plan: list[tuple[onnx.TensorProto, list[tuple[_Product, bool]]]],
    constants: dict[str, onnx.TensorProto],
    readers: _Readers,
) -> int:
    """Rewrite the products of ``plan``; drop what only their old form read."""
    replaced: dict[tuple[int, int], list[onnx.NodeProto]] = {}
    dropped: set[str] = set()  # stored transposes and layout shapes, where nothing else reads them
    for k, (weight, kept) in enumerate(plan):
        for j, (p, transposed) in enumerate(kept):
            prefix = f"{PREFIX}{k}.{j}."
            nodes, consts = _rewritten(p, weight.name, transposed, prefix, constants, readers)
            graphs[p.graph].initializer.extend(consts)
            for node in nodes:  # the part of the step and the op it computes, for the profile
                node.metadata_props.extend(graphs[p.graph].node[p.node].metadata_props)
            replaced[(p.graph, p.node)] = nodes
            replaced.update(((p.graph, i), []) for i in p.layout)
            dropped.add(p.tensor)
            dropped.update(n for i in p.layout for n in graphs[p.graph].node[i].input[1:])
        dims = _matrix_dims(weight) or []
        del weight.dims[:]
        weight.dims.extend(dims)
    for g in reversed(range(len(graphs))):  # nested graphs first: a parent copies its nodes
        if any(key[0] == g for key in replaced):
            rebuilt = [
                _copy(n)
                for i, node in enumerate(graphs[g].node)
                for n in replaced.get((g, i), [node])
            ]
            del graphs[g].node[:]
            graphs[g].node.extend(rebuilt)
    unread = dropped - names_read(model.graph)
    for graph in graphs:
        for i in reversed(range(len(graph.initializer))):
            if graph.initializer[i].name in unread:
                del graph.initializer[i]
    return len(plan)


def _stored_transposes(
    weight: onnx.TensorProto,
    products: dict[str, list[_Product]],
    constants: dict[str, onnx.TensorProto],
    claimed: set[str],
    values: _Values,
) -> dict[str, bool]:
    """Other multiplied initializers that hold ``weight``'s matrix: name → whether transposed.

    The exporter folds a small weight's transpose into a constant of its own; compared by
    value, it is read as the weight itself and dropped.
    """
    matrix = values(weight.name)
    if matrix is None:
        return {}
    out = {}
    for name in products:
        if name == weight.name or name in claimed or _numel(constants[name]) != matrix.size:
            continue
        other = values(name)
        if other is None:
            continue
        if other.shape == matrix.shape and np.array_equal(other, matrix):
            out[name] = False
        elif other.shape == matrix.T.shape and np.array_equal(other, matrix.T):
            out[name] = True
    return out


class _Values:
    """Each initializer's matrix, read at most once (external data from ``directory``)."""

    def __init__(self, constants: dict[str, onnx.TensorProto], directory: Path | None) -> None:
        self._constants = constants
        self._directory = directory
        self._read: dict[str, np.ndarray | None] = {}

    def __call__(self, name: str) -> np.ndarray | None:
        """The tensor's matrix, or None where its data is in no file at hand."""
        if name not in self._read:
            self._read[name] = self._matrix(self._constants[name])
        return self._read[name]

    def _matrix(self, tensor: onnx.TensorProto) -> np.ndarray | None:
        external = tensor.data_location == TensorProto.EXTERNAL
        if external and self._directory is None:
            return None
        base = str(self._directory) if external else ""
        try:
            values = numpy_helper.to_array(tensor, base_dir=base)
        except (OSError, ValueError):  # a file that is not there: compared as different
            return None
        return values.reshape(_matrix_dims(tensor) or [-1])


def _numel(tensor: onnx.TensorProto) -> int:
    return int(np.prod(list(tensor.dims)))


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Every value's shape where shape inference states each dimension."""
    shapes: dict[str, tuple[int, ...]] = {}
    for g in graphs_within(graph):
        for info in (*g.value_info, *g.input, *g.output):
            t = info.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                shapes[info.name] = tuple(d.dim_value for d in t.shape.dim)
    return shapes


def _readers(graphs: list[onnx.GraphProto]) -> _Readers:
    """Each name's readers in ``graphs``; a graph's outputs count as one (node -1)."""
    out: _Readers = {}
    for g, graph in enumerate(graphs):
        for i, node in enumerate(graph.node):
            for name in dict.fromkeys(node.input):
                out.setdefault(name, []).append((g, i))
        for o in graph.output:
            out.setdefault(o.name, []).append((g, -1))
    return out


def _matrix_dims(weight: onnx.TensorProto) -> list[int] | None:
    """The weight as a matrix: a linear layer's as it is, a 1×1 kernel's (out, in)."""
    dims = list(weight.dims)
    if len(dims) == 2:
        return dims
    if len(dims) == 4 and dims[2:] == [1, 1]:
        return dims[:2]
    return None


def _product(
    tensor: onnx.TensorProto,
    graphs: list[onnx.GraphProto],
    g: int,
    i: int,
    readers: _Readers,
    shapes: dict[str, tuple[int, ...]],
    constants: dict[str, onnx.TensorProto],
) -> _Product | None:
    """The reader at ``(g, i)`` as a product by ``tensor``'s matrix, or None where it is not."""
    if i < 0:
        return None
    node = graphs[g].node[i]
    if node.domain:
        return None
    if node.op_type in ("Gemm", "MatMul"):
        return _linear(tensor, g, i, node, shapes, constants)
    layout: list[int] = []
    value = tensor.name
    while node.op_type in _LAYOUT_OPS and not node.domain:  # the backward's transposed copy
        if node.input[0] != value or len(node.output) != 1:
            return None
        layout.append(i)
        value = node.output[0]
        nxt = readers.get(value, [])
        if len(nxt) != 1 or nxt[0][0] != g or nxt[0][1] < 0:
            return None
        i = nxt[0][1]
        node = graphs[g].node[i]
    if node.op_type != "Conv" or node.domain:
        return None
    return _conv(tensor, g, i, node, value, tuple(layout), shapes, constants, graphs[g])


def _conv(
    tensor: onnx.TensorProto,
    g: int,
    i: int,
    node: onnx.NodeProto,
    kernel: str,
    layout: tuple[int, ...],
    shapes: dict[str, tuple[int, ...]],
    constants: dict[str, onnx.TensorProto],
    graph: onnx.GraphProto,
) -> _Product | None:
    """A 1×1 convolution of a 1×1 map by ``tensor`` (through ``layout``) as a product."""
    if len(node.input) < 2 or node.input[1] != kernel or node.input[0] == kernel:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("group", 1) != 1 or any(attrs.get("pads", [0])):
        return None
    if list(attrs.get("kernel_shape", [1, 1])) != [1, 1]:
        return None
    transposed = _transposed(tensor, [graph.node[j] for j in layout], constants)
    if transposed is None:
        return None
    rows, cols = _matrix_dims(tensor) or [0, 0]
    n, k = (cols, rows) if transposed else (rows, cols)
    seen = shapes.get(node.input[0])
    if seen is not None and seen != (1, k, 1, 1):
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and not _is_vector(constants.get(bias), n):
        return None
    return _Product(
        g, i, tensor.name, node.input[0], node.output[0], transposed, n, True,
        bias=bias, layout=layout, batch_one=seen is not None,
    )  # fmt: skip


def _linear(
    tensor: onnx.TensorProto,
    g: int,
    i: int,
    node: onnx.NodeProto,
    shapes: dict[str, tuple[int, ...]],
    constants: dict[str, onnx.TensorProto],
) -> _Product | None:
    """``Gemm(a, W)`` or ``MatMul(a, W)``, ``a`` one row, as ``W``'s matrix by ``a``'s column."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) < 2 or node.input[1] != tensor.name or node.input[0] == tensor.name:
        return None
    if attrs.get("transA", 0) != 0 or len(tensor.dims) != 2:
        return None
    trans_b = bool(attrs.get("transB", 0))
    k, n = (tensor.dims[1], tensor.dims[0]) if trans_b else (tensor.dims[0], tensor.dims[1])
    seen = shapes.get(node.input[0])
    if seen is not None and (seen[-1:] != (k,) or int(np.prod(seen[:-1])) != 1):
        return None
    if node.op_type == "Gemm" and seen is not None and len(seen) != 2:
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and not _is_vector(constants.get(bias), n):
        return None
    # A row a times op(W) is op(W)ᵀ times a's column: W itself where transB, else Wᵀ.
    return _Product(
        g, i, tensor.name, node.input[0], node.output[0], not trans_b, n, False,
        bias=bias, alpha=float(attrs.get("alpha", 1.0)), beta=float(attrs.get("beta", 1.0)),
        batch_one=seen is not None,
    )  # fmt: skip


def _is_vector(tensor: onnx.TensorProto | None, n: int) -> bool:
    """Whether ``tensor`` is a constant of ``n`` values laid out as ``(n,)`` or ``(1, n)``."""
    return tensor is not None and list(tensor.dims) in ([n], [1, n])


def _transposed(
    tensor: onnx.TensorProto,
    layout: list[onnx.NodeProto],
    constants: dict[str, onnx.TensorProto],
) -> bool | None:
    """Whether ``layout`` makes ``tensor``'s matrix (False) or its transpose (True) a 1×1 kernel.

    The layout nodes run on the tensor's element indices; None where they make anything
    else, or read a shape that is not a constant.
    """
    matrix = _matrix_dims(tensor)
    if matrix is None:
        return None
    index = np.arange(_numel(tensor), dtype=np.int64).reshape(list(tensor.dims))
    for node in layout:
        if node.op_type == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            index = np.transpose(index, perm)
        elif node.op_type == "Reshape":
            shape = constants.get(node.input[1]) if len(node.input) > 1 else None
            if shape is None:
                return None
            allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
            target = [int(d) for d in numpy_helper.to_array(shape)]
            if not allowzero:
                target = [index.shape[j] if d == 0 else d for j, d in enumerate(target)]
            try:
                index = index.reshape(target)
            except ValueError:
                return None
    if index.ndim != 4 or index.shape[2:] != (1, 1):
        return None
    plain = np.arange(index.size, dtype=np.int64).reshape(matrix)
    if np.array_equal(index[:, :, 0, 0], plain):
        return False
    if np.array_equal(index[:, :, 0, 0], plain.T):
        return True
    return None


def _rewritten(
    p: _Product,
    weight: str,
    transposed: bool,
    prefix: str,
    constants: dict[str, onnx.TensorProto],
    readers: _Readers,
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes that replace ``p``'s: a column, a ``Gemm`` with ``weight`` as A, a reshape.

    The column is ``(-1, 1)``: a vector of more than one sample makes ``Gemm`` fail on its
    shapes rather than multiply the wrong values.
    """
    consts = [numpy_helper.from_array(np.array([-1, 1], np.int64), prefix + "column")]
    inputs = [weight, prefix + "x"]
    if p.bias is not None:
        if len(readers.get(p.bias, [])) == 1:  # its own: laid out as a column where it is
            bias = constants[p.bias]
            del bias.dims[:]
            bias.dims.extend([p.rows, 1])
            inputs.append(p.bias)
        else:
            column = numpy_helper.to_array(constants[p.bias]).reshape(p.rows, 1)
            consts.append(numpy_helper.from_array(column, prefix + "bias"))
            inputs.append(prefix + "bias")
    nodes = [
        helper.make_node(
            "Reshape", [p.vector, prefix + "column"], [prefix + "x"], name=prefix + "x"
        ),
        helper.make_node(
            "Gemm", inputs, [prefix + "y"], name=prefix + "gemm",
            transA=int(transposed), alpha=p.alpha, beta=p.beta,
        ),
    ]  # fmt: skip
    if p.conv:
        consts.append(
            numpy_helper.from_array(np.array([1, p.rows, 1, 1], np.int64), prefix + "nchw")
        )
        shape = prefix + "nchw"
    else:  # the vector's own shape with n last, as MatMul would give it
        consts.append(numpy_helper.from_array(np.array([p.rows], np.int64), prefix + "n"))
        nodes += [
            helper.make_node("Shape", [p.vector], [prefix + "lead"], name=prefix + "lead", end=-1),
            helper.make_node(
                "Concat", [prefix + "lead", prefix + "n"], [prefix + "shape"],
                name=prefix + "shape", axis=0,
            ),
        ]  # fmt: skip
        shape = prefix + "shape"
    nodes.append(
        helper.make_node("Reshape", [prefix + "y", shape], [p.output], name=prefix + "out")
    )
    return nodes, consts


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out
