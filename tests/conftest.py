"""Shared fixtures: small models and the digits task, built once per session."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Bit-for-bit comparisons between two runs need the same reduction order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def digits():
    from realm_sdk import load_digits

    return load_digits()


@pytest.fixture(scope="session")
def digits_model(digits, tmp_path_factory):
    """A briefly trained source model (6 epochs: good enough for behaviour, fast to make)."""
    from realm_sdk import train_digits_model

    return train_digits_model(digits, epochs=6, cache_dir=tmp_path_factory.mktemp("weights"))
