"""SPEC §3's update in torch, once for the SDK and the traced step graph: SGD, projection, shares.

Every adapted value (the norm tensors θ, then REALM's α and λ) lies in one flat vector, so
the update is a handful of element-wise ops whatever the model: the SDK applies it to its
parameters after each accepted step, and the portable step graph (``realm_export``) traces
the same code into ONNX. The numpy twin of the host-step backends is
``realm_runtime``'s (``sgd_momentum``, ``project_alpha``, ``relax_and_anchor``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from realm_runtime import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN


class FlatUpdate:
    """One SGD step with momentum over a flat vector of adapted values, with what it needs.

    ``v' = μ·v + g`` and ``w' = w − lr·v'`` (PyTorch SGD: dampening 0, no Nesterov, no weight
    decay; a zero buffer gives ``v' = g``, PyTorch's first step); the rate is
    ``lr_batch_norm`` for BatchNorm's tensors where it is above 0, ``lr_alpha_lambda`` for α
    and λ, ``lr`` else. α and λ are then projected into their bounds (SPEC §2), and every
    value gives back a share κ of its way from where it started, ``w' ← w' − κ·(w' − w0)``
    (SPEC §10: ``anchor`` for θ, ``relax`` for α and λ; 0 gives back nothing).

    Example:
        >>> update = FlatUpdate(initial, batch_norm, learns_alpha_lambda=True)
        >>> new_values, new_velocity = update.step(values, velocity, grad, **rates)

    Args:
        initial: the values the update starts from (θ0, then α0 and λ0 where they learn), one
            tensor each; their order is the flat vector's.
        batch_norm: for each of ``initial``, whether it is a BatchNorm tensor.
        learns_alpha_lambda: the last two of ``initial`` are α and λ (REALM).

    Attributes:
        sizes: the element count of each value.
        shapes: the shape of each value.
        total: the flat vector's length.
        initial: ``(total,)`` the flat start, what the shares pull toward.
        lower: ``(total,)`` the projection's lower bounds (−inf but for α and λ).
        upper: ``(total,)`` its upper bounds (+inf but for α).
        on_batch_norm: ``(total,)`` bool, where BatchNorm's tensors lie; None without any.
    """

    def __init__(
        self,
        initial: Sequence[Tensor],
        batch_norm: Sequence[bool],
        *,
        learns_alpha_lambda: bool,
    ) -> None:
        if len(batch_norm) != len(initial):
            raise ValueError(
                f"batch_norm has {len(batch_norm)} entries for {len(initial)} initial values"
            )
        self.learns_alpha_lambda = learns_alpha_lambda
        self.sizes = [int(v.numel()) for v in initial]
        self.shapes = [tuple(v.shape) for v in initial]
        self.total = sum(self.sizes)
        self.initial = self.flatten(initial)
        like = {"dtype": self.initial.dtype, "device": self.initial.device}
        # Projection bounds per element (SPEC §2): ±inf leave the norm parameters alone.
        self.lower = torch.full((self.total,), -math.inf, **like)
        self.upper = torch.full((self.total,), math.inf, **like)
        if learns_alpha_lambda:
            self.lower[-2], self.upper[-2], self.lower[-1] = ALPHA_MIN, ALPHA_MAX, LAMBDA_MIN
        self.on_batch_norm = (
            torch.cat(
                [
                    torch.full((size,), on, device=self.initial.device)
                    for on, size in zip(batch_norm, self.sizes, strict=True)
                ]
            )
            if any(batch_norm)
            else None
        )

    def flatten(self, values: Sequence[Tensor]) -> Tensor:
        """``values`` (in the order of ``initial``) as one ``(total,)`` vector."""
        return torch.cat([v.reshape(-1) for v in values])

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        """The values of a ``(total,)`` vector, each in its own shape (views where it can)."""
        parts = torch.split(flat, self.sizes)
        return [part.reshape(shape) for part, shape in zip(parts, self.shapes, strict=True)]

    def step(
        self,
        values: Tensor,
        velocity: Tensor,
        grad: Tensor,
        *,
        lr: Tensor,
        lr_alpha_lambda: Tensor,
        lr_batch_norm: Tensor,
        momentum: Tensor,
        anchor: Tensor,
        relax: Tensor,
        fused_anchor: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """The new values and momentum buffers after one step; nothing is changed in place.

        The settings are 0-d tensors (graph inputs when traced), in the values' dtype.

        Args:
            values: ``(total,)`` the values now.
            velocity: ``(total,)`` their momentum buffers.
            grad: ``(total,)`` the loss's gradient with respect to ``values``.
            lr: the rate of θ.
            lr_alpha_lambda: the rate of α and λ (unused where they do not learn).
            lr_batch_norm: BatchNorm's rate; 0 or below: ``lr``.
            momentum: the coefficient μ.
            anchor: θ's share κ given back per step (0: none).
            relax: α's and λ's share (0: none; unused where they do not learn).
            fused_anchor: θ's share as ``torch.lerp`` (one rounding where the device fuses
                the multiply-add), the eager reference's rounding, which its parity runs
                are judged by; False: ``w − κ·(w − w0)``, the two ops the traced graph
                writes in ONNX (which has no lerp). The two differ by about an ulp.

        Returns:
            ``(new_values, new_velocity)``, both ``(total,)``.
        """
        total, realm = self.total, self.learns_alpha_lambda
        v_new = momentum * velocity + grad
        rate = (
            lr.expand(total)
            if not realm
            else torch.cat([lr.expand(total - 2), lr_alpha_lambda.expand(2)])
        )
        if self.on_batch_norm is not None:
            bn_rate = torch.where(lr_batch_norm > 0, lr_batch_norm, lr)
            rate = torch.where(self.on_batch_norm, bn_rate, rate)
        p_new = torch.minimum(torch.maximum(values - rate * v_new, self.lower), self.upper)
        if fused_anchor:
            n = total - 2 if realm else total
            theta = torch.lerp(p_new[:n], self.initial[:n], anchor)
            if not realm:
                return theta, v_new
            learned = p_new[n:] - relax * (p_new[n:] - self.initial[n:])
            return torch.cat([theta, learned]), v_new
        kappa = torch.cat([anchor.expand(total - 2), relax.expand(2)]) if realm else anchor
        p_new = p_new - kappa * (p_new - self.initial)
        return p_new, v_new
