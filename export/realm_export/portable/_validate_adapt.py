"""Export validation of the one adapt graph: its trajectory against the PyTorch reference.

The step graph inside it is validated gradient by gradient
(:func:`._validate_step.validate_portable`); what the adapt graph adds is the decision, the
commit and the bookkeeping. So the graph and a
``RealmAdapter`` on the source model take the same short stream, each validation input twice
(the repeat meets S_div, a skipped sample), and every step's reason, logits and parameters are
compared, then the counters.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import (
    ADAPT_INPUT_KEY,
    ADAPT_LOGITS_KEY,
    ADAPT_REASON_KEY,
    ADAPT_REASONS_KEY,
    ADAPT_STATE_KEY,
    ADAPT_UPDATED_KEY,
    COUNTERS,
    COUNTERS_NAME,
    FILE_KEY,
    PARAMS_NAME,
    SETTINGS_NAME,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
    adapt_settings,
)
from realm_sdk import RealmAdapter, RealmConfig, decision_margin

from .._validate import logits_floor, logits_tolerance, quiet_session

# The adapt graph's parameters after k steps, against the reference's: relative to how far the
# reference moved them. The step graph's gradients pass within grad_rtol of torch's, or within
# the reference's own spread at ReLU kinks (up to SPREAD_MAX_SCALE · grad_rtol); a few steps of
# SGD carry that relative error into the update.
UPDATE_RTOL_FACTOR = 10.0
# A decision this close to its threshold may fall either way in float32 (the parity suite's
# TIE_MARGIN): the comparison stops there without failing.
TIE_MARGIN = 1e-4


@dataclass
class AdaptReport:
    """What the adapt graph's validation compared, and how far apart the sides were."""

    steps: int  # steps compared
    logits_max_abs: float = 0.0
    params_max_rel: float = 0.0  # max |θ_graph − θ_ref| / max |θ_ref − θ0|
    reasons: dict[str, int] = field(default_factory=dict)  # the reference's reasons, counted
    mismatch: str | None = None  # the first disagreement, in words
    near_tie: int | None = None  # the step where a near-tie ended the comparison
    logits_tol: float = 0.0
    params_tol: float = 0.0

    @property
    def passed(self) -> bool:
        """Same decisions and counters, logits and parameters within tolerance."""
        return (
            self.mismatch is None
            and self.logits_max_abs <= self.logits_tol
            and self.params_max_rel <= self.params_tol
        )

    def to_dict(self) -> dict[str, Any]:
        """The figures, for the manifest."""
        return {
            "steps": self.steps,
            "logits_max_abs": self.logits_max_abs,
            "params_max_rel": self.params_max_rel,
            "logits_tol": self.logits_tol,
            "params_tol": self.params_tol,
            "reasons": dict(self.reasons),
            "near_tie": self.near_tie,
            "mismatch": self.mismatch,
            "passed": self.passed,
            "summary": self.summary(),
        }

    def summary(self) -> str:
        """One line of figures."""
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items()))
        line = (
            f"{self.steps} steps ({reasons}): logits {self.logits_max_abs:.1e} "
            f"(≤ {self.logits_tol:.1e}), parameters {self.params_max_rel:.1e} of the update "
            f"(≤ {self.params_tol:.1e})"
        )
        if self.near_tie is not None:
            line += f"; stopped at a near-tie at step {self.near_tie}"
        if self.mismatch is not None:
            line += f"; {self.mismatch}"
        return line


