"""The one adapt graph: a client that knows only the manifest's ``adapt`` section.

The client is the code block of docs/adapt.md, run as written (numpy and onnxruntime only).
It must take RealmRuntime's trajectory, step after step: the same reasons and updates, the
same logits and parameters (α and λ among them), and in the end the same counters and watch
figures, for every method and every guardrail, on selected, skipped, refused (non-finite) and
reset steps.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import (
    NearTie,
    assert_same_state,
    compare_twins,
    export_digits,
    follow,
    has_cuda,
    kink_tie,
    run_in_runtime_venv,
)
from torch import nn

from realm_runtime import COUNTERS, Guardrails, RealmRuntime
from realm_runtime.contract import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    INPUT_NAME,
    PARAMS_NAME,
    SETTINGS_NAME,
    VELOCITY_NAME,
    next_name,
    read_state,
)
from realm_sdk import RealmAdapter, RealmConfig
from realm_tools.parity import TOLERANCES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adapt.md"
STEPS = 130
OVERFLOW = 1e30  # an input this large overflows float32 in the first layers


def client_source() -> str:
    """The docs' client: the one python block under "A client in 25 lines"."""
    section = DOC.read_text().split("## A client in 25 lines", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_docs_client_is_short_and_knows_only_numpy_and_onnxruntime():
    source = client_source()
    code = [line for line in source.splitlines() if line.strip()]
    assert len(code) <= 26, len(code)
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported == {"json", "pathlib", "numpy", "onnxruntime"}


def _client(directory: Path):
    scope: dict = {}
    exec(compile(client_source(), str(DOC), "exec"), scope)  # the docs' code, as written
    return scope["AdaptClient"](directory)


def _stream(digits, kind: str, *, overflow: bool = True) -> np.ndarray:
    if kind == "one-class":  # what the collapse guard is for: one clean class, over and over
        x, y = digits.stream("clean", 1, seed=0)
        x = np.concatenate([x[y == 3]] * 3)
    else:
        x = digits.stream("gaussian_noise", 5, seed=0)[0]
    x = np.ascontiguousarray(x[:STEPS], dtype=np.float32)
    if overflow:  # finite, but its logits overflow (in ONNX Runtime 1.19's kernels)
        x[11] = OVERFLOW
    return x


CASES = {
    "realm": ({}, "shifted"),
    "realm-imagenet": ({"preset": "imagenet", "diversity_margin": 0.4, "lr": 2e-3}, "shifted"),
    "tent": ({"method": "tent"}, "shifted"),
    "eata": ({"method": "eata"}, "shifted"),
    "sar-recovering": ({"method": "sar", "recovery_loss": 0.8}, "shifted"),
    "deyo": ({"method": "deyo"}, "shifted"),
    "guardrails": (
        {
            "lr": 0.02,
            "guardrails": Guardrails(relax=0.05, anchor=0.01, max_drift=0.004, full_rate=0.9),
        },
        "shifted",
    ),
    "collapse": (
        {"guardrails": Guardrails(collapse=0.5)},
        "one-class",
    ),
    "episodic": ({"episodic": True}, "shifted"),
}


MAX_NEAR_TIES = 2  # per stream: a step input within rounding of a kink is rare


@pytest.mark.parametrize("case", list(CASES))
def test_a_manifest_only_client_takes_the_runtimes_steps(case, digits_model, digits, tmp_path):
    overrides, kind = CASES[case]
    directory = tmp_path / "a"
    export_digits(digits_model, directory, **overrides)
    xs = _stream(digits, kind)
    runtime = RealmRuntime(directory, threads=1, backend="onnx-steps")
    client = _client(directory)
    graph = RealmRuntime(directory, threads=1)  # RealmRuntime on the graph
    assert graph.backend == "onnx"
    layout = json.loads((directory / "realm.json").read_text())["portable"]["layout"]
    reasons = set()
    ties = 0
    before, after = tmp_path / "before.npz", tmp_path / "after.npz"
    for i, x in enumerate(xs):
        runtime.save(before)  # the arbiter's input, should this step part the two
        client_before = dict(client.state)
        ours = runtime.adapt(x[None])
        logits, updated, reason = client.adapt(x[None])
        fed = graph.adapt(x[None])
        assert (reason, updated) == (ours.reason, ours.updated), f"step {i}"
        assert (fed.reason, fed.updated, fed.loss is None) == (
            ours.reason,
            ours.updated,
            ours.loss is None,
        ), f"step {i}"
        reasons.add(reason)
        if np.isfinite(ours.logits).all():
            np.testing.assert_allclose(logits, ours.logits, rtol=0, atol=TOLERANCES["logits"])
        if _params_gap(client.state[PARAMS_NAME], runtime, layout) > TOLERANCES["params"]:
            _arbitrate(i, x, client, client_before, runtime, before, layout, digits_model)
            ties += 1
            runtime.save(after)  # both went on correctly: go on from the runtime's state
            client.state = {**read_state(after)[0], SETTINGS_NAME: client.state[SETTINGS_NAME]}
            graph.restore(after)
        flat = client.state[PARAMS_NAME]
        for slot in layout:
            name, start = slot["name"], slot["offset"]
            want = _runtime_value(runtime, name)
            got = flat[start : start + want.size].reshape(want.shape)
            np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCES["params"], err_msg=name)
    assert ties <= MAX_NEAR_TIES, f"{ties} near-ties in {STEPS} steps: more than rounding explains"
    state = runtime.state
    counters = dict(zip(COUNTERS, client.state["realm.counters"].tolist(), strict=True))
    assert counters == {c: getattr(state, c) for c in COUNTERS}
    assert {"updated", "nonfinite"} <= reasons, reasons
    _same_watch(client, state)
    assert_same_state(runtime, graph, TOLERANCES)
    for figure in ("update_rate", "entropy_ema", "loss_ema"):
        want = getattr(state, figure)
        got = getattr(graph.state, figure)
        assert got == (None if want is None else pytest.approx(want, rel=1e-5, abs=1e-6))
    assert graph.state.update_rate == state.update_rate
    if case == "sar-recovering":
        assert state.resets_recovery > 0
    if case == "guardrails":
        assert state.drift_clips > 0
    if case == "collapse":
        assert state.resets_collapse > 0


