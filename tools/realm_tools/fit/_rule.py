"""The choice: the stated rule (:class:`FitRule`) applied to what the search measured."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from realm_runtime.methods import REALM

from ._candidates import NO_ADAPT_CANDIDATE, Candidate
from ._options import FitRule


@dataclass(frozen=True)
class Measured:
    """A finalist's figures, in percent: what the rule reads."""

    candidate: Candidate
    mean: float  # mean online accuracy over the shifted streams
    clean_after: float  # clean accuracy after the long stream
    worst: float | None  # the worst case found inside its drift bound (None: not searched)
    per_stream: tuple[float, ...] = ()  # each stream's online accuracy, the streams in one order


@dataclass(frozen=True)
class Verdict:
    """One finalist against the rule: eligible, or the first floor it falls below."""

    measured: Measured
    why_not: str | None  # None: eligible


@dataclass(frozen=True)
class Choice:
    """The configuration chosen (``NO_ADAPT_CANDIDATE``: do not adapt) and every verdict."""

    candidate: Candidate
    verdicts: tuple[Verdict, ...]
    reason: str = ""  # why this one, in a sentence fit.md prints

    @property
    def adapts(self) -> bool:
        """Whether the choice is to adapt at all."""
        return self.candidate.config is not None


def choose(
    finalists: list[Measured], *, no_adapt: float, source_clean: float, rule: FitRule
) -> Choice:
    """Apply ``rule``: the eligible finalist of highest mean, or not adapting.

    Args:
        finalists: what the search measured of its last configurations.
        no_adapt: not adapting's mean online accuracy on the same streams.
        source_clean: the source model's clean accuracy on the same clean images.
        rule: the floors.
    """
    verdicts = []
    for m in finalists:
        why = None
        if m.mean < no_adapt + rule.no_adapt_margin:
            why = f"mean {m.mean:.2f} below not adapting's {no_adapt:.2f}"
        elif m.clean_after < source_clean - rule.clean_drop:
            why = (
                f"clean after the long stream {m.clean_after:.2f}, below the source's "
                f"{source_clean:.2f} − {rule.clean_drop:g}"
            )
        elif m.worst is None and source_clean - rule.worst_drop > 0:  # a floor it may break
            why = "its worst case is not known (no drift bound, or no time left to search it)"
        elif m.worst is not None and m.worst < source_clean - rule.worst_drop:
            why = (
                f"worst case {m.worst:.2f}, below the source's {source_clean:.2f} − "
                f"{rule.worst_drop:g}"
            )
        verdicts.append(Verdict(m, why))
    eligible = [v.measured for v in verdicts if v.why_not is None]
    if not eligible:
        return Choice(NO_ADAPT_CANDIDATE, tuple(verdicts), "no finalist met the rule")
    best = max(eligible, key=lambda m: m.mean)  # the first listed wins an exact tie
    tied = [m for m in eligible if m is best or _within(best, m, rule.tie_z)]
    chosen = min(tied, key=_simplicity)
    if chosen is best:
        reason = f"the highest mean of the eligible finalists, {best.mean:.2f}"
        if len(tied) > 1:
            reason += " (and the simplest of those within noise of it)"
    else:
        reason = (
            f"{best.candidate.label}'s mean {best.mean:.2f} is {best.mean - chosen.mean:.2f} "
            f"points higher, within {rule.tie_z:g} standard errors of the paired per-stream gap "
            f"({_gap_error(best, chosen):.2f}): a tie, and {chosen.candidate.label} is the simpler"
        )
    return Choice(chosen.candidate, tuple(verdicts), reason)


def _simplicity(m: Measured) -> tuple[int, bool, float]:
    """The order ties are broken in: the paper's settings first, REALM first, then the mean."""
    return (m.candidate.tier, m.candidate.method != REALM.name, -m.mean)


def _gap_error(a: Measured, b: Measured) -> float:
    """The standard error of the mean per-stream gap between ``a`` and ``b`` (nan: unpaired)."""
    if len(a.per_stream) != len(b.per_stream) or len(a.per_stream) < 2:
        return float("nan")
    gap = np.asarray(a.per_stream) - np.asarray(b.per_stream)
    return float(gap.std(ddof=1) / np.sqrt(len(gap)))


def _within(best: Measured, other: Measured, z: float) -> bool:
    """Whether ``other``'s mean is within ``z`` standard errors of ``best``'s, paired by stream."""
    error = _gap_error(best, other)
    return bool(np.isfinite(error)) and best.mean - other.mean <= z * error
