"""The long-running benchmark: every method on the streams of ``build_stream``, no reset.

Rows: no adaptation, Tent, EATA, SAR, REALM as its paper runs it, and REALM with its default
guardrails (``RealmConfig``'s), all through the PyTorch reference at batch size 1. Per run:
accuracy over the stream (labelled samples), accuracy per pass or segment, clean accuracy after
the stream where the data has a clean split, the interventions by reason, and traces of the
windowed accuracy, α, λ, the drift from the source and the update rate, for the plots.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from realm_runtime import RealmConfig
from realm_runtime.methods import method_named
from realm_sdk import has_batch_norm
from realm_tools.data import JUNK, ShiftDataset, StreamSettings
from realm_tools.models import weights_digest

from ..rows import row_named
from ._clean_state import clean_state_images
from ._runlog import RunLog
from ._stream_pool import Cell, Job, progress_of, run_pool
from ._stream_run import (
    DEFAULT_STREAM_METHODS,
    EVENTS,
    STREAM_METHODS,
    HeldOut,
    StreamRun,
    check_overrides,
    comparable_config,
    config_defaults,
    method_config,
)
from ._views import view_overrides

# An episodic part's traces are kept in the run log at this resolution: no plot draws them,
# and their course (α, λ, the update rate) is all a per-corruption look needs.
PART_TRACE_POINTS = 20
# The paper's Fig. 3 and Table 4 corruptions: their parts keep finer traces, and score the
# held-out tail where a run asks for it.
FIGURE_PARTS = ("gaussian_noise", "snow")
FIGURE_TRACE_POINTS = 200
BACKENDS = ("sdk", "runtime")  # what adapts a row that exports: the torch SDK or the runtime


def bench_streams(
    dataset: ShiftDataset,
    source: nn.Module,
    *,
    settings: Sequence[str],
    seeds: Sequence[int],
    corruptions: Sequence[str],
    methods: Sequence[str] = DEFAULT_STREAM_METHODS,
    preset: str = "cifar",
    stream_settings: StreamSettings | None = None,
    on_run: Callable[[str, int], Callable[[int], None] | None] | None = None,
    jobs: int = 1,
    log: RunLog | None = None,
    overrides: dict[str, Any] | None = None,
    backend: str = "sdk",
    heldout: HeldOut | None = None,
) -> list[StreamRun]:
    """Every method × setting × seed; ``episodic``: each corruption from the source, averaged.

    Args:
        dataset: the shifted test set; its clean split measures forgetting.
        source: the source model; every run adapts a private copy.
        settings: names of :data:`SETTINGS`.
        seeds: one stream per seed and setting.
        corruptions: the domains, in pass-1 order.
        methods: rows, names of :data:`STREAM_METHODS`.
        preset: the hyper-parameters' preset (``"cifar"`` or ``"imagenet"``).
        stream_settings: lengths, passes and severities of the streams.
        on_run: ``on_run(label, samples)`` opens a run's progress callback (or None).
        jobs: worker processes (one torch thread each); 1 runs in this process. The runs
            are independent: the figures are those of one process at one torch thread.
        log: keeps each run as it finishes, and gives back the runs it already holds
            instead of running them again (made with :func:`streams_fingerprint`).
        overrides: configuration fields every adapting row gets (see :func:`method_config`).
        backend: ``"runtime"``: every row whose method exports is exported once (its own
            configuration) and run by ``RealmRuntime``, several times faster than the SDK
            at batch 1; the other rows (MEMO, SFT, TTAug) by the SDK. A run keeps which.
        heldout: Table 4's checkpoints, scored on the :data:`FIGURE_PARTS` streams.

    Returns:
        One :class:`StreamRun` per combination, in settings × seeds × methods order.
    """
    unknown = [m for m in methods if m not in STREAM_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {STREAM_METHODS}")
    if jobs < 1:
        raise ValueError(f"jobs must be ≥ 1, got {jobs}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    clean = dataset.clean()
    junk = [s for s in settings if s in JUNK]
    if junk and clean is None:  # before hours of other runs, not after
        raise ValueError(
            f"{', '.join(junk)} need clean images of {dataset.name} (to draw frames from and "
            "to measure forgetting after), and this copy of the data set has none: leave "
            "the junk settings out"
        )
    shape = stream_settings or StreamSettings()
    # The rows that draw AugMix views undo the data's normalisation: the data says which.
    overrides = {**view_overrides(dataset), **(overrides or {})}
    # The overrides are the same fields for every row: a bad one fails here, before any run.
    check_overrides(preset, dataset.num_classes, overrides)
    job = Job(
        dataset,
        source,
        clean,
        tuple(corruptions),
        preset,
        shape,
        overrides,
        clean_state_images(dataset, tuple(methods)),
    )
    cells = [
        Cell(setting, seed, method, part)
        for setting in settings
        for seed in seeds
        for method in methods
        for part in (corruptions if setting == "episodic" else (None,))
    ]
    exported = [m for m in methods if backend == "runtime" and _exports(m)]
    configs: dict[str, Any] = {  # a row that does not adapt has no configuration
        m: {
            **method_config(m, preset, dataset.num_classes, overrides).to_dict(),
            **({"backend": "runtime"} if m in exported else {}),
        }
        if row_named(m).adapts
        else None
        for m in methods
    }
    kept = log.done if log is not None else {}
    defaults = config_defaults()
    # BatchNorm's own rate steps nothing on a model without BatchNorm: runs at any rate are one.
    normal = functools.partial(comparable_config, batch_norm=has_batch_norm(source))
    todo = [
        c
        for c in cells
        if log is None or not log.holds(c.label, configs[c.method], defaults, normal)
    ]

    def keep(cell: Cell, run: StreamRun) -> StreamRun:
        if log is not None:
            points = None if cell.part is None else PART_TRACE_POINTS
            if cell.part in FIGURE_PARTS:
                points = FIGURE_TRACE_POINTS
            log.add(cell.label, _compact(run, points), configs[cell.method])
        return run

    with tempfile.TemporaryDirectory() as tmp:
        wanted = {c.method for c in todo} & set(exported)
        job = dataclasses.replace(
            job,
            artifacts=_exports_of(job, sorted(wanted), configs, Path(tmp)),
            heldout=heldout,
            heldout_parts=FIGURE_PARTS if heldout is not None else (),
        )
        if not todo:
            ran = []
        elif jobs == 1:
            ran = [keep(c, job.run(c, progress_of(on_run, c))) for c in todo]
        else:
            ran = run_pool(job, todo, jobs, on_run, keep)
    fresh = {c.label: r for c, r in zip(todo, ran, strict=True)}
    done = [fresh[c.label] if c.label in fresh else _run_from_dict(kept[c.label]) for c in cells]
    runs: list[StreamRun] = []
    for setting in settings:
        for seed in seeds:
            for method in methods:
                mine = [
                    r
                    for c, r in zip(cells, done, strict=True)
                    if (c.setting, c.seed, c.method) == (setting, seed, method)
                ]
                runs.append(_episodic(mine, corruptions) if setting == "episodic" else mine[0])
    return runs


def _exports(row: str) -> bool:
    """Whether the runtime can run ``row``: it adapts, by a method that exports, as it is."""
    r = row_named(row)
    return r.method is not None and method_named(r.method).exports and r.reset_every is None


def _exports_of(
    job: Job, rows: Sequence[str], configs: dict[str, Any], folder: Path
) -> dict[str, str]:
    """Each row exported with its own configuration (EATA's Fisher on the job's images)."""
    from realm_export import ExportOptions, export_realm_artifacts

    out = {}
    for row in rows:
        config = {k: v for k, v in configs[row].items() if k != "backend"}
        options = ExportOptions(
            config=RealmConfig.from_dict(config),
            input_shape=job.dataset.input_shape,
            clean_images=job.clean_state if method_named(config["method"]).clean_state else None,
        )
        export_realm_artifacts(copy.deepcopy(job.source), folder / row, options)
        out[row] = str(folder / row)
    return out


def _episodic(parts: list[StreamRun], corruptions: Sequence[str]) -> StreamRun:
    """The paper's protocol as one row: each corruption from the source, then the mean."""
    first = parts[0]
    cleans = [r.clean_after for r in parts if r.clean_after is not None]
    return StreamRun(
        setting="episodic",
        method=first.method,
        seed=first.seed,
        samples=sum(r.samples for r in parts),
        accuracy=float(np.mean([r.accuracy for r in parts if r.accuracy is not None])),
        segments=[(name, r.accuracy or 0.0) for name, r in zip(corruptions, parts, strict=True)],
        clean_after=float(np.mean(cleans)) if cleans else None,
        updates=sum(r.updates for r in parts),
        events={k: sum(r.events[k] for r in parts) for k in EVENTS},
        seconds=sum(r.seconds for r in parts),
    )


