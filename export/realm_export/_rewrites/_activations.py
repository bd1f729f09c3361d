"""Activations' backward in few passes: piecewise ones as mask multiplies, SiLU from σ.

Torch's decompositions of ``hardswish_backward``, ``hardsigmoid_backward`` and
``hardtanh_backward`` (ReLU6) pick each element's slope with ``where``, seven ONNX nodes
for hard-swish, and ONNX Runtime's ``Where`` runs several times slower than a comparison,
a ``Cast`` and a ``Mul`` on a feature map. The forms here give the same slopes (the same
sides of each kink) as multiplies by cast masks. Hard-swish and hard-sigmoid themselves stay
whole: ONNX has ``HardSwish`` and ``HardSigmoid``, one pass each where torch's decomposition
takes five. SiLU's backward reuses the forward's σ(x) and x·σ(x).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._nodes import aten


def _threshold_backward(grad: Tensor, value: Tensor, threshold: float) -> Tensor:
    # ReLU's backward: the gradient where the value passed the threshold.
    return grad * (value > threshold).to(grad.dtype)


def _hardswish_backward(grad: Tensor, x: Tensor) -> Tensor:
    # The slope is x/3 + 1/2 strictly inside (-3, 3), 0 from -3 down, 1 from 3 up (torch's
    # sides): hardsigmoid(x) + x/6 inside, hardsigmoid(x) alone outside.
    inside = (x.abs() < 3.0).to(x.dtype)
    return grad * (torch.nn.functional.hardsigmoid(x) + x * inside * (1.0 / 6.0))


def _hardsigmoid_backward(grad: Tensor, x: Tensor) -> Tensor:
    # The slope is 1/6 strictly inside (-3, 3), as torch's, 0 elsewhere.
    return grad * ((x.abs() < 3.0).to(x.dtype) * (1.0 / 6.0))


def _hardtanh_backward(grad: Tensor, x: Tensor, low: float, high: float) -> Tensor:
    # The gradient strictly between the bounds, as torch's (ReLU6: 0 and 6).
    return grad * ((x > low) & (x < high)).to(grad.dtype)


def _silu_backward(grad: Tensor, x: Tensor) -> Tensor:
    # σ(x)·(1 + x·(1 − σ(x))) = σ + y·(1 − σ) with y = x·σ(x): σ and y are the forward's own
    # nodes (the optimiser merges equal nodes), leaving four passes over the feature map.
    s = torch.sigmoid(x)
    return grad * (s + x * s * (1.0 - s))


ACTIVATION_FORMS: dict[Any, Callable[..., Any]] = {
    aten.threshold_backward.default: _threshold_backward,
    aten.hardswish_backward.default: _hardswish_backward,
    aten.hardsigmoid_backward.default: _hardsigmoid_backward,
    aten.hardtanh_backward.default: _hardtanh_backward,
    aten.silu_backward.default: _silu_backward,
}
# Written whole: ONNX's own op is one pass.
ACTIVATIONS_WHOLE = (aten.hardswish.default, aten.hardsigmoid.default)
