"""Input checks: a bad batch is refused with a ValueError before anything runs."""

from __future__ import annotations

import torch
from torch import Tensor, nn


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


def check_batch(
    x: object, sample_shape: tuple[int | None, ...] | None, dtype: torch.dtype | None = None
) -> None:
    """Raise ``ValueError`` naming the problem if ``x`` is not a usable input batch.

    Args:
        x: the candidate input, expected a floating-point tensor ``(B, *sample_shape)``.
        sample_shape: expected per-sample shape; ``None`` entries (or ``None``) skip a check.
        dtype: the model's floating-point dtype, which the input must match.

    Raises:
        ValueError: not a tensor, wrong rank, wrong channel count or size, non-float dtype,
            empty batch, or NaN/Inf values.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"input must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(
            f"input dtype must be floating point (float32 images, normalised), got {x.dtype}"
        )
    if dtype is not None and x.dtype != dtype:
        raise ValueError(f"input dtype {x.dtype} does not match the model's {dtype}")
    if sample_shape is not None:
        want_rank = len(sample_shape) + 1
        if x.dim() != want_rank:
            raise ValueError(
                f"input must have rank {want_rank} (batch, {', '.join(_dims(sample_shape))}), "
                f"got shape {tuple(x.shape)}"
            )
        for axis, (got, want) in enumerate(zip(x.shape[1:], sample_shape, strict=True), 1):
            if want is not None and got != want:
                what = "channel count" if axis == 1 else f"size of axis {axis}"
                raise ValueError(f"input {what} must be {want}, got {got} (shape {tuple(x.shape)})")
    if x.dim() == 0 or x.shape[0] == 0:
        raise ValueError(f"input batch is empty (shape {tuple(x.shape)})")
    if not bool(x.isfinite().all()):
        n_nan = int(x.isnan().sum())
        n_inf = int(x.isinf().sum())
        raise ValueError(f"input contains non-finite values ({n_nan} NaN, {n_inf} Inf)")


def _dims(sample_shape: tuple[int | None, ...]) -> list[str]:
    return [str(d) if d is not None else "*" for d in sample_shape]