def streams_from_json(text: str) -> list[StreamRun]:
    """Inverse of :func:`streams_to_json` (to re-plot or re-tabulate a saved run)."""
    return [_run_from_dict(r) for r in json.loads(text)["runs"]]


def streams_to_json(runs: Sequence[StreamRun], settings: dict[str, Any]) -> str:
    """Every figure of every run, with the settings that produced them."""
    return json.dumps({"settings": settings, "runs": [_compact(r) for r in runs]})


def streams_fingerprint(
    dataset: ShiftDataset,
    source: nn.Module,
    *,
    corruptions: Sequence[str],
    preset: str,
    stream_settings: StreamSettings,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What makes two runs of one cell comparable: data, streams, source weights, preset.

    Settings, seeds and the rows' configurations are not part of it: a run log keeps runs by
    cell with the configuration each ran, so a benchmark started again with more seeds or
    settings reuses the cells it shares, and a row whose configuration changed runs again.
    ``overrides`` are checked here (a bad field fails before anything runs).
    """
    check_overrides(preset, dataset.num_classes, overrides)
    return {
        "dataset": dataset.name,
        "corruptions": list(corruptions),
        "streams": asdict(stream_settings),
        "source_sha256": weights_digest(source),
        "preset": preset,
    }


def _compact(run: StreamRun, points: int | None = None) -> dict[str, Any]:
    """A run as JSON-ready data, traces rounded (and cut to ``points`` evenly spaced ones)."""
    data = asdict(run)
    keep = range(len(run.trace_at))
    if points is not None and len(run.trace_at) > points:
        keep = sorted({round(i) for i in np.linspace(0, len(run.trace_at) - 1, points)})
    data["trace_at"] = [run.trace_at[i] for i in keep]
    data["trace"] = {k: [float(f"{vs[i]:.5g}") for i in keep] for k, vs in run.trace.items()}
    return data


def _run_from_dict(data: dict[str, Any]) -> StreamRun:
    data = dict(data)
    data["segments"] = [tuple(s) for s in data["segments"]]
    return StreamRun(**data)
