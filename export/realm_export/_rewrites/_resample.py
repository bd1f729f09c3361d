"""Upsampling's and adaptive average pooling's input gradient: two MatMuls with constants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, fx

from .._layers import untraced
from ._nodes import aten, node_shape

# Upsampling's backward ops (no ONNX form) → their forward op, the arguments after the
# sizes: align_corners where the mode has it, then the scales.
UPSAMPLE_BACKWARD = {
    aten.upsample_nearest2d_backward.default: (aten.upsample_nearest2d.default, 0),
    aten._upsample_nearest_exact2d_backward.default: (
        aten._upsample_nearest_exact2d.default,
        0,
    ),
    aten.upsample_bilinear2d_backward.default: (aten.upsample_bilinear2d.default, 1),
    aten.upsample_bicubic2d_backward.default: (aten.upsample_bicubic2d.default, 1),
}


def _axis_matrix(
    forward: Any, extra: Sequence[Any], in_hw: Sequence[int], out_hw: Sequence[int], axis: int
) -> Tensor:
    """The (out, in) matrix of a separable upsampling along one axis, read off the real op.

    Basis input ``k`` is one along ``axis`` at ``k`` and constant across the other axis;
    torch's interpolation weights sum to one along each axis, so its output along ``axis``
    is column ``k`` of the matrix.
    """
    size = int(in_hw[axis])
    basis = (
        torch.eye(size).reshape(size, 1, size, 1)
        if axis == 0
        else torch.eye(size).reshape(size, 1, 1, size)
    )
    basis = basis.expand(size, 1, int(in_hw[0]), int(in_hw[1])).contiguous()
    with untraced():
        out = forward(basis.to(torch.float32), list(out_hw), *extra)
    columns = out[:, 0, :, 0] if axis == 0 else out[:, 0, 0, :]
    return columns.transpose(0, 1).contiguous()  # (out, in)


def upsample_input_grad(gm: fx.GraphModule, node: fx.Node) -> fx.Node:
    """Upsampling's and adaptive average pooling's input gradient: ``A_hᵀ · g · A_w``.

    Nearest, bilinear and bicubic upsampling and adaptive average pooling are separable
    linear maps, ``y = A_h · x · A_wᵀ`` per plane; their gradient is the transposed map, two
    MatMuls with constant matrices. The matrices come from torch's own forward op on basis
    inputs, so every mode, size and ``align_corners`` is torch's.
    """
    grad = node.args[0]
    if node.target == aten._adaptive_avg_pool2d_backward.default:
        forward = aten._adaptive_avg_pool2d.default
        in_hw, out_hw, extra = list(node_shape(node.args[1]))[-2:], list(node_shape(grad))[-2:], []
    else:
        forward, has_align = UPSAMPLE_BACKWARD[node.target]
        out_hw, in_hw = list(node.args[1]), list(node.args[2])[-2:]
        rest = list(node.args[3:]) + [None] * (2 + has_align - len(node.args[3:]))
        extra = rest[: 2 + has_align]
    graph = gm.graph
    a_h = _axis_matrix(forward, extra, in_hw, out_hw, 0)  # (Ho, Hi)
    a_w = _axis_matrix(forward, extra, in_hw, out_hw, 1)  # (Wo, Wi)
    names = []
    for tensor in (a_h.transpose(0, 1).contiguous(), a_w):
        name = f"_{node.name}_matrix{len(names)}"
        gm.register_buffer(name, tensor)
        names.append(name)
    with graph.inserting_before(node):
        left, right = (graph.get_attr(n) for n in names)
        rows = graph.call_function(aten.matmul.default, (grad, right))  # (N, C, Ho, Wi)
        return graph.call_function(aten.matmul.default, (left, rows))  # (N, C, Hi, Wi)
