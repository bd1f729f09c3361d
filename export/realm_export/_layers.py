"""The layer forms both exporters trace: norms and average pooling that ONNX can express.

Rather than swapping modules (which would have to know every timm subclass and its
activation/drop extras), the functional entry points that all of them call are replaced for
the duration of a trace, so parameter names stay exactly those of ``model.named_parameters()``.
Two tracers, two sets of forms, one module (the math they share is written once, first):

* ``torch.onnx.export`` (TorchScript: the inference model and the legacy training graph's
  base), under :func:`export_friendly_norms`. ONNX Runtime training differentiates the
  graph, so every op must have an ORT gradient:

  * ``F.group_norm`` and ``F.instance_norm``: ONNX ``InstanceNormalization`` and
    ``GroupNormalization`` have no gradient in onnxruntime-training 1.19.2, so they are
    written as ReduceMean/Sub/Mul/Sqrt/Div over ``(N, G, -1)``, followed by the affine.
  * ``F.batch_norm``: exported as ``BatchNormalization`` it becomes a batch-statistics op in
    the training graph and updates the running statistics; here, in eval mode, it is
    ``(x − running_mean) / √(running_var + eps) · weight + bias`` with the statistics frozen
    (and batch statistics where torch itself would use them: no running statistics, or
    ``training=True`` as in timm's weight-standardised convolutions).
  * ``F.layer_norm`` is left alone: ``LayerNormalization`` has a gradient once the node
    declares all three outputs, which :func:`._torchscript.declare_layer_norm_outputs` adds.

* ``make_fx`` (the portable step graph, :func:`._trace.trace`), under
  :func:`traceable_layers`. Torch's autograd writes the backward, so the forms carry their
  own: GroupNorm, LayerNorm and BatchNorm run through :class:`_GroupNorm`/:class:`_LayerNorm`
  and a frozen-statistics affine, whose backward is the compact closed form
  (``dx = rstd · (g − mean g − x̂ · mean(g·x̂))``, ``dγ = Σ dy·x̂``, ``dβ = Σ dy``) instead of
  aten's decomposed ``native_group_norm_backward`` (≈ 45 nodes a layer).

* Both: ``F.avg_pool2d`` is a ones-kernel depthwise convolution times a constant divisor map
  (:func:`avg_pool2d`), whose gradient is an ordinary convolution gradient: ONNX Runtime
  training's ``AveragePoolGrad`` mishandles ``ceil_mode`` with ``count_include_pad=False``
  (ResNet-D shortcuts: an empty gradient, then a Reshape error), and that backward has no
  ONNX form at all.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

from ._errors import UnsupportedModelError
from ._provenance import layer

aten = torch.ops.aten
_F = TypeVar("_F", bound=Callable[..., Any])


# --------------------------------------------------------------------- shared math


def _affine_shape(x: Tensor) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)  # per channel, over (N, C, *spatial)


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    shape = _affine_shape(y)
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


def _batch_statistics_norm(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """A batch norm on the batch's own statistics, exactly as torch computes it here.

    timm's StdConv2d standardises its weights this way, and a BatchNorm without running
    statistics normalises each (per-sample) batch by itself in eval mode too. Exported in
    inference mode, it would silently use running statistics instead.
    """
    return _affine(_standardize(x, [0, *range(2, x.dim())], eps), weight, bias)


# ------------------------------------------- TorchScript forms (ORT differentiates them)


def _ts_group_norm(
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


def _ts_instance_norm(
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
    return _ts_group_norm(x, x.shape[1], weight, bias, eps)


def _ts_batch_norm(
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
        return _batch_statistics_norm(x, weight, bias, eps)
    shape = _affine_shape(x)
    y = (x - running_mean.reshape(shape)) / torch.sqrt(running_var.reshape(shape) + eps)
    return _affine(y, weight, bias)


@contextlib.contextmanager
def export_friendly_norms() -> Iterator[None]:
    """Within the block, norms and average pooling trace as ops ORT training differentiates.

    The forms for ``torch.onnx.export`` (TorchScript): the inference model, the legacy
    training graph's base.
    """
    saved = (F.group_norm, F.instance_norm, F.batch_norm, F.avg_pool2d, F.avg_pool1d)
    F.group_norm = _ts_group_norm  # type: ignore[assignment]
    F.instance_norm = _ts_instance_norm  # type: ignore[assignment]
    F.batch_norm = _ts_batch_norm  # type: ignore[assignment]
    F.avg_pool2d = avg_pool2d  # type: ignore[assignment]
    F.avg_pool1d = avg_pool1d  # type: ignore[assignment]
    try:
        yield
    finally:
        F.group_norm, F.instance_norm, F.batch_norm, F.avg_pool2d, F.avg_pool1d = saved  # type: ignore[assignment]


# ------------------------------------------- make_fx forms (their own compact backward)


def _labelled(name: str) -> Callable[[_F], _F]:
    """``fn``'s traced nodes labelled as layer form ``name``, for a profile to group them."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def labelled(*args: Any, **kwargs: Any) -> Any:
            with layer(name):
                return fn(*args, **kwargs)

        return labelled  # type: ignore[return-value]

    return wrap


