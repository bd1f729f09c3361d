"""REALM: entropy through a robust loss ρ(H; α, λ) with learned α, λ, and EATA's S_div.

Seto et al., "REALM: Robust Entropy Adaptive Loss Minimization for Improved Single-Sample
Test-Time Adaptation", WACV 2024, Eq. (rho) and Algorithm 1; SPEC §2.
"""

from __future__ import annotations

from .._guardrails import Guardrails
from .._names import RELAX_NAME
from ._method import Method

REALM = Method(
    name="realm",
    label="REALM",
    paper="Seto et al., WACV 2024",
    diversity=True,
    entropy_cut=False,  # ρ down-weights uncertain samples instead of refusing them
    entropy_weight=False,
    learns_alpha_lambda=True,
    recovery=False,
    guardrails=Guardrails(),  # the SDK's own method runs bounded (SPEC §10)
    step_input=RELAX_NAME,  # not the loss's: the guardrails' share of α − α0, λ − λ0 given back
    batch_norm_rate=True,  # at lr its BatchNorm models fell below not adapting (SPEC §4)
)
