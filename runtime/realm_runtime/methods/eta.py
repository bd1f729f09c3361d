"""ETA: EATA's step without its Fisher regulariser (Niu et al., ICML 2022, §4.1).

Reliable (H < e0) and non-redundant (S_div) samples, weighted by exp(−(H − e0)): what EATA's
paper calls ETA, its method less the anti-forgetting term that needs clean images.
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._method import Method

ETA = Method(
    name="eta",
    label="ETA",
    paper="Niu et al., ICML 2022 (EATA without its Fisher regulariser)",
    diversity=True,
    entropy_cut=True,
    entropy_weight=True,
    learns_alpha_lambda=False,
    recovery=False,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
)
