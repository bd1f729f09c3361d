"""A convolution's input gradient as a (transposed) convolution: its weights are frozen."""

from __future__ import annotations

from torch import fx

from .._errors import UnsupportedModelError
from ._nodes import aten, node_shape


def conv_input_grad(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """The input gradient of ``aten.convolution_backward`` ``node`` as a forward convolution.

    Raises:
        UnsupportedModelError: the weight or the bias needs a gradient.
    """
    grad_out, inp, weight, _bias, stride, padding, dilation, transposed, _op, groups, mask = (
        node.args
    )
    if mask[1] or mask[2]:
        raise UnsupportedModelError(
            "a convolution weight or bias needs a gradient: only norm parameters adapt"
        )
    in_shape, out_shape, w_shape = node_shape(inp), node_shape(grad_out), node_shape(weight)
    spatial = len(in_shape) - 2
    if transposed:
        # The input gradient of a transposed convolution is the convolution it transposes:
        # same weight, stride, padding, dilation and groups.
        with graph.inserting_before(node):
            return graph.call_function(
                aten.convolution.default,
                (grad_out, weight, None, stride, padding, dilation, False, [0] * spatial, groups),
            )
    # The transposed convolution inverts the size arithmetic up to the rows/columns that the
    # forward's stride dropped: output_padding puts them back (zeros, as their gradient is).
    out_pad = [
        in_shape[2 + i]
        - (
            (out_shape[2 + i] - 1) * stride[i]
            - 2 * padding[i]
            + dilation[i] * (w_shape[2 + i] - 1)
            + 1
        )
        for i in range(spatial)
    ]
    flipped_pad = [dilation[i] * (w_shape[2 + i] - 1) - padding[i] for i in range(spatial)]
    with graph.inserting_before(node):
        if all(s == 1 for s in stride) and all(p >= 0 for p in flipped_pad):
            # Stride 1: the input gradient is a plain convolution of the output gradient
            # with the weight flipped in space and its in/out channels swapped per group.
            # ORT folds the weight transform into a constant once, at session start, and
            # then runs its fast (NCHWc) convolution instead of ConvTranspose.
            return _flipped_conv(graph, grad_out, weight, w_shape, groups, flipped_pad, dilation)
        if groups > 1 and all(p >= 0 for p in flipped_pad):
            # Strided and grouped (depthwise): ONNX Runtime's grouped ConvTranspose runs
            # several times slower than the forward; the gradient spread onto the input's
            # grid (zeros between) and convolved at stride 1 takes its fast convolution.
            spread = _spread(graph, grad_out, out_shape, stride)
            dx = _flipped_conv(graph, spread, weight, w_shape, groups, flipped_pad, dilation)
            for i in range(spatial):  # the grid's last s − 1 zeros reach past the input
                dx = graph.call_function(aten.slice.Tensor, (dx, 2 + i, 0, in_shape[2 + i]))
            return dx
        return graph.call_function(
            aten.convolution.default,
            (grad_out, weight, None, stride, padding, dilation, True, out_pad, groups),
        )


def _spread(
    graph: fx.Graph, grad_out: fx.Node, out_shape: tuple[int, ...], stride: list[int]
) -> fx.Node:
    """``grad_out`` with ``stride − 1`` zeros after each value along each spatial axis.

    Convolved at stride 1 with the flipped weight, it gives the strided convolution's input
    gradient: each output position's gradient lands where the forward read its window.
    Zeros are concatenated (ONNX Runtime's Concat runs several times faster than its Pad).
    """
    n, c, *sizes = out_shape
    dtype = grad_out.meta["val"].dtype if "val" in grad_out.meta else None
    shape = [n, c]
    for size in sizes:
        shape += [size, 1]
    spread = graph.call_function(aten.view.default, (grad_out, list(shape)))
    for i, s in enumerate(stride):
        if s > 1:
            axis = 3 + 2 * i
            zeros = graph.call_function(
                aten.full.default,
                ([*shape[:axis], s - 1, *shape[axis + 1 :]], 0.0),
                {"dtype": dtype},
            )
            spread = graph.call_function(aten.cat.default, ([spread, zeros], axis))
            shape[axis] = s
    grid = [o * s for o, s in zip(sizes, stride, strict=True)]
    return graph.call_function(aten.view.default, (spread, [n, c, *grid]))


def _flipped_weight(
    graph: fx.Graph, weight: fx.Node, w_shape: tuple[int, ...], groups: int
) -> fx.Node:
    """``W (Cout, Cin/g, *k)`` → ``(Cin, Cout/g, *k)``, spatially flipped (stride-1 dx)."""
    c_out, c_in_g, *kernel = w_shape
    # Only the dimensions longer than 1 flip: a 1×1 kernel needs no Slice for ORT to fold.
    spatial = [2 + i for i, k in enumerate(kernel) if k > 1]
    call = graph.call_function

    def flip(tensor: fx.Node) -> fx.Node:
        return call(aten.flip.default, (tensor, spatial)) if spatial else tensor

    if c_in_g == 1 and c_out == groups:  # depthwise: only the flip
        return flip(weight)
    grouped = call(aten.view.default, (weight, [groups, c_out // groups, c_in_g, *kernel]))
    swapped = call(aten.transpose.int, (grouped, 1, 2))
    merged = call(aten.reshape.default, (swapped, [groups * c_in_g, c_out // groups, *kernel]))
    return flip(merged)


def _flipped_conv(
    graph: fx.Graph,
    x: fx.Node,
    weight: fx.Node,
    w_shape: tuple[int, ...],
    groups: int,
    padding: list[int],
    dilation: list[int],
) -> fx.Node:
    """A stride-1 convolution of ``x`` with the flipped, channel-swapped weight."""
    spatial = len(w_shape) - 2
    flipped = _flipped_weight(graph, weight, w_shape, groups)
    args = (x, flipped, None, [1] * spatial, padding, dilation, False, [0] * spatial, groups)
    return graph.call_function(aten.convolution.default, args)
