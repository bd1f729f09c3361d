"""Property-based fuzzing: one property, a fast tier and a slow one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAST = 150  # examples per target in `make test`
FULL = 1000  # examples per target in the slow tier


def tiers(prop: Callable, **strategies: st.SearchStrategy) -> tuple[Callable, Callable]:
    """The same property as a fast test and a slow-tier one with more examples."""
    common = {
        "deadline": None,
        "derandomize": True,  # the same examples on every run: a failure reproduces
        "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        "database": None,
    }
    fast = settings(max_examples=FAST, **common)(given(**strategies)(prop))
    full = pytest.mark.slow(settings(max_examples=FULL, **common)(given(**strategies)(prop)))
    return fast, full


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
