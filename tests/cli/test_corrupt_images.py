"""CIFAR-10-C corruptions at any size, grey or colour (realm_tools.data._any_size)."""

from __future__ import annotations

import numpy as np
import pytest

from realm_tools.data import CIFAR_C_CORRUPTIONS, CIFAR_C_EXTRAS, corrupt_gray32, corrupt_images

ALL = CIFAR_C_CORRUPTIONS + CIFAR_C_EXTRAS
SPATIAL = ("defocus_blur", "zoom_blur", "elastic_transform", "pixelate", "motion_blur")
SEED_FREE = (
    "defocus_blur",
    "zoom_blur",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
    "gaussian_blur",
)


def _images(n: int, channels: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """Image-like uint8 stack: gradients, a bright blob and stripes, each channel its own mix."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    yy, xx = yy * 32 / h, xx * 32 / w
    slope = rng.uniform(0.5, 2.5, (2, n, channels, 1, 1))
    cy, cx = rng.uniform(10, 22, (2, n, 1, 1, 1))
    radius = rng.uniform(3, 6, (n, 1, 1, 1))
    blob = rng.uniform(80, 150, (n, channels, 1, 1))
    blob = blob * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
    stripes = 25 * ((xx + yy) % 4 < 2)
    img = 30 + slope[0] * xx + slope[1] * yy + blob + stripes
    return np.clip(img, 0, 255).astype(np.uint8)


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


@pytest.fixture(scope="module")
def colour() -> np.ndarray:
    return _images(2, 3, 64, 48)


@pytest.mark.parametrize("name", ALL)
def test_grey_32_is_bit_identical_to_corrupt_gray32(name: str) -> None:
    images = _images(8, 1, 32, 32, seed=3)
    for severity in (1, 3, 5):
        for seed in (0, 1):
            expected = corrupt_gray32(images[:, 0], name, severity, seed=seed)[:, None]
            got = corrupt_images(images, name, severity, seed=seed)
            assert got.tobytes() == expected.tobytes()
            assert got.shape == (8, 1, 32, 32)


@pytest.mark.parametrize("shape", [(2, 1, 28, 28), (2, 3, 64, 48)])
@pytest.mark.parametrize("name", ALL)
def test_returns_uint8_of_the_input_shape(name: str, shape: tuple[int, ...]) -> None:
    images = _images(*shape)
    for severity in (1, 5):
        out = corrupt_images(images, name, severity, seed=0)
        assert out.dtype == np.uint8
        assert out.shape == shape


@pytest.mark.parametrize("name", ALL)
def test_same_arguments_give_the_same_bytes(colour: np.ndarray, name: str) -> None:
    first = corrupt_images(colour, name, 4, seed=11)
    assert first.tobytes() == corrupt_images(colour.copy(), name, 4, seed=11).tobytes()


@pytest.mark.parametrize("name", [n for n in ALL if n not in SEED_FREE])
def test_another_seed_gives_another_result(colour: np.ndarray, name: str) -> None:
    a = corrupt_images(colour, name, 5, seed=0)
    b = corrupt_images(colour, name, 5, seed=1)
    assert a.tobytes() != b.tobytes()


@pytest.mark.parametrize("name", SEED_FREE)
def test_deterministic_corruptions_ignore_the_seed(colour: np.ndarray, name: str) -> None:
    a = corrupt_images(colour, name, 3, seed=0)
    assert a.tobytes() == corrupt_images(colour, name, 3, seed=9).tobytes()


@pytest.mark.parametrize("name", SPATIAL)
def test_grey_copied_to_three_channels_stays_grey(name: str) -> None:
    grey = _images(3, 1, 40, 56, seed=5)
    for severity in (1, 5):
        out = corrupt_images(np.repeat(grey, 3, axis=1), name, severity, seed=2)
        assert np.array_equal(out[:, 0], out[:, 1])
        assert np.array_equal(out[:, 0], out[:, 2])
        assert _mad(out[:, :1], grey) > 0


def test_per_pixel_noise_differs_between_channels() -> None:
    grey = np.repeat(_images(2, 1, 48, 48), 3, axis=1)
    out = corrupt_images(grey, "gaussian_noise", 5, seed=0)
    assert not np.array_equal(out[:, 0], out[:, 1])


@pytest.mark.parametrize("name", [n for n in CIFAR_C_CORRUPTIONS if n != "elastic_transform"])
def test_severity_5_moves_further_than_severity_1(name: str) -> None:
    images = _images(4, 3, 64, 64, seed=1)
    mild = _mad(corrupt_images(images, name, 1, seed=7), images)
    harsh = _mad(corrupt_images(images, name, 5, seed=7), images)
    assert harsh > mild > 0


def test_elastic_severity_1_has_the_largest_affine_jitter() -> None:
    # As at 32 px (tests/cli/test_cifar_c.py): CIFAR-10-C's elastic table gives severity 1 an
    # affine jitter of ±0.08·size and no field, severity 5 ±0.03·size plus a small field.
    images = _images(4, 3, 64, 64, seed=1)
    mild = _mad(corrupt_images(images, "elastic_transform", 1, seed=7), images)
    harsh = _mad(corrupt_images(images, "elastic_transform", 5, seed=7), images)
    assert mild > harsh > 0


def test_extreme_sides_work() -> None:
    for shape in [(1, 1, 8, 8), (1, 3, 8, 512), (1, 1, 512, 9)]:
        images = _images(*shape)
        for name in ("fog", "frost", "glass_blur", "zoom_blur", "snow", "spatter"):
            assert corrupt_images(images, name, 5, seed=0).shape == shape


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros((2, 1, 32, 32), np.float32), "must be a uint8 numpy array, got float32"),
        ([[[[0] * 32] * 32]], "must be a uint8 numpy array, got list"),
        (np.zeros((2, 32, 32), np.uint8), r"must have 4 dimensions \(N, C, H, W\)"),
        (np.zeros((2, 2, 32, 32), np.uint8), "must have 1 or 3 channels on axis 1, got 2"),
        (np.zeros((2, 32, 32, 3), np.uint8), "must have 1 or 3 channels on axis 1, got 32"),
        (np.zeros((2, 1, 7, 32), np.uint8), "must be 8 to 512 pixels, got 7×32"),
        (np.zeros((2, 3, 32, 513), np.uint8), "must be 8 to 512 pixels, got 32×513"),
        (np.zeros((0, 1, 32, 32), np.uint8), "at least one image, got N = 0"),
    ],
)
def test_bad_images_are_refused(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        corrupt_images(bad, "fog", 1, seed=0)  # type: ignore[arg-type]


def test_unknown_name_is_refused_with_the_known_names(colour: np.ndarray) -> None:
    with pytest.raises(ValueError, match="unknown corruption 'saturate'; use one of") as info:
        corrupt_images(colour, "saturate", 1, seed=0)
    assert all(name in str(info.value) for name in ALL)


@pytest.mark.parametrize("severity", [0, 6, -1, 2.0, True, "3"])
def test_bad_severity_is_refused(colour: np.ndarray, severity: object) -> None:
    with pytest.raises(ValueError, match="severity must be an integer from 1 to 5"):
        corrupt_images(colour, "fog", severity, seed=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [-1, 1.5, None, False])
def test_bad_seed_is_refused(colour: np.ndarray, seed: object) -> None:
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        corrupt_images(colour, "fog", 1, seed=seed)  # type: ignore[arg-type]
