"""The parity suite — RealmRuntime (both backends) vs. RealmAdapter (torch).

Fast tier: ``pytest -m parity`` (in ``make test``); slow tier: ``pytest -m "parity and slow"``.
The cases, streams and tolerances live in ``realm_tools``' parity module (one place, with reasons).
Every case runs on the ``onnx`` backend (portable step graph, torch-derived gradients, the
update in the graph) and on ``ort-training`` (ORT's own gradient builder, numpy SGD).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import has_cuda, needs_fashion_mnist

from realm_runtime.methods import method_named
from realm_tools.parity import (
    CASES,
    OVERFLOW_INPUT,
    TIE_MARGIN,
    TOLERANCES,
    ExportCache,
    ParityCase,
    ParityReport,
    format_reports,
    judge_step,
    run_case,
)

FAST = [c for c in CASES if not c.slow]
SLOW = [c for c in CASES if c.slow]


def _check(case: ParityCase, reports, backends=None) -> None:
    backends = case.backends if backends is None else backends
    print(format_reports(reports))
    assert [r.backend for r in reports] == list(backends)
    for report in reports:
        if report.not_applicable:  # batches on the batch-1 graph; SAR, DeYO on legacy ones
            batch = report.backend in ("onnx", "onnx-steps") and case.batch > 1
            legacy = method_named(case.method).legacy_training
            assert batch or (report.backend == "ort-training" and legacy), report.not_applicable
            continue
        _check_one(case, report)


def _check_one(case: ParityCase, report) -> None:
    assert report.passed, format_reports([report])
    assert report.updates > 0, "nothing was compared"
    # Every compared decision lay clear of its threshold, by more than 10× the float error
    # measured between the sides; near-ties are few and were resolved by the SDK's branch.
    assert report.min_margin >= TIE_MARGIN
    assert report.cos_error * 10 <= TIE_MARGIN
    assert report.near_ties_resynced <= max(1, case.steps // 10)
    # A kink within rounding is rare. A step redone alike from the reference's own state
    # (no kink) parts states only where the float32 reference itself strays beyond
    # tolerance from float64 (an arbitrated case's measured figure): then one in ten.
    kinked = len({k.split(":")[0] for k in report.kinks})
    assert kinked <= max(1, case.steps // 50)
    strays = any(report.sdk_float64.get(q, 0.0) > TOLERANCES[q] for q in report.sdk_float64)
    assert report.step_ties - kinked <= max(1, case.steps // (10 if strays else 50))
    # Only the stream's 3e38 samples (every 13th step) may overflow on one side alone.
    assert report.overflow_resynced <= case.steps // 13
    rules = method_named(case.method)
    if rules.diversity:  # both S_div branches ran
        assert report.skipped_diversity > 0
    if rules.entropy_cut:  # and the entropy cut (or the step's own) refused some
        assert report.skipped_entropy > 0
    # Each guardrail and SAR's recovery that the case sets up acted, alike on both sides.
    if "guardrails" in case.name:
        assert report.interventions["drift_clips"] > 0
        assert report.interventions["resets_collapse"] > 0
    if "recovery" in case.name:
        assert report.interventions["resets_recovery"] > 0
    if case.steps > 13:  # the stream's overflowing inputs reached the guard on both sides
        assert report.skipped_nonfinite > 0
    if "bounds" in case.name:
        assert report.alpha_at_bound
    if case.name == "digits-imagenet-bounds":
        assert report.lambda_at_bound
    if case.arbiter:  # the float64 SDK judged most of the stream, both float32 sides on it
        assert set(report.arbitrated) == set(report.sdk_float64) == {"params", "momentum"}
        assert report.arbitrated_steps >= case.steps // 2


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """One export per model and baked configuration for the module's cases (the rest of a
    case's configuration reaches the runtime as overrides)."""
    return ExportCache(tmp_path_factory.mktemp("parity-exports"))


@pytest.mark.parity
@pytest.mark.parametrize("case", FAST, ids=[c.name for c in FAST])
def test_parity_fast(case, tmp_path, exports):
    needs_fashion_mnist(case.model)
    _check(case, run_case(case, work_dir=tmp_path, exports=exports))


@pytest.mark.parity
@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=[c.name for c in SLOW])
def test_parity_slow(case, tmp_path, exports):
    needs_fashion_mnist(case.model)
    _check(case, run_case(case, work_dir=tmp_path, exports=exports))