def _params_gap(flat: np.ndarray, runtime: RealmRuntime, layout: list[dict]) -> float:
    """The largest |difference| between a graph's ``realm.params`` and the runtime's."""
    gaps = []
    for slot in layout:
        want = _runtime_value(runtime, slot["name"])
        got = flat[slot["offset"] : slot["offset"] + want.size]
        gaps.append(float(np.abs(got.astype(np.float64) - want.reshape(-1)).max()))
    return max(gaps)


def _arbitrate(
    step: int,
    x: np.ndarray,
    client,
    client_before: dict[str, np.ndarray],
    runtime: RealmRuntime,
    before: Path,
    layout: list[dict],
    source: nn.Module,
) -> str:
    """Tell a near-tie from a disagreement, where one step parts the two sides' parameters.

    The graph takes the same step again from the runtime's own state before it (its state
    file: the graph's tensors). If it then lands within tolerance of the runtime, the two
    compute the step alike, and they parted only because the step's outcome turns on a
    difference of their inputs as small as float32 rounding. Still apart, their kernels set
    one activation input beside a kink apart from the very same state, and the SDK's step
    with that gate flipped must be the graph's (``kink_tie``). Anything else fails here.

    Returns:
        The near-tie, in one sentence with its figures, as warned (a :class:`NearTie`).
    """
    theirs = {**read_state(before)[0], SETTINGS_NAME: client.state[SETTINGS_NAME]}
    names = [o.name for o in client.session.get_outputs()]
    out = dict(zip(names, client.session.run(None, {INPUT_NAME: x[None], **theirs}), strict=True))
    parted = _params_gap(client.state[PARAMS_NAME], runtime, layout)
    same_input = _params_gap(out[next_name(PARAMS_NAME)], runtime, layout)
    if same_input > TOLERANCES["params"]:
        graph = {name: out[next_name(name)] for name in (PARAMS_NAME, VELOCITY_NAME)}
        return kink_tie(f"step {step}", source, runtime.config, before, x[None], graph, runtime)
    inputs = float(np.abs(client_before[PARAMS_NAME] - theirs[PARAMS_NAME]).max())
    message = (
        f"step {step}: a near-tie: from their own states, {inputs:.2g} apart (rounding), the "
        f"graph and the runtime land {parted:.2g} apart; from the same state, {same_input:.2g}: "
        "the step's outcome turns on a float32 rounding (a kink such as a ReLU's input at 0)"
    )
    warnings.warn(message, NearTie, stacklevel=2)
    return message


