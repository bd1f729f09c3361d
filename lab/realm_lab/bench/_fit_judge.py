"""``realm fit`` judged: a shipped model fitted on its validation split, read on the test split.

The fit sees only Fashion-MNIST's validation split (training images the source models never
trained on). Its choice, the defaults (what ``realm export`` writes with no flags: REALM with
its guardrails) and not adapting then run the Table 1 protocol on the test split's
Fashion-MNIST-C, through the same stream bench as the published tables, so the fitted row
sits beside the best row of Table 1 read from that table's own runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from realm_runtime import RealmConfig

from ..rows import NO_ADAPT, REALM_GUARDED, ROWS
from ._runlog import RunLog
from ._stream_run import method_config

DEFAULTS = REALM_GUARDED.key  # the row `realm export` writes with no flags
EPISODIC = "episodic"


def fitted_row(
    config: RealmConfig | None, preset: str, num_classes: int
) -> tuple[str, dict[str, Any]]:
    """The stream bench's row and ``--set`` overrides that run exactly ``config``.

    ``config`` None (the fit chose not to adapt) is the no-adapt row.

    Raises:
        ValueError: the configuration differs from its method's preset in a way the overrides
            cannot say (a method's own setting), so the bench would not run what was chosen.
    """
    if config is None:
        return NO_ADAPT.key, {}
    base = RealmConfig.preset(preset, num_classes=num_classes, method=config.method)  # type: ignore[arg-type]
    overrides: dict[str, Any] = {"guardrails": config.guard}
    for f in dataclasses.fields(RealmConfig):
        if f.name in ("settings", "guardrails", "method"):
            continue
        if getattr(config, f.name) != getattr(base, f.name):
            overrides[f.name] = getattr(config, f.name)
    rebuilt = method_config(config.method, preset, num_classes, overrides)
    if rebuilt.to_dict() != config.to_dict():
        raise ValueError(
            f"the fitted configuration of {config.method} changes a setting the stream bench "
            "cannot override: judge it through the SDK directly"
        )
    return config.method, overrides


@dataclass(frozen=True)
class RowResult:
    """A row's Table 1 average over the corruptions, per seed and over seeds."""

    label: str
    per_seed: tuple[float, ...]  # the mean over corruptions of each seed's streams

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_seed))

    @property
    def spread(self) -> float:
        """The standard deviation over seeds (0 with one seed)."""
        return float(np.std(self.per_seed))

    def text(self) -> str:
        return f"{self.mean:.2f} ± {self.spread:.2f}"


def row_result(
    log: Mapping[str, Mapping[str, Any]],
    row: str,
    corruptions: Sequence[str],
    seeds: Sequence[int],
    label: str,
) -> RowResult | None:
    """A row's episodic average from a run log's runs; None where a cell is missing."""
    per_seed = []
    for seed in seeds:
        cells = [log.get(f"{EPISODIC}/{c}/s{seed}/{row}") for c in corruptions]
        if any(c is None or c.get("accuracy") is None for c in cells):
            return None
        per_seed.append(float(np.mean([c["accuracy"] for c in cells])))  # type: ignore[index]
    return RowResult(label, tuple(per_seed))


def table1_best(
    path: Path,
    fingerprint: Mapping[str, Any],
    corruptions: Sequence[str],
    seeds: Sequence[int],
) -> tuple[RowResult | None, str]:
    """The best adapting row of a Table 1 run log, or None and why not.

    Only a log made on the same data, streams, source and preset is read (its fingerprint).
    """
    if not path.is_file():
        return None, f"no Table 1 runs at {path}"
    try:
        log = RunLog(path, fingerprint)
    except ValueError:
        return None, "Table 1's runs are of other streams, data or weights"
    found = [
        result
        for row in ROWS.values()
        if row.adapts
        and (result := row_result(log.done, row.key, corruptions, seeds, row.label)) is not None
    ]
    if not found:
        return None, f"{path} holds no complete adapting row"
    return max(found, key=lambda r: r.mean), ""


def import_runs(source: Path, target: RunLog, rows: Sequence[str]) -> int:
    """Copy ``rows``' runs from another log of the same benchmark into ``target``.

    Only a log whose fingerprint is ``target``'s is read; a run whose configuration differs
    from the one asked for is run again by the bench (``RunLog.holds`` decides). Returns how
    many runs were copied.
    """
    if not source.is_file():
        return 0
    try:
        other = RunLog(source, target.fingerprint)
    except ValueError:
        return 0
    copied = 0
    for label, run in other.done.items():
        if label.rsplit("/", 1)[-1] in rows and label not in target.done:
            target.add(label, run, other.configs.get(label))
            copied += 1
    return copied


def verdict(fitted: RowResult, defaults: RowResult, no_adapt: RowResult) -> tuple[bool, str]:
    """Whether the fitted export is at least the better of the defaults and not adapting.

    Within the seeds' spread: the fitted mean plus the larger of the two rows' spreads.
    """
    better = max(defaults, no_adapt, key=lambda r: r.mean)
    allowance = max(fitted.spread, better.spread)
    gap = fitted.mean - better.mean
    holds = gap + allowance >= 0
    return holds, (
        f"{gap:+.2f} against {better.label} ({better.mean:.2f}); spread over seeds "
        f"{allowance:.2f}: {'holds' if holds else 'falls short'}"
    )


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """``data`` as indented JSON, atomically."""
    from realm_tools.cli import write_atomic

    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
