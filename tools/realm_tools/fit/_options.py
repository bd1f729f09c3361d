"""``FitOptions``: what a fit measures on, how long it may take, and the rule it chooses by."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from realm_runtime import PRESETS

from ._data import AppImages, FitInputError

SEVERITIES = (3, 5)  # the shifted streams: a middle and the strongest severity of each corruption
MIN_IMAGES = 200  # a third held out for the proof, the rest for the search's streams


@dataclass(frozen=True)
class FitRule:
    """The rule a fit chooses by (docs/fit.md): the best mean online accuracy, above three floors.

    A configuration is eligible when its mean online accuracy over the shifted streams is at
    least not adapting's, its clean accuracy after the long stream at least the source's minus
    ``clean_drop``, and the worst case found inside its drift bound at least the source's minus
    ``worst_drop``; the eligible one of highest mean wins, or, where none is, not adapting.
    Eligible finalists whose mean is within ``tie_z`` standard errors of the best (the error
    of the per-stream gap, paired over the same streams) tie with it, and the simplest of them
    wins: the lowest tier, REALM before the other methods, as the defaults run it.
    """

    clean_drop: float = 1.0  # points of clean accuracy the long stream may cost
    worst_drop: float = 2.0  # points the worst θ inside the drift bound may cost (DriftCheck's)
    no_adapt_margin: float = 0.0  # points above not adapting a configuration must reach
    tie_z: float = 2.0  # standard errors of the paired per-stream gap within which two tie

    def __post_init__(self) -> None:
        for name in ("clean_drop", "worst_drop"):
            value = getattr(self, name)
            if not _finite(value) or not 0 < value < 100:
                raise FitInputError(f"FitRule.{name} must be points in (0, 100), got {value!r}")
        if not _finite(self.no_adapt_margin) or not 0 <= self.no_adapt_margin < 100:
            raise FitInputError(
                f"FitRule.no_adapt_margin must be points in [0, 100), got {self.no_adapt_margin!r}"
            )
        if not _finite(self.tie_z) or not 0 <= self.tie_z <= 10:
            raise FitInputError(
                f"FitRule.tie_z must be standard errors in [0, 10], got {self.tie_z!r}"
            )

    def text(self) -> str:
        """The rule in one sentence, as fit.md and the manifest state it."""
        margin = f" + {self.no_adapt_margin:g}" if self.no_adapt_margin else ""
        return (
            "the highest mean online accuracy over the shifted streams, among configurations "
            f"whose mean is at least not adapting's{margin}, whose clean accuracy after the long "
            f"stream is at least the source's − {self.clean_drop:g}, and whose worst case found "
            f"inside their drift bound is at least the source's − {self.worst_drop:g}; where "
            "none is, do not adapt; eligible configurations within "
            f"{self.tie_z:g} standard errors of the best (paired over the streams) tie with "
            "it, and the simplest of them wins (the paper's settings before a tuned rate, REALM "
            "before another method)"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class FitOptions:
    """What :func:`~realm_tools.fit.fit_realm_artifacts` measures on and how long it may take.

    Raises:
        FitInputError: a value of the wrong type or out of range, in one sentence.
    """

    data: AppImages  # the app's labelled clean images (``read_images`` / ``app_images``)
    num_classes: int  # classes of the classifier
    input_shape: tuple[int, ...]  # (1, C, H, W) the model takes
    mean: tuple[float, ...]  # the model's input normalisation, one value or one per channel
    std: tuple[float, ...]  # likewise; (x − mean) / std is what the model sees
    minutes: float  # the whole fit's time budget, export included, kept to within a tenth
    preset: str = "cifar"  # the paper's settings every candidate starts from (RealmConfig.preset)
    field_data: AppImages | None = None  # unlabelled images from where the app runs
    memory_budget_mb: float | None = None  # the adapting process's most (MemoryCheck); None: none
    rule: FitRule = dataclasses.field(default_factory=FitRule)  # how the choice is made
    seed: int = 0  # of the split, the streams' corruptions and orders, and the drift search
    workers: int | None = None  # processes measuring at once; None: one per core
    signing_key: object | None = None  # Ed25519 key for realm.json, as ExportOptions takes it
    model_info: Mapping[str, Any] | None = None  # the manifest's model description, kept as given
    overwrite: bool = False  # replace an existing non-empty output directory

    def __post_init__(self) -> None:
        errors = []
        if not isinstance(self.data, AppImages) or self.data.labels is None:
            errors.append("data must be labelled AppImages (read_images(..., num_classes=C))")
        if self.field_data is not None and not isinstance(self.field_data, AppImages):
            errors.append(
                "field_data must be AppImages (read_images(..., num_classes=None)) or None"
            )
        if not _int(self.num_classes) or self.num_classes < 2:
            errors.append(f"num_classes must be an integer ≥ 2, got {self.num_classes!r}")
        shape = tuple(self.input_shape) if hasattr(self.input_shape, "__len__") else ()
        if len(shape) != 4 or not all(_int(d) and d > 0 for d in shape) or shape[0] != 1:
            errors.append(f"input_shape must be (1, C, H, W), got {self.input_shape!r}")
        else:
            object.__setattr__(self, "input_shape", shape)
            channels = shape[1]
            for name in ("mean", "std"):
                value = tuple(getattr(self, name))
                if len(value) == 1:
                    value = value * channels
                if len(value) != channels or not all(_finite(v) for v in value):
                    errors.append(
                        f"{name} must be one number or one per channel ({channels}), got "
                        f"{getattr(self, name)!r}"
                    )
                elif name == "std" and min(value) <= 0:
                    errors.append(f"std must be > 0, got {value!r}")
                object.__setattr__(self, name, value)
        if not _finite(self.minutes) or self.minutes <= 0:
            errors.append(f"minutes must be a number > 0, got {self.minutes!r}")
        if self.preset not in PRESETS:
            errors.append(f"preset must be one of {PRESETS}, got {self.preset!r}")
        budget = self.memory_budget_mb
        if budget is not None and (not _finite(budget) or budget <= 0):
            errors.append(f"memory_budget_mb must be a number of MB > 0 or None, got {budget!r}")
        if not isinstance(self.rule, FitRule):
            errors.append(f"rule must be a FitRule, got {type(self.rule).__name__}")
        if not _int(self.seed) or self.seed < 0:
            errors.append(f"seed must be an integer ≥ 0, got {self.seed!r}")
        if self.workers is not None and (not _int(self.workers) or self.workers < 1):
            errors.append(f"workers must be an integer ≥ 1 or None, got {self.workers!r}")
        if errors:
            raise FitInputError("invalid FitOptions: " + "; ".join(errors))
        count = len(self.data.images)
        if count < MIN_IMAGES:
            raise FitInputError(
                f"{self.data.source}: {count} labelled images, a fit needs at least {MIN_IMAGES} "
                "(a third held out to prove the choice, the rest for the shifted streams): "
                "give more of the app's images"
            )


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
