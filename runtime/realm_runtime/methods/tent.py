"""Tent: the entropy of every sample, minimised on the normalisation affine parameters.

Wang et al., "Tent: Fully Test-Time Adaptation by Entropy Minimization", ICLR 2021, Eq. (2).
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._method import Method

TENT = Method(
    name="tent",
    label="Tent",
    paper="Wang et al., ICLR 2021",
    diversity=False,
    entropy_cut=False,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=False,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
)
