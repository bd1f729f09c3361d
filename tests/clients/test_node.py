"""The Node.js edge app (examples/node) against RealmRuntime's numpy twin, step for step.

The app runs the one adapt graph on the current onnxruntime-node with the browser page's
client (clients/js/adapt-client.js), which knows only the manifest's ``adapt`` section and
does no decision arithmetic of its own. Compared on the same artifacts and stream:
each sample's prediction, decision and reason, α and λ, and at the end the parameters, the
momentum, the EMA and the counters (from the app's checkpoint, restored into RealmRuntime).
Also: a restart resumes from the checkpoint exactly, and a state saved by RealmRuntime
continues in the app. Needs Node.js and ``npm ci`` in examples/node (``make web-deps``).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    NearTie,
    assert_same_state,
    edit_manifest,
    export_digits,
    flip,
    kink_tie,
    manifest_offset,
    run_node_app,
)
from torch import nn

from realm_runtime import Guardrails, RealmRuntime
from realm_runtime.contract import PARAMS_NAME, read_state
from realm_tools.data import write_stream_folder
from realm_tools.parity import TOLERANCES

SAMPLES = 100  # ≥ 100 steps of every method's trajectory


def _app(artifacts: Path, stream: Path, *extra: str) -> str:
    done = run_node_app(artifacts, stream, *extra)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


@pytest.fixture(scope="module")
def stream(digits_stream, tmp_path_factory) -> Path:
    """The shifted digits as the app reads them: one .npy a sample, labels.json."""
    folder = tmp_path_factory.mktemp("stream")
    write_stream_folder(folder, digits_stream[0][:SAMPLES], digits_stream[1][:SAMPLES])
    return folder


def _runtime_steps(
    artifacts: Path, stream: Path, count: int = SAMPLES, overrides: dict | None = None
) -> tuple[RealmRuntime, list]:
    rt = RealmRuntime(artifacts, threads=1, backend="onnx-steps", overrides=overrides)
    steps = [rt.adapt(np.load(stream / f"{i:05d}.npy")[None]) for i in range(count)]
    return rt, steps


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"method": "tent"},
        {"method": "eta"},
        {"method": "sar", "recovery_loss": 0.8},
        {"method": "deyo"},
        {"lr": 0.02, "guardrails": Guardrails(relax=0.05, anchor=0.01, max_drift=0.004)},
        {"adapt_stages": 1},
    ],
    ids=["realm", "tent", "eta", "sar-recovering", "deyo", "guardrails", "last-stage"],
)
def test_node_app_takes_the_runtimes_steps(digits_model, stream, tmp_path, overrides):
    artifacts = tmp_path / "artifacts"
    export_digits(digits_model, artifacts, **overrides)
    rt = RealmRuntime(artifacts, threads=1, backend="onnx-steps")
    states = [tmp_path / f"twin-{i:03d}.npz" for i in range(SAMPLES + 1)]  # before each step
    steps = []
    for i in range(SAMPLES):
        rt.save(states[i])
        steps.append(rt.adapt(np.load(stream / f"{i:05d}.npy")[None]))
    rt.save(states[SAMPLES])
    there, ties, state = _node_steps(artifacts, stream, states, tmp_path, digits_model)
    assert len(there) == SAMPLES
    for i, (node, py) in enumerate(zip(there, steps, strict=True)):
        assert (node["reason"], node["updated"], node["selected"], node["top1"]) == (
            py.reason,
            py.updated,
            bool(py.selected[0]),
            int(py.top1[0]),
        ), f"sample {i}"
        np.testing.assert_allclose(node["logits"], py.logits[0], rtol=0, atol=TOLERANCES["logits"])
    assert ties <= 2, f"{ties} near-ties in {SAMPLES} steps: more than rounding explains"
    assert rt.state.updates > 0
    if overrides.get("method") != "tent":  # Tent has no filter: every sample updates
        assert rt.state.skipped_diversity + rt.state.skipped_entropy > 0
    if rt.state.alpha is not None and overrides.get("method") != "eta":
        assert there[-1]["alpha"] == pytest.approx(rt.state.alpha, abs=TOLERANCES["alpha"])
    restored = RealmRuntime(artifacts, threads=1)
    restored.restore(state)  # the app's checkpoint is the SDK's state file
    assert_same_state(rt, restored, TOLERANCES)
    # The watch figures travel in the state file too (float32 there).
    ours, theirs = rt.state, restored.state
    for name in ("update_rate", "entropy_ema", "loss_ema"):
        want = getattr(ours, name)
        assert getattr(theirs, name) == (None if want is None else pytest.approx(want, rel=1e-5))
    np.testing.assert_allclose(theirs.marginal, ours.marginal, rtol=1e-5)
    if overrides.get("method") == "sar":
        assert ours.resets_recovery > 0
    if "guardrails" in overrides:
        assert ours.drift_clips > 0
    if "adapt_stages" in overrides:  # the app adapted only the last stage's norms
        assert rt.trainable_names and all(n.startswith("stages.3.") for n in rt.trainable_names)


def _node_steps(
    artifacts: Path, stream: Path, twin: list[Path], work: Path, source: nn.Module, start: int = 0
) -> tuple[list[dict], int, Path]:
    """The app's log from sample ``start`` to the end, its near-ties, and its final state file.

    ``twin[i]`` is the numpy twin's state before sample ``i`` (``twin[-1]``: after the last);
    the app starts from ``twin[start]`` (from the export when ``start`` is 0). Where the app's
    parameters part from the twin's beyond tolerance, the first step that parts them is found
    (the app stopped after n samples, by bisection) and taken again by the app from the
    twin's own state before it. Landing within tolerance there, both compute that step alike
    and only a float32 rounding of their inputs parted them; still apart, a gate beside a
    kink that their kernels set apart must explain it (``kink_tie``, with ``source`` the
    exported model). Either is a near-tie, warned, after which the app goes on from the
    twin's state. Anything else fails.
    """
    config = RealmRuntime(artifacts, threads=1).config
    log, ties = [], 0
    while True:
        origin = twin[start] if start else None  # None: the export's own initial state
        steps, state = _app_from(artifacts, stream, origin, work)
        parted = _apart(state, twin[-1])
        if parted <= TOLERANCES["params"]:
            return [*log, *steps], ties, state
        ok, bad = start, len(twin) - 1  # within tolerance after `ok` samples, not after `bad`
        while bad - ok > 1:
            middle = (ok + bad) // 2
            _, part = _app_from(artifacts, stream, origin, work, middle - start)
            gap = _apart(part, twin[middle])
            if gap <= TOLERANCES["params"]:
                ok = middle
            else:
                bad, parted = middle, gap
        step = bad - 1
        again_steps, again = _app_from(artifacts, stream, twin[step], work, 1)
        same_input = _apart(again, twin[bad])
        if same_input <= TOLERANCES["params"]:
            warnings.warn(
                f"sample {step}: a near-tie: from their own states the app and the twin land "
                f"{parted:.2g} apart, from the twin's {same_input:.2g}",
                NearTie,
                stacklevel=1,
            )
        else:
            x = np.load(stream / f"{step:05d}.npy")[None]
            kink_tie(f"sample {step}", source, config, twin[step], x, again, twin[bad])
        ties += 1
        log += [*steps[: step - start], *again_steps]
        start = bad
        if start == len(twin) - 1:
            return log, ties, again


def _app_from(
    artifacts: Path, stream: Path, state: Path | None, work: Path, limit: int | None = None
) -> tuple[list[dict], Path]:
    """The app from ``state`` (a copy; None: the export), for ``limit`` samples or to the end."""
    run = work / f"node-{len(list(work.glob('node-*.npz'))):03d}.npz"
    if state is not None:
        shutil.copyfile(state, run)
    log = run.with_suffix(".jsonl")
    extra = ["--limit", str(limit)] if limit else []
    _app(artifacts, stream, "--state", str(run), "--log", str(log), "--quiet", *extra)
    return [json.loads(line) for line in log.read_text().splitlines()], run


def _apart(a: Path, b: Path) -> float:
    """The largest |difference| of two state files' ``realm.params``."""
    x, y = read_state(a)[0][PARAMS_NAME], read_state(b)[0][PARAMS_NAME]
    return float(np.abs(x.astype(np.float64) - y).max())


