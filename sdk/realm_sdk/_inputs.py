"""Input checks of the reference: a bad batch is refused with a ValueError before anything runs."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from realm_runtime.contract import (
    check_input_shape,
    input_dtype_error,
    input_nonfinite_error,
    input_type_error,
)


def infer_sample_shape(model: nn.Module) -> tuple[int | None, ...] | None:
    """Best-effort per-sample input shape ``(C, H, W)``; ``None`` entries are not checked.

    timm models declare their input size in ``pretrained_cfg``; a ViT needs exactly that
    spatial size, a CNN accepts others, so only the channel count is taken from it. Otherwise
    the first convolution's ``in_channels`` gives the channel count.
    """
    for module in model.modules():
        if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
            return (module.in_channels,) + (None,) * (module.weight.dim() - 2)
    cfg = getattr(model, "pretrained_cfg", None)
    if isinstance(cfg, dict) and cfg.get("input_size"):
        size = tuple(cfg["input_size"])
        return (int(size[0]),) + (None,) * (len(size) - 1)
    return None


def check_input(
    x: object, sample_shape: tuple[int | None, ...] | None, dtype: torch.dtype | None = None
) -> None:
    """Raise ``ValueError`` naming the problem if ``x`` is not a usable input batch.

    The shape rules and every message are the runtime's (``realm_runtime.contract``), so a
    bad batch reads the same in both twins; the tensor-specific checks are made here.

    Args:
        x: the candidate input, expected a floating-point tensor ``(B, *sample_shape)``.
        sample_shape: expected per-sample shape; ``None`` entries (or ``None``) skip a check.
        dtype: the model's floating-point dtype, which the input must match.

    Raises:
        ValueError: not a tensor, non-float dtype or not the model's, wrong rank, wrong
            channel count or size, empty batch, or NaN/Inf values.
    """
    if not isinstance(x, Tensor):
        raise input_type_error(x, "torch.Tensor")
    if not x.is_floating_point():
        raise input_dtype_error(x.dtype, "floating point (float32 images, normalised)")
    if dtype is not None and x.dtype != dtype:
        raise input_dtype_error(x.dtype, f"the model's {dtype}")
    check_input_shape(tuple(x.shape), sample_shape)
    if not bool(x.isfinite().all()):
        raise input_nonfinite_error(int(x.isnan().sum()), int(x.isinf().sum()))