def test_the_docs_way_to_change_a_setting_is_the_runtimes_override(digits_artifacts, digits):
    """docs/adapt.md's snippet writes realm.lr: the twin given the same override agrees."""
    directory = digits_artifacts[0]
    section = DOC.read_text().split("## Changing a setting without re-exporting", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    client = _client(directory)
    exec(compile(snippet, str(DOC), "exec"), {"client": client})  # as written: realm.lr = 0.01
    runtime = RealmRuntime(directory, threads=1, backend="onnx-steps", overrides={"lr": 0.01})
    plain = RealmRuntime(directory, threads=1, backend="onnx-steps")
    xs = _stream(digits, "shifted", overflow=False)[:100]
    for i, x in enumerate(xs):
        ours = runtime.adapt(x[None])
        plain.adapt(x[None])
        logits, updated, reason = client.adapt(x[None])
        assert (reason, updated) == (ours.reason, ours.updated), f"step {i}"
        np.testing.assert_allclose(logits, ours.logits, rtol=0, atol=TOLERANCES["logits"])
    flat = client.state["realm.params"]
    want = np.concatenate([v.reshape(-1) for v in runtime.trainable_parameters().values()])
    np.testing.assert_allclose(flat[: want.size], want, rtol=0, atol=TOLERANCES["params"])
    away = np.concatenate([v.reshape(-1) for v in plain.trainable_parameters().values()])
    assert np.abs(away - want).max() > 100 * TOLERANCES["params"]  # the setting mattered


class _PooledNet(nn.Module):
    """Conv → GroupNorm → ReLU → MaxPool → Conv → GroupNorm → ReLU → mean → Linear."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
        )
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def test_a_max_pooling_forward_pools_without_indices_and_updates_as_the_sdk(tmp_path):
    """The forward pools as a forward-only graph does; the updating branch gets the indices."""
    from realm_export import ExportOptions, export_realm_artifacts

    model = _PooledNet().eval()
    config = RealmConfig.preset("cifar", num_classes=5, diversity_margin=0.9)
    export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=config, input_shape=(1, 3, 16, 16), training=False),
    )
    graph = onnx.load(str(tmp_path / "a" / "adapt_model.onnx"), load_external_data=False).graph
    pools = [n for n in graph.node if n.op_type == "MaxPool"]
    assert [len(n.output) for n in pools] == [1]
    (step,) = [n for n in graph.node if n.op_type == "If" and n.name == "adapt.step"]
    then = next(a.g for a in step.attribute if a.name == "then_branch")
    assert [len(n.output) for n in then.node if n.op_type == "MaxPool"] == [2]
    rt = RealmRuntime(tmp_path / "a", threads=1)
    assert rt.backend == "onnx"
    xs = np.random.default_rng(0).standard_normal((60, 3, 16, 16)).astype(np.float32)
    compare_twins(rt, RealmAdapter(copy.deepcopy(model), config), xs, source=model)
    assert 0 < rt.state.updates < 60


def _runtime_value(runtime: RealmRuntime, name: str) -> np.ndarray:
    if name in ("realm.alpha", "realm.lambda"):
        value = runtime.state.alpha if name == "realm.alpha" else runtime.state.lam
        return np.array(value, np.float32)
    return runtime.trainable_parameters()[name]


def _same_watch(client, state) -> None:
    known = dict(zip(ADAPT_KNOWN, client.state["realm.known"], strict=True))
    watch = dict(zip(ADAPT_WATCH, client.state["realm.watch"], strict=True))
    assert bool(known["ema"]) == (state.ema is not None)
    if state.ema is not None:
        np.testing.assert_allclose(client.state["realm.ema"], state.ema, atol=TOLERANCES["ema"])
    for figure, flag in (("update_rate", "update_rate"), ("entropy_ema", "watch")):
        want = getattr(state, figure)
        assert bool(known[flag]) == (want is not None), figure
        if want is not None:
            assert watch[figure] == pytest.approx(want, rel=1e-5, abs=1e-6), figure
    if state.update_rate is not None:  # float32 on every side, bit for bit: the bound reads it
        assert float(watch["update_rate"]) == state.update_rate
    assert bool(known["loss_ema"]) == (state.loss_ema is not None)
    if state.loss_ema is not None:
        assert watch["loss_ema"] == pytest.approx(state.loss_ema, rel=1e-5)
    if state.marginal is not None:
        np.testing.assert_allclose(client.state["realm.marginal"], state.marginal, atol=1e-5)


def _arrays(params: list, velocity: list) -> dict[str, np.ndarray]:
    """A client's ``realm.params`` and ``realm.velocity``, as a state file holds them."""
    return {PARAMS_NAME: np.float32(params), VELOCITY_NAME: np.float32(velocity)}


NEWEST = """
import json, sys
import numpy as np, onnxruntime
scope = {}
exec(open(sys.argv[1]).read(), scope)
client = scope["AdaptClient"](sys.argv[2])
if len(sys.argv) > 4:  # go on from a state file (the graph's tensors), the settings the export's
    with np.load(sys.argv[4]) as saved:
        client.state.update({k: saved[k] for k in client.state if k != "realm.settings"})
rows = []
for x in np.load(sys.argv[3]):
    logits, updated, reason = client.adapt(x[None])
    state = client.state
    rows.append([reason, updated, logits[0].tolist(), state["realm.params"].tolist(),
                 state["realm.velocity"].tolist()])
print(json.dumps({"ort": onnxruntime.__version__, "rows": rows}))
"""


@pytest.mark.parametrize("case", ["realm", "tent", "eata", "sar-recovering"])
def test_the_docs_client_on_the_newest_onnxruntime(
    case, runtime_python, digits_model, digits, tmp_path
):
    overrides, kind = CASES[case]
    directory = tmp_path / "a"
    export_digits(digits_model, directory, **overrides)
    # No overflowing input: whether its logits overflow depends on the version's kernels.
    xs = _stream(digits, kind, overflow=False)[:100]
    (tmp_path / "client.py").write_text(client_source())

    def newest(first: int, last: int, state: Path | None = None) -> list:
        """The docs' client on the newest onnxruntime: samples first..last-1, from ``state``."""
        np.save(tmp_path / "xs.npy", xs[first:last])
        args = [tmp_path / "client.py", directory, tmp_path / "xs.npy"]
        args += [state] if state is not None else []
        there = run_in_runtime_venv(runtime_python, NEWEST, *args, cwd=tmp_path)
        assert there["ort"] != onnxruntime.__version__  # two ONNX Runtime versions compared
        return there["rows"]

    import onnxruntime

    def other(first: int, last: int, state: Path | None) -> list:
        rows = newest(first, last, state)
        return [(r[0], r[1], r[2], _arrays(r[3], r[4])) for r in rows]

    runtime = RealmRuntime(directory, threads=1, backend="onnx-steps")
    follow(other, runtime, xs, source=digits_model, where="the newest onnxruntime's client")
    assert runtime.state.updates > 0


@pytest.mark.parametrize("method", ["realm", "eata"])
def test_the_export_validates_the_adapt_graph_on_selected_and_skipped_samples(
    method, digits_model, tmp_path
):
    directory = tmp_path / "a"
    export_digits(digits_model, directory, method=method)
    section = json.loads((directory / "realm.json").read_text())["adapt"]
    reports = section["validation"]
    assert all(r["passed"] and r["mismatch"] is None for r in reports)
    assert all(r["steps"] >= 6 and r["logits_max_abs"] <= r["logits_tol"] for r in reports)
    # EATA: the written graph, and its twin with the cut opened so that the update runs too.
    assert len(reports) == (2 if method == "eata" else 1)
    seen = set().union(*(r["reasons"] for r in reports))
    assert "updated" in seen and seen - {"updated"}, seen


def test_the_ort_format_adapt_graph_takes_the_same_steps(
    digits_ort_artifacts, digits_model, digits
):
    """The docs' client on the .ort adapt graph against the runtime on the .onnx one."""
    directory = digits_ort_artifacts[0]
    manifest = json.loads((directory / "realm.json").read_text())
    mobile = manifest["portable"]["ort_format"]
    assert mobile["adapt_validation"]["passed"]
    operators = (directory / mobile["operators_config"]).read_text()
    assert re.search(r"^ai\.onnx;\d+;.*\bIf\b", operators, re.M), operators  # a build keeps If
    ort_client = _client(directory)
    ort_client.spec = {**ort_client.spec, "file": mobile["adapt_model"]}
    import onnxruntime

    ort_client.session = onnxruntime.InferenceSession(str(directory / mobile["adapt_model"]))
    settings = ort_client.state[SETTINGS_NAME]

    def other(first: int, last: int, state: Path | None) -> list:
        if state is not None:
            ort_client.state = {**read_state(state)[0], SETTINGS_NAME: settings}
        rows = []
        for x in xs[first:last]:
            logits, updated, reason = ort_client.adapt(x[None])
            graph = ort_client.state
            rows.append(
                (reason, updated, logits[0], _arrays(graph[PARAMS_NAME], graph[VELOCITY_NAME]))
            )
        return rows

    xs = _stream(digits, "shifted")[:100]
    onnx_graph = RealmRuntime(directory, threads=1, graph_format="onnx")
    assert onnx_graph.backend == "onnx"
    follow(other, onnx_graph, xs, source=digits_model, where="the .ort adapt graph")
    assert onnx_graph.state.updates > 0


def test_the_adapt_benchmark_runs_the_rates_it_names():
    from realm_tools.bench import bench_adapt, format_adapt_costs, machine_peak

    peak = machine_peak(1, n=256, repeats=1)
    row = bench_adapt(
        "digits", rates=(0.0, 0.5, 1.0), samples=4, rounds=1, threads=1, warmup=1, peak=peak
    )
    assert row.stream_rate == {0.0: 0.0, 0.5: 0.5, 1.0: 1.0}  # the forced decisions held
    assert row.forward_ms > 0 and row.skip_ms > 0 and row.update_ms > 0
    assert row.target_ms(0.0) == row.forward_ms and row.target_ms(1.0) == row.step_ms
    assert row.today_ms(1.0) == row.step_ms
    table = format_adapt_costs([row], rates=(0.0, 0.5, 1.0))
    assert table.count("| digits |") == 4 and "share of the floor" in table


def test_one_copy_of_the_weights_unless_a_standalone_inference_model_is_asked_for(
    digits_model, digits_artifacts, digits, tmp_path
):
    import onnxruntime

    from realm_export import ExportOptions, export_realm_artifacts

    x = _stream(digits, "shifted", overflow=False)[:1]
    logits = {}
    for standalone in (False, True):
        directory = digits_artifacts[0]  # the default export of the same model
        if standalone:
            directory = tmp_path / "standalone"
            export_realm_artifacts(
                digits_model,
                directory,
                ExportOptions(
                    config=digits_artifacts[1],
                    input_shape=(1, 1, 32, 32),
                    standalone_inference=True,
                    training=False,
                ),
            )
        path = directory / "inference_model.onnx"
        model = onnx.load(str(path), load_external_data=False)
        external = [
            t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
        ]
        assert bool(external) != standalone
        # Copied apart from the directory, only the standalone one still loads.
        apart = tmp_path / f"apart-{standalone}" / "inference_model.onnx"
        apart.parent.mkdir()
        apart.write_bytes(path.read_bytes())
        if standalone:
            onnxruntime.InferenceSession(str(apart))
        else:
            with pytest.raises(Exception, match=re.escape("weights.bin")):
                onnxruntime.InferenceSession(str(apart))
        logits[standalone] = onnxruntime.InferenceSession(str(path)).run(None, {"input": x})[0]
        if not standalone:
            _no_tensor_twice(directory)
    np.testing.assert_allclose(logits[False], logits[True], atol=1e-6)


def test_a_classifier_held_transposed_is_stored_once(tmp_path):
    """The step graph holds a linear layer's weight as Wᵀ, the inference graph as W: once."""
    import onnxruntime

    from realm_export import ExportOptions, export_realm_artifacts

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3), nn.GroupNorm(4, 16), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 36, 40)
    ).eval()
    config = RealmConfig.preset("cifar", num_classes=40)
    directory = tmp_path / "a"
    shape = (1, 3, 8, 8)
    export_realm_artifacts(
        model, directory, ExportOptions(config=config, input_shape=shape, training=False)
    )
    _no_tensor_twice(directory)
    inference = onnx.load(str(directory / "inference_model.onnx"), load_external_data=False)
    assert [n.op_type for n in inference.graph.node].count("Transpose") == 1
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(directory / "inference_model.onnx"))
    got = session.run(None, {"input": x})
    want = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-5)


