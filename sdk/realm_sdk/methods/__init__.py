"""The torch form of each method (one file per method, as in ``realm_runtime.methods``).

Each file gives the method's per-sample loss ``L(H_i)``, and where its step needs more
(SAR's second gradient at a perturbed point, DeYO's shuffled forward), the torch
code of that too.
"""

from __future__ import annotations

from realm_runtime import RealmConfig

from . import deyo, eata, realm, sar, tent
from ._form import CutStep, PerSampleLoss
from .eata import eata_loss
from .realm import robust_loss

LOSSES: dict[str, PerSampleLoss] = {
    "realm": realm.per_sample_loss,
    "tent": tent.per_sample_loss,
    "eata": eata.per_sample_loss,
    "sar": sar.per_sample_loss,
    "deyo": deyo.per_sample_loss,
}


def per_sample_loss(config: RealmConfig) -> PerSampleLoss:
    """The per-sample loss of ``config.method``, in torch."""
    return LOSSES[config.method]


__all__ = [
    "LOSSES",
    "CutStep",
    "PerSampleLoss",
    "deyo",
    "eata_loss",
    "per_sample_loss",
    "robust_loss",
    "sar",
]
