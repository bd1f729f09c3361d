"""The fit's streams: the app's images shuffled, corrupted at the model's size, then normalised.

A stream is named by its part of the split (``search`` or ``proof``), its corruption and
severity and a seed; the same name always gives the same images. The field images, where
given, are one more stream, unlabelled (its labels read ``-1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import CIFAR_C_CORRUPTIONS, corrupt_images

FIELD = "field"
UNLABELLED = -1


@dataclass(frozen=True, order=True)
class StreamKey:
    """One stream: which images, which corruption at which severity, which draw."""

    part: str  # "search", "proof" or "field"
    corruption: str  # a CIFAR-10-C corruption, or "field"
    severity: int  # 1–5 (0 for the field images)
    seed: int  # of the order and the corruption's draws

    @property
    def name(self) -> str:
        """``part/corruption/severity/seed``: how journals and reports name it."""
        return f"{self.part}/{self.corruption}/{self.severity}/s{self.seed}"


def shifted_keys(part: str, severities: tuple[int, ...], seed: int) -> list[StreamKey]:
    """The 15 corruptions at each severity: the shifted streams of one part and seed."""
    return [StreamKey(part, c, s, seed) for s in severities for c in CIFAR_C_CORRUPTIONS]


@dataclass(frozen=True, eq=False)
class StreamImages:
    """A stream's 8-bit images and labels (``UNLABELLED`` for the field's)."""

    images: np.ndarray  # uint8 (L, C, H, W)
    labels: np.ndarray  # int64 (L,)


def build_stream(
    key: StreamKey, images: np.ndarray, labels: np.ndarray | None, length: int
) -> StreamImages:
    """The first ``length`` images of the stream ``key`` draws from ``images``.

    Args:
        key: the stream.
        images: uint8 ``(N, C, H, W)``: the part's images (the field's for ``field``).
        labels: ``(N,)``, or None for unlabelled images.
        length: how many (at most ``N``).
    """
    order = np.random.default_rng([key.seed, 104729]).permutation(len(images))[:length]
    chosen = images[order]
    if key.corruption != FIELD:
        chosen = corrupt_images(chosen, key.corruption, key.severity, seed=key.seed)
    y = np.full(len(order), UNLABELLED, np.int64) if labels is None else labels[order]
    return StreamImages(images=chosen, labels=y)


def normalise(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """uint8 ``(N, C, H, W)`` as the model takes it: ``(x / 255 − mean) / std``, float32."""
    m = np.asarray(mean, np.float32)[None, :, None, None]
    s = np.asarray(std, np.float32)[None, :, None, None]
    return np.ascontiguousarray((images.astype(np.float32) / np.float32(255) - m) / s)