@pytest.mark.parity
@pytest.mark.cuda
@pytest.mark.skipif(
    not has_cuda(), reason="needs onnxruntime-gpu (CUDAExecutionProvider) and an NVIDIA GPU"
)
@pytest.mark.parametrize("case", FAST[:3], ids=[c.name for c in FAST[:3]])
def test_parity_cuda(case, tmp_path):
    sides = ["onnx", "onnx-steps"]
    reports = run_case(case, device="cuda", threads=None, work_dir=tmp_path, backends=sides)
    _check(case, reports, backends=sides)


def _step(reason: str, selected: bool) -> SimpleNamespace:
    return SimpleNamespace(
        reason=reason, selected=np.array([selected]), updated=reason == "updated"
    )


@pytest.mark.parametrize(
    ("runtime", "sdk", "margin", "input_max", "verdict"),
    [
        (("updated", True), ("updated", True), 1.0, 1.0, "same"),
        (("updated", True), ("diversity", False), 1.0, 1.0, "mismatch"),
        (("updated", True), ("diversity", False), TIE_MARGIN / 2, 1.0, "near-tie"),
        # Both sides refused the step as non-finite: their selections are not compared.
        (("nonfinite", True), ("nonfinite", False), 1.0, OVERFLOW_INPUT, "same"),
        # One side overflowed on an extreme input (ORT ≥ 1.20's LayerNorm: finite 0, torch NaN).
        (("updated", True), ("nonfinite", False), 1.0, 3e38, "overflow"),
        (("diversity", False), ("nonfinite", False), 1.0, 3e38, "overflow"),
        # The same difference on an ordinary input is a mismatch.
        (("updated", True), ("nonfinite", False), 1.0, 10.0, "mismatch"),
        # Same decision, different reason (a skip for S_div vs. a non-finite skip): counters differ.
        (("diversity", False), ("nonfinite", False), 1.0, 10.0, "mismatch"),
    ],
)
def test_judge_step(runtime, sdk, margin, input_max, verdict):
    assert judge_step(_step(*runtime), _step(*sdk), margin, input_max) == verdict


def _report(momentum: float, arbitrated: dict[str, float]) -> ParityReport:
    report = ParityReport("c", "m", "cifar", "realm", 10, 1, "cpu", "onnx", arbitrated=arbitrated)
    report.max_abs = dict.fromkeys(TOLERANCES, 0.0) | {"momentum": momentum}
    return report


@pytest.mark.parametrize(
    ("momentum", "arbitrated", "passed"),
    [
        (0.5 * TOLERANCES["momentum"], {}, True),
        (10 * TOLERANCES["momentum"], {}, False),  # no arbiter: the float32 SDK decides
        # The runtime within tolerance of the nearer SDK (float64) at every step.
        (
            10 * TOLERANCES["momentum"],
            {"params": 0.0, "momentum": 0.1 * TOLERANCES["momentum"]},
            True,
        ),
        # On some step the runtime lay outside tolerance of both SDKs: a failure.
        (
            10 * TOLERANCES["momentum"],
            {"params": 0.0, "momentum": 2 * TOLERANCES["momentum"]},
            False,
        ),
    ],
)
def test_a_float64_run_arbitrates_between_float32_sides(momentum, arbitrated, passed):
    assert _report(momentum, arbitrated).passed is passed


def test_parity_cli_writes_the_table(tmp_path, capsys):
    from realm_tools.cli import main

    out = tmp_path / "parity"
    code = main(
        ["parity", "--cases", "digits-cifar-realm-batch4", "--out", str(out), "--no-progress"]
    )
    assert code == 0
    md = (tmp_path / "parity.md").read_text()
    assert "| digits-cifar-realm-batch4 | ort-training |" in md and "| yes |" in md
    assert "| digits-cifar-realm-batch4 | onnx | n/a: batch 4" in md
    assert '"passed": true' in (tmp_path / "parity.json").read_text()
    assert main(["parity", "--cases", "nope"]) == 2


def test_a_step_tie_is_told_from_a_disagreement(digits_model, digits_artifacts, digits, tmp_path):
    """From the SDK's own state the runtime agrees (a tie), or it does not (a disagreement)."""
    import copy

    from realm_runtime import RealmRuntime
    from realm_runtime.contract import PARAMS_NAME, read_state, write_state
    from realm_sdk import RealmAdapter
    from realm_tools.parity import step_tie

    directory, config = digits_artifacts
    x = np.ascontiguousarray(digits.stream("gaussian_noise", 5, seed=0)[0][:1])
    before, apart = tmp_path / "before.npz", tmp_path / "apart.npz"
    for lr, tie in ((config.lr, True), (2 * config.lr, False)):
        adapter = RealmAdapter(copy.deepcopy(digits_model), config)
        adapter.save(before)
        arrays, header = read_state(before)
        arrays[PARAMS_NAME] = arrays[PARAMS_NAME] + np.float32(1e-3)  # states 1e-3 apart
        write_state(apart, arrays, header)
        rt = RealmRuntime(directory, threads=1, backend="onnx-steps", overrides={"lr": lr})
        rt.restore(apart)
        sdk = adapter.adapt(torch.from_numpy(x))
        assert rt.adapt(x).updated and sdk.updated
        assert step_tie(rt, adapter, sdk, x, before) is tie, f"lr {lr}"


