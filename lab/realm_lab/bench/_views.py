"""What a row that draws AugMix views takes from the data: its pixel normalisation."""

from __future__ import annotations

from typing import Any


def view_overrides(dataset: object) -> dict[str, Any]:
    """The settings a row that draws AugMix views (MEMO, SFT, TTAug) takes from the data.

    The views are drawn on pixels: the data's normalisation (``pixel_normalisation`` of a
    ``ShiftDataset``) is what they undo. None where the data does not say.
    """
    said = getattr(dataset, "pixel_normalisation", None)
    if said is None:
        return {}
    mean, std = said
    return {"pixel_mean": tuple(mean), "pixel_std": tuple(std)}
