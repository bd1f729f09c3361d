"""SPEC §10's guardrails: what keeps an adapter that runs for months useful."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._numbers import finite as _finite


@dataclass(frozen=True)
class Guardrails:
    """What keeps an adapter that runs for months useful (SPEC §10); each is off with ``None``.

    Every intervention is counted in the adaptation state, by reason. The defaults are those
    the continual benchmark supports (docs/continual.md), chosen on its validation stream.
    """

    relax: float | None = 0.1  # share of α − α0 and λ − λ0 given back per update (REALM)
    anchor: float | None = 0.003  # share of θ − θ0 given back per update (a soft drift bound)
    max_drift: float | None = 0.02  # bound of ‖θ − θ0‖ / ‖θ0‖ on a natural shift's stream
    # Update rate at which max_drift holds in full; below it the bound shrinks in proportion,
    # as S_div refuses most junk and one-class frames (None: the bound is max_drift always).
    full_rate: float | None = 0.5
    collapse: float | None = None  # reset to the source when H(mean prediction) < this·ln C

    def __post_init__(self) -> None:
        errors = []
        for name in ("relax", "anchor"):
            value = getattr(self, name)
            if value is not None and (not _finite(value) or not 0 < value < 1):
                errors.append(f"{name} must be in (0, 1) or None, got {value!r}")
        if self.max_drift is not None and (not _finite(self.max_drift) or self.max_drift <= 0):
            errors.append(f"max_drift must be a finite number > 0 or None, got {self.max_drift!r}")
        if self.full_rate is not None and (
            not _finite(self.full_rate) or not 0 < self.full_rate <= 1
        ):
            errors.append(f"full_rate must be in (0, 1] or None, got {self.full_rate!r}")
        if self.collapse is not None and (not _finite(self.collapse) or not 0 < self.collapse < 1):
            errors.append(f"collapse must be in (0, 1) or None, got {self.collapse!r}")
        if errors:
            raise ValueError("invalid Guardrails: " + "; ".join(errors))

    def drift_bound(self, update_rate: float | None) -> float | None:
        """The bound of ‖θ − θ0‖ / ‖θ0‖ in force at ``update_rate`` (None: no bound).

        ``max_drift·min(1, update_rate / full_rate)``; before any rate is known (at the start,
        after a reset) the bound is ``max_drift``. In float32, operation for operation as the
        adapt graph computes it from its float32 settings, so that every implementation
        compares the drift with the same threshold.
        """
        if self.max_drift is None:
            return None
        bound = np.float32(self.max_drift)
        if self.full_rate is None or update_rate is None:
            return float(bound)
        share = np.float32(update_rate) / np.float32(self.full_rate)
        return float(bound * min(np.float32(1.0), share))

    def collapse_limit(self, num_classes: int) -> float | None:
        """The collapse guard's limit on H(p̄) in nats, ``collapse·ln C`` (None: off).

        Rounded to float32: the value of the adapt graph's setting, which every
        implementation compares with.
        """
        if self.collapse is None:
            return None
        return float(np.float32(self.collapse * math.log(num_classes)))

    @classmethod
    def off(cls) -> Guardrails:
        """No guardrail: the methods exactly as their papers run them."""
        return cls(relax=None, anchor=None, max_drift=None, full_rate=None, collapse=None)
