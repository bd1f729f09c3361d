"""Rewrites of a traced aten graph's backward into ops the ONNX exporter writes in standard ONNX."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, fx

from ._errors import UnsupportedModelError
from ._layers import pair, untraced

aten = torch.ops.aten


def restride_(
    x: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> Tensor:
    # Some kernels (mean over a channels-last tensor) restride their result in place to the
    # input's memory format. Values do not change; the restride's backward would be an
    # as_strided_scatter, which has no ONNX form. Keep the tensor as it is.
    if list(x.shape) == list(size) and storage_offset in (None, x.storage_offset()):
        return x
    return aten.as_strided_.default(x, size, stride, storage_offset)


def _shape(node: Any) -> tuple[int, ...]:
    val = node.meta.get("val")
    if val is None:
        meta = node.meta.get("tensor_meta")
        if meta is None:
            raise UnsupportedModelError(f"no shape recorded for {node.name}")
        return tuple(int(d) for d in meta.shape)
    return tuple(int(d) for d in val.shape)


def _conv_input_grad(graph: fx.Graph, node: fx.Node) -> fx.Node:
    grad_out, inp, weight, _bias, stride, padding, dilation, transposed, _op, groups, mask = (
        node.args
    )
    if mask[1] or mask[2]:
        raise UnsupportedModelError(
            "a convolution weight or bias needs a gradient: only norm parameters adapt"
        )
    in_shape, out_shape, w_shape = _shape(inp), _shape(grad_out), _shape(weight)
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
            return graph.call_function(
                aten.convolution.default,
                (
                    grad_out,
                    _flipped_weight(graph, weight, w_shape, groups),
                    None,
                    [1] * spatial,
                    flipped_pad,
                    dilation,
                    False,
                    [0] * spatial,
                    groups,
                ),
            )
        return graph.call_function(
            aten.convolution.default,
            (grad_out, weight, None, stride, padding, dilation, True, out_pad, groups),
        )


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


def _max_pool_input_grad(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """Scatter-add of the output gradient at the forward's argmax positions.

    The indices are ONNX MaxPool's, flat over the whole (N, C, H, W) input (see
    :func:`max_pool_translation`), not torch's per-plane ones: one scatter over the flat
    input, and no second pooling pass to convert them.
    """
    grad_out, inp, *_rest, indices = node.args
    n, c, h, w = _shape(inp)
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
    consumer here is :func:`_max_pool_input_grad`, which takes them as they are.
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


def _dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``(size, stride)`` is the row-major layout (dims of size 1 ignored)."""
    expected = 1
    for dim, step in zip(reversed(list(size)), reversed(list(stride)), strict=True):
        if dim != 1 and step != expected:
            return False
        expected *= dim
    return True


def _fold_restride_backward(graph: fx.Graph, copy: fx.Node) -> bool:
    """``full(0) → as_strided → copy_(·, g) → as_strided`` with dense views is ``reshape(g)``.

    That chain is autograd's backward of a restride that kept every value in place (see
    :func:`restride_`); with both views dense over the whole buffer it moves nothing.
    """
    target, src = copy.args[0], copy.args[1]
    if not (isinstance(target, fx.Node) and target.target == aten.as_strided.default):
        return False
    base = target.args[0]
    if not (isinstance(base, fx.Node) and base.target == aten.full.default):
        return False
    numel = math.prod(base.args[0])
    views = [u for u in base.users if u is not target]
    ok = _dense(target.args[1], target.args[2]) and math.prod(target.args[1]) == numel
    for view in views:
        ok = ok and view.target == aten.as_strided.default
        ok = ok and _dense(view.args[1], view.args[2]) and math.prod(view.args[1]) == numel
    if not ok or not views:
        return False
    for view in views:
        with graph.inserting_before(view):
            reshaped = graph.call_function(aten.reshape.default, (src, list(view.args[1])))
        reshaped.meta.update(view.meta)
        view.replace_all_uses_with(reshaped)
        graph.erase_node(view)
    graph.erase_node(copy)
    graph.erase_node(target)
    graph.erase_node(base)
    return True


