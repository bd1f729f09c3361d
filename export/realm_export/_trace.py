"""Tracing a REALM step into one aten graph (forward and backward) that ONNX can express.

``make_fx`` records what torch's autograd does for one step: the model's forward with the
adapted norm parameters as explicit inputs, the loss, and ``torch.autograd.grad``. The
result is a graph of aten ops. Three kinds of node in it have no ONNX translation or
translate into thousands of tiny nodes, so they are shaped here before or after the trace:

* Norm layers and average pooling (during the trace): the compact forms of
  :func:`._layers.traceable_layers` (GroupNorm, LayerNorm and BatchNorm with a closed-form
  backward; average pooling as a ones-kernel depthwise convolution), so their backward is a
  handful of ops instead of aten's decomposition, or one with no ONNX form.
* After the trace: ``aten.convolution_backward`` (conv weights are frozen, so only the
  input gradient is asked for) becomes a transposed convolution with the same weight, and
  ``aten.max_pool2d_with_indices_backward`` a scatter-add of the gradient at the indices.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import Tensor, fx
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from ._errors import UnsupportedModelError
from ._layers import traceable_layers
from ._provenance import recording
from ._rewrites import ACTIVATION_FORMS, ACTIVATIONS_WHOLE, aten, restride_, rewrite_backward_ops


def _squeeze_dims(x: Tensor, dims: Sequence[int]) -> Tensor:
    # torch.onnx has no translation of squeeze.dims (ViTs' class-token slice): a reshape.
    drop = {d % x.dim() for d in dims}
    return x.reshape([s for i, s in enumerate(x.shape) if i not in drop or s != 1])


def decompositions() -> dict[Any, Callable[..., Any]]:
    """Core aten decompositions, with the backward ops the rewrites below handle kept whole."""
    table = dict(core_aten_decompositions())
    table.update(ACTIVATION_FORMS)
    table[aten.squeeze.dims] = _squeeze_dims
    table[aten.as_strided_.default] = restride_
    for op in (
        aten.convolution_backward.default,
        aten.max_pool2d_with_indices_backward.default,
        aten.native_layer_norm.default,
        # mean's decomposition restrides its result to the input's memory format (as_strided_,
        # whose backward is as_strided_scatter: no ONNX form); ONNX has ReduceMean anyway.
        aten.mean.dim,
        *ACTIVATIONS_WHOLE,
    ):
        table.pop(op, None)
    return table


@contextlib.contextmanager
def _one_fake_mode() -> Iterator[None]:
    """One fake-tensor mode for the whole trace's node metadata.

    A real-tensor ``make_fx`` records each node's shape as a fake tensor and, finding no
    fake mode in the tracing context, makes a new mode per node (each recording its own
    Python stack): most of a large model's trace time. A tracing context holding one mode
    gives the same metadata. Where torch's private ``_guards`` module differs, nothing
    changes.
    """
    try:
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        yield
        return
    with tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True))):
        yield


def trace(fn: Callable[..., Any], args: Sequence[Tensor]) -> fx.GraphModule:
    """``make_fx`` of ``fn`` on ``args`` (real tensors), with the traceable layer forms, rewritten.

    Raises:
        UnsupportedModelError: an op that could not be traced or rewritten, with the reason.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        # The math attention backend: its backward is plain matmuls and softmax (the flash
        # and efficient kernels' backward ops have no ONNX translation).
        with traceable_layers(), sdpa_kernel(SDPBackend.MATH), _one_fake_mode(), recording():
            gm = make_fx(fn, decomposition_table=decompositions())(*args)
    except UnsupportedModelError:
        raise
    except Exception as exc:
        text = str(exc).strip()
        if "_local_scalar_dense" in text or "data-dependent" in text:
            raise UnsupportedModelError(
                "the model's forward branches on a tensor's value (data-dependent control "
                "flow, such as `if x.mean() > 0:` or `.item()`), which one graph cannot hold: "
                "write the branch as a tensor op (torch.where)"
            ) from exc
        raise UnsupportedModelError(
            f"tracing the step with make_fx failed: {type(exc).__name__}: "
            f"{text.splitlines()[0][:300] if text else ''}"
        ) from exc
    rewrite_backward_ops(gm)
    return gm


def count_ops(gm: fx.GraphModule) -> dict[str, int]:
    """How many nodes of each aten op the graph holds (for reports and tests)."""
    counts: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            key = str(node.target)
            counts[key] = counts.get(key, 0) + 1
    return counts
