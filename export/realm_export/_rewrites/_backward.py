"""The rewrites applied to a traced graph: each backward op without an ONNX form replaced."""

from __future__ import annotations

import operator

import torch
from torch import fx

from .._errors import UnsupportedModelError
from .._provenance import inherit
from ._buffers import fold_dense_copy, fold_restride_backward, functionalize_buffer
from ._conv import conv_input_grad
from ._max_pool import max_pool_input_grad
from ._nodes import aten, node_shape
from ._resample import UPSAMPLE_BACKWARD, upsample_input_grad

# The index-writing ops whose index tensors become ONNX ScatterND indices (int64 only).
_INDEX_PUT = (aten.index_put.default, aten._unsafe_index_put.default)


def _int64_indices(graph: fx.Graph, node: fx.Node) -> None:
    """Cast ``node``'s int32 index tensors to int64, in place.

    Torch's ``unfold_backward`` decomposition indexes with an int32 ``arange`` (blocked
    attention's ``Tensor.unfold``: HaloNet); ONNX ScatterND reads int64 indices only, and
    ONNX Runtime refuses the graph otherwise. The indices are the same numbers.
    """
    cast = []
    for index in node.args[1]:
        value = index.meta.get("val") if isinstance(index, fx.Node) else None
        if value is not None and value.dtype == torch.int32:
            with graph.inserting_before(node):
                index = graph.call_function(aten._to_copy.default, (index,), {"dtype": torch.int64})
            index.meta["val"] = value.to(torch.int64)
        cast.append(index)
    node.args = (node.args[0], cast, *node.args[2:])


def rewrite_backward_ops(gm: fx.GraphModule) -> None:
    """Replace the backward ops without an ONNX translation by equivalent forward ops."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _INDEX_PUT:
            with inherit(graph, node):
                _int64_indices(graph, node)
            continue
        if node.target == aten.copy_.default:
            with inherit(graph, node):
                fold_restride_backward(graph, node) or fold_dense_copy(graph, node)
            continue
        if node.target == aten.convolution_backward.default:
            with inherit(graph, node):
                replacement = conv_input_grad(graph, node)
            for user in list(node.users):
                if user.target is operator.getitem and user.args[1] == 0:
                    # The shape of what it replaces: a later rewrite may read it (conv → conv).
                    replacement.meta.update(user.meta)
                    user.replace_all_uses_with(replacement)
                    graph.erase_node(user)
                elif user.users:
                    raise UnsupportedModelError("a convolution weight gradient is used")
                else:
                    graph.erase_node(user)
            graph.erase_node(node)
        elif (
            node.target in UPSAMPLE_BACKWARD
            or node.target == aten._adaptive_avg_pool2d_backward.default
        ):
            with inherit(graph, node):
                replacement = upsample_input_grad(gm, node)
            replacement.meta.update(node.meta)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
        elif node.target == aten.max_pool2d_with_indices_backward.default:
            if len(node_shape(node.args[1])) != 4:
                raise UnsupportedModelError("max pooling backward is written for 2-d inputs only")
            with inherit(graph, node):
                replacement = max_pool_input_grad(graph, node)
            replacement.meta.update(node.meta)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
    for node in list(graph.nodes):
        if node.target == aten.full.default and node.users:
            with inherit(graph, node):
                functionalize_buffer(gm, node)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
