"""Max pooling: ONNX MaxPool's own indices, and the input gradient scattered at them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from .._errors import UnsupportedModelError
from .._layers import pair
from ._nodes import aten, node_shape


def max_pool_input_grad(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """Scatter-add of the output gradient at the forward's argmax positions.

    The indices are ONNX MaxPool's, flat over the whole (N, C, H, W) input (see
    :func:`max_pool_translation`), not torch's per-plane ones: one scatter over the flat
    input, and no second pooling pass to convert them.
    """
    grad_out, inp, *_rest, indices = node.args
    n, c, h, w = node_shape(inp)
    forward = indices.args[0] if isinstance(indices, fx.Node) else None
    if forward is None or forward.target != aten.max_pool2d_with_indices.default:
        raise UnsupportedModelError("max pooling backward without its forward's indices")
    for user in forward.users:  # the indices must feed this backward only
        if user.args[1] == 1 and any(u is not node for u in user.users):
            raise UnsupportedModelError(
                "the model uses max-pooling indices itself (return_indices=True); the portable "
                "graph keeps them for the gradient only"
            )
    with graph.inserting_before(node):
        flat_grad = graph.call_function(aten.view.default, (grad_out, [-1]))
        flat_idx = graph.call_function(aten.view.default, (indices, [-1]))
        zeros = graph.call_function(
            aten.zeros.default,
            ([n * c * h * w],),
            {"dtype": torch.float32, "device": torch.device("cpu")},
        )
        scattered = graph.call_function(aten.scatter_add.default, (zeros, 0, flat_idx, flat_grad))
        return graph.call_function(aten.view.default, (scattered, [n, c, h, w]))


def max_pool_translation(
    x: Any,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    ceil_mode: bool = False,
) -> tuple[Any, Any]:
    """ONNX for ``aten.max_pool2d_with_indices``: MaxPool's own (flat NCHW) indices.

    torch.onnx's translation converts them to torch's per-plane indices with a second,
    1×1 MaxPool over the whole input every step (a sizeable share of a stem); the only
    consumer here is :func:`max_pool_input_grad`, which takes them as they are.
    """
    from onnxscript import opset18 as op

    k = pair(kernel_size)
    s = pair(stride) if len(stride) else k
    p = pair(padding)
    d = pair(dilation)
    y, indices = op.MaxPool(
        x,
        ceil_mode=int(ceil_mode),
        dilations=list(d),
        kernel_shape=list(k),
        pads=[p[0], p[1], p[0], p[1]],
        strides=list(s),
    )
    return y, indices
