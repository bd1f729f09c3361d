"""The one adapt graph: a client that knows only the manifest's ``adapt`` section.

The client is the code block of docs/adapt.md, run as written (numpy and onnxruntime only).
It must take RealmRuntime's trajectory, step after step: the same reasons and updates, the
same logits and parameters (α and λ among them), and in the end the same counters and watch
figures, for every method and every guardrail, on selected, skipped, refused (non-finite) and
reset steps. The same client on other ONNX Runtime builds is in test_adapt_graph_builds.py;
what the export writes into the graph in test_adapt_graph_export.py.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import ADAPT_CASES as CASES
from helpers import ADAPT_DOC as DOC
from helpers import ADAPT_STEPS as STEPS
from helpers import NearTie, assert_same_state, client_source, export_digits, kink_tie
from helpers import adapt_client as _client
from helpers import adapt_stream as _stream
from torch import nn

from realm_runtime import COUNTERS, RealmRuntime
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
from realm_tools.parity import TOLERANCES


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
