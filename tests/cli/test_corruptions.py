"""The built-in shift benchmark's corruptions and the digits task."""

from __future__ import annotations

import numpy as np
import pytest

from realm_tools.data import CORRUPTIONS, corrupt


@pytest.fixture(scope="module")
def images(digits):
    return digits.test_x[:64]


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corruption_is_deterministic_bounded_and_graded(images, name):
    out = [corrupt(images, name, s, seed=3) for s in (1, 3, 5)]
    for o in out:
        assert o.shape == images.shape and o.dtype == np.float32
        assert o.min() >= 0.0 and o.max() <= 1.0
    np.testing.assert_array_equal(out[2], corrupt(images, name, 5, seed=3))
    change = [float(np.abs(o - images).mean()) for o in out]
    assert change[0] > 0
    assert change[2] > change[0], change  # severity 5 departs further than severity 1


def test_clean_is_a_copy(images):
    out = corrupt(images, "clean", 5)
    np.testing.assert_array_equal(out, images)
    assert out is not images


def test_bad_arguments(images):
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt(images, "snowstorm", 3)
    with pytest.raises(ValueError, match="severity"):
        corrupt(images, "fog", 6)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        corrupt(images[0], "fog", 3)


def test_digits_split_is_stratified_and_deterministic(digits):
    from realm_tools.data import load_digits

    again = load_digits()
    np.testing.assert_array_equal(digits.test_y, again.test_y)
    assert len(digits.train_y) + len(digits.test_y) == 1797  # scikit-learn's digits
    assert set(np.unique(digits.test_y)) == set(range(10))
    counts = np.bincount(digits.test_y)
    assert counts.max() - counts.min() <= 3
    x, y = digits.stream("fog", 5, seed=1)
    assert x.shape == (len(digits.test_y), 1, 32, 32) and x.dtype == np.float32
    assert sorted(y.tolist()) == sorted(digits.test_y.tolist())  # a permutation


def test_source_model_learns_and_shift_hurts(digits, digits_model):
    import torch

    def accuracy(corruption):
        x, y = digits.stream(corruption, 5, seed=0)
        with torch.no_grad():
            return float((digits_model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())

    clean = accuracy("clean")
    assert clean > 0.8
    assert accuracy("gaussian_noise") < clean - 0.1