def _no_tensor_twice(directory: Path) -> None:
    """weights.bin holds each tensor once: no two stored tensors equal, or equal transposed."""
    section = json.loads((directory / "realm.json").read_text())["portable"]["weights"]
    raw = (directory / section["file"]).read_bytes()
    stored = {
        (offset, tuple(shape)) for table in section["graphs"].values() for _, offset, shape in table
    }
    seen: dict[bytes, int] = {}
    for offset, shape in sorted(stored):
        size = 4 * int(np.prod(shape))
        array = np.frombuffer(raw[offset : offset + size], "<f4").reshape(shape)
        for layout in (array, array.T) if array.ndim == 2 else (array,):
            key = np.ascontiguousarray(layout).tobytes()
            assert seen.setdefault(key, offset) == offset, (offset, shape, seen[key])


@pytest.mark.cuda
@pytest.mark.skipif(not has_cuda(), reason="needs onnxruntime-gpu and an NVIDIA GPU")
@pytest.mark.parametrize("case", list(CASES))
def test_the_adapt_graph_on_cuda_takes_the_cpu_twins_steps(case, digits_model, digits, tmp_path):
    """The docs' client on the CUDA provider, and RealmRuntime on CUDA (its state on the GPU),
    against the numpy twin on the CPU: the same decisions, logits, parameters and counters."""
    import onnxruntime

    overrides, kind = CASES[case]
    directory = tmp_path / "a"
    export_digits(digits_model, directory, **overrides)
    # No overflowing input: whether its logits overflow depends on the provider's kernels.
    xs = _stream(digits, kind, overflow=False)
    twin = RealmRuntime(directory, threads=1, backend="onnx-steps")
    gpu = RealmRuntime(directory, device="cuda")
    client = _client(directory)
    cuda = [("CUDAExecutionProvider", {"use_tf32": "0"})]  # float32, as the reference
    client.session = onnxruntime.InferenceSession(
        str(directory / client.spec["file"]), providers=cuda
    )
    assert client.session.get_providers()[0] == "CUDAExecutionProvider"
    for i, x in enumerate(xs):
        ours = twin.adapt(x[None])
        logits, updated, reason = client.adapt(x[None])
        fed = gpu.adapt(x[None])
        assert (reason, updated) == (ours.reason, ours.updated), f"step {i}"
        assert (fed.reason, fed.updated) == (ours.reason, ours.updated), f"step {i}"
        np.testing.assert_allclose(logits, ours.logits, rtol=0, atol=1e-4)
        np.testing.assert_allclose(fed.logits, ours.logits, rtol=0, atol=1e-4)
    assert {v.device_name() for v in gpu._backend._state.values()} == {"cuda"}
    want = twin.trainable_parameters()
    flat = np.concatenate([want[n].reshape(-1) for n in want])
    size = flat.size
    np.testing.assert_allclose(client.state["realm.params"][:size], flat, atol=1e-4)
    for name, value in gpu.trainable_parameters().items():
        np.testing.assert_allclose(value, want[name], atol=1e-4, err_msg=name)
    state, on_gpu = twin.state, gpu.state
    counters = dict(zip(COUNTERS, client.state["realm.counters"].tolist(), strict=True))
    assert counters == {c: getattr(state, c) for c in COUNTERS}
    assert {c: getattr(on_gpu, c) for c in COUNTERS} == counters
    if state.alpha is not None:
        assert on_gpu.alpha == pytest.approx(state.alpha, abs=1e-5)
        assert on_gpu.lam == pytest.approx(state.lam, rel=1e-5)
