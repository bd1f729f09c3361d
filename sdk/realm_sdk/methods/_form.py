"""The torch form of a method: the loss of one step, as every caller computes it.

Each method file of this package defines ``FORM``, a :class:`TorchForm`. Its ``step_loss``
is written once, functionally (θ is an argument, never moved in place), so the three callers
run the same code: the SDK on its model's parameters, the traced step graph on the flat
parameter vector, the export's reference on a private copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from torch import Tensor

from realm_runtime import RealmConfig

# L(H_i) of each sample: entropies (B,), the loss's learned scalars (REALM's α, λ; else
# none), e0 (a float, or a tensor where the graph takes it as an input), the configuration.
PerSampleLoss = Callable[[Tensor, Sequence[Tensor], "Tensor | float", RealmConfig], Tensor]

# (inputs, θ as tensors in the trainable order) → logits: a second forward at another point.
LogitsAt = Callable[[Tensor, Sequence[Tensor]], Tensor]

# (inputs, logits at θ, inputs → logits at θ, config, the first sample's index) → the
# distance of the step's own cut from its threshold, for the float32 tie check (inf: none).
CutMargin = Callable[[Tensor, np.ndarray, Callable[[Tensor], np.ndarray], RealmConfig, int], float]


@dataclass(frozen=True)
class StepInputs:
    """What a method's step loss reads: the same fields in every caller."""

    logits_at: LogitsAt  # a second forward, for a step that needs one (SAR, DeYO)
    x: Tensor  # the batch
    theta: Sequence[Tensor]  # the adapted parameters θ: the gradient's variables
    logits: Tensor  # (B, C) at θ, with their autograd graph
    entropy: Tensor  # (B,) at θ, with their autograd graph
    weight: Tensor  # (B,) 1/n on the n samples the decision kept, 0 elsewhere
    learned: Sequence[Tensor]  # REALM's α, λ; empty for the other methods
    e0: Tensor | float  # the entropy margin (a graph input in the step graph)
    knob: Tensor | float  # the method's own scalar (Method.step_input: SAR's ρ, DeYO's τ)
    config: RealmConfig  # everything a graph fixes at export (grid sizes, seeds)
    sample: Tensor | int = 0  # the batch's first sample's index in the stream (DeYO's draw)
    # θ0 and λ_F·F laid out as ``theta`` is (EATA's regulariser); empty for the others.
    origin: Sequence[Tensor] = ()
    fisher: Sequence[Tensor] = ()


@dataclass(frozen=True)
class StepLoss:
    """The loss of one step, before its gradient."""

    loss: Tensor  # scalar: the weighted loss of the samples the step keeps
    kept: Tensor | None = None  # samples the step's own cut kept (None: it has no cut)
    checked: Tensor | None = None  # also required finite (SAR's first gradient)


def _any_input(x: Tensor, config: RealmConfig) -> None:
    """Every input the model takes suits the method."""


def _no_cut(
    x: Tensor, logits: np.ndarray, predict: object, config: RealmConfig, sample: int
) -> float:
    return float("inf")


def _as_is(config: RealmConfig) -> RealmConfig:
    return config


# (inputs, the model at its current θ, config, the first sample's index) → the method's own
# logits of the batch (TTAug's: the log of the mean softmax over views).
Predict = Callable[[Tensor, Callable[[Tensor], Tensor], RealmConfig, int], Tensor]


@dataclass(frozen=True)
class TorchForm:
    """A method in torch (``realm_sdk.methods.<name>.FORM``)."""

    # Its loss from the step's inputs; the caller takes the gradient w.r.t. θ and ``learned``.
    step_loss: Callable[[StepInputs], StepLoss]
    # Raises ValueError, in one sentence, on an input the step cannot take (DeYO's patches).
    check_input: Callable[[Tensor, RealmConfig], None] = field(default=_any_input)
    # Its own cut's distance from its threshold (see CutMargin).
    cut_margin: CutMargin = field(default=_no_cut)
    # The configuration with its own cut open, so validation sees a gradient on every input.
    open_cut: Callable[[RealmConfig], RealmConfig] = field(default=_as_is)
    # Its own prediction (a method that never updates); None: the model's logits.
    predict: Predict | None = None

    @classmethod
    def weighted(cls, per_sample: PerSampleLoss) -> TorchForm:
        """The form of a method whose step is ``Σ w_i L(H_i)``: no second forward, no cut."""

        def step_loss(s: StepInputs) -> StepLoss:
            return StepLoss((per_sample(s.entropy, s.learned, s.e0, s.config) * s.weight).sum())

        return cls(step_loss)
