"""What one parity case found, as a dataclass, a Markdown table and JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ._cases import ARBITER, CASES
from ._judge import (
    OVERFLOW_INPUT,
    QUANTITIES,
    TIE_MARGIN,
    TOLERANCES,
)

# The watch figures are float64 EMAs of float32 logits and parameters: the sides' logits
# differ by ≤ 1e-5 (TOLERANCES), so do entropies and drifts, to a few 1e-6.
WATCH_TOLERANCE = 1e-5


@dataclass
class ParityReport:
    """The outcome of one case: worst differences over the run and what was exercised."""

    case: str
    model: str
    preset: str
    method: str
    steps: int
    batch: int
    device: str  # the runtime's execution provider
    backend: str = "ort-training"  # the runtime backend compared with the SDK
    reference_device: str = "cpu"  # the torch device the SDK ran on
    not_applicable: str = ""  # why this backend cannot run the case (then nothing ran)
    overrides: list[str] = field(default_factory=list)  # settings given to the runtime, not baked
    max_abs: dict[str, float] = field(default_factory=dict)  # quantity -> worst over the run
    decision_mismatches: int = 0  # steps whose S_div/update decision differed
    counter_mismatches: int = 0  # steps after which some counter differed
    updates: int = 0  # optimizer steps (runtime side)
    skipped_diversity: int = 0  # samples S_div refused
    skipped_entropy: int = 0  # samples EATA's threshold refused
    skipped_nonfinite: int = 0  # samples the non-finite guard refused
    near_ties: int = 0  # steps with a decision within TIE_MARGIN of its threshold
    near_ties_resynced: int = 0  # near-ties decided differently: runtime given the SDK state
    # Steps that parted the parameters beyond tolerance and agreed when the runtime took them
    # again from the SDK's state before them: a kink (a ReLU's input at 0) decided by rounding.
    step_ties: int = 0
    kinks: list[str] = field(default_factory=list)  # "step N: <gate>" of ties by the kernels
    min_margin: float = math.inf  # smallest |score − threshold| among compared decisions
    cos_error: float = 0.0  # largest |cos(p, m)| difference between the sides
    first_mismatch: int | None = None  # the first step whose decision differed (0-based)
    overflow_resynced: int = 0  # steps on a ≥ OVERFLOW_INPUT input only one side found non-finite
    interventions: dict[str, int] = field(default_factory=dict)  # guardrail counts (runtime)
    watch_error: float = 0.0  # largest watch-figure difference at the end (rate, EMAs, drift)
    alpha_at_bound: bool = False  # α reached α_min or α_max at some step
    lambda_at_bound: bool = False  # λ reached λ_min at some step
    tolerance: dict[str, float] = field(default_factory=lambda: dict(TOLERANCES))
    # Arbitrated cases (ARBITER quantities, measured like max_abs): the worst over the steps
    # of the runtime's distance to the nearer of the float32 and float64 SDKs, the steps the
    # float64 SDK ran (until its first decision of its own), and the float32 SDK's distance
    # from it over those steps.
    arbitrated: dict[str, float] = field(default_factory=dict)
    arbitrated_steps: int = 0
    sdk_float64: dict[str, float] = field(default_factory=dict)

    def within(self, quantity: str) -> bool:
        """Within tolerance of the float32 SDK, or (arbitrated) of the nearer SDK, each step."""
        worst = self.arbitrated.get(quantity, self.max_abs.get(quantity, 0.0))
        return worst <= self.tolerance[quantity]

    @property
    def passed(self) -> bool:
        """Same decisions and counters at every step, every quantity within tolerance."""
        if self.not_applicable:
            return True
        return (
            self.decision_mismatches == 0
            and self.counter_mismatches == 0
            and all(self.within(q) for q in QUANTITIES)
            and self.cos_error * 10 <= TIE_MARGIN
            and self.watch_error <= WATCH_TOLERANCE
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return asdict(self) | {"passed": self.passed}


def format_reports(reports: Sequence[ParityReport]) -> str:
    """A Markdown table: case × quantity → max abs difference, counts, pass/fail."""
    head = [
        "case",
        "backend",
        "steps×B",
        *QUANTITIES,
        "decisions",
        "updates",
        "S_div skips",
        "non-finite skips",
        "α/λ at bound",
        "near-ties (resynced)",
        "overflow resynced",
        "min margin",
        "cos error",
        "pass",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        if r.not_applicable:
            lines.append(f"| {r.case} | {r.backend} | n/a: {r.not_applicable} |")
            continue
        side = (
            r.backend
            if r.reference_device == "cpu"
            else f"{r.backend} vs torch {r.reference_device}"
        )
        cells = [r.case, side, f"{r.steps}×{r.batch}"]
        cells += [f"{r.max_abs.get(q, 0.0):.1e}" for q in QUANTITIES]
        cells += [
            "same"
            if r.decision_mismatches == 0
            else f"{r.decision_mismatches} differ, first at step {r.first_mismatch}",
            str(r.updates),
            str(r.skipped_diversity),
            str(r.skipped_nonfinite),
            f"{'α' if r.alpha_at_bound else '-'}/{'λ' if r.lambda_at_bound else '-'}",
            f"{r.near_ties} ({r.near_ties_resynced})"
            + (f"; {r.step_ties} in the step" if r.step_ties else ""),
            str(r.overflow_resynced),
            f"{r.min_margin:.1e}" if math.isfinite(r.min_margin) else "-",
            f"{r.cos_error:.1e}",
            "yes" if r.passed else "**NO**",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    tol = ", ".join(f"{q} ≤ {t:.0e}" for q, t in TOLERANCES.items())
    lines.append("")
    lines.append(
        f"Tolerances (max abs difference over the run; momentum relative to the run's largest "
        f"buffer entry, λ to max(1, λ)): {tol}. Decisions within {TIE_MARGIN:.0e} of their "
        "threshold are near-ties (module docstring of realm_tools.parity); the largest |cos| "
        "difference between the sides must stay below a tenth of that margin."
    )
    for r in reports:
        if r.arbitrated:
            figures = ", ".join(
                f"{q} {r.arbitrated[q]:.1e} (float32 SDK from float64: {r.sdk_float64[q]:.1e})"
                for q in ARBITER
            )
            lines.append(
                f"- {r.case} on {r.backend}, arbitrated by a float64 SDK over its first "
                f"{r.arbitrated_steps} of {r.steps} steps: the runtime's distance to the nearer "
                f"SDK, step by step, {figures}; this, not the float32 SDK's alone, is held to "
                "the tolerance."
            )
        if r.kinks:
            lines.append(
                f"- {r.case} on {r.backend}: steps the kernels decided at a ReLU's kink (the "
                "runtime took the SDK's step with that one gate flipped): " + "; ".join(r.kinks)
            )
    reasons = {c.name: c for c in CASES if c.why}
    for name in dict.fromkeys(r.case for r in reports):  # once per case, not per backend
        case = reasons.get(name)
        if case is not None:
            extra = f" Tolerance: {case.tolerance}." if case.tolerance else ""
            lines.append(f"- {name}: {case.overrides} — {case.why}.{extra}")
    return "\n".join(lines)


def reports_to_json(reports: Sequence[ParityReport]) -> str:
    """Every report's figures as JSON, with the tolerances."""
    data = {"tolerances": TOLERANCES, "tie_margin": TIE_MARGIN, "overflow_input": OVERFLOW_INPUT}
    cases = [r.to_dict() | {"min_margin": _finite_or_none(r.min_margin)} for r in reports]
    return json.dumps(data | {"cases": cases}, indent=2)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