def _dense_full_view(node: Any, numel: int) -> bool:
    """An ``as_strided`` at offset 0 whose view is row-major over all ``numel`` values."""
    return (
        isinstance(node, fx.Node)
        and node.target == aten.as_strided.default
        and (len(node.args) < 4 or node.args[3] in (0, None))
        and _dense(node.args[1], node.args[2])
        and math.prod(node.args[1]) == numel
    )


def _fold_dense_copy(graph: fx.Graph, copy: fx.Node) -> bool:
    """``copy_(new_empty_strided(·, dense), src)`` is ``src``: a contiguous clone.

    Autograd's backward of slicing a concatenation (GhostNet's ``cat(...)[:, :k]``) clones
    the gradient into a fresh dense buffer and views it whole with ``as_strided``; after
    functionalization the view becomes ``as_strided_scatter``, which has no ONNX form. With
    the buffer dense and the same size as ``src``, the clone moves nothing: its views are
    reshapes of ``src`` and its other readers read ``src``.
    """
    base, src = copy.args[0], copy.args[1]
    empties = (aten.new_empty_strided.default, aten.empty_strided.default)
    if not (isinstance(base, fx.Node) and base.target in empties and isinstance(src, fx.Node)):
        return False
    size, stride = (base.args[1], base.args[2]) if base.target == empties[0] else base.args[:2]
    val = src.meta.get("val")
    if val is None or list(val.shape) != list(size) or not _dense(size, stride):
        return False
    if any(u is not copy for u in base.users):
        return False
    numel = math.prod(size)
    for user in list(copy.users):
        if _dense_full_view(user, numel):
            with graph.inserting_before(user):
                reshaped = graph.call_function(aten.reshape.default, (src, list(user.args[1])))
            reshaped.meta.update(user.meta)
            user.replace_all_uses_with(reshaped)
            graph.erase_node(user)
        else:
            user.replace_input_with(copy, src)
    graph.erase_node(copy)
    graph.erase_node(base)
    return True


def _storage_index(size: Sequence[int], stride: Sequence[int], offset: int) -> Tensor:
    """The flat storage position of every element of a strided view, in row-major order."""
    index = torch.full([1] * len(size), int(offset), dtype=torch.int64)
    for dim, (n, step) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[dim] = int(n)
        index = index + (torch.arange(int(n), dtype=torch.int64) * int(step)).reshape(shape)
    return index.expand(*[int(n) for n in size]).reshape(-1)


