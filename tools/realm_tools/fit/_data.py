"""The app's own images, read from an .npz or a folder, checked against the model's input.

Three layouts are taken, as images decode: ``uint8 (N, H, W)`` grey, ``uint8 (N, H, W, 3)``
colour, or float ``(N, C, H, W)`` in [0, 1] (quantised to 8 bits: the corruptions, like
CIFAR-10-C's, act on 8-bit images). A folder holds image files and, where labels are needed,
a ``labels.csv`` of ``file,label`` rows. Everything is returned as ``uint8 (N, C, H, W)``.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".gif", ".tif", ".tiff")
LABELS_FILE = "labels.csv"


class FitInputError(ValueError):
    """Input ``realm fit`` cannot use, in one sentence naming the problem and the fix."""


@dataclass(frozen=True, eq=False)
class AppImages:
    """Images of the app's own, as the model takes them, with their labels where known."""

    images: np.ndarray  # uint8 (N, C, H, W)
    labels: np.ndarray | None  # int64 (N,), or None for unlabelled (field) images
    source: str  # where they came from, for messages and the report

    def digest(self) -> str:
        """sha256 of the images and labels as given: the fit's record of its data."""
        h = hashlib.sha256(np.ascontiguousarray(self.images).tobytes())
        h.update(repr(self.images.shape).encode())
        if self.labels is not None:
            h.update(np.ascontiguousarray(self.labels, dtype=np.int64).tobytes())
        return h.hexdigest()


def read_images(
    path: str | Path,
    *,
    input_shape: tuple[int, ...],
    num_classes: int | None,
    what: str = "--data",
) -> AppImages:
    """Read labelled (``num_classes`` given) or unlabelled images and check them.

    Args:
        path: an ``.npz`` with ``images`` (and ``labels``), or a folder of image files (with
            ``labels.csv``).
        input_shape: the model's ``(1, C, H, W)``.
        num_classes: the classifier's classes; None reads no labels.
        what: the option named in messages.

    Raises:
        FitInputError: a file that does not hold such images, in one sentence.
    """
    file = Path(path)
    if file.is_dir():
        images, labels = _read_folder(file, input_shape, num_classes is not None, what)
    elif file.is_file():
        images, labels = _read_npz(file, num_classes is not None, what)
    else:
        raise FitInputError(f"{what} {file}: no such file or folder")
    return app_images(images, labels, input_shape=input_shape, num_classes=num_classes, what=what)


def app_images(
    images: np.ndarray,
    labels: np.ndarray | None,
    *,
    input_shape: tuple[int, ...],
    num_classes: int | None,
    what: str = "images",
) -> AppImages:
    """Arrays in any of the three layouts, checked and returned as ``uint8 (N, C, H, W)``.

    Raises:
        FitInputError: a layout, dtype, value or label the model cannot take, in one sentence.
    """
    channels, height, width = (int(d) for d in input_shape[1:4])
    x = _to_nchw(images, channels, what)
    if x.shape[2:] != (height, width):
        raise FitInputError(
            f"{what}: images are {x.shape[2]}×{x.shape[3]} pixels, the model takes "
            f"{height}×{width}: resize them as the app does before the model, or pass "
            "--input-shape"
        )
    y = None
    if num_classes is not None:
        y = _labels(labels, len(x), num_classes, what)
    return AppImages(images=x, labels=y, source=what)


def _to_nchw(images: object, channels: int, what: str) -> np.ndarray:
    if not isinstance(images, np.ndarray):
        raise FitInputError(f"{what}: images must be a numpy array, got {type(images).__name__}")
    if len(images) == 0:
        raise FitInputError(f"{what}: no images")
    if images.dtype == np.uint8:
        if images.ndim == 3:
            x = images[:, None]
        elif images.ndim == 4 and images.shape[-1] == 3:
            x = images.transpose(0, 3, 1, 2)
        else:
            raise FitInputError(
                f"{what}: uint8 images of shape {images.shape}: pass (N, H, W) grey or "
                "(N, H, W, 3) colour, as images decode"
            )
    elif np.issubdtype(images.dtype, np.floating):
        if images.ndim != 4:
            raise FitInputError(
                f"{what}: float images of shape {images.shape}: pass (N, C, H, W) in [0, 1]"
            )
        if not np.isfinite(images).all():
            raise FitInputError(f"{what}: the images hold NaN or infinite values")
        low, high = float(images.min()), float(images.max())
        if low < 0 or high > 1:
            raise FitInputError(
                f"{what}: float images range over [{low:.3g}, {high:.3g}], not [0, 1]: pass "
                "them before normalisation (--mean/--std apply it), divided by 255"
            )
        x = np.rint(images * 255).astype(np.uint8)
    else:
        raise FitInputError(
            f"{what}: images of dtype {images.dtype}: pass uint8 as they decode, or floats "
            "in [0, 1]"
        )
    if x.shape[1] != channels:
        kind = {1: "grey", 3: "colour"}.get(x.shape[1], f"{x.shape[1]}-channel")
        raise FitInputError(
            f"{what}: {kind} images for a model that takes {channels} channel"
            f"{'s' * (channels != 1)}: convert them as the app does before the model"
        )
    return np.ascontiguousarray(x)


