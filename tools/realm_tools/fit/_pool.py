"""The fit's measurements on every core: forked workers, one torch thread each, and a journal.

Each job runs configurations on one stream (or, for the long stream, one configuration on
every stream in turn, then its clean accuracy). The workers are forked from a process that
holds the model and the streams (:class:`Bench`), so nothing large is pickled and any
``nn.Module`` works, as ``DataLoader``'s workers do. Every result is appended to a journal as
it arrives: an interrupted fit measures only what it had not.

A forked child cannot run a backward once its parent has started autograd's device threads
(a backward where CUDA is present, or after ``torch.export``/``torch.compile`` ran): then
the workers are spawned instead and sent the bench pickled (:mod:`._spawned`), and where the
model cannot be sent the jobs run here, on one process, saying why.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_sdk import RealmAdapter

from ..bench import run_online
from . import _spawned
from ._candidates import Candidate
from ._streams import StreamImages, normalise


@dataclass(frozen=True, eq=False)
class Bench:
    """What every worker measures with: the model, the streams, the clean images."""

    model: nn.Module  # the source model, eval mode, never modified
    streams: dict[str, StreamImages]  # by StreamKey.name
    mean: tuple[float, ...]  # the model's input normalisation
    std: tuple[float, ...]
    clean: np.ndarray  # float32 (N, C, H, W), normalised: the clean accuracy after a long stream
    clean_labels: np.ndarray  # (N,)


@dataclass(frozen=True)
class Job:
    """Configurations on one stream, or (``long``) one configuration on several in turn."""

    streams: tuple[str, ...]  # one stream; or the long stream's parts, in order
    length: int  # samples of each stream
    candidates: tuple[Candidate, ...]  # each from the source model
    long: bool = False  # continual over ``streams``, then the clean accuracy after

    def key(self, candidate: Candidate) -> str:
        """The journal's key of one candidate's result."""
        where = "long" if self.long else self.streams[0]
        return f"{where}|{self.length}|{candidate.key}"

    @property
    def weight(self) -> float:
        """Samples stepped, to start the longest first."""
        return len(self.streams) * self.length * len(self.candidates)


_BENCH: Bench | None = None  # set before the workers fork; read by them


def measure(job: Job) -> dict[str, dict[str, Any]]:
    """Run a job on this process's bench: each candidate's figures, by journal key."""
    bench = _BENCH if _BENCH is not None else _spawned.received()
    out = {}
    for candidate in job.candidates:
        out[job.key(candidate)] = _run(bench, job, candidate)
    return out


def _run(bench: Bench, job: Job, candidate: Candidate) -> dict[str, Any]:
    began = time.perf_counter()

    def from_source() -> Any:
        model = copy.deepcopy(bench.model)
        if candidate.config is None:
            return model
        return RealmAdapter(model, candidate.config, clean_images=bench.clean)

    subject: Any = None
    correct, labelled, updates = 0, 0, 0
    per_stream = []
    for name in job.streams:
        part = bench.streams[name]
        x = normalise(part.images[: job.length], bench.mean, bench.std)
        y = part.labels[: job.length]
        if subject is None or (not job.long and candidate.config is not None):
            subject = from_source()  # each episode from the source; the long stream goes on
        result = run_online(subject, x, y, alpha_lambda=False)
        known = y >= 0
        hits = int((result.predictions[known] == y[known]).sum())
        per_stream.append(hits / max(int(known.sum()), 1) * 100)
        correct, labelled = correct + hits, labelled + int(known.sum())
        updates = result.updates  # the long stream's adapter counts on across its streams
    figures: dict[str, Any] = {
        "accuracy": correct / max(labelled, 1) * 100,
        "updates": updates,
        "samples": len(job.streams) * job.length,
    }
    if job.long:
        figures["per_stream"] = per_stream
        adapted = subject.model if hasattr(subject, "model") else subject
        figures["clean_after"] = _accuracy(adapted, bench.clean, bench.clean_labels)
    figures["seconds"] = time.perf_counter() - began
    return figures


@torch.no_grad()
def _accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    hits = 0
    for start in range(0, len(images), 256):
        x = torch.from_numpy(images[start : start + 256])
        hits += int((model(x).argmax(1).numpy() == labels[start : start + 256]).sum())
    return hits / len(images) * 100


def clean_accuracy(bench: Bench) -> float:
    """The source model's accuracy on the bench's clean images, in percent."""
    return _accuracy(copy.deepcopy(bench.model), bench.clean, bench.clean_labels)


class Journal:
    """Results by key, one JSON line each, under a header naming what they were measured on."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        self.results: dict[str, dict[str, Any]] = {}
        header = {"fit": fingerprint}
        if path.is_file():
            lines = path.read_text().splitlines()
            if lines and _json(lines[0]) == header:
                for line in lines[1:]:
                    row = _json(line)  # a line cut short by an interruption reads None
                    if row is not None and "key" in row:
                        self.results[row["key"]] = row["figures"]
                self.resumed = len(self.results)
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(header) + "\n")
        self.resumed = 0

    def add(self, results: dict[str, dict[str, Any]]) -> None:
        """Keep ``results`` here and on disk, each line flushed as written."""
        with self.path.open("a") as f:
            for key, figures in results.items():
                f.write(json.dumps({"key": key, "figures": figures}) + "\n")
                f.flush()
        self.results.update(results)