def _in_place(node: fx.Node) -> bool:
    """Whether ``node`` is an aten op that writes into its first argument (``add_``, ...)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and info.is_write


def _buffer_views(base: fx.Node) -> list[fx.Node] | None:
    """Every ``as_strided`` view of ``base``'s storage, views of views too.

    None where something else touches the storage: a reader of the buffer itself, or an
    in-place op other than ``copy_`` into a view.
    """
    views, todo = [], [base]
    while todo:
        node = todo.pop()
        for user in node.users:
            if user.target == aten.as_strided.default and user.args[0] is node:
                views.append(user)
                todo.append(user)
            elif node is base:
                return None  # the buffer read or written other than through a view
            elif _in_place(user) and user.target != aten.copy_.default:
                return None
    return views


def _functionalize_buffer(gm: fx.GraphModule, base: fx.Node) -> bool:
    """Writes (``copy_``) into strided views of a ``full`` buffer, as values: scatters.

    Autograd's backward of an in-place op on a view (GhostNet's ``cat(...)[:, :k] += s``)
    fills a zero buffer through ``as_strided`` views and ``copy_``: after functionalization
    an ``as_strided_scatter``, which has no ONNX form. Here the buffer is a flat value: each
    ``copy_`` scatters its source at the view's storage positions, each read of a view
    gathers them (a reshape where the view is the whole buffer, dense).
    """
    graph = gm.graph
    views = _buffer_views(base)
    if not views:
        return False
    view_set = set(views)
    numel = math.prod(base.args[0])
    order = list(graph.nodes)
    with graph.inserting_after(base):
        current = graph.call_function(aten.reshape.default, (base, [-1]))
    constants = 0

    def offset_of(view: fx.Node) -> int:
        given = view.args[3] if len(view.args) > 3 else None
        if given is not None:
            return int(given)  # as_strided's offset is into the storage, not the view
        parent = view.args[0]
        return offset_of(parent) if parent in view_set else 0  # None: the input's own

    def positions(view: fx.Node) -> fx.Node:
        nonlocal constants
        offset = offset_of(view)
        name = f"_{base.name}_view{constants}"
        constants += 1
        gm.register_buffer(name, _storage_index(view.args[1], view.args[2], offset))
        return graph.get_attr(name)

    def read(view: fx.Node) -> fx.Node:
        if _dense_full_view(view, numel) and offset_of(view) == 0:
            return graph.call_function(aten.reshape.default, (current, list(view.args[1])))
        flat = graph.call_function(aten.index_select.default, (current, 0, positions(view)))
        return graph.call_function(aten.reshape.default, (flat, list(view.args[1])))

    for node in order:
        if node in view_set:
            continue
        if node.target == aten.copy_.default and node.args[0] in view_set:
            view, src = node.args[0], node.args[1]
            with graph.inserting_before(node):
                if src in view_set:  # a copy within the buffer: read before the write
                    src = read(src)
                flat_src = graph.call_function(aten.reshape.default, (src, [-1]))
                if _dense_full_view(view, numel) and offset_of(view) == 0:
                    current = flat_src
                else:
                    current = graph.call_function(
                        aten.scatter.src, (current, 0, positions(view), flat_src)
                    )
                value = read(view)
            node.replace_all_uses_with(value)
            graph.erase_node(node)
            continue
        for arg in node.all_input_nodes:
            if arg in view_set:
                with graph.inserting_before(node):
                    node.replace_input_with(arg, read(arg))
    for view in reversed(views):
        graph.erase_node(view)
    return True


# Upsampling's backward ops (no ONNX form) → their forward op, the arguments after the
# sizes: align_corners where the mode has it, then the scales.
_UPSAMPLE_BACKWARD = {
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


def _upsample_input_grad(gm: fx.GraphModule, node: fx.Node) -> fx.Node:
    """Upsampling's and adaptive average pooling's input gradient: ``A_hᵀ · g · A_w``.

    Nearest, bilinear and bicubic upsampling and adaptive average pooling are separable
    linear maps, ``y = A_h · x · A_wᵀ`` per plane; their gradient is the transposed map, two
    MatMuls with constant matrices. The matrices come from torch's own forward op on basis
    inputs, so every mode, size and ``align_corners`` is torch's.
    """
    grad = node.args[0]
    if node.target == aten._adaptive_avg_pool2d_backward.default:
        forward = aten._adaptive_avg_pool2d.default
        in_hw, out_hw, extra = list(_shape(node.args[1]))[-2:], list(_shape(grad))[-2:], []
    else:
        forward, has_align = _UPSAMPLE_BACKWARD[node.target]
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
            _int64_indices(graph, node)
            continue
        if node.target == aten.copy_.default:
            _fold_restride_backward(graph, node) or _fold_dense_copy(graph, node)
            continue
        if node.target == aten.convolution_backward.default:
            replacement = _conv_input_grad(graph, node)
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
            node.target in _UPSAMPLE_BACKWARD
            or node.target == aten._adaptive_avg_pool2d_backward.default
        ):
            replacement = _upsample_input_grad(gm, node)
            replacement.meta.update(node.meta)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
        elif node.target == aten.max_pool2d_with_indices_backward.default:
            if len(_shape(node.args[1])) != 4:
                raise UnsupportedModelError("max pooling backward is written for 2-d inputs only")
            replacement = _max_pool_input_grad(graph, node)
            replacement.meta.update(node.meta)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
    for node in list(graph.nodes):
        if node.target == aten.full.default and node.users:
            _functionalize_buffer(gm, node)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
