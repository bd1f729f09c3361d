"""``realm fit``'s schedule and choice: successive halving sized to the budget, the stated rule."""

from __future__ import annotations

import itertools

import pytest

from realm_tools.fit import (
    FINALISTS,
    MIN_LENGTH,
    NO_ADAPT_CANDIDATE,
    FitInputError,
    FitRule,
    Measured,
    Round,
    candidates,
    choose,
    halving,
    schedule_cost,
    shortened,
)

COST = dict(streams=30, seconds_per_sample=0.01, workers=2)


def test_halving_keeps_a_third_on_streams_three_times_as_long_within_the_budget() -> None:
    plan = halving(35, max_length=6000, budget_s=600, **COST)
    assert plan is not None
    assert [r.candidates for r in plan] == [35, 12, 4, 3]
    assert all(b.length == min(6000, a.length * 3) for a, b in itertools.pairwise(plan))
    spent = schedule_cost(plan, **COST)
    assert spent <= 600
    longer = [Round(r.candidates, min(6000, r.length + 1)) for r in plan]
    assert schedule_cost(longer, **COST) > 600  # the first length is the largest that fits


def test_a_stream_too_short_or_a_budget_too_small_gives_no_schedule() -> None:
    assert halving(5, max_length=MIN_LENGTH - 1, budget_s=1e9, **COST) is None
    least = schedule_cost([Round(5, MIN_LENGTH), Round(FINALISTS, MIN_LENGTH * 3)], **COST)
    assert halving(5, max_length=5000, budget_s=least * 0.99, **COST) is None
    assert halving(5, max_length=5000, budget_s=least, **COST) is not None


def test_lengths_stop_at_what_a_stream_holds() -> None:
    plan = halving(35, max_length=100, budget_s=1e9, **COST)
    assert plan[-1].length == 100 and plan[-1].candidates == FINALISTS


def test_rounds_behind_the_plan_are_cut_together_to_fit_and_never_below_the_last_run() -> None:
    plan = halving(35, max_length=6000, budget_s=600, **COST)
    rest = plan[1:]
    assert shortened(rest, floor=plan[0].length, budget_s=600, **COST) == rest  # fits: kept
    cut = shortened(rest, floor=plan[0].length, budget_s=60, **COST)
    assert schedule_cost(cut, **COST) <= 60 < schedule_cost(rest, **COST)
    assert all(
        c.candidates == r.candidates and c.length < r.length for c, r in zip(cut, rest, strict=True)
    )
    assert all(c.length >= plan[0].length for c in cut)
    nothing = shortened(rest, floor=plan[0].length, budget_s=-1, **COST)
    assert [r.length for r in nothing] == [plan[0].length] * len(rest)


@pytest.fixture(scope="module")
def three():
    return candidates("cifar", 10, bound=0.01, batch_norm=False, adapt_stages=None, tiers=1)[:3]


def test_the_best_eligible_mean_wins(three) -> None:
    a, b, c = three
    finalists = [
        Measured(a, mean=80.0, clean_after=89.5, worst=88.5),
        Measured(b, mean=82.0, clean_after=88.0, worst=89.0),  # forgets too much
        Measured(c, mean=79.0, clean_after=90.0, worst=89.0),
    ]
    choice = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert choice.candidate is a and choice.adapts
    why = {v.measured.candidate.label: v.why_not for v in choice.verdicts}
    assert why[a.label] is None and why[c.label] is None
    assert "clean after the long stream 88.00, below the source's 90.00 − 1" in why[b.label]


def test_not_adapting_is_chosen_where_nothing_beats_it_safely(three) -> None:
    a, b, c = three
    finalists = [
        Measured(a, mean=74.0, clean_after=90.0, worst=89.0),  # below not adapting
        Measured(b, mean=80.0, clean_after=90.0, worst=87.0),  # worst case too low
    ]
    choice = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert choice.candidate is NO_ADAPT_CANDIDATE and not choice.adapts
    reasons = [v.why_not for v in choice.verdicts]
    assert "below not adapting's 75.00" in reasons[0]
    assert "worst case 87.00, below the source's 90.00 − 2" in reasons[1]
    margin = choose(
        [Measured(c, mean=75.5, clean_after=90.0, worst=89.0)],
        no_adapt=75.0,
        source_clean=90.0,
        rule=FitRule(no_adapt_margin=1.0),
    )
    assert not margin.adapts  # half a point above not adapting is not the point asked for


def _tiers() -> dict[tuple[str, int], object]:
    pool = candidates("cifar", 10, bound=0.01, batch_norm=False, adapt_stages=None, tiers=2)
    return {(c.method, c.tier): c for c in pool}


