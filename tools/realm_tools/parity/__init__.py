"""Parity (SPEC §5): RealmRuntime (ONNX Runtime) against RealmAdapter (torch), step by step.

Each case is exported once and run on each runtime backend: ``onnx``, the one adapt graph
(SPEC §11: decision, step and guardrails in one ONNX model), ``onnx-steps``, the host-step backend
over the portable step graph traced from torch's autograd (SPEC §8), and ``ort-training``,
whose gradients come from ONNX Runtime's own gradient builder (independent of torch).
They get the same source weights, configuration and input stream as the SDK; after every
step the logits, the S_div decisions, every trainable parameter, α, λ, the EMA, the
momentum buffers and the counters are compared.

Near-ties. float32 kernels differ between CPUs (AVX2, AVX-512) and between the two sides
by ~1e-7 relative, so a sample whose |cos(p, m)| (or, for EATA, entropy) lies within that
error of its threshold may go either way. Before each step the harness measures, on the
SDK side, how far every decision lies from its threshold. A decision closer than
:data:`TIE_MARGIN` is a near-tie: if the two sides decide it differently, the runtime is
given the SDK's resulting state (save → restore, both branches being correct) and the
step is counted in ``near_ties_resynced``, not as a mismatch. Every other decision must
agree, and the report carries the smallest margin among them and the largest |cos|
difference measured between the sides, so the rule's margin is checked against the float
error it guards against.

Ties inside the step. An activation whose input lies within rounding of a kink (ReLU's 0,
ReLU6's bounds, Hardswish's ±3) takes the slope of one side of it in one implementation and
of the other side in the other, and one step then parts the sides' parameters by far more
than their inputs differed. Where a step parts them beyond tolerance, the runtime takes it
again from the SDK's state before it; landing within tolerance there, with the same
decisions, makes it a tie of the step. Still apart, the SDK takes the step again with each
gate beside a kink flipped (``kink_split``); the runtime landing on one of those steps makes
it a tie too, named with its gate. Either is counted in ``step_ties``, and the run goes on
from the SDK's state. Cases with the float64 arbiter (``ParityCase.arbiter``, SPEC §5) are
judged by it instead.

Overflow ties. The streams hold samples of 3e38 to exercise the non-finite guard. Such an
input overflows float32 inside any network, but whether the overflow ends in NaN or in a
finite value (x / √inf = 0) depends on each kernel's order of operations: torch's and ONNX
Runtime 1.19.2's LayerNorm give NaN there, ONNX Runtime 1.32's gives 0, so a ConvNeXt adapts
on it on one side and is refused on the other. A step whose input reaches
:data:`OVERFLOW_INPUT` and that one side alone found non-finite is resynced like a near-tie
and counted in ``overflow_resynced``. When both sides found a step non-finite, neither
updates and their S_div selections (computed from NaN or overflowed logits) are not compared.

    >>> from realm_tools.parity import CASES, format_reports, run_case
    >>> print(format_reports(run_case(CASES[0])))
"""

from ._aligned import aligned_gates
from ._cases import BACKENDS, CASES, ParityCase, build_case, make_stream
from ._exports import ExportCache
from ._judge import (
    GREEDY_GATES,
    OVERFLOW_INPUT,
    TIE_MARGIN,
    TOLERANCES,
    judge_step,
    kink_split,
    step_tie,
    tolerance_ratio,
    within_tolerance,
)
from ._kinks import KINK_CANDIDATES, Gate, flipped_step, near_gates, state_arrays, step_gates
from ._report import ParityReport, format_reports, reports_to_json
from ._suite import run_case

__all__ = [
    "BACKENDS",
    "CASES",
    "GREEDY_GATES",
    "KINK_CANDIDATES",
    "OVERFLOW_INPUT",
    "TIE_MARGIN",
    "TOLERANCES",
    "ExportCache",
    "Gate",
    "ParityCase",
    "ParityReport",
    "aligned_gates",
    "build_case",
    "flipped_step",
    "format_reports",
    "judge_step",
    "kink_split",
    "make_stream",
    "near_gates",
    "reports_to_json",
    "run_case",
    "state_arrays",
    "step_gates",
    "step_tie",
    "tolerance_ratio",
    "within_tolerance",
]
