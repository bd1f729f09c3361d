"""The worst case inside the drift bound: the lowest clean accuracy any θ in the ball reaches.

Whatever frames an attacker sends, the guardrails keep the adapted norm parameters θ in
``‖θ − θ0‖ ≤ b·‖θ0‖`` (SPEC §10's ``max_drift``). So the most any stream can cost is the
lowest clean accuracy of a θ in that ball; this module searches for it directly, with
projected gradient ascent on θ (no frames, no step: an attacker who could set θ at will).
It is an oracle: it maximises the loss on the very images it is scored on, labels known.
Its result bounds every frame attack from below only as well as the search finds the
minimum, so it runs several restarts, two losses and a decaying step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

LOSSES = ("margin", "cross-entropy")  # the restarts take turns


@dataclass(frozen=True)
class SearchSettings:
    """How hard the search in the ball looks."""

    steps: int = 100  # gradient steps per restart
    restarts: int = 4  # the first from θ0, the others from random points in the ball
    step: float = 0.5  # first step, a share of the radius (cosine decay to a fiftieth)
    batch: int = 512  # images per gradient step (all of them where fewer)
    eval_every: int = 10  # steps between scorings on every image (the lowest is kept)
    margin_floor: float = 2.0  # a sample's logit margin counts down to −this (then it is won)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.restarts < 1 or self.batch < 1 or self.eval_every < 1:
            raise ValueError(
                "SearchSettings: steps, restarts, batch and eval_every must be ≥ 1, got "
                f"{self.steps}, {self.restarts}, {self.batch}, {self.eval_every}"
            )
        if not 0 < self.step <= 1:
            raise ValueError(f"SearchSettings: step must be in (0, 1], got {self.step}")


@dataclass
class WorstCase:
    """The lowest clean accuracy found in one ball ``‖θ − θ0‖ ≤ bound·‖θ0‖``."""

    bound: float  # relative radius b
    radius: float  # b·‖θ0‖
    source_accuracy: float  # θ0's, %
    worst_accuracy: float  # the lowest found, %
    drift: float  # ‖θ − θ0‖/‖θ0‖ of the θ that reached it
    per_restart: list[float] = field(default_factory=list)  # each restart's lowest, %
    seconds: float = 0.0

    @property
    def drop(self) -> float:
        """Points of clean accuracy lost at the worst θ found."""
        return self.source_accuracy - self.worst_accuracy


class NormBall:
    """``model``'s adapted norm parameters as one vector θ, and the model's logits at any θ.

    Args:
        model: the classifier, in eval mode (its running statistics frozen, as the SDK runs
            it); not modified.
        names: the parameters the SDK adapts (``RealmAdapter.trainable_names``), in order.
    """

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        named = dict(model.named_parameters())
        missing = [n for n in names if n not in named]
        if missing:
            raise ValueError(f"the model has no parameters {missing[:3]}")
        self.model = model.eval()
        self.names = list(names)
        self.shapes = [named[n].shape for n in names]
        self.sizes = [named[n].numel() for n in names]
        self.theta0 = torch.cat([named[n].detach().reshape(-1) for n in names]).float()
        self.norm0 = float(self.theta0.norm())
        if self.norm0 == 0:
            raise ValueError("the adapted parameters are all zero: a relative bound is empty")

    def logits(self, theta: Tensor, x: Tensor) -> Tensor:
        """The model's logits on ``x`` with its norm parameters set to ``theta``."""
        parts = torch.split(theta, self.sizes)
        params = {n: p.reshape(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}
        return functional_call(self.model, params, (x,))

    @torch.no_grad()
    def accuracy(self, theta: Tensor, images: Tensor, labels: Tensor, batch: int = 1024) -> float:
        """Top-1 accuracy (%) of the model at ``theta`` on every image."""
        right = 0
        for start in range(0, len(images), batch):
            logits = self.logits(theta, images[start : start + batch])
            right += int((logits.argmax(1) == labels[start : start + batch]).sum())
        return 100.0 * right / len(images)


def _loss(logits: Tensor, labels: Tensor, kind: str, floor: float) -> Tensor:
    """What the search raises: cross-entropy, or minus the logit margin (floored)."""
    if kind == "cross-entropy":
        return nn.functional.cross_entropy(logits, labels)
    true = logits.gather(1, labels[:, None])[:, 0]
    other = logits.masked_fill(nn.functional.one_hot(labels, logits.shape[1]).bool(), -math.inf)
    margin = true - other.max(1).values
    return -margin.clamp(min=-floor).mean()


def _project(delta: Tensor, radius: float) -> Tensor:
    norm = float(delta.norm())
    return delta if norm <= radius else delta * (radius / norm)


def worst_case(
    ball: NormBall,
    images: np.ndarray,
    labels: np.ndarray,
    bound: float,
    settings: SearchSettings | None = None,
    *,
    seed: int = 0,
) -> WorstCase:
    """Search the ball ``‖θ − θ0‖ ≤ bound·‖θ0‖`` for the θ of lowest accuracy on ``images``.

    Projected gradient ascent in L2 (normalised gradient, projection on the ball); the
    restarts alternate :data:`LOSSES`; every ``eval_every`` steps and at each restart's end
    θ is scored on every image, and the lowest score is the result.

    Args:
        ball: the model and its adapted parameters.
        images: float32 model inputs ``(N, C, H, W)``.
        labels: int64 ``(N,)``.
        bound: the relative radius b (``max_drift``).
        settings: how hard to look (:class:`SearchSettings` by default).
        seed: of the restarts' starting points and the minibatches.
    """
    settings = settings or SearchSettings()
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    start = time.perf_counter()
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    radius = bound * ball.norm0
    source = ball.accuracy(ball.theta0, x, y)
    best, best_drift, per_restart = source, 0.0, []
    for restart in range(settings.restarts):
        kind = LOSSES[restart % len(LOSSES)]
        delta = torch.zeros_like(ball.theta0)
        if restart >= len(LOSSES):  # a random start inside the ball
            direction = torch.randn(ball.theta0.shape, generator=gen)
            scale = radius * float(torch.rand((), generator=gen)) ** (1 / direction.numel())
            delta = direction * (scale / float(direction.norm()))
        lowest = math.inf
        for step in range(settings.steps):
            pick = (
                torch.randperm(len(x), generator=gen)[: settings.batch]
                if len(x) > settings.batch
                else slice(None)
            )
            theta = (ball.theta0 + delta).requires_grad_(True)
            loss = _loss(ball.logits(theta, x[pick]), y[pick], kind, settings.margin_floor)
            (grad,) = torch.autograd.grad(loss, theta)
            share = settings.step * (
                0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * step / settings.steps))
            )
            norm = float(grad.norm())
            if norm > 0 and math.isfinite(norm):
                delta = _project(delta + grad * (share * radius / norm), radius)
            if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
                score = ball.accuracy(ball.theta0 + delta, x, y)
                lowest = min(lowest, score)
                if score < best:
                    best, best_drift = score, float(delta.norm()) / ball.norm0
        per_restart.append(lowest)
    return WorstCase(
        bound=bound,
        radius=radius,
        source_accuracy=source,
        worst_accuracy=best,
        drift=best_drift,
        per_restart=per_restart,
        seconds=time.perf_counter() - start,
    )
