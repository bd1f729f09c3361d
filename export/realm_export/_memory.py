"""The updating peak of an export, measured into its manifest, and fitted to a budget.

The peak is measured, not estimated: a fresh process runs the files just built with
``RealmRuntime``'s defaults, every sample updating
(:func:`realm_runtime.measure.measure_update_peak`).
With a budget, each candidate ``adapt_stages`` (the last K stages' norms adapting, K = 1…N,
then every norm) is exported without validation and measured, from the most stages down by
bisection: the peak grows with K, since each stage adapted keeps its activations for the
backward. The chosen setting is then exported as asked (validated) and measured again.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from torch import nn

from realm_runtime import Manifest
from realm_runtime.contract import ERROR_KEY, FILE_KEY, MANIFEST_NAME
from realm_runtime.measure import measure_update_peak
from realm_sdk import RealmConfig, select_trainable, stage_count

from ._directory import manifest_bytes
from ._errors import MemoryBudgetError, UnsupportedModelError
from ._options import MemoryCheck
from ._plan import Built, Plan, Stages, Traced

log = logging.getLogger(__name__)


def with_memory(plan: Plan, traced: Traced, built: Built) -> Built:
    """``built`` with its manifest's ``memory`` section: the measured updating peak.

    Raises:
        UnsupportedModelError: there is no adapt graph to measure (with why).
    """
    check = plan.options.memory
    assert check is not None  # called only when asked for
    if FILE_KEY not in built.adapt:
        why = built.adapt.get(ERROR_KEY) or built.portable.get(ERROR_KEY) or "it was not built"
        raise UnsupportedModelError(f"no adapt graph to measure the updating peak of: {why}")
    plan.notify("measuring the updating peak")
    manifest = built.directory / MANIFEST_NAME
    manifest.write_bytes(manifest_bytes(plan, traced, built))  # the runtime loads from it
    try:
        figure = measure_update_peak(
            built.directory, python=check.python, threads=check.threads, samples=check.samples
        )
    finally:
        manifest.unlink(missing_ok=True)  # written again, with the figure, by the last stage
    memory = figure.to_dict()
    if check.budget_mb is not None:
        memory["budget_mb"] = check.budget_mb
        memory["adapt_stages"] = plan.config.adapt_stages
        memory["tried"] = list(plan.budget_trials)
        if figure.peak_mb > check.budget_mb:
            log.warning(
                "the exported artifacts peak at %.1f MB, over the budget of %.1f MB that their "
                "trial export fitted: the two processes differed; the manifest has the figure",
                figure.peak_mb,
                check.budget_mb,
            )
    return dataclasses.replace(built, memory=memory)


def fit_budget(model: nn.Module, plan: Plan, export: Callable[[Plan], Manifest]) -> Plan:
    """The plan with ``config.adapt_stages`` set to the most stages whose peak fits.

    Args:
        model: the user's model (its stages are counted).
        plan: the settled plan; ``plan.options.memory.budget_mb`` is set.
        export: runs one export of a plan (a trial's: no validation, into a temporary
            directory) and returns its manifest.

    Returns:
        The plan to export, each trial in its ``budget_trials`` as
        ``{"adapt_stages": K, "peak_mb": MB}``.

    Raises:
        MemoryBudgetError: even the fewest stages tried peak over the budget.
    """
    check = plan.options.memory
    assert check is not None and check.budget_mb is not None  # called only with a budget
    budget = check.budget_mb
    candidates = _candidates(model, plan.config)
    if not candidates:  # every value leaves nothing: the export itself says why
        return plan
    tried: dict[int | None, float] = {}

    def peak(stages: int | None) -> float:
        if stages not in tried:
            tried[stages] = _trial_peak(plan, stages, export)
        return tried[stages]

    if peak(candidates[-1]) <= budget:
        chosen = len(candidates) - 1
    elif len(candidates) == 1 or peak(candidates[0]) > budget:
        raise MemoryBudgetError(_refusal(budget, candidates[0], tried, check))
    else:  # candidates[lo] fits, candidates[hi] does not
        lo, hi = 0, len(candidates) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if peak(candidates[mid]) <= budget else (lo, mid)
        chosen = lo
    config = dataclasses.replace(plan.config, adapt_stages=candidates[chosen])
    options = dataclasses.replace(plan.options, config=config)
    trials = tuple({"adapt_stages": k, "peak_mb": v} for k, v in tried.items())
    return dataclasses.replace(plan, options=options, budget_trials=trials)


def _candidates(model: nn.Module, config: RealmConfig) -> list[int | None]:
    """``adapt_stages`` values in order of growing peak: 1…N, then None (every norm).

    Values that leave nothing to adapt (the last stage frozen by ``freeze_last_block``,
    say) are left out; ``config.adapt_stages``, where given, is the most tried.
    """
    try:
        count = stage_count(model)
    except ValueError as exc:
        log.warning("only every norm adapting is tried against the budget: %s", exc)
        return [None]
    most = config.adapt_stages
    values: list[int | None] = list(range(1, (count if most is None else min(most, count)) + 1))
    if most is None:
        values.append(None)
    return [k for k in values if _adapts_something(model, config, k)]


def _adapts_something(model: nn.Module, config: RealmConfig, stages: int | None) -> bool:
    try:
        select_trainable(
            model, config.frozen, freeze_last_block=config.freeze_last_block, adapt_stages=stages
        )
    except ValueError:
        return False
    return True


def _trial_peak(plan: Plan, stages: int | None, export: Callable[[Plan], Manifest]) -> float:
    """The measured peak of ``plan`` exported with ``adapt_stages=stages``, unvalidated."""
    label = _stages_label(stages)
    config = dataclasses.replace(plan.config, adapt_stages=stages)
    check = plan.options.memory
    assert check is not None
    options = dataclasses.replace(
        plan.options,
        config=config,
        validate=False,
        training=False,
        ort_format=False,
        signing_key=None,
        overwrite=True,
        memory=dataclasses.replace(check, budget_mb=None),
    )
    notify = plan.notify
    with tempfile.TemporaryDirectory(prefix="realm-budget-") as tmp:
        trial = dataclasses.replace(
            plan,
            options=options,
            out_dir=Path(tmp) / "trial",
            training=False,
            signing_key=None,
            notify=Stages(lambda stage: notify(f"budget, trying {label}: {stage}")),
        )
        manifest = export(trial)
    return float(manifest.memory["peak_mb"])


def _refusal(
    budget: float, fewest: int | None, tried: dict[int | None, float], check: MemoryCheck
) -> str:
    """The sentence of :class:`MemoryBudgetError`: the least it found, and what to do."""
    least = tried[fewest]
    what = _stages_label(fewest) if fewest is None else f"only {_stages_label(fewest)}"
    count = check.threads
    threads = f"{count} thread{'s' * (count != 1)}" if count else "ONNX Runtime's default threads"
    return (
        f"no setting fits a memory budget of {budget:g} MB: adapting {what} peaks at "
        f"{least:.1f} MB ({threads}); raise the budget to at least {math.ceil(least)} MB, "
        "or freeze more norm layers with RealmConfig.frozen"
    )


def _stages_label(stages: int | None) -> str:
    if stages is None:
        return "every stage"
    return "the last stage" if stages == 1 else f"the last {stages} stages"
