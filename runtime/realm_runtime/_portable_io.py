"""The portable graphs' feeds: the settings vectors of a configuration, the parameter layout.

Torch-free, like the rest of the runtime package; the names themselves are :mod:`._names`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._names import (
    ADAPT_SETTINGS,
    ANCHOR_NAME,
    COLLAPSE_LIMIT_NAME,
    DIVERSITY_MARGIN_NAME,
    EMA_BETA_NAME,
    EMA_NEW_NAME,
    ENTROPY_MARGIN_NAME,
    EPISODIC_NAME,
    FULL_RATE_NAME,
    LR_ALPHA_LAMBDA_NAME,
    LR_BATCH_NORM_NAME,
    LR_NAME,
    MAX_DRIFT_NAME,
    MOMENTUM_NAME,
    NEXT_SUFFIX,
    PLPD_THRESHOLD_NAME,
    RECOVERY_LOSS_NAME,
    RELAX_NAME,
    SAM_RHO_NAME,
)

if TYPE_CHECKING:
    from ._config import RealmConfig


def next_name(state: str) -> str:
    """The adapt graph's output that holds the next value of the state input ``state``."""
    return state + NEXT_SUFFIX


def step_settings(config: RealmConfig) -> dict[str, float]:
    """What the step graph's hyper-parameter inputs are fed from ``config``, by input name."""
    guard = config.guard
    values = {
        LR_NAME: config.lr,
        # 0: at lr (no BatchNorm tensor, or no rate of BatchNorm's own)
        LR_BATCH_NORM_NAME: 0.0 if config.batch_norm_lr == config.lr else config.batch_norm_lr,
        MOMENTUM_NAME: config.momentum,
        ENTROPY_MARGIN_NAME: config.e0,
        ANCHOR_NAME: guard.anchor or 0.0,
        RELAX_NAME: (guard.relax or 0.0) if config.rules.learns_alpha_lambda else 0.0,
        **dict.fromkeys(_METHOD_STEP_SLOTS, 0.0),  # another method's: fed, never read
    }
    values.update((k, v) for k, v in _method_slots(config).items() if k in _METHOD_STEP_SLOTS)
    return values


# The step graph's inputs that are a method's own setting (its settings' slots()).
_METHOD_STEP_SLOTS = (LR_ALPHA_LAMBDA_NAME, SAM_RHO_NAME, PLPD_THRESHOLD_NAME)


def _method_slots(config: RealmConfig) -> dict[str, float]:
    assert config.settings is not None  # resolved on construction
    return config.settings.slots()


def method_input(config: RealmConfig) -> float:
    """The value of the method's own step input (``Method.step_input``; 0 where it has none)."""
    name = config.rules.step_input
    return step_settings(config)[name] if name else 0.0


def adapt_settings(config: RealmConfig) -> np.ndarray:
    """The adapt graph's settings vector (``realm.settings``) of ``config``, float32.

    In :data:`ADAPT_SETTINGS` order. Each value is rounded to float32 from its float64 value,
    as the host-step backends round it; ``realm.episodic`` is 1 or 0.
    """
    guard = config.guard
    limit = guard.collapse_limit(config.num_classes)
    values = {
        **step_settings(config),
        DIVERSITY_MARGIN_NAME: config.diversity_margin,
        EMA_BETA_NAME: config.ema_beta,
        EMA_NEW_NAME: 1 - config.ema_beta,
        MAX_DRIFT_NAME: guard.max_drift or 0.0,
        COLLAPSE_LIMIT_NAME: 0.0 if limit is None else limit,
        RECOVERY_LOSS_NAME: 0.0,  # SAR's: its settings' slots below
        EPISODIC_NAME: 1.0 if config.episodic else 0.0,
        FULL_RATE_NAME: guard.full_rate or 0.0,
        **_method_slots(config),
    }
    return np.array([values[name] for name in ADAPT_SETTINGS], np.float32)


@dataclass(frozen=True)
class TensorSlot:
    """Where one trainable tensor lies in the flat parameter vector ``realm.params``."""

    name: str  # the SDK's parameter name (or realm.alpha / realm.lambda)
    offset: int  # first element in the flat vector
    shape: list[int]  # the tensor's shape ([] for α and λ)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)
