"""A method's own settings: a frozen dataclass its file declares, validated on construction.

``RealmConfig`` holds what every method shares and one of these, the settings of its method;
manifests and state files write them under the method's name (``{"method": "sar", "sar":
{"sam_rho": 0.05, …}}``). A method with no settings of its own uses this class as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

SettingsT = TypeVar("SettingsT", bound="MethodSettings")


class Configured(Protocol):
    """What a method's file reads of a ``RealmConfig`` (which imports the methods)."""

    @property
    def method(self) -> str: ...

    @property
    def settings(self) -> MethodSettings | None: ...


@dataclass(frozen=True)
class MethodSettings:
    """The settings of a method that has none besides those every method shares."""

    # Fields fixed in the exported graphs: changing one needs a re-export, not an override.
    BAKED: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        errors = self.problems()
        if errors:
            raise ValueError(f"invalid {type(self).__name__}: " + "; ".join(errors))

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence each (empty: nothing)."""
        return []

    @classmethod
    def for_preset(
        cls: type[SettingsT], preset: str | None, *, num_classes: int, lr: float
    ) -> SettingsT:
        """The settings a preset gives the method (``None``: no preset, the defaults).

        Args:
            preset: a name of ``realm_runtime.PRESETS``, or ``None``.
            num_classes: C of the classifier.
            lr: the preset's learning rate of θ.
        """
        del preset, num_classes, lr  # a method without settings has one set of defaults
        return cls()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' field names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def slots(self) -> dict[str, float]:
        """The graphs' settings slots this method feeds, by contract name (``realm.*``)."""
        return {}

    def recover(self, loss_ema: float | None, loss: float) -> tuple[float | None, bool]:
        """The method's model recovery after an update whose loss was ``loss``.

        Read only where ``Method.recovery`` is set.

        Returns:
            The loss EMA now, and whether the model goes back to the source (here: never).
        """
        del loss
        return loss_ema, False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary of every field."""
        return dataclasses.asdict(self)

    def replaced(self: SettingsT, changes: Mapping[str, Any], method: str) -> SettingsT:
        """A copy with ``changes`` applied, validated again.

        Args:
            changes: field → new value.
            method: the method's label, for the message.

        Raises:
            ValueError: a name that is not one of the settings, or a bad value.
        """
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            have = ", ".join(self.names()) or "none of its own"
            raise ValueError(f"{method} has no setting {unknown}: its settings are {have}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls: type[SettingsT], data: Mapping[str, Any], method: str) -> SettingsT:
        """Inverse of :meth:`to_dict`; a name it does not hold is an error, not dropped.

        Raises:
            ValueError: not a mapping, an unknown name, or a bad value.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"the settings of {method} must be a mapping, got {data!r}")
        return cls().replaced(data, method)

    @classmethod
    def of(cls: type[SettingsT], config: Configured) -> SettingsT:
        """The settings of ``config``, which must be this method's.

        Raises:
            TypeError: ``config`` runs another method (a caller's mistake, not the user's).
        """
        settings = config.settings
        if not isinstance(settings, cls):
            raise TypeError(f"{config.method} does not hold {cls.__name__}: {settings!r}")
        return settings
