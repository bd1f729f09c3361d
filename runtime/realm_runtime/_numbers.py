"""The one test of a configuration number that every validated dataclass shares."""

from __future__ import annotations

import math


def finite(value: object) -> bool:
    """Whether ``value`` is a finite int or float (a bool is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integer(value: object) -> bool:
    """Whether ``value`` is an int (a bool is not one here)."""
    return isinstance(value, int) and not isinstance(value, bool)
