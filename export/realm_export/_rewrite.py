"""Export-time rewrites of the norm functions that ONNX Runtime training cannot differentiate.

Rather than swapping modules (which would have to know every timm subclass and its
activation/drop extras), the functional entry points that all of them call are replaced
for the duration of the export, so parameter names stay exactly those of
``model.named_parameters()``:

* ``F.group_norm`` and ``F.instance_norm``: ONNX ``InstanceNormalization`` and
  ``GroupNormalization`` have no gradient in onnxruntime-training 1.19.2, so they are written
  as ReduceMean/Sub/Mul/Sqrt/Div over ``(N, G, -1)``, followed by the affine.
* ``F.batch_norm``: exported as ``BatchNormalization`` it becomes a batch-statistics op in
  the training graph and updates the running statistics; here, in eval mode, it is
  ``(x − running_mean) / √(running_var + eps) · weight + bias`` with the statistics frozen
  (and batch statistics where torch itself would use them: no running statistics, or
  ``training=True`` as in timm's weight-standardised convolutions).

* ``F.avg_pool2d``: ONNX Runtime training's ``AveragePoolGrad`` mishandles ``ceil_mode``
  with ``count_include_pad=False`` (ResNet-D shortcuts: an empty gradient, then a Reshape
  error), so it is a ones-kernel depthwise convolution times a constant divisor map, whose
  gradient is an ordinary convolution gradient (:func:`realm_export._trace.avg_pool2d`).

``F.layer_norm`` is left alone: ``LayerNormalization`` has a gradient once the node declares
all three outputs, which :func:`realm_export._graph.declare_layer_norm_outputs` adds.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor


class UnsupportedModelError(ValueError):
    """The model contains something the on-device training graph cannot represent."""


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    shape = (1, y.shape[1]) + (1,) * (y.dim() - 2)  # broadcast over (N, C, *spatial)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _standardize(x: Tensor, dims: list[int], eps: float) -> Tensor:
    """``(x − mean) / √(var + eps)`` over ``dims``, biased variance, as torch's norms."""
    mean = x.mean(dim=dims, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dim=dims, keepdim=True)
    return centered / torch.sqrt(var + eps)


def _group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    # Sizes other than the batch become constants of the graph (int() under the tracer):
    # with a symbolic batch axis, a Reshape to a computed shape hides the rank from ORT, whose
    # broadcasting Mul gradient then fails to reduce over the spatial axes.
    dims = [int(d) for d in x.shape[1:]]  # (C, *spatial), fixed per export
    per_group = math.prod(dims) // num_groups
    xg = x.reshape(-1, num_groups, per_group)  # (N, G, C/G · spatial)
    y = _standardize(xg, [-1], eps).reshape(-1, *dims)
    return _affine(y, weight, bias)


def _instance_norm(
    x: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    if not use_input_stats:
        raise UnsupportedModelError(
            "InstanceNorm with track_running_stats=True in eval mode is not supported by the "
            "exporter; use track_running_stats=False (per-sample statistics)"
        )
    return _group_norm(x, x.shape[1], weight, bias, eps)


def _batch_norm(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    if training or running_mean is None or running_var is None:
        # Batch statistics, as torch computes them here: timm's StdConv2d standardises its
        # weights this way, and a BatchNorm without running statistics normalises each
        # (per-sample) batch by itself in eval mode too.
        return _affine(_standardize(x, [0, *range(2, x.dim())], eps), weight, bias)
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    y = (x - running_mean.reshape(shape)) / torch.sqrt(running_var.reshape(shape) + eps)
    return _affine(y, weight, bias)


@contextlib.contextmanager
def export_friendly_norms() -> Iterator[None]:
    """Within the block, norms and average pooling trace as differentiable primitive ops."""
    from ._trace import avg_pool2d  # the same rewrite serves the portable graph's trace

    saved = (F.group_norm, F.instance_norm, F.batch_norm, F.avg_pool2d)
    F.group_norm = _group_norm  # type: ignore[assignment]
    F.instance_norm = _instance_norm  # type: ignore[assignment]
    F.batch_norm = _batch_norm  # type: ignore[assignment]
    F.avg_pool2d = avg_pool2d  # type: ignore[assignment]
    try:
        yield
    finally:
        F.group_norm, F.instance_norm, F.batch_norm, F.avg_pool2d = saved  # type: ignore[assignment]
