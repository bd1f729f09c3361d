"""The choice: the stated rule (:class:`FitRule`) applied to what the search measured."""

from __future__ import annotations

from dataclasses import dataclass

from ._candidates import NO_ADAPT_CANDIDATE, Candidate
from ._options import FitRule


@dataclass(frozen=True)
class Measured:
    """A finalist's figures, in percent: what the rule reads."""

    candidate: Candidate
    mean: float  # mean online accuracy over the shifted streams
    clean_after: float  # clean accuracy after the long stream
    worst: float  # the worst case found inside its drift bound (clean accuracy)


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
        elif m.worst < source_clean - rule.worst_drop:
            why = (
                f"worst case {m.worst:.2f}, below the source's {source_clean:.2f} − "
                f"{rule.worst_drop:g}"
            )
        verdicts.append(Verdict(m, why))
    eligible = [v.measured for v in verdicts if v.why_not is None]
    best = max(eligible, key=lambda m: m.mean, default=None)  # the first listed wins a tie
    chosen = NO_ADAPT_CANDIDATE if best is None else best.candidate
    return Choice(candidate=chosen, verdicts=tuple(verdicts))
