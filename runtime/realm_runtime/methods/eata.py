"""EATA: reliable (H < e0) and non-redundant (S_div) samples, weighted by exp(−(H − e0)).

Niu et al., "Efficient Test-Time Model Adaptation without Forgetting", ICML 2022, Eq. (3)–(6);
without the Fisher regulariser, which needs source data.
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._method import Method

EATA = Method(
    name="eata",
    label="EATA",
    paper="Niu et al., ICML 2022",
    diversity=True,
    entropy_cut=True,
    entropy_weight=True,
    learns_alpha_lambda=False,
    recovery=False,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
)