def test_a_lead_within_the_streams_noise_goes_to_the_simpler_configuration() -> None:
    pool = _tiers()
    tuned, paper = pool[("eta", 1)], pool[("realm", 0)]
    noisy = (80.0, 84.0, 78.0, 86.0, 79.0, 83.0)  # the gap swings by ±4 points stream to stream
    gap = (1.0, -1.0, 1.5, -0.5, 0.5, 0.1)
    finalists = [
        Measured(tuned, mean=81.85, clean_after=90.0, worst=89.0, per_stream=noisy),
        Measured(
            paper,
            mean=81.6,
            clean_after=90.0,
            worst=89.0,
            per_stream=tuple(a - b for a, b in zip(noisy, gap, strict=True)),
        ),
    ]
    choice = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert choice.candidate is paper
    assert "a tie" in choice.reason and tuned.label in choice.reason
    strict = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule(tie_z=0.0))
    assert strict.candidate is tuned  # no allowance for noise: the highest mean


def test_a_lead_the_streams_agree_on_is_kept() -> None:
    pool = _tiers()
    tuned, paper = pool[("eta", 1)], pool[("realm", 0)]
    base = (80.0, 84.0, 78.0, 86.0, 79.0, 83.0)
    finalists = [
        Measured(tuned, 81.85, 90.0, 89.0, per_stream=tuple(a + 0.5 for a in base)),
        Measured(paper, 81.35, 90.0, 89.0, per_stream=base),  # 0.5 behind on every stream
    ]
    choice = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert choice.candidate is tuned
    assert choice.reason.startswith("the highest mean")


def test_a_tie_never_reaches_an_ineligible_configuration() -> None:
    pool = _tiers()
    tuned, paper = pool[("eta", 1)], pool[("realm", 0)]
    same = (80.0, 84.0, 78.0)
    finalists = [
        Measured(tuned, 80.67, 90.0, 89.0, per_stream=same),
        Measured(paper, 80.67, 88.0, 89.0, per_stream=same),  # forgets: not eligible
    ]
    choice = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert choice.candidate is tuned


def test_the_rule_refuses_a_negative_noise_allowance() -> None:
    with pytest.raises(FitInputError, match="tie_z"):
        FitRule(tie_z=-1.0)


def test_fit_md_says_what_the_rule_gave_up_where_the_defaults_did_better() -> None:
    from realm_tools.fit import rule_costs

    report = {
        "proof": {
            "mean": {"REALM guardrails": 77.7, "defaults (REALM, preset)": 79.3},
            "spread": {"REALM guardrails": 0.4, "defaults (REALM, preset)": 0.5},
        },
        "defaults": {"label": "defaults (REALM, preset)", "max_drift": 0.02, "worst": 85.1},
        "choice": {"label": "REALM guardrails", "adapts": True},
        "source_clean": 90.4,
        "rule": {"worst_drop": 2.0},
    }
    text = " ".join(rule_costs(report))
    assert "The defaults did 1.60 points better" in text
    assert "max_drift 0.02) loses 5.30 points" in text and "--worst-drop 5.3" in text
    report["proof"]["mean"]["defaults (REALM, preset)"] = 78.0  # within the spread: silent
    assert rule_costs(report) == []


def test_fit_md_names_the_floor_that_kept_the_defaults_out_when_they_were_weighed() -> None:
    from realm_tools.fit import rule_costs

    defaults = "defaults (REALM, preset)"

    def finalist(label: str, mean: float, clean_after: float, worst: float | None, why):
        return {"label": label, "mean": mean, "clean_after": clean_after, "worst": worst,
                "why_not": why}  # fmt: skip

    report = {
        "proof": {
            "mean": {"REALM guardrails": 77.7, defaults: 79.3},
            "spread": {"REALM guardrails": 0.4, defaults: 0.5},
        },
        "defaults": {"label": defaults, "max_drift": 0.02, "worst": 85.1},
        "choice": {"label": "REALM guardrails", "adapts": True},
        "source_clean": 90.4,
        "rule": {"worst_drop": 2.0, "clean_drop": 1.0},
        "finalists": [
            finalist("REALM guardrails", 80.0, 90.1, 89.0, None),
            finalist(defaults, 81.0, 87.9, 85.1, "clean after the long stream 87.90, below …"),
        ],
    }
    text = " ".join(rule_costs(report))
    assert "the rule kept them out: clean after the long stream 87.90" in text
    assert "`--clean-drop 2.5` and `--worst-drop 5.3`" in text
    report["finalists"][1] = finalist(defaults, 79.0, 90.2, 89.5, None)  # eligible, lower
    text = " ".join(rule_costs(report))
    assert "their mean was 79.00, against the choice's 80.00" in text and "--" not in text


def test_an_unknown_worst_case_excludes_only_under_a_floor_it_could_break(three) -> None:
    a, b, _ = three
    finalists = [
        Measured(a, mean=80.0, clean_after=89.5, worst=88.5),
        Measured(b, mean=82.0, clean_after=89.8, worst=None),  # its bound was not searched
    ]
    kept = choose(finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule())
    assert kept.candidate is a
    assert (
        "worst case is not known"
        in {v.measured.candidate.label: v.why_not for v in kept.verdicts}[b.label]
    )
    lifted = choose(
        finalists, no_adapt=75.0, source_clean=90.0, rule=FitRule(worst_drop=99, clean_drop=99)
    )
    assert lifted.candidate is b  # source − 99 < 0: no worst case can break that floor
