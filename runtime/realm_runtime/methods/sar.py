"""SAR: the entropy cut, a sharpness-aware (SAM) step, and a reset when the loss collapses.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023, Eq. (2)–(5)
and Algorithm 1; SAM: Foret et al., ICLR 2021.
"""

from __future__ import annotations

from .._guardrails import Guardrails
from .._names import SAM_RHO_NAME
from ._method import Method

SAR = Method(
    name="sar",
    label="SAR",
    paper="Niu et al., ICLR 2023",
    diversity=False,
    entropy_cut=True,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=True,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    second_forward="the entropy's gradient again at θ + ρ·g/‖g‖ (SAM), the cut applied there",
    step_cut=True,
    step_input=SAM_RHO_NAME,
    legacy_training="SAR's second gradient at a perturbed point is not in the legacy training "
    "artifacts",
    cost=2.0,  # a second forward and backward at θ + ε
)
