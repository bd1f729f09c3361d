"""REALM: entropy through a robust loss ρ(H; α, λ) with learned α, λ, and EATA's S_div.

Seto et al., "REALM: Robust Entropy Adaptive Loss Minimization for Improved Single-Sample
Test-Time Adaptation", WACV 2024, Eq. (rho) and Algorithm 1; SPEC §2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._guardrails import Guardrails
from .._names import LR_ALPHA_LAMBDA_NAME, RELAX_NAME
from .._numbers import finite
from ._method import Method
from ._settings import Configured, MethodSettings

LossScale = Literal["one", "lambda"]

# Projection bounds of the robust-loss parameters (SPEC §2). α must stay below 2 (the loss is
# concave, and |α − 2| > 0) and above 0 (division by α); λ must stay positive.
ALPHA_MIN = 1e-3
ALPHA_MAX = 1.999
LAMBDA_MIN = 1e-4


@dataclass(frozen=True)
class RealmSettings(MethodSettings):
    """REALM's own settings: the robust loss's initial shape and scale, and their rate."""

    BAKED = frozenset({"alpha0", "lambda0", "loss_scale"})  # α0, λ0 are the graph's sources

    alpha0: float = 0.15  # initial shape α of ρ; small α mimics EATA's reliable-sample cut
    lambda0: float = 0.1  # initial scale λ of ρ (entropy units)
    # SGD learning rate of α and λ: App. D's smaller rate, chosen on the validation split
    # (docs/fmnist.md); at the main text's 2·lr, λ grows until the updates fade away.
    lr_alpha_lambda: float = 5e-7
    loss_scale: LossScale = "one"  # C of ρ: 1, or the live λ (removes λ from the grad's scale)

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not finite(self.alpha0) or not 0 < self.alpha0 < 2:
            errors.append(f"alpha0 must be in (0, 2), got {self.alpha0!r}")
        elif not ALPHA_MIN <= self.alpha0 <= ALPHA_MAX:
            errors.append(
                f"alpha0 must lie in the projection range [{ALPHA_MIN}, {ALPHA_MAX}], "
                f"got {self.alpha0!r}"
            )
        if not finite(self.lambda0) or self.lambda0 < LAMBDA_MIN:
            errors.append(f"lambda0 must be a finite number ≥ {LAMBDA_MIN}, got {self.lambda0!r}")
        if not finite(self.lr_alpha_lambda) or self.lr_alpha_lambda < 0:
            errors.append(
                f"lr_alpha_lambda must be a finite number ≥ 0, got {self.lr_alpha_lambda!r}"
            )
        if self.loss_scale not in ("one", "lambda"):
            errors.append(f"loss_scale must be 'one' or 'lambda', got {self.loss_scale!r}")
        return errors

    @classmethod
    def for_preset(cls, preset: str | None, *, num_classes: int, lr: float) -> RealmSettings:
        """The paper's: ImageNet's λ0 = 0.4·ln C, C = λ, α and λ at lr; else the defaults."""
        if preset != "imagenet":
            return cls()
        return cls(
            lambda0=0.4 * math.log(num_classes),
            lr_alpha_lambda=lr,
            loss_scale="lambda",
        )

    def slots(self) -> dict[str, float]:
        """The rate of α and λ."""
        return {LR_ALPHA_LAMBDA_NAME: self.lr_alpha_lambda}


def alpha_lambda_start(config: Configured) -> tuple[float, float]:
    """α0 and λ0 where the method learns them; 0 where it does not (never read then)."""
    own = config.settings
    return (own.alpha0, own.lambda0) if isinstance(own, RealmSettings) else (0.0, 0.0)


def scales_by_lambda(config: Configured) -> bool:
    """Whether ρ is scaled by the live λ (``loss_scale="lambda"``; False where none is learned)."""
    own = config.settings
    return isinstance(own, RealmSettings) and own.loss_scale == "lambda"


REALM = Method(
    name="realm",
    label="REALM",
    paper="Seto et al., WACV 2024",
    diversity=True,
    entropy_cut=False,  # ρ down-weights uncertain samples instead of refusing them
    entropy_weight=False,
    learns_alpha_lambda=True,
    recovery=False,
    settings=RealmSettings,
    guardrails=Guardrails(),  # the SDK's own method runs bounded (SPEC §10)
    step_input=RELAX_NAME,  # not the loss's: the guardrails' share of α − α0, λ − λ0 given back
    batch_norm_rate=True,  # at lr its BatchNorm models fell below not adapting (SPEC §4)
)
