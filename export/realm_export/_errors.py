"""The export's refusal: what the model holds that no artifact of this package can represent."""

from __future__ import annotations


class UnsupportedModelError(ValueError):
    """The model contains something the on-device training graph cannot represent."""


class MemoryBudgetError(ValueError):
    """No setting the export may choose keeps the updating peak within the memory budget."""


class DriftBoundError(ValueError):
    """No candidate ``max_drift`` keeps the worst case inside it within the allowed drop."""