def test_node_app_feeds_changed_settings_as_the_runtime_applies_overrides(
    digits_artifacts, stream, tmp_path
):
    """`--set` feeds the graph's setting inputs: the numpy twin with the same overrides."""
    artifacts = digits_artifacts[0]
    log = tmp_path / "steps.jsonl"
    sets = {"realm.lr": 0.02, "realm.anchor": 0.01, "realm.max_drift": 0.002}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    _app(artifacts, stream, "--state", str(tmp_path / "s.npz"), "--log", str(log), *args)
    overrides = {"lr": 0.02, "guardrails": Guardrails(anchor=0.01, max_drift=0.002)}
    rt, steps = _runtime_steps(artifacts, stream, overrides=overrides)
    there = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(n["reason"], n["top1"]) for n in there] == [(p.reason, int(p.top1[0])) for p in steps]
    for node, py in zip(there, steps, strict=True):
        np.testing.assert_allclose(node["logits"], py.logits[0], rtol=0, atol=TOLERANCES["logits"])
    assert rt.state.drift_clips > 0  # the tighter bound acted, on both sides
    bad = run_node_app(artifacts, stream, "--set", "realm.nope=1", "--state", str(tmp_path / "x"))
    assert bad.returncode == 1 and 'no setting named "realm.nope"' in bad.stderr
    assert "realm.lr" in bad.stderr and "Error:" not in bad.stderr


