"""The adaptation methods, one file each (SPEC §4): what every layer reads about a method.

A new method is a new file here, and where a layer needs its own form of it (torch ops in
``realm_sdk.methods``, ONNX nodes in ``realm_export.methods``), one file of the same name
there.
"""

from __future__ import annotations

from ._augmix import AugMixSettings
from ._method import ADAPTS, Method
from ._settings import MethodSettings
from .deyo import DEYO, DeyoSettings
from .eata import EATA, EataSettings
from .eta import ETA
from .memo import MEMO
from .realm import REALM, RealmSettings
from .sar import SAR, SarSettings
from .sft import SFT
from .tent import TENT
from .ttaug import TTAUG

# Table order: the paper's Table 1 (the augmenting baselines, then the online ones).
BY_NAME: dict[str, Method] = {
    m.name: m for m in (REALM, TTAUG, MEMO, SFT, TENT, ETA, EATA, SAR, DEYO)
}
EXPORTED: tuple[str, ...] = tuple(m.name for m in BY_NAME.values() if m.exports)


def method_named(name: str) -> Method:
    """The method called ``name``.

    Raises:
        ValueError: no method has that name; the message lists those that do.
    """
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {tuple(BY_NAME)}, got {name!r}") from None


def setting_owners(name: str) -> tuple[Method, ...]:
    """The methods that have a setting called ``name`` (empty: none has)."""
    return tuple(m for m in BY_NAME.values() if name in m.settings.names())


def methods_costing(at_most: float) -> tuple[str, ...]:
    """Names of the methods on the model alone costing at most ``at_most`` of Tent's, REALM last.

    What a command shows by default where every method would cost too long: the demo's
    columns, the speed bench's rows (``methods_costing(1)``: one forward and one backward).
    """
    # A method that needs clean images of the app's own (EATA) runs where a command has them.
    cheap = [
        m.name
        for m in BY_NAME.values()
        if m.cost <= at_most and m.clean_state is None and m.exports
    ]
    return tuple(sorted(cheap, key=lambda name: name == REALM.name))


__all__ = [
    "ADAPTS",
    "BY_NAME",
    "DEYO",
    "EATA",
    "ETA",
    "EXPORTED",
    "MEMO",
    "REALM",
    "SAR",
    "SFT",
    "TENT",
    "TTAUG",
    "AugMixSettings",
    "DeyoSettings",
    "EataSettings",
    "Method",
    "MethodSettings",
    "RealmSettings",
    "SarSettings",
    "method_named",
    "methods_costing",
    "setting_owners",
]
