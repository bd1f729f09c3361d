"""What a test needs of the data sets, and the sentence where it is missing."""

from __future__ import annotations

import pytest


def needs_fashion_mnist(model: str = "fmnist_") -> None:
    """Skip, naming the fix, where a Fashion-MNIST model or stream is asked for and the data
    set is not installed (``make test`` installs Debian's package where it can)."""
    if not model.startswith("fmnist_"):
        return
    from realm_tools.data import find_fashion_mnist

    try:
        find_fashion_mnist()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