def validate_adapt(
    directory: Path,
    section: dict[str, Any],
    model: nn.Module,
    config: RealmConfig,
    inputs: list[np.ndarray],
    *,
    atol: float,
    grad_rtol: float,
    logits_spread: float = 0.0,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> AdaptReport:
    """Run ``adapt_model.onnx`` and ``RealmAdapter`` over ``inputs``, each twice; compare.

    The graph is fed ``config``'s settings (``realm.settings``): where they are the
    export's own, this changes nothing; where they differ, the settings are checked too.

    Args:
        directory: the artifact directory (the graph and its initial state).
        section: the manifest's ``adapt`` section.
        model: the source model (copied, not modified).
        config: the export's configuration.
        inputs: float32 arrays of shape ``(1, *input)``.
        atol: tolerance on logits, plus ``LOGITS_RTOL`` of their scale (``logits_tolerance``).
        grad_rtol: the step graph's relative gradient tolerance.
        logits_spread: torch's own float32 error on this model's logits, where the step
            graph's validation measured it (``ValidationReport.logits_spread``): the logits'
            tolerance is at least :func:`.._validate.logits_floor` of it.
        fisher: λ_F·F as the graph holds it (EATA); the reference adapter steps with it.
    """
    floor = logits_floor(atol, logits_spread)
    session = quiet_session(directory / section[FILE_KEY])
    names = [o.name for o in session.get_outputs()]
    entries = section[ADAPT_STATE_KEY]
    state = {s[STATE_INPUT_KEY]: np.load(directory / s[STATE_INITIAL_KEY]) for s in entries}
    outputs = {s[STATE_INPUT_KEY]: s[STATE_OUTPUT_KEY] for s in entries}
    state[SETTINGS_NAME] = adapt_settings(config)
    adapter = RealmAdapter(copy.deepcopy(model), config, fisher=fisher)  # the graph's own F
    source = state[PARAMS_NAME].copy()
    stream = [x for x in inputs for _ in range(2)]
    report = AdaptReport(steps=0, params_tol=UPDATE_RTOL_FACTOR * grad_rtol)
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before.npz"  # the reference before each step
        for step, x in enumerate(stream):
            feeds = {section[ADAPT_INPUT_KEY]: x, **state}
            out = dict(zip(names, session.run(None, feeds), strict=True))
            reshaped = [n for n, o in outputs.items() if out[o].shape != state[n].shape]
            if reshaped:  # a client feeds each output back: its shape must stay the input's
                n = reshaped[0]
                report.mismatch = (
                    f"step {step}: state {n!r} comes back with shape {out[outputs[n]].shape}, "
                    f"its input has {state[n].shape}"
                )
                break
            for name, output in outputs.items():
                state[name] = out[output]
            adapter.save(before)
            ref = adapter.adapt(torch.from_numpy(x))
            reason = section[ADAPT_REASONS_KEY][int(out[section[ADAPT_REASON_KEY]])]
            if (reason, bool(out[section[ADAPT_UPDATED_KEY]])) != (ref.reason, ref.updated):
                adapter.restore(before)  # the margin of the decisions as the step met them
                if decision_margin(adapter, x)[0] < TIE_MARGIN:
                    report.near_tie = step
                    break
                report.mismatch = (
                    f"step {step}: the graph says {reason!r}, the reference {ref.reason!r}"
                )
                break
            report.steps += 1
            report.reasons[ref.reason] = report.reasons.get(ref.reason, 0) + 1
            want = ref.logits.detach().numpy()
            if np.isfinite(want).all():
                got = out[section[ADAPT_LOGITS_KEY]]
                report.logits_max_abs = max(report.logits_max_abs, float(np.abs(got - want).max()))
                report.logits_tol = max(report.logits_tol, logits_tolerance(atol, want), floor)
            theirs = _flat_params(adapter, config)
            moved = max(float(np.abs(theirs - source).max()), 1e-12)
            error = float(np.abs(state[PARAMS_NAME] - theirs).max()) / moved
            report.params_max_rel = max(report.params_max_rel, error if moved > 1e-12 else 0.0)
    report.logits_tol = report.logits_tol or floor
    if report.mismatch is None and report.near_tie is None:
        counters = dict(zip(COUNTERS, state[COUNTERS_NAME].tolist(), strict=True))
        expected = {c: getattr(adapter.state, c) for c in COUNTERS}
        if counters != expected:
            report.mismatch = f"counters {counters} against the reference's {expected}"
    return report


def _flat_params(adapter: RealmAdapter, config: RealmConfig) -> np.ndarray:
    """The reference's ``realm.params``: its norm tensors in order, then α and λ (REALM)."""
    parts = [t.detach().numpy().reshape(-1) for t in adapter.trainable_parameters().values()]
    if config.rules.learns_alpha_lambda:
        state = adapter.state
        parts.append(np.array([state.alpha, state.lam], np.float32))
    return np.concatenate(parts).astype(np.float32)


def validate_adapt_graphs(
    directory: Path,
    section: dict[str, Any],
    model: nn.Module,
    config: RealmConfig,
    inputs: list[np.ndarray],
    *,
    atol: float,
    grad_rtol: float,
    logits_spread: float = 0.0,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> list[AdaptReport]:
    """:func:`validate_adapt` on the written graph and, with an entropy cut, on it opened.

    An untrained or badly shifted model is unsure of every input, so an entropy cut (EATA's,
    SAR's, DeYO's) refuses them all and the written graph never runs its update. An entropy
    margin above ``ln C`` keeps every sample (and SAR's second cut too), so the update, the
    commit and the recovery are compared as well: the written graph, fed that margin through
    ``realm.settings``.
    """
    checks = {
        "atol": atol,
        "grad_rtol": grad_rtol,
        "logits_spread": logits_spread,
        "fisher": fisher,
    }
    reports = [validate_adapt(directory, section, model, config, inputs, **checks)]
    if config.rules.entropy_cut:  # the same graph, its entropy margin fed above ln C
        opened = dataclasses.replace(config, entropy_margin=math.log(config.num_classes) + 1.0)
        reports.append(validate_adapt(directory, section, model, opened, inputs, **checks))
    return reports
