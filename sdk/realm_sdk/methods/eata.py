"""EATA's loss in torch: ETA's weighted entropy plus λ_F · Σ F_i (θ_i − θ0_i)² (ICML 2022)."""

from __future__ import annotations

from torch import Tensor

from ._form import StepInputs, StepLoss, TorchForm
from .eta import eata_loss


def fisher_penalty(s: StepInputs) -> Tensor | float:
    """``Σ λ_F·F_i (θ_i − θ0_i)²`` over the adapted values (``s.fisher`` holds λ_F·F).

    As the authors add it: once per step, to the mean weighted entropy of the kept samples.
    """
    return sum(
        (f * (t - t0) ** 2).sum() for t, t0, f in zip(s.theta, s.origin, s.fisher, strict=True)
    )


def step_loss(s: StepInputs) -> StepLoss:
    """ETA's ``Σ w_i exp(−(H_i − e0)) · H_i``, plus the Fisher regulariser."""
    if not s.fisher:
        raise ValueError("EATA's step needs its Fisher information (StepInputs.fisher)")
    return StepLoss((eata_loss(s.entropy, s.e0) * s.weight).sum() + fisher_penalty(s))


FORM = TorchForm(step_loss)
