"""Model coverage: which timm architectures export, validate and adapt (``realm coverage``).

Each architecture is built with random weights (nothing is downloaded), exported with
``realm_export``'s default options under the ImageNet preset (100 classes), validated against
the PyTorch reference, then run through ``RealmRuntime`` on a few random samples beside the
torch forward and the SDK's step. A refused export is a finding, not an error: its row holds
the exception's sentence.

Every model runs in a fresh process (``python -m realm_tools.coverage._worker``) under a
timeout, so a hang, a crash or a leak in one export cannot take the others with it; the worker
answers with one JSON row on stdout. Where the platform forks, the process is forked from a
zygote that imported the libraries once (:mod:`._zygote`), not started anew.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from .._processes import exit_text, last_json, run_bounded, tail_of
from ._models import COVERAGE_MODELS, family_of
from ._row import CoverageRow
from ._zygote import Zygote, can_fork

COVERAGE_WORKER = f"{__package__}._worker"  # run as python -m, one model per process


# --------------------------------------------------------------------- the run (the parent)


def run_coverage(
    models: Sequence[str] | None = None,
    *,
    image_size: int = 128,
    timeout: float = 600.0,
    threads: int = 2,
    samples: int = 3,
    seed: int = 0,
    jobs: int = 1,
    on_row: Callable[[CoverageRow], None] | None = None,
) -> list[CoverageRow]:
    """Export, validate and adapt each model, each in a fresh worker process.

    Args:
        models: timm architectures (default: :data:`COVERAGE_MODELS`).
        image_size: the square side of models whose ``pretrained_cfg`` does not fix their
            input size (fixed ones, e.g. ViTs, run at their own).
        timeout: seconds per model before its worker is killed (a ``timeout`` row).
        threads: torch's and ONNX Runtime's intra-op threads in the worker.
        samples: timed samples per figure (after ``WARMUP`` untimed ones); a few, not a
            benchmark.
        seed: seed of the weights and the samples.
        jobs: workers at a time (each with ``threads`` threads: jobs × threads ≤ cores keeps
            the timings apart).
        on_row: called with each row as its model ends (progress, for a command line).

    Returns:
        One row per model, in order. A model that hangs or crashes its worker gets a
        ``timeout`` or ``crashed`` row; none stops the run.
    """
    import queue
    from concurrent.futures import ThreadPoolExecutor, as_completed

    names = list(COVERAGE_MODELS if models is None else models)
    rows: dict[str, CoverageRow] = {}
    zygotes: queue.Queue[Zygote | None] = queue.Queue()
    for _ in range(max(1, jobs)):  # one per job: a zygote serves one model at a time
        zygotes.put(Zygote(COVERAGE_WORKER) if can_fork() else None)

    def one(name: str) -> CoverageRow:
        zygote = zygotes.get()
        try:
            return _run_worker(name, image_size, timeout, threads, samples, seed, zygote)
        finally:
            zygotes.put(zygote)

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(one, name): name for name in names}
            for future in as_completed(futures):
                row = future.result()
                rows[futures[future]] = row
                if on_row is not None:
                    on_row(row)
    finally:
        while not zygotes.empty():
            zygote = zygotes.get()
            if zygote is not None:
                zygote.close()
    return [rows[name] for name in names]


def merge_rows(old: Sequence[CoverageRow], new: Sequence[CoverageRow]) -> list[CoverageRow]:
    """``old`` with each model of ``new`` replaced (or added), in COVERAGE_MODELS order first."""
    merged = {r.model: r for r in old} | {r.model: r for r in new}
    ranked = {name: i for i, name in enumerate(COVERAGE_MODELS)}
    return sorted(merged.values(), key=lambda r: ranked.get(r.model, len(ranked)))


def _run_worker(
    name: str,
    image_size: int,
    timeout: float,
    threads: int,
    samples: int,
    seed: int,
    zygote: Zygote | None = None,
) -> CoverageRow:
    """One model's row from a fresh ``realm_tools.coverage._worker`` process.

    Forked by ``zygote`` where given, else started anew.
    """
    family = family_of(name)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="realm-coverage-") as work:
        command = [
            sys.executable,
            "-m",
            COVERAGE_WORKER,
            name,
            "--work-dir",
            work,
            "--image-size",
            str(image_size),
            "--threads",
            str(threads),
            "--samples",
            str(samples),
            "--seed",
            str(seed),
        ]
        try:
            done = (
                run_bounded(command, timeout)
                if zygote is None
                else zygote.run(command[3:], timeout)
            )
        except subprocess.TimeoutExpired as exc:
            return CoverageRow(
                name,
                family,
                "timeout",
                stage="worker",
                error=f"no result within {timeout:g} s: the worker was killed",
                seconds=time.perf_counter() - start,
                log_tail=tail_of(exc.stderr),
            )
    seconds = time.perf_counter() - start
    result = last_json(done.stdout)
    if result is not None:  # a row is whole once written, whatever the exit (ORT at exit)
        return CoverageRow.from_dict({**result, "seconds": seconds})
    last = [line for line in (done.stderr or "").splitlines() if line.strip()][-1:]
    return CoverageRow(
        name,
        family,
        "crashed",
        stage="worker",
        error=f"the worker {exit_text(done.returncode)} without a result"
        + (f"; its last line: {last[0].strip()}" if last else ""),
        seconds=seconds,
        log_tail=tail_of(done.stderr),
    )
