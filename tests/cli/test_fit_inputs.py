"""``realm fit``'s inputs: the app's images read in each layout, and each bad input refused in one
sentence before anything is measured or written."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from realm_runtime.methods import EXPORTED as METHODS  # the fit's answer is an export
from realm_tools.fit import (
    MIN_IMAGES,
    FitInputError,
    FitOptions,
    FitRule,
    app_images,
    candidates,
    read_images,
)

GREY = (1, 1, 28, 28)
COLOUR = (1, 3, 16, 20)


def _grey(n: int = MIN_IMAGES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)


def test_grey_colour_and_float_layouts_become_uint8_nchw() -> None:
    x, y = _grey(4)
    grey = app_images(x, y, input_shape=GREY, num_classes=10)
    assert grey.images.shape == (4, 1, 28, 28) and grey.images.dtype == np.uint8
    assert np.array_equal(grey.images[:, 0], x)
    hwc = np.random.default_rng(1).integers(0, 256, (3, 16, 20, 3), dtype=np.uint8)
    colour = app_images(hwc, np.arange(3), input_shape=COLOUR, num_classes=10)
    assert np.array_equal(colour.images, hwc.transpose(0, 3, 1, 2))
    floats = app_images(x[:, None] / 255.0, y, input_shape=GREY, num_classes=10)
    assert np.array_equal(floats.images, grey.images)  # 8-bit values survive the round trip


def test_a_folder_with_labels_csv_reads_like_the_npz(tmp_path) -> None:
    x, y = _grey(5)
    for i, img in enumerate(x):
        Image.fromarray(img).save(tmp_path / f"img{i}.png")
    rows = ["file,label"] + [f"img{i}.png,{label}" for i, label in enumerate(y)]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    from_folder = read_images(tmp_path, input_shape=GREY, num_classes=10)
    np.savez(tmp_path / "data.npz", images=x, labels=y)
    from_npz = read_images(tmp_path / "data.npz", input_shape=GREY, num_classes=10)
    assert np.array_equal(from_folder.images, from_npz.images)
    assert np.array_equal(from_folder.labels, from_npz.labels)
    assert from_folder.digest() == from_npz.digest()
    unlabelled = read_images(tmp_path, input_shape=GREY, num_classes=None)
    assert unlabelled.labels is None and len(unlabelled.images) == 5


@pytest.mark.parametrize(
    "images,labels,shape,needle",
    [
        (
            np.zeros((4, 32, 32), np.uint8),
            np.zeros(4, int),
            GREY,
            "32×32 pixels, the model takes 28×28",
        ),
        (
            np.zeros((4, 28, 28, 3), np.uint8),
            np.zeros(4, int),
            GREY,
            "colour images for a model that takes 1 channel",
        ),
        (np.zeros((4, 28, 28), np.int32), np.zeros(4, int), GREY, "dtype int32"),
        (np.full((4, 1, 28, 28), 2.0), np.zeros(4, int), GREY, "not [0, 1]"),
        (np.full((4, 1, 28, 28), np.nan), np.zeros(4, int), GREY, "NaN"),
        (np.zeros((4, 28, 28), np.uint8), np.array([0, 1, 2, 10]), GREY, "10 classes (0…9)"),
        (np.zeros((4, 28, 28), np.uint8), np.array([0, 1, -1, 2]), GREY, "labels range over -1"),
        (np.zeros((4, 28, 28), np.uint8), np.zeros(3, int), GREY, "3 labels for 4 images"),
        (np.zeros((4, 28, 28), np.uint8), np.zeros(4), GREY, "labels must be integers"),
        (np.zeros((0, 28, 28), np.uint8), np.zeros(0, int), GREY, "no images"),
    ],
)
def test_bad_images_and_labels_get_one_sentence(images, labels, shape, needle) -> None:
    with pytest.raises(FitInputError) as caught:
        app_images(images, labels, input_shape=shape, num_classes=10)
    message = str(caught.value)
    assert needle in message
    assert "\n" not in message and "Traceback" not in message


def test_unreadable_files_are_named(tmp_path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(FitInputError, match=r"bad\.npz: not a readable \.npz"):
        read_images(bad, input_shape=GREY, num_classes=10)
    np.savez(tmp_path / "other.npz", pixels=np.zeros(3))
    with pytest.raises(FitInputError, match=r"no array 'images' \(it holds \['pixels'\]\)"):
        read_images(tmp_path / "other.npz", input_shape=GREY, num_classes=10)
    with pytest.raises(FitInputError, match="no such file or folder"):
        read_images(tmp_path / "missing", input_shape=GREY, num_classes=10)
    (tmp_path / "folder").mkdir()
    with pytest.raises(FitInputError, match=r"no labels\.csv"):
        read_images(tmp_path / "folder", input_shape=GREY, num_classes=10)
    (tmp_path / "folder" / "labels.csv").write_text("a.png,seven\n")
    with pytest.raises(FitInputError, match="line 1 is"):
        read_images(tmp_path / "folder", input_shape=GREY, num_classes=10)


def _options(**changes):
    x, y = _grey()
    data = app_images(x, y, input_shape=GREY, num_classes=10)
    base = dict(data=data, num_classes=10, input_shape=GREY, mean=(0.5,), std=(0.25,), minutes=5)
    return FitOptions(**{**base, **changes})


def test_options_broadcast_one_mean_to_every_channel() -> None:
    options = _options()
    assert options.mean == (0.5,) and options.std == (0.25,)


def test_too_few_images_for_the_split_is_refused() -> None:
    x, y = _grey(MIN_IMAGES - 1)
    data = app_images(x, y, input_shape=GREY, num_classes=10)
    with pytest.raises(
        FitInputError, match=f"{MIN_IMAGES - 1} labelled images, a fit needs at least"
    ):
        _options(data=data)


@pytest.mark.parametrize(
    "changes,needle",
    [
        ({"minutes": 0}, "minutes must be a number > 0"),
        ({"std": (0.0,)}, "std must be > 0"),
        ({"mean": (0.1, 0.2)}, "one per channel (1)"),
        ({"preset": "mnist"}, "preset must be one of"),
        ({"memory_budget_mb": -1}, "memory_budget_mb must be"),
        ({"workers": 0}, "workers must be"),
        ({"input_shape": (2, 1, 28, 28)}, "input_shape must be (1, C, H, W)"),
    ],
)
def test_bad_options_are_refused(changes, needle) -> None:
    with pytest.raises(FitInputError) as caught:
        _options(**changes)
    assert needle in str(caught.value)


def test_the_rule_reads_as_one_sentence_with_its_floors() -> None:
    text = FitRule(clean_drop=1.5).text()
    assert "source's − 1.5" in text and "source's − 2" in text and "do not adapt" in text
    with pytest.raises(FitInputError, match="clean_drop"):
        FitRule(clean_drop=0)


def test_candidates_cover_every_method_inside_the_bound() -> None:
    found = candidates("cifar", 10, bound=0.005, batch_norm=True, adapt_stages=2)
    assert {c.method for c in found if c.tier == 0} == set(METHODS)
    assert all(c.config.guard.max_drift == 0.005 for c in found)
    assert all(c.config.adapt_stages == 2 for c in found)
    assert len({c.key for c in found}) == len(found)  # no configuration measured twice
    fewer = candidates("cifar", 10, bound=0.005, batch_norm=False, adapt_stages=None, tiers=1)
    assert len(fewer) == len(METHODS)
