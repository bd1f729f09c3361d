"""The search itself: the halving rounds run on the workers, the best third kept each time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ._candidates import NO_ADAPT_CANDIDATE, Candidate
from ._pool import Bench, Job, Journal, run_jobs
from ._schedule import Round


@dataclass(frozen=True)
class Standing:
    """A candidate's mean online accuracy over the streams at one round's length."""

    candidate: Candidate
    length: int  # samples of each stream
    mean: float  # mean over the streams of the online accuracy, in percent
    per_stream: tuple[float, ...]  # each stream's, in the order of the streams given


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
) -> list[list[Standing]]:
    """Run ``plan``'s rounds: each keeps its best ``plan[r + 1].candidates`` for the next.

    Not adapting runs beside every round, at the round's length, for the rule's floor;
    ``carried`` (the defaults) join the final round, so the rule always weighs them.

    Returns:
        Each round's standings, best first, not adapting among them.
    """
    alive = list(pool)
    rounds = []
    for number, step in enumerate(plan):
        everyone = (NO_ADAPT_CANDIDATE, *alive)
        if number + 1 == len(plan):
            known = {c.key for c in everyone}
            everyone += tuple(c for c in carried if c.key not in known)
        jobs = [Job((name,), step.length, everyone) for name in streams]
        tell = None
        if progress is not None:
            total = int(sum(j.weight for j in jobs))
            tell = progress(f"round {number + 1}/{len(plan)}: {len(alive)} configurations", total)
        for _ in run_jobs(bench, jobs, journal, workers=workers, progress=tell, notify=notify):
            pass
        standings = [_standing(c, streams, step.length, journal) for c in everyone]
        standings.sort(key=lambda s: -s.mean)  # stable: a tie keeps the registry's order
        rounds.append(standings)
        if number + 1 < len(plan):
            keep = plan[number + 1].candidates
            alive = [s.candidate for s in standings if s.candidate.config is not None][:keep]
    return rounds


def _standing(candidate: Candidate, streams: list[str], length: int, journal: Journal) -> Standing:
    per = tuple(
        float(journal.results[Job((name,), length, (candidate,)).key(candidate)]["accuracy"])
        for name in streams
    )
    return Standing(candidate, length, float(np.mean(per)), per)
