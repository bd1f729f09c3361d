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
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime import Guardrails, RealmConfig
from realm_runtime.contract import INTERVENTIONS
from realm_sdk import RealmAdapter

from ..data import JUNK, NO_LABEL, ShiftDataset, Stream, StreamSettings, build_stream
from ._quality import _clean_accuracy, _torch_predict
from ._runlog import RunLog, weights_digest

# Every row a stream benchmark can run, in table order; the default rows leave DeYO out
# (asked for with --methods), so that the stored tables run again only where asked.
STREAM_METHODS: tuple[str, ...] = (
    "none",
    "tent",
    "eata",
    "sar",
    "deyo",
    "realm",
    "realm-guarded",
)
DEFAULT_STREAM_METHODS: tuple[str, ...] = tuple(m for m in STREAM_METHODS if m != "deyo")
STREAM_LABELS = {
    "none": "no-adapt",
    "tent": "Tent",
    "eata": "EATA",
    "sar": "SAR",
    "deyo": "DeYO",
    "realm": "REALM",
    "realm-guarded": "REALM + guardrails",
}
TRACE_POINTS = 400  # samples of each trace: enough for a plot, small in the JSON
# An episodic part's traces are kept in the run log at this resolution: no plot draws them,
# and their course (α, λ, the update rate) is all a per-corruption look needs.
PART_TRACE_POINTS = 20
EVENTS = INTERVENTIONS


@dataclass
class StreamRun:
    """One method on one stream."""

    setting: str
    method: str
    seed: int
    samples: int  # length of the stream
    accuracy: float | None  # % correct over the labelled samples (None: no labels)
    segments: list[tuple[str, float]]  # (segment or pass, % correct) in stream order
    clean_after: float | None  # % correct on the clean split after the stream
    updates: int  # optimizer steps
    events: dict[str, int]  # interventions by reason (EVENTS)
    reset_at: list[int] = field(default_factory=list)  # samples after which a reset happened
    trace_at: list[int] = field(default_factory=list)  # sample index of each trace point
    trace: dict[str, list[float]] = field(default_factory=dict)  # accuracy, alpha, lam, ...
    seconds: float = 0.0  # wall time of the stream and the clean check (0: not recorded)


def method_config(
    method: str, preset: str, num_classes: int, overrides: dict[str, Any] | None = None
) -> RealmConfig:
    """The configuration of one row: the paper's, and REALM's defaults for the guarded row.

    ``overrides`` (fields of :class:`RealmConfig`) apply to every row alike: a variant of
    the preset, such as another reading of the paper's settings.
    """
    extra = dict(overrides or {})
    if method == "realm-guarded":
        return RealmConfig.preset(preset, num_classes=num_classes, **extra)  # type: ignore[arg-type]
    extra.setdefault("guardrails", Guardrails.off())
    return RealmConfig.preset(
        preset,  # type: ignore[arg-type]
        num_classes=num_classes,
        method=method,  # type: ignore[arg-type]
        **extra,
    )


