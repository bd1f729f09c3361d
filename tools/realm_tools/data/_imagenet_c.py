"""ImageNet-C from its official folder tree, read lazily (one JPEG when a sample is asked for)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._realdata import (
    BENCHMARK_CORRUPTIONS,
    CORRUPTION_NAMES,
    SEVERITIES,
    LazyImages,
    channel_stats,
    check_severity,
    sorted_corruptions,
    stream_order,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_WNID = re.compile(r"n\d{8}")
_IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


@dataclass(frozen=True)
class ImageNetC:
    """ImageNet-C on disk (see :func:`load_imagenetc`, which validates it)."""

    root: Path  # folder of <corruption>/<severity>/<wnid>/*.JPEG
    corruptions: tuple[str, ...]  # corruption folders found, in the papers' order
    classes: tuple[str, ...]  # wnids in class-index order
    mean: tuple[float, float, float]  # per-channel mean of [0, 1] pixels (ImageNet's)
    std: tuple[float, float, float]  # per-channel std of [0, 1] pixels
    image_size: int = 224  # model input side; ImageNet-C images already are 224×224
    name: str = "imagenetc"  # for reports and artifact folders

    @property
    def num_classes(self) -> int:
        """The length of the class list (1000 for a full ImageNet-C)."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(1, 3, S, S)``."""
        return (1, 3, self.image_size, self.image_size)

    @property
    def pixel_normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The ``(mean, std)`` per channel its samples were normalised with from [0, 1] pixels."""
        return self.mean, self.std

    @property
    def default_corruptions(self) -> tuple[str, ...]:
        """The papers' 15 where present (all found corruptions if none of those is)."""
        return tuple(c for c in self.corruptions if c in BENCHMARK_CORRUPTIONS) or self.corruptions

    def files(self, corruption: str, severity: int) -> tuple[list[Path], np.ndarray]:
        """Every image of one corruption and severity, sorted, with its class index."""
        if corruption not in self.corruptions:
            raise ValueError(
                f"unknown corruption {corruption!r} for ImageNet-C in {self.root}; "
                f"present: {list(self.corruptions)}"
            )
        check_severity(severity)
        folder = self.root / corruption / str(severity)
        if not folder.is_dir():
            raise FileNotFoundError(f"severity {severity} of {corruption!r} is missing: {folder}")
        index = {wnid: k for k, wnid in enumerate(self.classes)}
        paths: list[Path] = []
        labels: list[int] = []
        for wnid in _wnid_folders(folder):
            if wnid not in index:
                raise ValueError(
                    f"{folder / wnid}: class {wnid} is not in the class list "
                    f"({len(self.classes)} classes)"
                )
            images = sorted(
                p for p in (folder / wnid).iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES
            )
            if not images:
                raise FileNotFoundError(f"{folder / wnid} has no images (*.JPEG)")
            paths.extend(images)
            labels.extend([index[wnid]] * len(images))
        return paths, np.asarray(labels, dtype=np.int64)

    def stream(
        self, corruption: str, severity: int = 5, *, seed: int = 0, limit: int | None = None
    ) -> tuple[LazyImages, np.ndarray]:
        """One corruption at one severity as a shuffled, lazily loaded stream.

        Args:
            corruption: one of :attr:`corruptions`.
            severity: 1–5.
            seed: the stream order.
            limit: keep only the first ``limit`` samples of the shuffled stream.

        Returns:
            ``(images, labels)``: a :class:`LazyImages` of ``(1, 3, 224, 224)`` float32
            inputs, read from disk when indexed, and int64 ``(N,)`` labels, in stream order.
        """
        paths, labels = self.files(corruption, severity)
        order = stream_order(len(paths), seed, limit)
        images = LazyImages(tuple(paths[i] for i in order), self.image_size, self.mean, self.std)
        return images, labels[order]

    def clean(self) -> None:
        """ImageNet-C has no clean split: forgetting is not measured on it."""
        return None


def _wnid_folders(folder: Path) -> list[str]:
    """The sorted class folders of one severity folder, each checked to be a wnid."""
    names = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not names:
        raise FileNotFoundError(f"{folder} has no class folders (<wnid>/ such as n01440764/)")
    bad = [n for n in names if not _WNID.fullmatch(n)]
    if bad:
        raise ValueError(
            f"{folder}: class folders must be WordNet ids such as n01440764, found {bad[:5]}"
        )
    return names


def load_imagenetc(
    root: str | os.PathLike[str],
    *,
    classes: Sequence[str] | None = None,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    image_size: int = 224,
) -> ImageNetC:
    """Find and check ImageNet-C in ``root``; images are read later, one per sample.

    The class index of an image is the position of its wnid folder in ``classes``. By
    default the list is the sorted wnid folders of the first corruption's lowest severity:
    a complete ImageNet-C has all 1000 there, and sorted wnids are the standard class index
    of torchvision's and timm's ImageNet models. For a subset of ImageNet-C (fewer class
    folders) pass the full ordered list, or the indices will not match the model's.

    Args:
        root: the unpacked ``ImageNet-C`` folder (``<corruption>/<severity>/<wnid>/``).
        classes: wnids in class-index order (default: found on disk, sorted).
        mean: per-channel mean of [0, 1] pixels (default: ImageNet's).
        std: per-channel standard deviation of [0, 1] pixels.
        image_size: model input side (other image sizes are resized and center-cropped).

    Returns:
        The dataset, ready to :meth:`~ImageNetC.stream`.

    Raises:
        FileNotFoundError: no such folder, no corruption or severity folders, no class folders.
        ValueError: a class folder or class-list entry that is not a wnid, or duplicates.
    """
    path = Path(root).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"ImageNet-C root {path} does not exist or is not a folder")
    found = [
        p.name
        for p in path.iterdir()
        if p.is_dir() and not p.name.startswith(".") and any(_severity_folders(p))
    ]
    if not found:
        raise FileNotFoundError(
            f"no ImageNet-C corruption folders in {path}: expected <corruption>/<severity>/"
            f"<wnid>/*.JPEG with names such as {list(CORRUPTION_NAMES[:3])}"
        )
    corruptions = sorted_corruptions(found)
    if classes is None:
        first = path / corruptions[0]
        classes = _wnid_folders(first / str(min(_severity_folders(first))))
    else:
        classes = [str(c).strip() for c in classes]
        bad = [c for c in classes if not _WNID.fullmatch(c)]
        if bad:
            raise ValueError(f"class list entries must be wnids such as n01440764, got {bad[:5]}")
        if len(set(classes)) != len(classes):
            raise ValueError("the class list has duplicate wnids")
    if len(classes) < 2:
        raise ValueError(f"need at least 2 classes, found {list(classes)} in {path}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    m, s = channel_stats(mean, "mean"), channel_stats(std, "std")
    return ImageNetC(
        root=path,
        corruptions=corruptions,
        classes=tuple(classes),
        mean=(float(m[0]), float(m[1]), float(m[2])),
        std=(float(s[0]), float(s[1]), float(s[2])),
        image_size=image_size,
    )


def _severity_folders(corruption_dir: Path) -> list[int]:
    return [s for s in SEVERITIES if (corruption_dir / str(s)).is_dir()]
