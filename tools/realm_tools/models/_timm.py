"""Any timm architecture by name, randomly initialised: nothing is downloaded."""

from __future__ import annotations

from typing import Any

from torch import nn


def timm_model(name: str, num_classes: int = 1000, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, pretrained=False, ...)`` with an error that names the model.

    Raises:
        ValueError: timm has no such model, or refuses the arguments.
    """
    import timm

    if not timm.is_model(name):
        raise ValueError(f"timm has no model {name!r} (timm {timm.__version__})")
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except RuntimeError as exc:
        raise ValueError(f"cannot build timm model {name!r}: {exc}") from exc
