"""The search's schedule: successive halving sized to the time it is given.

Every configuration runs on every shifted stream for a few samples; the best third go on
to streams three times as long, until a few finalists remain. The first round's length is
the largest that fits the budget, given what one sample costs on this machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ETA = 3  # each round keeps a third, on streams three times as long
FINALISTS = 3  # where the halving stops: the rule then reads these
MIN_LENGTH = 16  # samples per stream below which a round measures noise


@dataclass(frozen=True)
class Round:
    """One round: how many configurations, on how many samples of each stream."""

    candidates: int
    length: int


def halving(
    count: int,
    *,
    streams: int,
    max_length: int,
    seconds_per_sample: float,
    workers: int,
    budget_s: float,
    carried: int = 0,
) -> list[Round] | None:
    """The rounds of the longest first round that fits ``budget_s``; None if none does.

    Args:
        count: configurations at the start.
        streams: shifted streams each configuration runs on per round.
        max_length: samples a stream holds.
        seconds_per_sample: what one adapting sample costs one worker.
        workers: processes measuring at once.
        budget_s: the search's share of the time.
        carried: configurations that join the final round without running the others.
    """

    def rounds(first: int) -> list[Round]:
        return _rounds(count, first, max_length)

    def cost(plan: list[Round]) -> float:
        return schedule_cost(
            plan,
            streams=streams,
            seconds_per_sample=seconds_per_sample,
            workers=workers,
            carried=carried,
        )

    if max_length < MIN_LENGTH or cost(rounds(MIN_LENGTH)) > budget_s:
        return None
    low, high = MIN_LENGTH, max_length
    while low < high:  # the cost grows with the first length: the largest that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if cost(rounds(middle)) <= budget_s else (low, middle - 1)
    return rounds(low)


def shortened(
    rest: list[Round],
    *,
    floor: int,
    streams: int,
    seconds_per_sample: float,
    workers: int,
    budget_s: float,
    carried: int = 0,
) -> list[Round]:
    """The rounds still to run, their lengths cut together until they fit ``budget_s``.

    None falls below ``floor`` (the length the last round ran: its results there are kept,
    so a round at ``floor`` only runs what joins it); where nothing fits, every round is at
    ``floor``. Rounds that already fit come back as they were.

    Args:
        rest: the plan's rounds not run yet.
        floor: samples per stream of the round last run.
        streams: shifted streams each configuration runs on per round.
        seconds_per_sample: what one adapting sample costs one worker, as measured so far.
        workers: processes measuring at once.
        budget_s: seconds left to the search.
        carried: configurations that join the final round.
    """
    last = rest[-1].length

    def at(final: int) -> list[Round]:
        return [Round(r.candidates, max(floor, r.length * final // last)) for r in rest]

    def fits(plan: list[Round]) -> bool:
        cost = schedule_cost(
            plan,
            streams=streams,
            seconds_per_sample=seconds_per_sample,
            workers=workers,
            carried=carried,
        )
        return cost <= budget_s

    if fits(rest):
        return list(rest)
    low, high = floor, last
    while low < high:  # the cost grows with the final length: the largest that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(at(middle)) else (low, middle - 1)
    return at(low)


def _rounds(count: int, first: int, max_length: int) -> list[Round]:
    """Halving from ``count`` configurations on ``first`` samples down to the finalists."""
    sizes = [count]
    while sizes[-1] > FINALISTS:
        sizes.append(max(FINALISTS, math.ceil(sizes[-1] / ETA)))
    return [Round(n, min(max_length, first * ETA**r)) for r, n in enumerate(sizes)]


def least_cost(
    count: int, *, streams: int, max_length: int, seconds_per_sample: float, workers: int
) -> float:
    """Seconds the cheapest schedule :func:`halving` accepts takes: its first round's shortest."""
    plan = _rounds(count, MIN_LENGTH, max_length)
    return schedule_cost(
        plan, streams=streams, seconds_per_sample=seconds_per_sample, workers=workers
    )


def schedule_cost(
    plan: list[Round],
    *,
    streams: int,
    seconds_per_sample: float,
    workers: int,
    carried: int = 0,
) -> float:
    """Seconds a plan takes at ``seconds_per_sample`` on ``workers`` processes.

    ``carried`` configurations run in the final round only.
    """
    samples = (sum(r.candidates * r.length for r in plan) + carried * plan[-1].length) * streams
    return samples * seconds_per_sample / workers