def _standardized_grad(g: Tensor, xhat: Tensor, rstd: Tensor, dims: Sequence[int]) -> Tensor:
    """``∂L/∂x`` of ``x̂ = (x − mean) · rstd`` given ``g = ∂L/∂x̂``, statistics over ``dims``."""
    mean_g = g.mean(dim=list(dims), keepdim=True)
    mean_gx = (g * xhat).mean(dim=list(dims), keepdim=True)
    return rstd * (g - mean_g - xhat * mean_gx)


class _GroupNorm(torch.autograd.Function):
    """``F.group_norm`` with a closed-form backward (SPEC §1 norms, traced compactly).

    Neither direction materialises x̂ = (x − μ)·rstd: the forward scales the centred input by
    one per-(sample, channel) factor rstd·γ, and the backward folds rstd into its
    per-channel sums and coefficients. One pass over the activation fewer each way.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float
    ) -> Tensor:
        n, c = x.shape[0], x.shape[1]
        xg = x.reshape(n, groups, -1)
        # Written out, not LayerNormalization over (N, G, K): with only G long rows, ORT
        # 1.19.2's LayerNormalization runs slower than these ops (docs/BENCHMARKS.md).
        centered_g = xg - xg.mean(dim=-1, keepdim=True)
        rstd = torch.rsqrt((centered_g * centered_g).mean(dim=-1, keepdim=True) + eps)
        centered = centered_g.reshape(x.shape)
        scale = _per_channel(rstd, n, c)  # (N, C): rstd of each channel's group
        if weight is not None:
            scale = scale * weight
        y = centered * scale.reshape(_coeff_shape(x))
        if bias is not None:
            y = y + bias.reshape(_affine_shape(x))
        ctx.save_for_backward(centered, rstd, weight)
        ctx.groups = groups
        return y

    @staticmethod
    @_labelled("group_norm")
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        # Per-sample, per-channel sums first (two passes over dy), then everything per group
        # on (N, C)-sized tensors: dx = a·dy − c·x̂ − b with a = rstd·γ, b = rstd·mean(g),
        # c = rstd·mean(g·x̂), g = γ·dy, x̂ = (x − μ)·rstd. Torch's own group_norm_backward has
        # the same shape; the decomposed one makes ~45 ONNX nodes and 11 passes a layer.
        centered, rstd, weight = ctx.saved_tensors
        shape = tuple(centered.shape)
        n, c, groups = shape[0], shape[1], ctx.groups
        k = centered.numel() // (n * groups)
        spatial = list(range(2, len(shape)))
        dy_c = dy * centered
        s_dy = dy.sum(dim=spatial) if spatial else dy  # (N, C)
        rstd_c = _per_channel(rstd, n, c)
        s_dyx = (dy_c.sum(dim=spatial) if spatial else dy_c) * rstd_c  # Σ dy·x̂, (N, C)
        dx = dw = db = None
        if ctx.needs_input_grad[2]:
            dw = s_dyx.sum(dim=0)
        if ctx.needs_input_grad[3]:
            db = s_dy.sum(dim=0)
        if ctx.needs_input_grad[0]:
            per_group = (n, groups, c // groups)
            gamma = torch.ones(c, dtype=dy.dtype) if weight is None else weight
            mean_g = (s_dy * gamma).reshape(per_group).sum(dim=-1, keepdim=True) / k
            mean_gx = (s_dyx * gamma).reshape(per_group).sum(dim=-1, keepdim=True) / k
            coeff = _coeff_shape(centered)
            a = (rstd_c * gamma).reshape(coeff)
            b = _per_channel(rstd * mean_g, n, c).reshape(coeff)
            cc = (_per_channel(rstd * mean_gx, n, c) * rstd_c).reshape(coeff)  # x̂ = centred·rstd
            dx = a * dy - cc * centered - b
        return dx, None, dw, db, None


def _per_channel(per_group: Tensor, n: int, c: int) -> Tensor:
    """``(N, G, 1)`` group statistics → ``(N, C)``, each channel its group's value."""
    groups = per_group.shape[1]
    return per_group.expand(n, groups, c // groups).reshape(n, c)


def _coeff_shape(x: Tensor) -> tuple[int, ...]:
    return (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2)  # per (sample, channel)


class _LayerNorm(torch.autograd.Function):
    """``F.layer_norm`` (affine fused into the forward) with a closed-form backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        normalized_shape: list[int],
        weight: Tensor | None,
        bias: Tensor | None,
        eps: float,
    ) -> Tensor:
        y, mean, rstd = aten.native_layer_norm(x, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.dims = len(normalized_shape)
        return y

    @staticmethod
    @_labelled("layer_norm")
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, mean, rstd, weight = ctx.saved_tensors
        norm_dims = list(range(x.dim() - ctx.dims, x.dim()))
        lead = list(range(x.dim() - ctx.dims))
        xhat = (x - mean) * rstd
        dx = dw = db = None
        if ctx.needs_input_grad[2]:
            dw = (dy * xhat).sum(dim=lead)
        if ctx.needs_input_grad[3]:
            db = dy.sum(dim=lead)
        if ctx.needs_input_grad[0]:
            g = dy if weight is None else dy * weight
            dx = _standardized_grad(g, xhat, rstd, norm_dims)
        return dx, None, dw, db, None


def _group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    return _GroupNorm.apply(x, num_groups, weight, bias, eps)


def _layer_norm(
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    return _LayerNorm.apply(x, list(normalized_shape), weight, bias, eps)


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
        return _batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    return _GroupNorm.apply(x, x.shape[1], weight, bias, eps)


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
    shape = _affine_shape(x)
    if training or running_mean is None or running_var is None:
        return _batch_statistics_norm(x, weight, bias, eps)
    # Frozen statistics (SPEC §1): y = x·s + t with s = γ/√(σ²+ε), t = β − μ·s — two
    # big-tensor ops, and a tiny backward into γ and β.
    inv = torch.rsqrt(running_var + eps)
    scale = inv if weight is None else weight * inv
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return _FrozenAffine.apply(x, scale.reshape(shape), shift.reshape(shape))


class _FrozenAffine(torch.autograd.Function):
    """``x·s + t`` per channel, its backward autograd's own ops, labelled a batch norm's."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, scale)
        return x * scale + shift

    @staticmethod
    @_labelled("batch_norm")
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, scale = ctx.saved_tensors
        dims = [d for d in range(dy.dim()) if scale.shape[d] == 1]
        dx = dy * scale if ctx.needs_input_grad[0] else None
        ds = (dy * x).sum(dim=dims, keepdim=True) if ctx.needs_input_grad[1] else None
        dt = dy.sum(dim=dims, keepdim=True) if ctx.needs_input_grad[2] else None
        return dx, ds, dt


@contextlib.contextmanager
def traceable_layers() -> Iterator[None]:
    """Within the block, norms and average pooling run as the compact forms above.

    The forms for ``make_fx`` (:func:`._trace.trace`): the portable step graph.
    """
    saved = {
        name: getattr(F, name)
        for name in (
            "group_norm",
            "layer_norm",
            "instance_norm",
            "batch_norm",
            "avg_pool2d",
            "avg_pool1d",
        )
    }
    replacements = {
        "group_norm": _group_norm,
        "layer_norm": _layer_norm,
        "instance_norm": _instance_norm,
        "batch_norm": _batch_norm,
        "avg_pool2d": avg_pool2d,
        "avg_pool1d": avg_pool1d,
    }
    for name, fn in replacements.items():
        setattr(F, name, _labelled(name)(fn))
    patched_fast = _patch_timm_fast_norm()
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)
        for module, name, fn in patched_fast:
            setattr(module, name, fn)