def _json(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _start_worker() -> None:
    torch.set_num_threads(1)  # one process per core, as DataLoader's workers


def run_jobs(
    bench: Bench,
    jobs: list[Job],
    journal: Journal,
    *,
    workers: int,
    progress: Callable[[int], None] | None = None,
    notify: Callable[[str], None] | None = None,
    spawn: bool = False,
) -> Iterator[dict[str, dict[str, Any]]]:
    """Measure what the journal lacks of ``jobs`` on ``workers`` processes, yielding as done.

    Args:
        bench: the model and streams (the workers fork from this process with it).
        jobs: what to measure; candidates already in the journal are left out.
        journal: where each result is kept as it arrives.
        workers: processes at once (1: this process).
        progress: told the samples done so far.
        notify: told, in a sentence, when the jobs cannot run on ``workers`` processes
            (a warning where not given).
        spawn: start the workers fresh even where forked ones could run a backward.
    """
    global _BENCH
    todo = []
    for job in jobs:
        left = tuple(c for c in job.candidates if job.key(c) not in journal.results)
        if left:
            todo.append(Job(job.streams, job.length, left, job.long))
    todo.sort(key=lambda j: -j.weight)
    _BENCH = bench
    done = 0
    for job, results in _measured(bench, todo, workers, notify, spawn):
        journal.add(results)
        done += int(job.weight)
        if progress is not None:
            progress(done)
        yield results


def _measured(
    bench: Bench,
    todo: list[Job],
    workers: int,
    notify: Callable[[str], None] | None,
    spawn: bool,
) -> Iterator[tuple[Job, dict[str, dict[str, Any]]]]:
    """Each job with its results as it finishes: here (one worker, or one job) or on a pool."""
    if workers <= 1 or len(todo) <= 1:
        yield from _here(todo, max(1, workers))
        return
    if not spawn and fork_runs_autograd():
        context: Any = multiprocessing.get_context("fork")
        start: tuple[Callable[..., None], tuple[Any, ...]] = (_start_worker, ())
    else:
        try:
            parcel = _spawned.Parcel.of(bench)
        except _spawned.CannotSend as exc:
            _tell(notify, _one_process(str(exc)))
            yield from _here(todo, workers)
            return
        context = multiprocessing.get_context("spawn")
        start = (_spawned.receive, (parcel,))
    left = list(todo)
    try:
        with ProcessPoolExecutor(
            min(workers, len(todo)), mp_context=context, initializer=start[0], initargs=start[1]
        ) as pool:
            pending: dict[Future[dict[str, dict[str, Any]]], Job] = {
                pool.submit(measure, job): job for job in todo
            }
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = pending.pop(future)
                    results = future.result()
                    left.remove(job)
                    yield job, results
    except _spawned.CannotSend as exc:  # a spawned worker could not rebuild the model
        _tell(notify, _one_process(str(exc)))
        yield from _here(left, workers)


def _here(todo: list[Job], threads: int) -> Iterator[tuple[Job, dict[str, dict[str, Any]]]]:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for job in todo:
            yield job, measure(job)
    finally:
        torch.set_num_threads(before)


def _one_process(why: str) -> str:
    return (
        "the fit measures in this one process: a forked worker cannot run a backward here "
        "(this process has started autograd's threads: CUDA, torch.export or torch.compile "
        f"ran in it) and a fresh one cannot be sent the model ({why}); run the fit in a new "
        "process, with the model's class in an importable module, to use every core"
    )


def _tell(notify: Callable[[str], None] | None, sentence: str) -> None:
    if notify is not None:
        notify(sentence)
    else:
        warnings.warn(sentence, RuntimeWarning, stacklevel=3)


def fork_runs_autograd() -> bool:
    """Whether a process forked from this one can run a backward.

    torch refuses it in the child once the parent has started autograd's device threads
    (a backward where a device other than the CPU is registered: CUDA present, or
    ``torch.export`` run before); a child forked to try tells.
    """
    if not hasattr(os, "fork"):
        return False
    pid = os.fork()
    if pid == 0:  # the child: exits without running anything of the parent's
        code = 1
        try:
            x = torch.ones(1, requires_grad=True)
            (x * 2).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
