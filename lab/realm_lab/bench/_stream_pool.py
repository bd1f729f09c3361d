"""A stream benchmark's runs on spawned processes, longest first, progress through a queue."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_tools.data import ShiftDataset, Stream, StreamSettings, build_stream

from ..rows import row_named
from ._stream_run import HeldOut, StreamRun, run_stream


@dataclass(frozen=True)
class Cell:
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
        return length * row_named(self.method).cost


@dataclass(frozen=True)
class Job:
    """What every run of one benchmark shares (sent once to each worker process)."""

    dataset: ShiftDataset
    source: nn.Module
    clean: tuple[Any, np.ndarray] | None  # the clean split, built once (forgetting)
    corruptions: tuple[str, ...]
    preset: str
    shape: StreamSettings
    overrides: dict[str, Any]  # configuration fields of every adapting row
    # Clean images for a method with clean state (EATA's Fisher); None: no row needs them.
    clean_state: np.ndarray | None = None
    # Row → an export of its configuration, run by RealmRuntime (else the SDK runs it).
    artifacts: dict[str, str] = field(default_factory=dict)
    heldout: HeldOut | None = None  # Table 4's checkpoints, on the heldout_parts' streams
    heldout_parts: tuple[str, ...] = ()

    def run(self, cell: Cell, progress: Callable[[int, int], None] | None) -> StreamRun:
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
            clean_images=self.clean_state,
            artifacts=self.artifacts.get(cell.method),
            heldout=self.heldout if cell.part in self.heldout_parts else None,
        )
        run.seed = cell.seed
        return run


def progress_of(
    on_run: Callable[[str, int], Callable[[int], None] | None] | None, cell: Cell
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


def _init_worker(job: Job, queue: Any, parent: int) -> None:
    torch.set_num_threads(1)
    _WORKER.update(job=job, queue=queue)
    _end_with_parent(parent)


def _end_with_parent(parent: int) -> None:
    """End this helper process once the benchmark ``parent`` (its pid) that started it is gone.

    A pool's workers (and its queue's manager) outlive a parent killed by a signal it does
    not handle; without this they would go on for an hour with no one to take their runs.
    The pid comes from the parent: one that died while this process still imported torch
    has already handed it to another parent, which ``getppid`` here would take for its own.
    """
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _work(index: int, cell: Cell) -> StreamRun:
    job: Job = _WORKER["job"]
    queue = _WORKER["queue"]
    return job.run(cell, lambda done, total: queue.put((index, done, total)))


def run_pool(
    job: Job,
    cells: list[Cell],
    jobs: int,
    on_run: Callable[[str, int], Callable[[int], None] | None] | None,
    keep: Callable[[Cell, StreamRun], StreamRun],
) -> list[StreamRun]:
    """The cells on ``jobs`` spawned processes, longest first; progress through a queue.

    ``keep(cell, run)`` sees each run as it comes back (to keep it before the next one).
    """
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import ProcessPoolExecutor, wait
    from multiprocessing.managers import SyncManager

    context = multiprocessing.get_context("spawn")  # no fork of a process with torch threads
    bars = {i: progress_of(on_run, c) for i, c in enumerate(cells)}
    order = sorted(range(len(cells)), key=lambda i: -cells[i].weight)
    results: dict[int, StreamRun] = {}
    manager = SyncManager(ctx=context)
    manager.start(_end_with_parent, (os.getpid(),))
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
            jobs,
            mp_context=context,
            initializer=_init_worker,
            initargs=(job, reports, os.getpid()),
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
