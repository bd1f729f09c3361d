"""Fashion-MNIST-C: the 15 benchmark corruptions × 5 severities, built once, cached on disk.

CIFAR-10-C's protocol on Fashion-MNIST: each corruption at each severity is applied to the
whole split with a fixed corruption seed (the test split seed 0, the validation split other
seeds), so every stream of it reads the same images, as a CIFAR-10-C file holds them. The
corrupted uint8 images are cached as ``.npy`` files under ``<cache_dir>/fmnist-c/``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._cifar_c import CIFAR_C_CORRUPTIONS, CIFAR_C_EXTRAS, corrupt_gray32
from ._fashion import MEAN, STD, FashionMNIST, load_fashion_mnist, normalise
from ._realdata import check_severity, stream_order

SPLITS = ("test", "val")
# The corruption seed of each split: the test split's is reported, the others are chosen on.
CORRUPTION_SEEDS = {"test": 0, "val": 1}
CLEAN_SAMPLES = 2000  # forgetting is measured on these many clean images, a fixed subset
CACHE_VERSION = 1  # bump when a corruption changes: older caches are rebuilt, not reused


@dataclass(frozen=True)
class FashionMNISTC:
    """One split of Fashion-MNIST-C, as the benchmarks' :class:`ShiftDataset`.

    Build it with :func:`load_fmnistc`. Streams are ``(N, 1, 32, 32)`` normalised float32.
    """

    data: FashionMNIST  # the clean images of every split
    split: str  # "test" (reported) or "val" (held out from training; chosen on)
    corruption_seed: int  # the randomness of the corruptions (other seeds: other copies)
    cache_dir: Path | None  # where the corrupted images are kept (None: rebuilt per process)
    clean_samples: int = CLEAN_SAMPLES  # clean images forgetting is measured on (a forward each)
    _memory: dict[tuple[str, int], np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """``fmnist-c`` (test) or ``fmnist-c-val``."""
        return "fmnist-c" if self.split == "test" else f"fmnist-c-{self.split}"

    @property
    def corruptions(self) -> tuple[str, ...]:
        """The 15 benchmark corruptions, then the extras."""
        return CIFAR_C_CORRUPTIONS + CIFAR_C_EXTRAS

    @property
    def default_corruptions(self) -> tuple[str, ...]:
        """The papers' 15."""
        return CIFAR_C_CORRUPTIONS

    @property
    def num_classes(self) -> int:
        """10."""
        return 10

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(1, 1, 32, 32)``."""
        return (1, 1, 32, 32)

    @property
    def pixel_normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The ``(mean, std)`` its samples were normalised with from [0, 1] pixels."""
        return (MEAN,), (STD,)

    def corrupted(self, corruption: str, severity: int) -> np.ndarray:
        """The whole split under one corruption: uint8 ``(N, 32, 32)``, built or read once."""
        if corruption not in self.corruptions:
            raise ValueError(
                f"unknown corruption {corruption!r} for Fashion-MNIST-C; known: "
                f"{list(self.corruptions)}"
            )
        check_severity(severity)
        key = (corruption, severity)
        if key not in self._memory:
            self._memory[key] = self._cached(corruption, severity)
        return self._memory[key]

    def _cached(self, corruption: str, severity: int) -> np.ndarray:
        images = self.data.split(self.split)[0]
        if self.cache_dir is None:
            return corrupt_gray32(images, corruption, severity, seed=self.corruption_seed)
        tag = hashlib.sha256(images.tobytes()).hexdigest()[:12]  # another copy: another file
        folder = self.cache_dir / "fmnist-c" / f"v{CACHE_VERSION}-{self.split}-{tag}"
        path = folder / f"{corruption}-{severity}-c{self.corruption_seed}.npy"
        if path.is_file():
            try:
                cached = np.load(path)
                if cached.shape == images.shape and cached.dtype == np.uint8:
                    return cached
            except (OSError, ValueError):
                pass  # a damaged cache file is rebuilt
        out = corrupt_gray32(images, corruption, severity, seed=self.corruption_seed)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npy.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, out)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return out

    def stream(
        self, corruption: str, severity: int = 5, *, seed: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One corruption at one severity, shuffled by ``seed``, the first ``limit`` samples.

        Returns:
            ``(images, labels)``: float32 ``(N, 1, 32, 32)`` normalised inputs and int64
            ``(N,)`` labels, in stream order.
        """
        images = self.corrupted(corruption, severity)
        labels = self.data.split(self.split)[1]
        rows = stream_order(len(labels), seed, limit)
        return normalise(images[rows]), labels[rows]

    def clean(self) -> tuple[np.ndarray, np.ndarray]:
        """``clean_samples`` uncorrupted images of the split, normalised, a fixed subset.

        Forgetting (clean accuracy after a stream) is measured on them after every run.
        """
        images, labels = self.data.split(self.split)
        rows = np.sort(stream_order(len(labels), 0, self.clean_samples))
        return normalise(images[rows]), labels[rows]


def load_fmnistc(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    split: str = "test",
    corruption_seed: int | None = None,
    cache_dir: str | os.PathLike[str] | None = ".cache",
) -> FashionMNISTC:
    """Fashion-MNIST-C over one split of Fashion-MNIST (read from the dataset's IDX files).

    Args:
        data_dir: a folder holding the four Fashion-MNIST files (default: ``$REALM_DATA``,
            then Debian's ``/usr/share/datasets/fashion-mnist``).
        split: ``"test"`` (the official test images; reported) or ``"val"`` (the last
            10,000 training images, never trained on; what settings are chosen on).
        corruption_seed: the corruptions' randomness (default: 0 for test, 1 for val).
        cache_dir: where corrupted copies are cached (None: not cached).

    Raises:
        FileNotFoundError: Fashion-MNIST is not installed, naming the ways to provide it.
        ValueError: an unknown split, or files that are not Fashion-MNIST's.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown Fashion-MNIST-C split {split!r}; known: {list(SPLITS)}")
    seed = CORRUPTION_SEEDS[split] if corruption_seed is None else corruption_seed
    if split == "val" and seed == CORRUPTION_SEEDS["test"]:
        raise ValueError(
            f"the validation split is corrupted with seeds other than the test split's "
            f"({CORRUPTION_SEEDS['test']}): give another corruption_seed"
        )
    return FashionMNISTC(
        data=load_fashion_mnist(data_dir),
        split=split,
        corruption_seed=seed,
        cache_dir=None if cache_dir is None else Path(cache_dir),
    )
