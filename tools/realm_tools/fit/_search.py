"""The search itself: the halving rounds run on the workers, the best third kept each time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ._candidates import NO_ADAPT_CANDIDATE, Candidate
from ._pool import Bench, Job, Journal, run_jobs
from ._schedule import Round, shortened


@dataclass(frozen=True)
class Standing:
    """A candidate's mean online accuracy over the streams at one round's length."""

    candidate: Candidate
    length: int  # samples of each stream
    mean: float  # mean over the streams of the online accuracy, in percent
    per_stream: tuple[float, ...]  # each stream's, in the order of the streams given


@dataclass(frozen=True)
class Searched:
    """The search as it ran: each round's standings and what a sample cost in it."""

    rounds: list[list[Standing]]  # each round's standings, best first, not adapting among them
    plan: list[Round]  # the rounds as run: later ones shortened where the search fell behind
    per_sample: float  # seconds an adapting sample cost a worker, by the wall clock; 0: none ran


def run_rounds(
    bench: Bench,
    streams: list[str],
    pool: list[Candidate],
    plan: list[Round],
    journal: Journal,
    *,
    workers: int,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    notify: Callable[[str], None] | None = None,
    carried: Sequence[Candidate] = (),
    deadline: float | None = None,
) -> Searched:
    """Run ``plan``'s rounds: each keeps its best ``plan[r + 1].candidates`` for the next.

    Not adapting runs beside every round, at the round's length, for the rule's floor;
    ``carried`` (the defaults) join the final round, so the rule always weighs them. Where
    a round ran slower than the plan was priced (the machine shared, say), the rounds after
    it are shortened to end by ``deadline`` (a ``time.perf_counter()`` reading).

    Returns:
        The rounds' standings, the plan as run and the cost of a sample measured.
    """
    alive = list(pool)
    rounds: list[list[Standing]] = []
    plan = list(plan)
    measured = 0.0
    for number in range(len(plan)):
        if deadline is not None and measured > 0 and number > 0:
            rest = shortened(
                plan[number:],
                floor=plan[number - 1].length,
                streams=len(streams),
                seconds_per_sample=measured,
                workers=workers,
                budget_s=deadline - time.perf_counter(),
                carried=len(carried),
            )
            if rest != plan[number:] and notify is not None:
                notify(
                    f"the search runs behind its plan (a sample costs {measured * 1e3:.0f} ms "
                    f"here now): rounds {number + 1}-{len(plan)} shortened to "
                    f"{', '.join(str(r.length) for r in rest)} samples a stream"
                )
            plan[number:] = rest
        step = plan[number]
        everyone = (NO_ADAPT_CANDIDATE, *alive)
        if number + 1 == len(plan):
            known = {c.key for c in everyone}
            everyone += tuple(c for c in carried if c.key not in known)
        jobs = [Job((name,), step.length, everyone) for name in streams]
        tell = None
        if progress is not None:
            total = int(sum(j.weight for j in jobs))
            tell = progress(f"round {number + 1}/{len(plan)}: {len(alive)} configurations", total)
        adapted = sum(  # what the journal lacks: run_jobs leaves the rest out
            len(j.streams) * j.length
            for j in jobs
            for c in j.candidates
            if c.config is not None and j.key(c) not in journal.results
        )
        began = time.perf_counter()
        for _ in run_jobs(bench, jobs, journal, workers=workers, progress=tell, notify=notify):
            pass
        if adapted:  # the wall clock: what sharing the machine costs is in it
            measured = (time.perf_counter() - began) * workers / adapted
        standings = [_standing(c, streams, step.length, journal) for c in everyone]
        standings.sort(key=lambda s: -s.mean)  # stable: a tie keeps the registry's order
        rounds.append(standings)
        if number + 1 < len(plan):
            keep = plan[number + 1].candidates
            alive = [s.candidate for s in standings if s.candidate.config is not None][:keep]
    return Searched(rounds, plan, measured)


def _standing(candidate: Candidate, streams: list[str], length: int, journal: Journal) -> Standing:
    per = tuple(
        float(journal.results[Job((name,), length, (candidate,)).key(candidate)]["accuracy"])
        for name in streams
    )
    return Standing(candidate, length, float(np.mean(per)), per)