def test_node_app_resumes_and_continues_python_states(
    digits_artifacts, digits_model, stream, tmp_path
):
    artifacts = digits_artifacts[0]
    whole = tmp_path / "whole.npz"
    _app(artifacts, stream, "--state", str(whole), "--quiet")
    # Stopped after 35 samples and started again: the same end state as one run.
    halves = tmp_path / "halves.npz"
    first = _app(
        artifacts, stream, "--state", str(halves), "--limit", "35", "--checkpoint-every", "10"
    )
    assert "from the exported model" in first
    second = _app(artifacts, stream, "--state", str(halves))
    assert "resumed at sample 35" in second
    a, b = RealmRuntime(artifacts, threads=1), RealmRuntime(artifacts, threads=1)
    a.restore(whole)
    b.restore(halves)
    assert_same_state(a, b, dict.fromkeys(TOLERANCES, 0.0))
    # A state RealmRuntime saved after 35 samples continues in the app, step for step.
    rt = RealmRuntime(artifacts, threads=1, backend="onnx-steps")
    twin = [tmp_path / f"twin-{i:03d}.npz" for i in range(SAMPLES + 1)]
    for i in range(SAMPLES):
        rt.save(twin[i])
        rt.adapt(np.load(stream / f"{i:05d}.npy")[None])
    rt.save(twin[SAMPLES])
    there, _, state = _node_steps(artifacts, stream, twin, tmp_path, digits_model, start=35)
    assert len(there) == SAMPLES - 35
    c = RealmRuntime(artifacts, threads=1)
    c.restore(state)
    assert_same_state(rt, c, TOLERANCES)


def test_node_app_refuses_tampered_artifacts_and_foreign_states(digits_artifacts, stream, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    (copy / "adapt_model.onnx").write_bytes((copy / "adapt_model.onnx").read_bytes()[:-10])
    done = run_node_app(copy, stream, timeout=120)
    assert done.returncode == 1 and "adapt_model.onnx" in done.stderr, done.stderr
    foreign = tmp_path / "foreign.npz"
    foreign.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: no header member
    done = run_node_app(digits_artifacts[0], stream, "--state", str(foreign), timeout=120)
    assert done.returncode == 1 and "__header__" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "target",
    [
        *("realm.json header", "realm.json json value", "adapt_model.onnx", "weights.bin"),
        *("source_params.npy", "initial_realm.counters.npy"),
    ],
)
def test_node_app_refuses_a_flipped_byte(digits_artifacts, stream, tmp_path, target):
    """One flipped byte per class of position, in the files the JavaScript client loads."""
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    name = target.split()[0]
    raw = (copy / name).read_bytes()
    kind = target.removeprefix("realm.json ")
    flip(copy / name, manifest_offset(raw, kind) if name == "realm.json" else len(raw) // 2)
    done = run_node_app(copy, stream, timeout=120)
    assert done.returncode == 1 and name in done.stderr, done.stderr
    expected = {
        "realm.json header": "is not 'realm-tta/artifacts'",  # the key "format" is no more
        "realm.json json value": "its bytes do not hash to its own manifest_sha256",
    }.get(target, "SHA-256")
    assert expected in done.stderr, done.stderr


def test_node_app_checks_signatures(signed_artifacts, signing_keys, stream, tmp_path):
    """WebCrypto's Ed25519 in Node: the trusted key loads; another key, a re-sealed edit and a
    missing signature are refused."""
    (_, vendor_pub), (_, stranger_pub) = signing_keys
    done = run_node_app(signed_artifacts, stream, "--limit", "3", "--trusted-key", str(vendor_pub))
    assert done.returncode == 0, done.stderr
    assert "signature verified" in done.stdout and "trusted" in done.stdout
    done = run_node_app(
        signed_artifacts, stream, "--limit", "3", "--trusted-key", str(stranger_pub)
    )
    assert done.returncode == 1 and "not among the trusted keys" in done.stderr, done.stderr
    copy = tmp_path / "copy"
    shutil.copytree(signed_artifacts, copy)
    edit_manifest(copy, lambda m: m["config"].update(lr=0.5))
    done = run_node_app(copy, stream, "--limit", "3", "--trusted-key", str(vendor_pub))
    assert done.returncode == 1 and "signature does not verify" in done.stderr, done.stderr
    (copy / "realm.sig").unlink()
    done = run_node_app(copy, stream, "--limit", "3", "--trusted-key", str(vendor_pub))
    assert done.returncode == 1 and "unsigned" in done.stderr, done.stderr
