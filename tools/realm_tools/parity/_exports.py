"""Exports shared between parity cases that differ only in settings a device may change."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from torch import nn

from realm_runtime import RealmConfig, RealmRuntime


class ExportCache:
    """One export per model and baked configuration, reused by every case that fits it.

    A case whose configuration differs from an earlier export's only outside
    ``RealmRuntime.exported_part`` runs on that export, its differences given to the runtime
    as ``overrides``: the way a device changes a setting without re-exporting (SPEC §11).

    Args:
        folder: where the exports go; the caller owns its lifetime.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._made: dict[tuple[str, ...], tuple[Path, RealmConfig, bool]] = {}
        self._count = 0

    def artifacts(
        self,
        name: str,
        model: nn.Module,
        config: RealmConfig,
        shape: tuple[int, ...],
        *,
        training: bool = False,
        clean: Any = None,
    ) -> tuple[Path, dict[str, Any]]:
        """The export directory for ``model`` (named ``name``) and the runtime's overrides.

        Args:
            name: the model's name; equal names must mean equal weights.
            model: the source model, exported with ``config`` when no export fits.
            config: the case's configuration.
            shape: one sample's shape (the export takes batch 1).
            training: the export must hold the legacy training artifacts (the
                ``ort-training`` backend's); one made without them is made again with them.
            clean: clean images for a method with clean state (EATA's Fisher); the same
                for every export of ``name``.

        Returns:
            The artifacts' directory and the fields of ``config`` that differ from its export's.
        """
        from realm_export import ExportOptions, export_realm_artifacts

        key = (name, *(f"{k}={v!r}" for k, v in RealmRuntime.exported_part(config).items()))
        made = self._made.get(key)
        if made is None or (training and not made[2]):
            target = self.folder / f"export-{self._count}"
            self._count += 1
            options = ExportOptions(
                config=config, input_shape=(1, *shape), training=training, clean_images=clean
            )
            export_realm_artifacts(model, target, options)
            self._made[key] = (target, config, training)
        target, exported, _ = self._made[key]
        overrides = {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(exported, f.name)
        }
        return target, overrides
