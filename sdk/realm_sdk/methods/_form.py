"""The torch form of a method: what the SDK and the traced step graphs compute with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor

from realm_runtime import RealmConfig

# L(H_i) of each sample: entropies (B,), the loss's learned scalars (REALM's α, λ; else
# none), e0 (a float, or a tensor where the graph takes it as an input), the configuration.
PerSampleLoss = Callable[[Tensor, Sequence[Tensor], "Tensor | float", RealmConfig], Tensor]


@dataclass(frozen=True)
class CutStep:
    """A step whose own cut may refuse samples (SAR's at θ + ε, DeYO's PLPD), for the SDK."""

    loss: float  # the loss of the samples the step's cut kept
    finite: bool  # the loss and every gradient are finite
    grads: tuple[Tensor, ...]  # ∂loss/∂θ (empty when none was kept)
    kept: int  # samples the step's cut kept
