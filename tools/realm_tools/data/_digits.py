"""The built-in source task's data: scikit-learn's digits (no download), split and shifted.

scikit-learn ships the 1,797 8×8 digits images, so the demo, the tests and the benchmarks
have a real classifier (``realm_tools.models.train_digits_model``) and a real distribution
shift (the corruptions) on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._corruptions import CORRUPTIONS, corrupt, resize_bilinear

IMAGE_SIZE = 32  # upsampled from 8×8, the size of the paper's CIFAR models' inputs
NUM_CLASSES = 10


@dataclass(frozen=True)
class DigitsData:
    """Deterministic train/test split of the digits at their native 8×8, values in [0, 1].

    Corruptions apply to the native images, as a camera's would, before the same upsampling
    to 32×32 and normalisation as the clean images (:meth:`prepare`).
    """

    train_x: np.ndarray  # (N_train, 1, 8, 8) float32 in [0, 1]
    train_y: np.ndarray  # (N_train,) int64
    test_x: np.ndarray  # (N_test, 1, 8, 8) float32 in [0, 1]
    test_y: np.ndarray  # (N_test,) int64
    mean: float  # pixel mean of the upsampled train split, for normalisation
    std: float  # pixel std of the upsampled train split

    def prepare(self, images: np.ndarray) -> np.ndarray:
        """Native ``(N, 1, 8, 8)`` images in [0, 1] → normalised float32 ``(N, 1, 32, 32)``."""
        big = resize_bilinear(images.astype(np.float64), (IMAGE_SIZE, IMAGE_SIZE))
        return np.ascontiguousarray((big - self.mean) / self.std, dtype=np.float32)

    def stream(
        self, corruption: str = "clean", severity: int = 5, *, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """The test split, corrupted and shuffled: an online stream of model inputs.

        Args:
            corruption: a name of :data:`CORRUPTIONS` or ``"clean"``.
            severity: 1–5.
            seed: the stream order and the corruption's randomness.

        Returns:
            ``(images, labels)``: ``(N, 1, 32, 32)`` float32 inputs and ``(N,)`` labels.
        """
        order = np.random.default_rng(seed).permutation(len(self.test_y))
        shifted = corrupt(self.test_x, corruption, severity, seed=seed)
        return self.prepare(shifted[order]), self.test_y[order]


def load_digits(*, test_fraction: float = 0.35, seed: int = 0) -> DigitsData:
    """Load scikit-learn's digits and split them deterministically, stratified by class.

    Args:
        test_fraction: share of each class held out for the shifted test streams.
        seed: split seed.

    Returns:
        The split, native 8×8 images in [0, 1].
    """
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = (bunch.images.astype(np.float32) / 16.0)[:, None]  # (N, 1, 8, 8), from 0..16
    labels = bunch.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test_idx = []
    for c in range(NUM_CLASSES):  # stratified, so every class is in both splits
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        test_idx.extend(idx[: round(len(idx) * test_fraction)])
    is_test = np.zeros(len(labels), dtype=bool)
    is_test[test_idx] = True
    train_big = resize_bilinear(images[~is_test].astype(np.float64), (IMAGE_SIZE, IMAGE_SIZE))
    return DigitsData(
        train_x=images[~is_test],
        train_y=labels[~is_test],
        test_x=images[is_test],
        test_y=labels[is_test],
        mean=float(train_big.mean()),
        std=float(train_big.std()),
    )


def digits_preprocessing(data: DigitsData) -> dict[str, list]:
    """The model input's preprocessing, as a manifest records it (timm's keys)."""
    return {"input_size": [1, IMAGE_SIZE, IMAGE_SIZE], "mean": [data.mean], "std": [data.std]}


@dataclass(frozen=True)
class DigitsShift:
    """The built-in digits task as a :class:`ShiftDataset` (it alone has a clean split)."""

    data: DigitsData  # the split of scikit-learn's digits
    name: str = "digits"  # for reports and artifact folders
    num_classes: int = NUM_CLASSES  # the ten digits

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, 1, 32, 32)

    @property
    def pixel_normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The ``(mean, std)`` per channel its samples were normalised with from [0, 1] pixels."""
        return (self.data.mean,), (self.data.std,)

    @property
    def corruptions(self) -> tuple[str, ...]:
        return ("clean", *sorted(CORRUPTIONS))

    @property
    def default_corruptions(self) -> tuple[str, ...]:
        return tuple(sorted(CORRUPTIONS))

    def stream(
        self, corruption: str, severity: int = 5, *, seed: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        x, y = self.data.stream(corruption, severity, seed=seed)
        return x[:limit], y[:limit]

    def clean(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.stream("clean", 1, seed=0)
