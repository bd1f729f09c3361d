"""The worst case inside the drift bound: the lowest clean accuracy any θ in the ball reaches.

Whatever frames an attacker sends, the guardrails keep the adapted norm parameters θ in a
set around the source θ0 (SPEC §10). So the most any stream can cost is the lowest clean
accuracy of a θ in that set; this module searches for it directly, with projected gradient
ascent on θ (no frames, no step: an attacker who could set θ at will). Two shapes of set
(:data:`SHAPES`): ``"l2"``, ``‖θ − θ0‖ ≤ b·‖θ0‖`` (``max_drift``), and ``"box"``, every
entry within ``b·rms(θ0_t)`` of its source value, ``t`` its tensor (a candidate guardrail, not
a field of ``Guardrails``).
It is an oracle: it maximises the loss on the very images it is scored on, labels known.
Its result bounds every frame attack from below only as well as the search finds the
minimum, so it runs several restarts, two losses and a decaying step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

LOSSES = ("margin", "cross-entropy")  # the restarts take turns
SHAPES = ("l2", "box")  # the relative L2 ball of max_drift; a per-entry box (a candidate)


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

    bound: float  # relative size b
    radius: float  # b·‖θ0‖: the ball's radius, the box's half-diagonal
    source_accuracy: float  # θ0's, %
    worst_accuracy: float  # the lowest found, %
    drift: float  # ‖θ − θ0‖/‖θ0‖ of the θ that reached it
    per_restart: list[float] = field(default_factory=list)  # each restart's lowest, %
    seconds: float = 0.0
    shape: str = "l2"  # of SHAPES
    delta: Tensor | None = field(default=None, repr=False, compare=False)  # θ − θ0 found

    def to_dict(self) -> dict[str, object]:
        """Every figure, without the parameters found."""
        return {k: v for k, v in asdict(self).items() if k != "delta"}

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
        # Each entry's unit in the box: its tensor's root mean square at the source.
        self.scale = torch.cat(
            [
                torch.full((size,), float(part.norm()) / math.sqrt(size))
                for size, part in zip(self.sizes, torch.split(self.theta0, self.sizes), strict=True)
            ]
        )

    def logits(self, theta: Tensor, x: Tensor) -> Tensor:
        """The model's logits on ``x`` with its norm parameters set to ``theta``."""
        parts = torch.split(theta, self.sizes)
        params = {n: p.reshape(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}
        return functional_call(self.model, params, (x,))

    def accuracy(self, theta: Tensor, images: Tensor, labels: Tensor) -> float:
        """Top-1 accuracy (%) of the model at ``theta`` on every image."""
        return top1_accuracy(lambda x: self.logits(theta, x), images, labels)


@torch.no_grad()
def top1_accuracy(
    logits: Callable[[Tensor], Tensor], images: Tensor, labels: Tensor, batch: int = 1024
) -> float:
    """Top-1 accuracy (%) of ``logits`` on every image, ``batch`` images at a time."""
    right = 0
    for start in range(0, len(images), batch):
        top1 = logits(images[start : start + batch]).argmax(1)
        right += int((top1 == labels[start : start + batch]).sum())
    return 100.0 * right / len(images)


def _loss(logits: Tensor, labels: Tensor, kind: str, floor: float) -> Tensor:
    """What the search raises: cross-entropy, or minus the logit margin (floored)."""
    if kind == "cross-entropy":
        return nn.functional.cross_entropy(logits, labels)
    true = logits.gather(1, labels[:, None])[:, 0]
    other = logits.masked_fill(nn.functional.one_hot(labels, logits.shape[1]).bool(), -math.inf)
    margin = true - other.max(1).values
    return -margin.clamp(min=-floor).mean()


class _Set:
    """One shape of set at one size: its projection, its steps and its random points."""

    def __init__(self, ball: NormBall, shape: str, bound: float) -> None:
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
        self.shape, self.radius = shape, bound * ball.norm0
        self.half = bound * ball.scale  # the box's half-widths

    def project(self, delta: Tensor) -> Tensor:
        if self.shape == "box":
            return torch.clamp(delta, -self.half, self.half)
        norm = float(delta.norm())
        return delta if norm <= self.radius else delta * (self.radius / norm)

    def ascent(self, grad: Tensor, share: float) -> Tensor | None:
        """A step of ``share`` of the set's size up ``grad`` (None: no usable gradient)."""
        norm = float(grad.norm())
        if not (norm > 0 and math.isfinite(norm)):
            return None
        if self.shape == "box":  # steepest ascent in L∞: the gradient's sign, per entry
            return torch.sign(grad) * self.half * share
        return grad * (share * self.radius / norm)

    def random_point(self, gen: torch.Generator) -> Tensor:
        """A point drawn uniformly from the set."""
        if self.shape == "box":
            return (2 * torch.rand(self.half.shape, generator=gen) - 1) * self.half
        direction = torch.randn(self.half.shape, generator=gen)
        scale = self.radius * float(torch.rand((), generator=gen)) ** (1 / direction.numel())
        return direction * (scale / float(direction.norm()))


def worst_case(
    ball: NormBall,
    images: np.ndarray,
    labels: np.ndarray,
    bound: float,
    settings: SearchSettings | None = None,
    *,
    seed: int = 0,
    shape: str = "l2",
    start: Tensor | None = None,
    deadline: float | None = None,
) -> WorstCase:
    """Search the set of size ``bound`` around θ0 for the θ of lowest accuracy on ``images``.

    Projected gradient ascent (steepest in the set's norm: the normalised gradient in the
    ball, its sign in the box); the restarts alternate :data:`LOSSES`; every ``eval_every``
    steps and at each restart's end θ is scored on every image, and the lowest score is the
    result.

    Args:
        ball: the model and its adapted parameters.
        images: float32 model inputs ``(N, C, H, W)``.
        labels: int64 ``(N,)``.
        bound: the relative size b (``max_drift`` for the ball, the per-entry share for the box).
        settings: how hard to look (:class:`SearchSettings` by default).
        seed: of the restarts' starting points and the minibatches.
        shape: of :data:`SHAPES`.
        start: θ − θ0 to start one more restart from (projected into the set), such as the
            worst point of a smaller set of the same shape, which this one contains.
        deadline: a ``time.perf_counter()`` reading: a restart after the first runs only
            where, priced as the mean so far, it ends by then (``per_restart`` says how many
            ran).
    """
    settings = settings or SearchSettings()
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    started = time.perf_counter()
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    region = _Set(ball, shape, bound)
    source = ball.accuracy(ball.theta0, x, y)
    best, best_drift, per_restart = source, 0.0, []
    best_delta = torch.zeros_like(ball.theta0)

    def scored(delta: Tensor) -> float:
        """θ0 + delta's accuracy, kept where it is the lowest yet."""
        nonlocal best, best_drift, best_delta
        score = ball.accuracy(ball.theta0 + delta, x, y)
        if score < best:
            best, best_drift, best_delta = score, float(delta.norm()) / ball.norm0, delta.clone()
        return score

    for restart in range(settings.restarts + (start is not None)):
        now = time.perf_counter()
        if restart and deadline is not None and now + (now - started) / restart > deadline:
            break
        kind = LOSSES[restart % len(LOSSES)]
        delta = torch.zeros_like(ball.theta0)
        lowest = math.inf
        if restart == settings.restarts:  # the extra restart, from the given point, scored
            delta = region.project(start.to(delta.dtype))  # type: ignore[union-attr]
            lowest = scored(delta)
        elif restart >= len(LOSSES):
            delta = region.random_point(gen)
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
            move = region.ascent(grad, share)
            if move is not None:
                delta = region.project(delta + move)
            if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
                lowest = min(lowest, scored(delta))
        per_restart.append(lowest)
    return WorstCase(
        bound=bound,
        radius=region.radius,
        source_accuracy=source,
        worst_accuracy=best,
        drift=best_drift,
        per_restart=per_restart,
        seconds=time.perf_counter() - started,
        shape=shape,
        delta=best_delta,
    )
