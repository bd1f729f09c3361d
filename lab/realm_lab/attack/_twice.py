"""Twice-differentiable forms of the torch ops whose backward torch cannot differentiate.

A crafted frame is scored by the loss after the step it causes, so its gradient goes through
the step's own gradient: a second derivative of every op in the model. torch has none for
some kernels that common models use (``hardsigmoid`` in MobileNetV3's squeeze-excite gates,
the fused ``scaled_dot_product_attention`` of timm's ViTs on the CPU). While
:class:`TwiceDifferentiable` is active, those calls run as the same function written in ops
that have one; the values agree to float32 rounding, and the first derivative is the same
function with the same one-sided choices at the kinks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

_MISSING = re.compile(r"derivative for (\S+) is not implemented")


class NotTwiceDifferentiable(ValueError):
    """The model uses an op without a second derivative that has no form here."""


def _hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    del inplace  # the caller uses the returned tensor; writing into x would break autograd
    return F.relu6(x + 3.0) / 6.0


def _attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa:
        repeat = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(repeat, dim=-3)
        value = value.repeat_interleave(repeat, dim=-3)
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = F.softmax(scores, dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ value


_FORMS: dict[Callable[..., Any], Callable[..., Tensor]] = {
    F.hardsigmoid: _hardsigmoid,
    F.scaled_dot_product_attention: _attention,
}


class TwiceDifferentiable(TorchFunctionMode):
    """While active, the ops of ``_FORMS`` run in forms torch can differentiate twice."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        form = _FORMS.get(func)
        return (form or func)(*args, **(kwargs or {}))


def explain(error: RuntimeError, model: torch.nn.Module) -> NotTwiceDifferentiable | None:
    """One sentence for a missing second derivative, or None when ``error`` is another."""
    found = _MISSING.search(str(error))
    if found is None:
        return None
    op = found.group(1)
    return NotTwiceDifferentiable(
        f"the frame attack differentiates through the adaptation step, so it needs the second "
        f"derivative of every op in {type(model).__name__}, and torch has none for {op}: "
        f"write that layer with twice-differentiable ops (as realm_lab.attack does for "
        f"hardsigmoid and scaled_dot_product_attention), or leave this model out of --frames"
    )