def test_a_step_that_changed_nothing_is_no_step_tie(
    digits_model, digits_artifacts, digits, tmp_path
):
    """Sides apart before a skipped step stay apart: the redo from the SDK's state (a no-op
    that lands on it) must not count as a tie that explains them."""
    import copy

    from realm_runtime import RealmRuntime
    from realm_runtime.contract import PARAMS_NAME, read_state, write_state
    from realm_sdk import RealmAdapter
    from realm_tools.parity import step_tie, tolerance_ratio

    directory, config = digits_artifacts
    x = np.ascontiguousarray(digits.stream("gaussian_noise", 5, seed=0)[0][:1])
    before, apart = tmp_path / "before.npz", tmp_path / "apart.npz"
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    adapter.adapt(torch.from_numpy(x))  # the EMA is now this sample's prediction
    adapter.save(before)
    arrays, header = read_state(before)
    arrays[PARAMS_NAME] = arrays[PARAMS_NAME] + np.float32(1e-3)
    write_state(apart, arrays, header)
    rt = RealmRuntime(directory, threads=1, backend="onnx-steps")
    rt.restore(apart)
    sdk = adapter.adapt(torch.from_numpy(x))  # the same sample again: S_div refuses it
    assert not rt.adapt(x).updated and not sdk.updated and sdk.reason == "diversity"
    gap = tolerance_ratio(rt, adapter)
    assert gap > 50
    assert step_tie(rt, adapter, sdk, x, before) is False
    assert tolerance_ratio(rt, adapter) == gap  # left on its own state, not resynced


def test_momentum_is_judged_against_the_runs_scale():
    """A step's momentum gap is relative to the run's largest entry so far, as the report's."""
    from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME
    from realm_tools.parity import TOLERANCES, tolerance_ratio, within_tolerance

    theirs = {PARAMS_NAME: np.zeros(4, np.float32), VELOCITY_NAME: np.full(4, 0.01, np.float32)}
    gap = 3 * TOLERANCES["momentum"] * 0.01  # 3 tolerances of this young buffer's largest entry
    mine = {PARAMS_NAME: theirs[PARAMS_NAME], VELOCITY_NAME: theirs[VELOCITY_NAME] + gap}
    assert tolerance_ratio(mine, theirs) == pytest.approx(3.0, rel=1e-3)
    assert not within_tolerance(mine, theirs)
    assert tolerance_ratio(mine, theirs, momentum_scale=0.1) == pytest.approx(0.3, rel=1e-3)
    assert within_tolerance(mine, theirs, momentum_scale=0.1)
    assert not within_tolerance(mine, theirs, momentum_scale=0.001)  # never below its own


