"""Real shift benchmarks on disk: CIFAR-10-C and ImageNet-C, in the paper's protocol.

Hendrycks & Dietterich's corrupted test sets, read as online streams: one corruption at one
severity (5 by default), shuffled by a seed, fed one sample at a time (batch size 1). Both
loaders, and the built-in digits task, share the small :class:`ShiftDataset` interface the
quality benchmark runs on. numpy and Pillow only: no torch, no download.

Layouts (as the official archives unpack):

- CIFAR-10-C: ``<root>/<corruption>.npy``, uint8 ``(50000, 32, 32, 3)``, severity ``s`` in
  rows ``(s-1)·10000 : s·10000``; ``<root>/labels.npy``, the 50000 labels.
- ImageNet-C: ``<root>/<corruption>/<severity>/<wnid>/*.JPEG``, 224×224 images.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, overload, runtime_checkable

import numpy as np

SEVERITIES = (1, 2, 3, 4, 5)

# The 15 corruptions of the papers' tables (noise, blur, weather, digital), in their order,
# then the 4 extra ones the archives also ship (the "validation" corruptions).
BENCHMARK_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
EXTRA_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
CORRUPTION_NAMES: tuple[str, ...] = BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@runtime_checkable
class ShiftDataset(Protocol):
    """What the quality benchmark needs of a shifted test set.

    ``stream`` returns ``(samples, labels)``: ``samples`` is a float32 ``(N, C, H, W)`` array
    or a :class:`LazyImages` (same indexing for a slice; an int gives one ``(1, C, H, W)``
    input), already normalised for the model; ``labels`` is ``(N,)`` int64, for scoring only.
    """

    @property
    def name(self) -> str:
        """Short name, used for artifact folders and reports."""
        ...

    @property
    def corruptions(self) -> tuple[str, ...]:
        """The corruptions this copy of the data has."""
        ...

    @property
    def default_corruptions(self) -> tuple[str, ...]:
        """The corruptions a full benchmark run uses (the paper's table)."""
        ...

    @property
    def num_classes(self) -> int:
        """Classes of the classifier the labels index."""
        ...

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(1, C, H, W)``: one sample, the batch-size-1 model input."""
        ...

    def stream(
        self, corruption: str, severity: int = 5, *, seed: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray | LazyImages, np.ndarray]:
        """One corruption at one severity, shuffled by ``seed``, the first ``limit`` samples."""
        ...

    @property
    def pixel_normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The ``(mean, std)`` per channel the samples were normalised with from [0, 1] pixels.

        What a method that draws AugMix views of the pixels (MEMO, SFT, TTAug) undoes.
        """
        ...

    def clean(self) -> tuple[np.ndarray | LazyImages, np.ndarray] | None:
        """Uncorrupted test data to measure forgetting on, or None where there is none."""
        ...


def check_severity(severity: int) -> None:
    if isinstance(severity, bool) or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer 1–5, got {severity!r}")


def stream_order(n: int, seed: int, limit: int | None) -> np.ndarray:
    """The stream order: a seeded permutation of ``n`` samples, cut to ``limit``."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be ≥ 1 or None, got {limit!r}")
    return np.random.default_rng(seed).permutation(n)[:limit]


def sorted_corruptions(names: Sequence[str]) -> tuple[str, ...]:
    """The papers' order for known names, then any others alphabetically."""
    known = [c for c in CORRUPTION_NAMES if c in names]
    return tuple(known + sorted(set(names) - set(known)))


def normalise(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """uint8 ``(N, H, W, 3)`` → float32 ``(N, 3, H, W)``, ``(x/255 − mean) / std``."""
    x = images.astype(np.float32) / np.float32(255.0)
    x = (x - mean.astype(np.float32)) / std.astype(np.float32)  # over the channel axis, last
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32)  # (N, 3, H, W)


def channel_stats(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float32)
    if arr.shape != (3,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be 3 finite numbers (R, G, B), got {values!r}")
    if what == "std" and np.any(arr <= 0):
        raise ValueError(f"std must be positive, got {values!r}")
    return arr


# ---------------------------------------------------------------------------- CIFAR-10-C


@dataclass(frozen=True)
class Cifar10C:
    """CIFAR-10-C on disk (see :func:`load_cifar10c`, which validates it)."""

    root: Path  # folder of <corruption>.npy files and labels.npy
    corruptions: tuple[str, ...]  # corruption files found, in the papers' order
    per_severity: int  # images per severity: file length / 5 (10000 in the real set)
    mean: tuple[float, float, float]  # per-channel mean of the [0, 1] pixels, for normalisation
    std: tuple[float, float, float]  # per-channel std of the [0, 1] pixels
    num_classes: int = 10  # 10; 100 reads CIFAR-100-C, which has the same layout
    name: str = "cifar10c"  # for reports and artifact folders

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(1, 3, 32, 32)``."""
        return (1, 3, 32, 32)

    @property
    def pixel_normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The ``(mean, std)`` per channel its samples were normalised with from [0, 1] pixels."""
        return self.mean, self.std

    @property
    def default_corruptions(self) -> tuple[str, ...]:
        """The papers' 15 where present (all found corruptions if none of those is)."""
        return tuple(c for c in self.corruptions if c in BENCHMARK_CORRUPTIONS) or self.corruptions

    def stream(
        self, corruption: str, severity: int = 5, *, seed: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One corruption at one severity as a shuffled stream.

        Only the rows of the stream are read (the files are memory-mapped), so a severity or
        a ``limit`` costs what it uses, not a whole file (50,000 images).

        Args:
            corruption: one of :attr:`corruptions`.
            severity: 1–5.
            seed: the stream order.
            limit: keep only the first ``limit`` samples of the shuffled stream.

        Returns:
            ``(images, labels)``: float32 ``(N, 3, 32, 32)`` normalised inputs and int64
            ``(N,)`` labels, in stream order.
        """
        if corruption not in self.corruptions:
            raise ValueError(
                f"unknown corruption {corruption!r} for CIFAR-10-C in {self.root}; "
                f"present: {list(self.corruptions)}"
            )
        check_severity(severity)
        images = _open_cifar_file(self.root / f"{corruption}.npy")
        labels = _open_cifar_labels(self.root, len(images), self.num_classes)
        start = (severity - 1) * self.per_severity
        rows = start + stream_order(self.per_severity, seed, limit)
        # Fancy indexing a memmap reads just these rows.
        x = normalise(np.asarray(images[rows]), np.array(self.mean), np.array(self.std))
        return x, np.asarray(labels[rows], dtype=np.int64)

    def clean(self) -> None:
        """CIFAR-10-C ships no clean split: forgetting is not measured on it."""
        return None


def _open_cifar_file(path: Path) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npy file ({exc})") from exc
    if arr.dtype != np.uint8:
        raise ValueError(f"{path}: expected uint8 pixels, got dtype {arr.dtype}")
    if arr.ndim != 4 or arr.shape[1:] != (32, 32, 3):
        raise ValueError(
            f"{path}: expected shape (N, 32, 32, 3) (5 severities × N/5 images, HWC), "
            f"got {arr.shape}"
        )
    if len(arr) == 0 or len(arr) % len(SEVERITIES):
        raise ValueError(
            f"{path}: {len(arr)} images is not 5 severities of equal size (need a positive "
            "multiple of 5; the real files have 50000)"
        )
    return arr


def _open_cifar_labels(root: Path, n: int, num_classes: int) -> np.ndarray:
    path = root / "labels.npy"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: CIFAR-10-C keeps its labels in labels.npy")
    labels = np.load(path, mmap_mode="r")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{path}: expected a 1-D integer array, got dtype {labels.dtype}, shape {labels.shape}"
        )
    if len(labels) != n:
        raise ValueError(
            f"{path} has {len(labels)} labels but the corruption files have {n} images"
        )
    return labels


def load_cifar10c(
    root: str | os.PathLike[str],
    *,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
    num_classes: int = 10,
) -> Cifar10C:
    """Find and check CIFAR-10-C in ``root``; pixels are read later, per stream.

    Every ``<corruption>.npy`` of the 19 known names is listed (other ``.npy`` files are
    ignored) and its header checked: uint8, ``(N, 32, 32, 3)``, N a multiple of 5 and equal to
    the length of ``labels.npy``. A copy with fewer images per severity (N/5) works the same.

    Args:
        root: the unpacked ``CIFAR-10-C`` folder.
        mean: per-channel mean of [0, 1] pixels (default: CIFAR-10's train split).
        std: per-channel standard deviation of [0, 1] pixels.
        num_classes: classes the labels index (100 for CIFAR-100-C).

    Returns:
        The dataset, ready to :meth:`~Cifar10C.stream`.

    Raises:
        FileNotFoundError: no such folder, no corruption file, or no ``labels.npy``.
        ValueError: a file with the wrong dtype or shape, or a label count that differs.
    """
    path = Path(root).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"CIFAR-10-C root {path} does not exist or is not a folder")
    found = [c for c in CORRUPTION_NAMES if (path / f"{c}.npy").is_file()]
    if not found:
        raise FileNotFoundError(
            f"no CIFAR-10-C corruption files in {path}: expected <corruption>.npy for names "
            f"such as {list(CORRUPTION_NAMES[:3])} (known: {list(CORRUPTION_NAMES)})"
        )
    sizes = {c: len(_open_cifar_file(path / f"{c}.npy")) for c in found}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"CIFAR-10-C files in {path} differ in length: {sizes}")
    n = sizes[found[0]]
    labels = _open_cifar_labels(path, n, num_classes)
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"{path / 'labels.npy'}: labels must lie in [0, {num_classes}), found "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    m, s = channel_stats(mean, "mean"), channel_stats(std, "std")
    return Cifar10C(
        root=path,
        corruptions=sorted_corruptions(found),
        per_severity=n // len(SEVERITIES),
        mean=(float(m[0]), float(m[1]), float(m[2])),
        std=(float(s[0]), float(s[1]), float(s[2])),
        num_classes=num_classes,
    )


# ---------------------------------------------------------------------------- ImageNet-C


@dataclass(frozen=True)
class LazyImages(Sequence[np.ndarray]):
    """Image files read one at a time, on demand, as normalised model inputs.

    ``images[i]`` is one float32 ``(1, 3, S, S)`` input (batch size 1); a slice gives the
    stacked ``(n, 3, S, S)`` array, as a numpy array's would, so ``images[i : i + 1]`` is the
    same input either way. Nothing is read until indexed: a stream of 50000 JPEGs is a list
    of paths.
    """

    paths: tuple[Path, ...]  # the files, in stream order
    size: int  # S: output side (resize the short side to S·256/224, center-crop S×S)
    mean: tuple[float, float, float]  # per-channel mean of [0, 1] pixels
    std: tuple[float, float, float]  # per-channel std of [0, 1] pixels

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> np.ndarray: ...

    def __getitem__(self, index: int | slice) -> np.ndarray:
        if isinstance(index, slice):
            chosen = self.paths[index]
            if not chosen:
                return np.empty((0, 3, self.size, self.size), dtype=np.float32)
            return np.concatenate([self._load(p) for p in chosen])
        return self._load(self.paths[index])

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self._load(p) for p in self.paths)

    def _load(self, path: Path) -> np.ndarray:
        from PIL import Image

        with Image.open(path) as img:
            rgb = img.convert("RGB")
        if rgb.size != (self.size, self.size):
            # The standard evaluation transform: short side to 256 (for S = 224), center crop.
            w, h = rgb.size
            short = round(self.size * 256 / 224)
            scale = short / min(w, h)
            rgb = rgb.resize(
                (max(short, round(w * scale)), max(short, round(h * scale))),
                Image.Resampling.BILINEAR,
            )
            w, h = rgb.size
            left, top = (w - self.size) // 2, (h - self.size) // 2
            rgb = rgb.crop((left, top, left + self.size, top + self.size))
        pixels = np.asarray(rgb, dtype=np.uint8)[None]  # (1, S, S, 3)
        return normalise(pixels, np.array(self.mean), np.array(self.std))  # (1, 3, S, S)
