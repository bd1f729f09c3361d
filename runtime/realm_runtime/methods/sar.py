"""SAR: the entropy cut, a sharpness-aware (SAM) step, and a reset when the loss collapses.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023, Eq. (2)–(5)
and Algorithm 1; SAM: Foret et al., ICLR 2021.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._guardrails import Guardrails
from .._names import RECOVERY_LOSS_NAME, SAM_RHO_NAME
from .._numbers import finite
from ._method import Method
from ._settings import MethodSettings

LOSS_EMA_BETA = 0.9  # the EMA coefficient of its second-pass loss, which its recovery reads


@dataclass(frozen=True)
class SarSettings(MethodSettings):
    """SAR's own settings: SAM's radius and the loss EMA under which the model recovers."""

    sam_rho: float = 0.05  # radius ρ of SAM's step to θ + ρ·g/‖g‖ (SAR's and SAM's value)
    recovery_loss: float = 0.2  # reset to the source when its loss EMA falls below this (e_m)

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not finite(self.sam_rho) or self.sam_rho <= 0:
            errors.append(f"sam_rho must be a finite number > 0, got {self.sam_rho!r}")
        if not finite(self.recovery_loss) or self.recovery_loss < 0:
            errors.append(f"recovery_loss must be a finite number ≥ 0, got {self.recovery_loss!r}")
        return errors

    def slots(self) -> dict[str, float]:
        """SAM's radius and e_m."""
        return {SAM_RHO_NAME: self.sam_rho, RECOVERY_LOSS_NAME: self.recovery_loss}

    def recover(self, loss_ema: float | None, loss: float) -> tuple[float | None, bool]:
        """SAR's model recovery after an update whose second-pass loss was ``loss``.

        A low loss EMA means the model has become confidently wrong (SAR's collapse sign).

        Returns:
            The loss EMA now, and whether the model goes back to the source. ``e_m`` is
            compared in float32, as the graphs hold it.
        """
        beta = LOSS_EMA_BETA
        ema = loss if loss_ema is None else beta * loss_ema + (1 - beta) * loss
        return ema, ema < float(np.float32(self.recovery_loss))


SAR = Method(
    name="sar",
    label="SAR",
    paper="Niu et al., ICLR 2023",
    diversity=False,
    entropy_cut=True,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=True,
    settings=SarSettings,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    second_forward="the entropy's gradient again at θ + ρ·g/‖g‖ (SAM), the cut applied there",
    step_cut=True,
    step_input=SAM_RHO_NAME,
    legacy_training="SAR's second gradient at a perturbed point is not in the legacy training "
    "artifacts",
    cost=2.0,  # a second forward and backward at θ + ε
)
