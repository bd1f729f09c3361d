"""An attacker who sends frames: each crafted to lower clean accuracy after the step it causes.

White-box: the attacker knows the model, the method and the adapter's state now (θ, the
momentum, α and λ, the EMA of S_div). For each frame it controls it runs projected gradient
ascent on the frame's pixels (anywhere in the pixel range: no perturbation budget) to raise
the cross-entropy of its own labelled images at the parameters the step would produce. The
step is the SDK's own (``realm_sdk.methods.torch_form``: REALM's ρ, EATA's weight, SAR's
SAM step with its cut at θ + ε), then SGD with momentum, the anchor and the drift bound,
all differentiated through. A frame must also pass the method's filters (the entropy cut,
S_div's similarity): the ascent pays a penalty where the frame would be refused.
It looks one step ahead (greedy), as the published test-time poisoning attacks do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call

from realm_runtime.contract import method_input
from realm_sdk import RealmAdapter, entropy
from realm_sdk.methods import StepInputs, torch_form

from ._twice import TwiceDifferentiable, explain

PENALTY = 10.0  # weight of a refused frame's penalty: a refused frame moves nothing


@dataclass(frozen=True)
class _Snapshot:
    """The adapter's state a frame is crafted against (read once per frame)."""

    theta: list[Tensor]  # the adapted parameters, in trainable order
    momentum: list[Tensor]  # their SGD momentum buffers
    learned: tuple[Tensor, ...]  # REALM's α, λ (empty for the other methods)
    ema: Tensor | None  # S_div's EMA of predictions
    bound: float | None  # the drift bound in force for the next update


@dataclass(frozen=True)
class FrameSettings:
    """How hard the attacker works on each frame."""

    iterations: int = 10  # gradient steps on a frame's pixels
    step: float = 0.1  # first step, a share of the pixel range (cosine decay to a tenth)
    batch: int = 64  # of the attacker's own images per look-ahead (drawn anew each step)
    slack: float = 0.8  # the frame aims below this share of a filter's threshold

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.batch < 1:
            raise ValueError(
                f"FrameSettings: iterations and batch must be ≥ 1, got {self.iterations}, "
                f"{self.batch}"
            )
        if not 0 < self.step <= 1 or not 0 < self.slack <= 1:
            raise ValueError(
                f"FrameSettings: step and slack must be in (0, 1], got {self.step}, {self.slack}"
            )


