"""The settings of the methods that read AugMix views of a sample: MEMO, SFT and TTAug.

Hendrycks et al.'s AugMix as Zhang et al.'s MEMO applies it at test time (NeurIPS 2022): each
view is a random crop and flip of the sample, then a Beta-weighted mix of the sample with a
Dirichlet-weighted sum of three chains of one to three operations. The SDK draws the views
(``realm_sdk``'s ``augmix_views``, torchvision's ``AugMix``); the draw of each sample is
seeded by ``seed`` and the sample's index in the stream, so a rerun sees the same views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._numbers import finite, integer
from ._settings import MethodSettings

MAX_SEVERITY = 10  # torchvision's AugMix takes severities 1..10


def _floats(value: Any) -> Any:
    """A sequence of numbers as a tuple of floats (a JSON list reads back as the tuple)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(float(v) if finite(v) else v for v in value)
    return value


@dataclass(frozen=True)
class AugMixSettings(MethodSettings):
    """How the views are drawn, and how the model's inputs map back to pixels to draw them."""

    augmentations: int = 64  # views per sample (the REALM paper's App. B, after EATA's batch)
    # torchvision's AugMix severity: 2 draws each operation at 0 or 1/9 of its range, the
    # nearest to MEMO's own level 1 (SPEC §4).
    severity: int = 2
    crop_flip: bool = True  # MEMO's pre-augmentation: a crop padded by 1/8 of the side, a flip
    # The inputs are (pixels in [0, 1] − pixel_mean) / pixel_std, per channel (one value: every
    # channel): AugMix works on 8-bit pixels, so the views undo this and redo it.
    pixel_mean: tuple[float, ...] = (0.0,)
    pixel_std: tuple[float, ...] = (1.0,)
    fill: int = 128  # the gray of the pixels a rotation or shift brings in (MEMO's)
    seed: int = 0  # the views' seed; each sample's draw also reads its index in the stream

    def __post_init__(self) -> None:
        object.__setattr__(self, "pixel_mean", _floats(self.pixel_mean))
        object.__setattr__(self, "pixel_std", _floats(self.pixel_std))
        super().__post_init__()

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each."""
        errors = []
        if not integer(self.augmentations) or self.augmentations < 1:
            errors.append(f"augmentations must be an integer ≥ 1, got {self.augmentations!r}")
        if not integer(self.severity) or not 1 <= self.severity <= MAX_SEVERITY:
            errors.append(
                f"severity must be an integer in [1, {MAX_SEVERITY}], got {self.severity!r}"
            )
        if not isinstance(self.crop_flip, bool):
            errors.append(f"crop_flip must be true or false, got {self.crop_flip!r}")
        for name in ("pixel_mean", "pixel_std"):
            value = getattr(self, name)
            if (
                not isinstance(value, tuple)
                or not value
                or not all(isinstance(v, float) and finite(v) for v in value)
            ):
                errors.append(f"{name} must be a non-empty list of finite numbers, got {value!r}")
        if isinstance(self.pixel_std, tuple) and any(
            isinstance(v, float) and v <= 0 for v in self.pixel_std
        ):
            errors.append(f"pixel_std must be > 0 in every channel, got {self.pixel_std!r}")
        if not integer(self.fill) or not 0 <= self.fill <= 255:
            errors.append(f"fill must be an integer gray level in [0, 255], got {self.fill!r}")
        if not integer(self.seed) or self.seed < 0:
            errors.append(f"seed must be an integer ≥ 0, got {self.seed!r}")
        return errors