def _labels(labels: object, count: int, num_classes: int, what: str) -> np.ndarray:
    if labels is None:
        raise FitInputError(f"{what}: no labels: an .npz needs 'labels', a folder {LABELS_FILE}")
    if (
        not isinstance(labels, np.ndarray)
        or labels.ndim != 1
        or not np.issubdtype(labels.dtype, np.integer)
    ):
        shape = getattr(labels, "shape", "?")
        kind = getattr(labels, "dtype", type(labels).__name__)
        raise FitInputError(
            f"{what}: labels must be integers of shape (N,), got {kind} of shape {shape}"
        )
    if len(labels) != count:
        raise FitInputError(f"{what}: {len(labels)} labels for {count} images: give one each")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise FitInputError(
            f"{what}: labels range over {int(labels.min())}…{int(labels.max())}, the model "
            f"has {num_classes} classes (0…{num_classes - 1}): check --num-classes"
        )
    return labels.astype(np.int64)


def _read_npz(file: Path, labelled: bool, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    try:
        with np.load(file, allow_pickle=False) as data:
            if "images" not in data.files:
                raise FitInputError(
                    f"{what} {file}: no array 'images' (it holds {sorted(data.files)})"
                )
            images = data["images"]
            labels = data["labels"] if labelled and "labels" in data.files else None
    except FitInputError:
        raise
    except (OSError, ValueError) as exc:
        raise FitInputError(f"{what} {file}: not a readable .npz ({exc})") from None
    return images, labels


def _read_folder(
    folder: Path, input_shape: tuple[int, ...], labelled: bool, what: str
) -> tuple[np.ndarray, np.ndarray | None]:
    from PIL import Image, UnidentifiedImageError

    mode = "L" if int(input_shape[1]) == 1 else "RGB"
    if labelled:
        names, labels = _read_labels(folder, what)
    else:
        names = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        labels = None
    if not names:
        raise FitInputError(f"{what} {folder}: no image files ({', '.join(IMAGE_SUFFIXES)})")
    decoded = []
    for name in names:
        try:
            with Image.open(folder / name) as image:
                decoded.append(np.asarray(image.convert(mode), dtype=np.uint8))
        except FileNotFoundError:
            raise FitInputError(f"{what}: {LABELS_FILE} names {name}, not in {folder}") from None
        except (UnidentifiedImageError, OSError) as exc:
            raise FitInputError(
                f"{what}: {folder / name} is not a readable image ({exc})"
            ) from None
    sizes = {d.shape[:2] for d in decoded}
    if len(sizes) > 1:
        raise FitInputError(
            f"{what} {folder}: images of {len(sizes)} sizes ({sorted(sizes)[:3]}…): resize "
            "them as the app does before the model"
        )
    return np.stack(decoded), labels


def _read_labels(folder: Path, what: str) -> tuple[list[str], np.ndarray]:
    table = folder / LABELS_FILE
    if not table.is_file():
        raise FitInputError(
            f"{what} {folder}: no {LABELS_FILE} (rows of file,label, one per image)"
        )
    names, labels = [], []
    with table.open(newline="") as f:
        for number, row in enumerate(csv.reader(f), start=1):
            if not row or (number == 1 and row[:2] == ["file", "label"]):
                continue
            try:
                name, label = row[0].strip(), int(row[1])
            except (IndexError, ValueError):
                raise FitInputError(
                    f"{what}: {table} line {number} is {row!r}, not file,label with an "
                    "integer label"
                ) from None
            names.append(name)
            labels.append(label)
    return names, np.asarray(labels, dtype=np.int64)