class FrameAttacker:
    """Crafts frames against one :class:`~realm_sdk.RealmAdapter`, reading its state each time.

    Args:
        adapter: the adapter under attack (read, never modified).
        own_images: the attacker's labelled images, float32 ``(N, C, H, W)`` model inputs.
        own_labels: their int64 labels.
        low: the least value a frame's entry may hold (a black pixel, normalised).
        high: the most (a white pixel).
        settings: :class:`FrameSettings`.
        seed: of the look-ahead batches.

    Raises:
        NotTwiceDifferentiable: the model has an op torch cannot differentiate twice (the
            attack differentiates through the step's gradient); checked once, at the start.
    """

    def __init__(
        self,
        adapter: RealmAdapter,
        own_images: np.ndarray,
        own_labels: np.ndarray,
        low: float,
        high: float,
        settings: FrameSettings | None = None,
        *,
        seed: int = 0,
    ) -> None:
        if not low < high:
            raise ValueError(f"the pixel range must have low < high, got {low}, {high}")
        self.adapter = adapter
        self.settings = settings or FrameSettings()
        self.own = torch.from_numpy(np.ascontiguousarray(own_images, dtype=np.float32))
        self.own_labels = torch.from_numpy(np.asarray(own_labels, dtype=np.int64))
        self.low, self.high = low, high
        self.names = list(adapter.trainable_names)
        source = adapter.trainable_parameters()  # the adapter must be at its source now
        self.source = [source[n] for n in self.names]
        self.norm0 = math.sqrt(sum(float((p0**2).sum()) for p0 in self.source))
        self.gen = torch.Generator().manual_seed(seed)
        drawn = self.gen.get_state()  # the probe leaves the look-ahead batches as they were
        self._ascent(self.own[:1].clone(), self._snapshot())  # fails here, not mid-stream
        self.gen.set_state(drawn)

    def _ascent(self, x: Tensor, now: _Snapshot) -> Tensor:
        """The gradient of the attacker's gain with respect to the frame's pixels.

        Raises:
            NotTwiceDifferentiable: the model has an op torch cannot differentiate twice.
        """
        x = x.detach().requires_grad_(True)
        try:
            with torch.enable_grad(), TwiceDifferentiable():
                (grad,) = torch.autograd.grad(self._objective(x, now), x)
        except RuntimeError as error:
            reason = explain(error, self.adapter.model)
            if reason is None:
                raise
            raise reason from None
        return grad

    def _logits_at(self, inputs: Tensor, theta: list[Tensor]) -> Tensor:
        params = dict(zip(self.names, theta, strict=True))
        return functional_call(self.adapter.model, params, (inputs,))

    def _objective(self, x: Tensor, now: _Snapshot) -> Tensor:
        """The attacker's gain from ``x``: own loss after the step, less the refusal penalty."""
        cfg, s = self.adapter.config, self.settings
        theta = [p.detach().requires_grad_(True) for p in now.theta]
        logits = self._logits_at(x, theta)
        h = entropy(logits)
        penalty = x.new_zeros(())
        if cfg.rules.entropy_cut:
            penalty = penalty + F.relu(h - s.slack * cfg.e0).sum()
        if cfg.rules.diversity and now.ema is not None:
            cos = F.cosine_similarity(F.softmax(logits, -1), now.ema[None], dim=1).abs()
            penalty = penalty + F.relu(cos - s.slack * cfg.diversity_margin).sum()
        weight = torch.ones(x.shape[0]) / x.shape[0]
        learned = tuple(v.detach().requires_grad_(True) for v in now.learned)
        inputs = StepInputs(
            self._logits_at, x, theta, logits, h, weight, learned, cfg.e0, method_input(cfg), cfg
        )
        loss = torch_form(cfg).step_loss(inputs).loss
        grads = torch.autograd.grad(loss, theta, create_graph=True)
        rates = self.adapter.learning_rates
        moved = [
            p - rates[n] * (cfg.momentum * v + g)
            for n, p, v, g in zip(self.names, theta, now.momentum, grads, strict=True)
        ]
        guard = cfg.guard
        if guard.anchor is not None:
            moved = [p - guard.anchor * (p - p0) for p, p0 in zip(moved, self.source, strict=True)]
        if now.bound is not None:  # the clip, as the step applies it: a scaling toward θ0
            delta = [p - p0 for p, p0 in zip(moved, self.source, strict=True)]
            norm = torch.sqrt(sum((d**2).sum() for d in delta))
            scale = torch.clamp(now.bound * self.norm0 / (norm + 1e-12), max=1.0)
            moved = [p0 + d * scale for p0, d in zip(self.source, delta, strict=True)]
        pick = torch.randperm(len(self.own), generator=self.gen)[: s.batch]
        after = F.cross_entropy(self._logits_at(self.own[pick], moved), self.own_labels[pick])
        return after - PENALTY * penalty

    def _snapshot(self) -> _Snapshot:
        adapter = self.adapter
        state = adapter.state
        params, momentum = adapter.trainable_parameters(), adapter.momentum_buffers()
        learned: tuple[Tensor, ...] = ()
        if adapter.config.rules.learns_alpha_lambda:
            learned = (torch.tensor(state.alpha), torch.tensor(state.lam))
        return _Snapshot(
            theta=[params[n] for n in self.names],
            momentum=[momentum[n] for n in self.names],
            learned=learned,
            ema=None if state.ema is None else torch.from_numpy(np.asarray(state.ema, np.float32)),
            bound=adapter.config.guard.drift_bound(state.update_rate),
        )

    def craft(self, start: np.ndarray) -> np.ndarray:
        """A frame crafted from ``start`` (float32 ``(1, C, H, W)``), within the pixel range."""
        s = self.settings
        x = torch.from_numpy(np.ascontiguousarray(start, dtype=np.float32)).clamp(
            self.low, self.high
        )
        span = self.high - self.low
        now = self._snapshot()
        for k in range(s.iterations):
            grad = self._ascent(x, now)
            share = s.step * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / s.iterations)))
            x = (x + share * span * torch.sign(grad)).clamp(self.low, self.high)
        return x.detach().numpy()