def _patch_timm_fast_norm() -> list[tuple[Any, str, Any]]:
    """Timm's LayerNorm2d/GroupNorm may call its own ``fast_*_norm``: route those here too."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        import timm.layers.fast_norm as fast
        import timm.layers.norm as norm
    except ImportError:
        return saved
    for module in (fast, norm):
        for name, fn in (("fast_layer_norm", _layer_norm), ("fast_group_norm", _group_norm)):
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, fn)
    return saved


# --------------------------------------------------------------------- average pooling (both)


def pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Average pooling as a depthwise ones-kernel convolution times a constant divisor map.

    The divisor map (torch's own rule for padding, ``ceil_mode`` and ``count_include_pad``)
    is computed once from a ones input outside the trace: ``avg_pool(1) / sum_pool(1)``.
    """
    k = pair(kernel_size)
    s = pair(stride if stride else kernel_size)
    p = pair(padding)
    c, h, w = (int(d) for d in x.shape[-3:])
    with untraced():
        ones = torch.ones(1, 1, h, w)
        averaged = _REAL_AVG_POOL2D(ones, k, s, p, ceil_mode, count_include_pad, divisor_override)
        out_h, out_w = averaged.shape[-2:]
        # Pad right/bottom so that a plain convolution yields ceil_mode's extra windows.
        extra_h = max(0, (out_h - 1) * s[0] + k[0] - (h + 2 * p[0]))
        extra_w = max(0, (out_w - 1) * s[1] + k[1] - (w + 2 * p[1]))
        pads = (p[1], p[1] + extra_w, p[0], p[0] + extra_h)
        summed = F.conv2d(F.pad(ones, pads), torch.ones(1, 1, *k), stride=s)
        scale = (averaged / summed).reshape(1, 1, out_h, out_w).contiguous()
        kernel = torch.ones(c, 1, *k, dtype=x.dtype)
    pooled = F.conv2d(F.pad(x, pads), kernel, stride=s, groups=c)
    return pooled * scale


_REAL_AVG_POOL2D = F.avg_pool2d  # torch's own, captured before any replacement


def avg_pool1d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """1-D average pooling (Next-ViT's attention) as :func:`avg_pool2d` over a height-1 plane.

    torch computes it as 2-D pooling too, whose backward has no ONNX form.
    """
    k, s, p = (pair(v)[-1] for v in (kernel_size, stride or kernel_size, padding))
    flat = avg_pool2d(x.unsqueeze(-2), (1, k), (1, s), (0, p), ceil_mode, count_include_pad)
    return flat.squeeze(-2)


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Compute constants of the graph with neither make_fx nor the TorchScript tracer on."""
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        with disable_proxy_modes_tracing():
            yield
    finally:
        torch._C._set_tracing_state(state)
