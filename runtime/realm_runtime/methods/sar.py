"""SAR: the entropy cut, a sharpness-aware (SAM) step, and a reset when the loss collapses.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023, Eq. (2)–(5)
and Algorithm 1; SAM: Foret et al., ICLR 2021.
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._method import Method

SAR = Method(
    name="sar",
    paper="Niu et al., ICLR 2023",
    diversity=False,
    entropy_cut=True,
    entropy_weight=False,
    learns_alpha_lambda=False,
    sharpness=True,
    recovery=True,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    legacy_training="SAR's second gradient at a perturbed point is not in the legacy training "
    "artifacts",
)