class _GateOpenAtZero(torch.autograd.Function):
    """ReLU whose gradient passes at an input of exactly 0 (torch's does not): another kernel."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= 0)


class _OpenRelu(torch.nn.Module):
    def forward(self, x):
        return _GateOpenAtZero.apply(x)


class _ShiftedHardswish(torch.nn.Module):
    """Hardswish whose input is rounded up past its kink at -3 by 1e-6: another kernel."""

    def forward(self, x):
        nudged = torch.where((x + 3).abs() < 1e-6, torch.full_like(x, -3 + 1e-6), x)
        return torch.nn.functional.hardswish(x + (nudged - x).detach())


def _kink_case(act, other, x, tmp_path, eps=1e-5):
    """The SDK's step and another kernel's on a LayerNorm → ``act`` → Linear net, from one state."""
    import copy

    from realm_runtime import Guardrails, RealmConfig
    from realm_sdk import RealmAdapter

    def net(a):
        torch.manual_seed(0)
        width = x.shape[1]
        return torch.nn.Sequential(torch.nn.LayerNorm(width, eps=eps), a, torch.nn.Linear(width, 3))

    source = net(act)
    config = RealmConfig.preset("cifar", num_classes=3, guardrails=Guardrails.off())
    before = tmp_path / "before.npz"
    sdk = RealmAdapter(copy.deepcopy(source), config)
    sdk.save(before)
    assert sdk.adapt(torch.from_numpy(x)).updated
    kernel = RealmAdapter(net(other), config)
    kernel.adapt(torch.from_numpy(x))
    return source, config, before, sdk, kernel


def test_a_kink_the_kernels_decide_is_named_and_nothing_else_is(tmp_path):
    """A LayerNorm output of exactly 0 meets a ReLU: a side whose kernel opens the gate there
    takes the SDK's step with that one gate flipped, and kink_split names it; a side that
    differs otherwise (twice the lr) is explained by no gate."""
    from realm_sdk import RealmAdapter
    from realm_tools.parity import kink_split

    x = np.array([[0.0, 1.0, 2.0, 5.0]], np.float32)  # its mean is its third value: LN gives 0
    for inplace in (False, True):  # an in-place ReLU overwrites the input the gate is read from
        relu = torch.nn.ReLU(inplace=inplace)
        source, config, before, sdk, kernel = _kink_case(relu, _OpenRelu(), x, tmp_path)
        grads = [a.momentum_buffers()["0.bias"] for a in (sdk, kernel)]
        assert float((grads[0] - grads[1]).abs().max()) > 1e-3  # the sides' steps part
        named = kink_split(source, config, before, x, kernel, sdk)
        assert named == "1 call 0 position 2: input 0.0e+00", inplace
        faster = RealmAdapter(_copy(source), config.with_overrides(lr=2 * config.lr))
        faster.adapt(torch.from_numpy(x))
        assert kink_split(source, config, before, x, faster, sdk) is None


def test_several_kinks_one_kernel_decides_at_once_are_named_together(tmp_path):
    """Two LayerNorm outputs of exactly 0 meet a ReLU whose kernel opens both gates: no one
    flip explains that step, the two together do, and kink_split names both."""
    x = np.array([[0.0, 2.0, 2.0, 4.0, 7.0, -3.0]], np.float32)  # mean 2: zeros at 1 and 2
    source, config, before, sdk, kernel = _kink_case(torch.nn.ReLU(), _OpenRelu(), x, tmp_path)
    from realm_tools.parity import flipped_step, kink_split, step_gates, within_tolerance

    gates = step_gates(source, config, before, x)
    assert [g.position for g in gates[:2]] == [1, 2]
    for gate in gates[:2]:  # either flip alone leaves the kernel's step apart
        one = flipped_step(source, config, before, x, ((gate, gate.slopes[0]),))
        assert not within_tolerance(kernel, one)
    named = kink_split(source, config, before, x, kernel, sdk)
    assert named == "1 call 0 position 1: input 0.0e+00; 1 call 0 position 2: input 0.0e+00"


def test_a_kink_away_from_zero_is_named_too(tmp_path):
    """Hardswish's kink at -3: one kernel rounds an input of -3 - 2e-7 to the other side."""
    from realm_tools.parity import kink_split, near_gates

    # Without eps, LayerNorm gives one 0 among nine ones exactly -3, a hair below it in float32.
    x = np.array([[0.0] + [1.0] * 9], np.float32)
    source, config, before, sdk, kernel = _kink_case(
        torch.nn.Hardswish(), _ShiftedHardswish(), x, tmp_path, eps=0.0
    )
    gates = near_gates(source[:2], torch.from_numpy(x))
    assert [(g.layer, g.position, g.kink) for g in gates[:1]] == [("1", 0, -3.0)]
    grads = [a.momentum_buffers()["0.bias"] for a in (sdk, kernel)]
    assert float((grads[0] - grads[1]).abs().max()) > 1e-3
    named = kink_split(source, config, before, x, kernel, sdk)
    assert named is not None and named.startswith("1 call 0 position 0: input -3.0e+00 (kink")


class _FunctionalNet(torch.nn.Module):
    """LayerNorm → an activation its forward calls (no module of its own) → Linear."""

    def __init__(self, act, width):
        super().__init__()
        torch.manual_seed(0)
        self.norm, self.act = torch.nn.LayerNorm(width), act
        self.head = torch.nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.act(self.norm(x)))


