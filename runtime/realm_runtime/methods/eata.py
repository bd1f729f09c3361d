"""EATA: ETA's step plus the Fisher regulariser λ_F · Σ F_i (θ_i − θ0_i)² against forgetting.

Niu et al., "Efficient Test-Time Model Adaptation without Forgetting", ICML 2022, Eq. (8)–(9).
F is the diagonal Fisher information of the adapted parameters on clean images, computed
once as the authors' code computes it (SPEC §4) and fixed for the deployment: the SDK takes
the images (``RealmAdapter(..., clean_images=x)``), the export bakes F into its graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .._guardrails import Guardrails
from .._numbers import finite
from ._method import Method
from ._settings import MethodSettings


@dataclass(frozen=True)
class EataSettings(MethodSettings):
    """EATA's own settings: the regulariser's weight and how its Fisher is estimated."""

    BAKED: ClassVar[frozenset[str]] = frozenset({"fisher_alpha", "fisher_size", "fisher_batch"})

    fisher_alpha: float = 2000.0  # λ_F, the regulariser's weight (EATA's ImageNet-C value)
    fisher_size: int = 2000  # clean images the Fisher is estimated on, at most (EATA's |Q|)
    fisher_batch: int = 64  # images per squared gradient (EATA's code squares batch means)

    @classmethod
    def for_preset(cls, preset: str | None, *, num_classes: int, lr: float) -> EataSettings:
        """EATA's published λ_F: 1 on CIFAR-10-C, 2000 on ImageNet-C (and without a preset)."""
        del num_classes, lr
        return cls(fisher_alpha=1.0) if preset == "cifar" else cls()

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not finite(self.fisher_alpha) or self.fisher_alpha < 0:
            errors.append(f"fisher_alpha must be a finite number ≥ 0, got {self.fisher_alpha!r}")
        for name in ("fisher_size", "fisher_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                errors.append(f"{name} must be an integer ≥ 1, got {value!r}")
        return errors


EATA = Method(
    name="eata",
    label="EATA",
    paper="Niu et al., ICML 2022",
    diversity=True,
    entropy_cut=True,
    entropy_weight=True,
    learns_alpha_lambda=False,
    recovery=False,
    settings=EataSettings,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    clean_state="the Fisher information of the adapted parameters on clean images",
    legacy_training="EATA's Fisher regulariser is not in the legacy training artifacts",
)
