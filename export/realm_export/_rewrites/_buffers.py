"""Writes through strided views of a buffer (restrides, clones, in-place ops on views) as values.

Autograd's backward of a restride, of slicing a concatenation or of an in-place op on a view
fills buffers through ``as_strided`` views; after functionalization these become
``as_strided_scatter``, which has no ONNX form. Here they become reshapes, gathers and
scatters of a flat value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, fx

from ._nodes import aten


def restride_(
    x: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> Tensor:
    # Some kernels (mean over a channels-last tensor) restride their result in place to the
    # input's memory format. Values do not change; the restride's backward would be an
    # as_strided_scatter, which has no ONNX form. Keep the tensor as it is.
    if list(x.shape) == list(size) and storage_offset in (None, x.storage_offset()):
        return x
    return aten.as_strided_.default(x, size, stride, storage_offset)


def _dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``(size, stride)`` is the row-major layout (dims of size 1 ignored)."""
    expected = 1
    for dim, step in zip(reversed(list(size)), reversed(list(stride)), strict=True):
        if dim != 1 and step != expected:
            return False
        expected *= dim
    return True


def fold_restride_backward(graph: fx.Graph, copy: fx.Node) -> bool:
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


def fold_dense_copy(graph: fx.Graph, copy: fx.Node) -> bool:
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


def functionalize_buffer(gm: fx.GraphModule, base: fx.Node) -> bool:
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