def test_a_kink_a_forward_calls_as_a_function_is_named_too(tmp_path):
    """``F.relu``, an in-place ``x.relu_()`` and clamps in a forward: a kernel that opens the
    gate at 0 takes the step kink_split finds with that call's gate flipped, named by the
    module whose forward made the call (a clamp to a tensor bound: torch halves the slope at
    the kink, so each side is tried)."""
    import copy

    from realm_runtime import Guardrails, RealmConfig
    from realm_sdk import RealmAdapter
    from realm_tools.parity import kink_split

    x = np.array([[0.0, 1.0, 2.0, 5.0]], np.float32)  # LayerNorm gives exactly 0 at position 2
    config = RealmConfig.preset("cifar", num_classes=3, guardrails=Guardrails.off())
    acts = (
        (torch.nn.functional.relu, "relu"),
        (lambda t: t.relu_(), "relu_"),
        (lambda t: t.clamp(min=0.0, max=9.0), "clamp"),
        (lambda t: torch.clamp_min(t, torch.tensor(0.0)), "clamp_min"),
    )
    for act, op in acts:
        source = _FunctionalNet(act, 4)
        before = tmp_path / "before.npz"
        sdk = RealmAdapter(copy.deepcopy(source), config)
        sdk.save(before)
        assert sdk.adapt(torch.from_numpy(x)).updated
        kernel = RealmAdapter(_FunctionalNet(_GateOpenAtZero.apply, 4), config)
        kernel.adapt(torch.from_numpy(x))
        grads = [a.momentum_buffers()["norm.bias"] for a in (sdk, kernel)]
        assert float((grads[0] - grads[1]).abs().max()) > 1e-3  # the sides' steps part
        named = kink_split(source, config, before, x, kernel, sdk)
        assert named == f"model call 0 ({op}) position 2: input 0.0e+00"


def _copy(module):
    import copy

    return copy.deepcopy(module)


def test_a_gate_torch_computes_exactly_is_still_fragile_for_another_kernel():
    """An input torch computes to its last bit (its float32 error 0) lies 2e-9 of its layer's
    largest value from the ReLU's kink: a blocked kernel summing in another order may round
    it across, so the float64 ranking puts it first, before inputs a thousand times farther."""
    import copy

    from realm_tools.parity import near_gates

    class Shift(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            return x + self.bias  # exact: adding zeros

    model = torch.nn.Sequential(Shift(), torch.nn.ReLU())
    x = torch.tensor([[4.0, 1e-8, -3e-6, 2.0]])
    wide = copy.deepcopy(model).double()
    gates = near_gates(model, x, wide)
    assert [g.position for g in gates] == [1, 2]  # 2e-9 and 7.5e-7 of 4: both within rounding
    assert gates[0].value == pytest.approx(1e-8)


class _Place(torch.nn.Module):
    """Puts chosen values at chosen positions of its input, exactly in float32: (x − c) + t."""

    def __init__(self, at, current, targets):
        super().__init__()
        c, t = torch.zeros_like(current), torch.zeros_like(current)
        c[:, at], t[:, at] = current[:, at], targets
        self.register_buffer("c", c)
        self.register_buffer("t", t)

    def forward(self, x):
        return (x - self.c) + self.t


def test_a_gate_buried_under_inputs_no_gradient_reaches_is_found_by_its_pull(tmp_path):
    """Forty ReLU inputs within 1e-9 of the kink feed a head column of zeros: the nearest
    first, they fill every candidate place ahead of the one gate, 2e-6 from the kink, whose
    flip a kernel took. Ranked by how far each flip moves the SDK's step towards the
    kernel's, that gate comes first, and kink_split names it alone."""
    import copy

    from realm_runtime import Guardrails, RealmConfig
    from realm_sdk import RealmAdapter
    from realm_tools.parity import (
        GREEDY_GATES,
        KINK_CANDIDATES,
        flipped_step,
        kink_split,
        step_gates,
    )

    width, buried, relevant = 48, list(range(40)), 44
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, width)).astype(np.float32)
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(width)
    with torch.no_grad():
        current = norm(torch.from_numpy(x))
    at = [*buried, relevant]
    targets = torch.tensor([1e-9 * (k + 1) for k in buried] + [2e-6])
    head = torch.nn.Linear(width, 3)
    with torch.no_grad():
        head.weight[:, buried] = 0.0  # no gradient ever reaches those gates
    source = torch.nn.Sequential(norm, _Place(at, current, targets), torch.nn.ReLU(), head)
    config = RealmConfig.preset("cifar", num_classes=3, guardrails=Guardrails.off())
    before = tmp_path / "before.npz"
    sdk = RealmAdapter(copy.deepcopy(source), config)
    sdk.save(before)
    assert sdk.adapt(torch.from_numpy(x)).updated

    gates = step_gates(source, config, before, x)
    order = [g.position for g in gates]
    assert order.index(relevant) >= max(KINK_CANDIDATES, GREEDY_GATES)  # buried by closeness
    gate = gates[order.index(relevant)]
    kernel = flipped_step(source, config, before, x, ((gate, gate.slopes[0]),))
    named = kink_split(source, config, before, x, kernel, sdk)
    assert named == str(gate)