def run_stream(
    method: str,
    source: nn.Module,
    stream: Stream,
    *,
    preset: str,
    num_classes: int,
    clean: tuple[Any, np.ndarray] | None,
    progress: Callable[[int, int], None] | None = None,
    overrides: dict[str, Any] | None = None,
) -> StreamRun:
    """One method through one stream, sample by sample, on a private copy of ``source``.

    ``progress(done, total)`` is called every 64 samples and at the end.
    """
    started = time.perf_counter()
    model = copy.deepcopy(source).eval()
    adapter = (
        None
        if method == "none"
        else RealmAdapter(model, method_config(method, preset, num_classes, overrides))
    )
    n = len(stream)
    every = max(1, n // TRACE_POINTS)
    correct = np.zeros(n, dtype=bool)
    trace: dict[str, list[float]] = {k: [] for k in ("alpha", "lam", "drift", "update_rate")}
    trace_at: list[int] = []
    reset_at: list[int] = []
    resets = 0
    for i in range(n):
        x = torch.from_numpy(stream.sample(i))
        if adapter is None:
            with torch.no_grad():
                top1 = int(model(x).argmax(1)[0])
        else:
            top1 = int(adapter.adapt(x).top1[0])
        correct[i] = top1 == stream.labels[i]
        if adapter is not None and ((i + 1) % every == 0 or i + 1 == n):
            st = adapter.state  # a snapshot costs a pass over θ: taken at trace points only
            trace_at.append(i)
            trace["alpha"].append(float(st.alpha or 0.0))
            trace["lam"].append(float(st.lam or 0.0))
            trace["drift"].append(st.drift)
            trace["update_rate"].append(float(st.update_rate or 0.0))
            if st.resets_recovery + st.resets_collapse != resets:
                reset_at.append(i)  # at trace resolution
                resets = st.resets_recovery + st.resets_collapse
        if progress is not None and ((i + 1) % 64 == 0 or i + 1 == n):
            progress(i + 1, n)
    labelled = stream.labels != NO_LABEL
    at = trace_at if adapter is not None else sorted({*range(every - 1, n, every), n - 1})
    window = _windowed(correct, labelled, at)
    segment = stream.segment_of()
    segments = []
    for k, (_, name) in enumerate(stream.segments):
        mask = (segment == k) & labelled
        if mask.any():
            segments.append((name, float(correct[mask].mean() * 100)))
    state = adapter.state if adapter is not None else None
    return StreamRun(
        setting=stream.setting,
        method=method,
        seed=-1,
        samples=n,
        accuracy=float(correct[labelled].mean() * 100) if labelled.any() else None,
        segments=segments,
        clean_after=_clean_accuracy(_torch_predict(model), clean),
        updates=state.updates if state is not None else 0,
        events={k: getattr(state, k) if state is not None else 0 for k in EVENTS},
        reset_at=reset_at,
        trace_at=at,
        trace={**(trace if adapter is not None else {}), "accuracy": window},
        seconds=time.perf_counter() - started,
    )


def _windowed(correct: np.ndarray, labelled: np.ndarray, at: Sequence[int]) -> list[float]:
    """% correct over the last 500 labelled samples, at each trace point."""
    hits = np.cumsum(correct & labelled)
    seen = np.cumsum(labelled)
    out = []
    for i in at:
        j = max(0, np.searchsorted(seen, seen[i] - 500, side="right"))
        count = seen[i] - (seen[j - 1] if j > 0 else 0)
        got = hits[i] - (hits[j - 1] if j > 0 else 0)
        out.append(float(got / count * 100) if count else float("nan"))
    return out


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

    Returns:
        One :class:`StreamRun` per combination, in settings × seeds × methods order.
    """
    unknown = [m for m in methods if m not in STREAM_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {STREAM_METHODS}")
    if jobs < 1:
        raise ValueError(f"jobs must be ≥ 1, got {jobs}")
    clean = dataset.clean()
    junk = [s for s in settings if s in JUNK]
    if junk and clean is None:  # before hours of other runs, not after
        raise ValueError(
            f"{', '.join(junk)} need clean images of {dataset.name} (to draw frames from and "
            "to measure forgetting after), and this copy of the data set has none: leave "
            "the junk settings out"
        )
    shape = stream_settings or StreamSettings()
    # The overrides are the same fields for every row: a bad one fails here, before any run.
    method_config("realm", preset, dataset.num_classes, overrides)
    job = _Job(dataset, source, clean, tuple(corruptions), preset, shape, dict(overrides or {}))
    cells = [
        _Cell(setting, seed, method, part)
        for setting in settings
        for seed in seeds
        for method in methods
        for part in (corruptions if setting == "episodic" else (None,))
    ]
    configs: dict[str, Any] = {"none": None}  # no-adapt has no configuration
    for m in set(methods) - {"none"}:
        configs[m] = method_config(m, preset, dataset.num_classes, overrides).to_dict()
    kept = log.done if log is not None else {}
    defaults = {f.name: f.default for f in dataclasses.fields(RealmConfig)}
    todo = [c for c in cells if log is None or not log.holds(c.label, configs[c.method], defaults)]

    def keep(cell: _Cell, run: StreamRun) -> StreamRun:
        if log is not None:
            points = PART_TRACE_POINTS if cell.part is not None else None
            log.add(cell.label, _compact(run, points), configs[cell.method])
        return run

    if not todo:
        ran = []
    elif jobs == 1:
        ran = [keep(c, job.run(c, _progress(on_run, c))) for c in todo]
    else:
        ran = _run_pool(job, todo, jobs, on_run, keep)
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


@dataclass(frozen=True)
class _Cell:
    """One run of the benchmark: a method on one seed's stream (episodic: one corruption)."""

    setting: str
    seed: int
    method: str
    part: str | None  # episodic: the corruption; None for the one-stream settings

    @property
    def label(self) -> str:
        middle = f"{self.setting}/{self.part}" if self.part else self.setting
        return f"{middle}/s{self.seed}/{self.method}"

    @property
    def weight(self) -> float:
        """Rough relative cost, to start the longest runs first in a pool."""
        length = {"long": 14.0, "continual": 4.0}.get(self.setting, 1.0)
        return length * {"none": 0.3, "sar": 2.0}.get(self.method, 1.0)


@dataclass(frozen=True)
class _Job:
    """What every run of one benchmark shares (sent once to each worker process)."""

    dataset: ShiftDataset
    source: nn.Module
    clean: tuple[Any, np.ndarray] | None  # the clean split, built once (forgetting)
    corruptions: tuple[str, ...]
    preset: str
    shape: StreamSettings
    overrides: dict[str, Any]  # configuration fields of every adapting row

    def run(self, cell: _Cell, progress: Callable[[int, int], None] | None) -> StreamRun:
        if cell.part is not None:
            x, y = self.dataset.stream(
                cell.part, self.shape.severity, seed=cell.seed, limit=self.shape.limit
            )
            rows = np.stack([np.zeros(len(y)), np.arange(len(y))], 1).astype(np.int64)
            stream = Stream("episodic", (x,), rows, np.asarray(y), ((0, cell.part),))
        else:
            stream = build_stream(
                self.dataset,
                cell.setting,
                seed=cell.seed,
                corruptions=self.corruptions,
                settings=self.shape,
            )
        run = run_stream(
            cell.method,
            self.source,
            stream,
            preset=self.preset,
            num_classes=self.dataset.num_classes,
            clean=self.clean,
            progress=progress,
            overrides=self.overrides,
        )
        run.seed = cell.seed
        return run


def _progress(
    on_run: Callable[[str, int], Callable[[int], None] | None] | None, cell: _Cell
) -> Callable[[int, int], None] | None:
    """A progress callback that opens its bar on the first report (the length is known then)."""
    if on_run is None:
        return None
    bar: list[Callable[[int], None] | None] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(on_run(cell.label, total))
        if bar[0] is not None:
            bar[0](done)

    return update


_WORKER: dict[str, Any] = {}  # the job and the progress queue of a pool's worker process


def _init_worker(job: _Job, queue: Any) -> None:
    torch.set_num_threads(1)
    _WORKER.update(job=job, queue=queue)
    _end_with_parent()


def _end_with_parent() -> None:
    """End this helper process once the benchmark that started it is gone.

    A pool's workers (and its queue's manager) outlive a parent killed by a signal it does
    not handle; without this they would go on for an hour with no one to take their runs.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _work(index: int, cell: _Cell) -> StreamRun:
    job: _Job = _WORKER["job"]
    queue = _WORKER["queue"]
    return job.run(cell, lambda done, total: queue.put((index, done, total)))


def _run_pool(
    job: _Job,
    cells: list[_Cell],
    jobs: int,
    on_run: Callable[[str, int], Callable[[int], None] | None] | None,
    keep: Callable[[_Cell, StreamRun], StreamRun],
) -> list[StreamRun]:
    """The cells on ``jobs`` spawned processes, longest first; progress through a queue.

    ``keep(cell, run)`` sees each run as it comes back (to keep it before the next one).
    """
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import ProcessPoolExecutor, wait
    from multiprocessing.managers import SyncManager

    context = multiprocessing.get_context("spawn")  # no fork of a process with torch threads
    bars = {i: _progress(on_run, c) for i, c in enumerate(cells)}
    order = sorted(range(len(cells)), key=lambda i: -cells[i].weight)
    results: dict[int, StreamRun] = {}
    manager = SyncManager(ctx=context)
    manager.start(_end_with_parent)
    with manager:
        reports = manager.Queue()

        def drain() -> None:
            while True:
                try:
                    i, done, total = reports.get_nowait()
                except queue_module.Empty:
                    return
                bar = bars[i]
                if bar is not None:
                    bar(done, total)

        with ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_init_worker, initargs=(job, reports)
        ) as pool:
            futures = {pool.submit(_work, i, cells[i]): i for i in order}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.5)
                for future in finished:
                    i = futures[future]  # a worker's error is raised by result()
                    results[i] = keep(cells[i], future.result())
                drain()
        drain()
    return [results[i] for i in range(len(cells))]


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
    method_config("realm", preset, dataset.num_classes, overrides)
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
