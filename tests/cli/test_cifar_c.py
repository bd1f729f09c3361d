"""CIFAR-10-C corruptions on 32×32 gray images (realm_tools.data._cifar_c)."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest
from PIL import Image

from realm_tools.data import CIFAR_C_CORRUPTIONS, CIFAR_C_EXTRAS, corrupt_gray32

ALL = CIFAR_C_CORRUPTIONS + CIFAR_C_EXTRAS
SEED_FREE = (
    "defocus_blur",
    "zoom_blur",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
    "gaussian_blur",
)
RANDOM = tuple(name for name in ALL if name not in SEED_FREE)


def _images(n: int = 16, seed: int = 0) -> np.ndarray:
    """Image-like uint8 stack: a gradient, a bright blob, some fine texture, a black margin."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float64)
    slope = rng.uniform(0.5, 2.5, (2, n, 1, 1))
    cy, cx = rng.uniform(10, 22, (2, n, 1, 1))
    radius = rng.uniform(3, 6, (n, 1, 1))
    blob = 150 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
    stripes = 25 * ((xx + yy) % 4 < 2)
    img = 30 + slope[0] * xx + slope[1] * yy + blob + stripes
    img[:, :2], img[:, -2:], img[:, :, :2], img[:, :, -2:] = 0, 0, 0, 0  # padded like F-MNIST
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return _images()


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


def test_names_are_the_benchmark_and_the_gray_extras() -> None:
    assert CIFAR_C_CORRUPTIONS == (
        "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
        "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
        "elastic_transform", "pixelate", "jpeg_compression",
    )  # fmt: skip
    assert set(CIFAR_C_EXTRAS) == {"speckle_noise", "gaussian_blur", "spatter"}


@pytest.mark.parametrize("severity", [1, 5])
@pytest.mark.parametrize("name", ALL)
def test_returns_uint8_of_the_input_shape(images: np.ndarray, name: str, severity: int) -> None:
    before = images.copy()
    out = corrupt_gray32(images, name, severity, seed=3)
    assert out.dtype == np.uint8
    assert out.shape == images.shape
    assert np.array_equal(images, before), "the input must not be modified"
    single = corrupt_gray32(images[:1], name, severity, seed=3)
    assert single.dtype == np.uint8 and single.shape == (1, 32, 32)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_is_bit_identical(images: np.ndarray, name: str) -> None:
    first = corrupt_gray32(images, name, 4, seed=11)
    second = corrupt_gray32(images.copy(), name, 4, seed=11)
    assert first.tobytes() == second.tobytes()


@pytest.mark.parametrize("name", RANDOM)
def test_another_seed_gives_another_result(images: np.ndarray, name: str) -> None:
    a = corrupt_gray32(images, name, 5, seed=0)
    b = corrupt_gray32(images, name, 5, seed=1)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", SEED_FREE)
def test_deterministic_corruptions_ignore_the_seed(images: np.ndarray, name: str) -> None:
    a = corrupt_gray32(images, name, 5, seed=0)
    b = corrupt_gray32(images, name, 5, seed=12345)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, images), "a seed-free corruption must still change the image"


@pytest.mark.parametrize("name", RANDOM)
def test_each_image_gets_its_own_draws(name: str) -> None:
    same = np.repeat(_images(1), 8, axis=0)
    out = corrupt_gray32(same, name, 5, seed=5)
    assert len({img.tobytes() for img in out}) > 1


@pytest.mark.parametrize("name", [n for n in ALL if n != "elastic_transform"])
def test_severity_5_moves_further_than_severity_1(images: np.ndarray, name: str) -> None:
    mild = _mad(corrupt_gray32(images, name, 1, seed=7), images)
    harsh = _mad(corrupt_gray32(images, name, 5, seed=7), images)
    assert harsh > mild > 0


def test_elastic_severity_1_has_the_largest_affine_jitter(images: np.ndarray) -> None:
    # make_cifar_c's elastic table gives severity 1 a random affine of ±0.08·32 px and no
    # elastic field, severity 5 ±0.03·32 px plus a small field: 1 moves pixels further than 5.
    mild = _mad(corrupt_gray32(images, "elastic_transform", 1, seed=7), images)
    harsh = _mad(corrupt_gray32(images, "elastic_transform", 5, seed=7), images)
    assert mild > harsh > 0


def test_brightness_and_contrast_follow_the_cifar_tables(images: np.ndarray) -> None:
    x = images / 255.0
    bright = np.uint8(np.clip(x + 0.3, 0, 1) * 255)
    assert np.array_equal(corrupt_gray32(images, "brightness", 5, seed=0), bright)
    means = x.mean(axis=(1, 2), keepdims=True)
    flat = np.uint8(np.clip((x - means) * 0.15 + means, 0, 1) * 255)
    assert np.array_equal(corrupt_gray32(images, "contrast", 5, seed=0), flat)


def test_frost_textures_ship_as_package_data() -> None:
    folder = resources.files("realm_tools.data").joinpath("frost")
    sizes = []
    for k in range(1, 7):
        with folder.joinpath(f"frost{k}.png").open("rb") as f, Image.open(f) as image:
            assert image.mode == "L"
            sizes.append(image.size)
    # ImageNet-C's photographs shrunk by make_cifar_c's factor 0.2 (cv2.resize rounding).
    assert sizes == [(180, 120), (112, 63), (112, 63), (105, 70), (132, 99), (97, 65)]


def test_gaussian_noise_is_noise_around_the_image(images: np.ndarray) -> None:
    out = corrupt_gray32(images, "gaussian_noise", 5, seed=2).astype(np.float64)
    inside = (images > 40) & (images < 200)  # away from clipping
    residual = out[inside] - images[inside]
    assert abs(residual.mean()) < 2.0  # truncation to uint8 biases it by about -0.5
    assert 0.08 * 255 < residual.std() < 0.12 * 255  # severity 5: sigma 0.10


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros((2, 32, 32), np.float32), "uint8"),
        (np.zeros((32, 32), np.uint8), "shape"),
        (np.zeros((2, 28, 28), np.uint8), "shape"),
        (np.zeros((2, 32, 32, 1), np.uint8), "shape"),
        (np.zeros((0, 32, 32), np.uint8), "shape"),
        ([[0] * 32] * 32, "uint8"),
    ],
)
def test_bad_images_are_refused(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        corrupt_gray32(bad, "fog", 1, seed=0)  # type: ignore[arg-type]


def test_unknown_name_is_refused_with_the_known_names(images: np.ndarray) -> None:
    with pytest.raises(ValueError, match="unknown corruption 'saturate'") as info:
        corrupt_gray32(images, "saturate", 1, seed=0)
    assert all(name in str(info.value) for name in ALL)


@pytest.mark.parametrize("severity", [0, 6, -1, 2.0, True, "3"])
def test_bad_severity_is_refused(images: np.ndarray, severity: object) -> None:
    with pytest.raises(ValueError, match="severity must be an integer from 1 to 5"):
        corrupt_gray32(images, "fog", severity, seed=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [-1, 1.5, None])
def test_bad_seed_is_refused(images: np.ndarray, seed: object) -> None:
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        corrupt_gray32(images, "fog", 1, seed=seed)  # type: ignore[arg-type]
