"""RealmRuntime on both backends, against the SDK and under bad input.

Saving and restoring a state (also across the twins): test_checkpoint.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
import threading

import numpy as np
import pytest
import torch
from helpers import (
    BACKENDS,
    compare_twins,
    edit_manifest,
    export_digits,
    has_cuda,
    last_line_in_a_fresh_interpreter,
    snapshot,
)

from realm_runtime import ArtifactError, RealmRuntime
from realm_sdk import Guardrails, RealmAdapter

# The adapt graph, and each twin in both orders of its graphs.
SIDES = [
    ("onnx", None),
    ("onnx-steps", "infer-first"),
    ("onnx-steps", "train"),
    ("ort-training", "infer-first"),
    ("ort-training", "train"),
]


@pytest.mark.parametrize(("backend", "schedule"), SIDES)
def test_step_for_step_agreement_with_the_sdk(
    backend, schedule, digits_artifacts, digits_model, digits_stream
):
    directory, config = digits_artifacts
    xs = digits_stream[0][:120]
    rt = RealmRuntime(directory, threads=1, schedule=schedule, backend=backend)
    assert (rt.backend, rt.schedule) == (backend, schedule)
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    worst = compare_twins(rt, adapter, xs, source=digits_model)
    st = rt.state
    assert 0 < st.updates < 120 and st.skipped_diversity > 0  # both S_div branches ran
    print(backend, schedule, worst)


@pytest.mark.parametrize(
    ("overrides", "steps", "batch", "backend"),
    [
        (dict(preset="imagenet"), 60, 1, "onnx"),  # momentum 0.9, C = λ, frozen last stage
        (dict(preset="imagenet"), 60, 1, "ort-training"),
        (dict(method="tent"), 60, 1, "onnx"),
        (dict(method="tent"), 60, 1, "ort-training"),
        (dict(method="eata"), 60, 1, "onnx"),
        (dict(method="eata"), 60, 1, "ort-training"),
        # B > 1 (per-sample S_div against one EMA, mean loss): the training artifacts only;
        # the portable step graph takes one sample per step (test_portable.py).
        (dict(), 40, 4, "ort-training"),
        (dict(method="eata"), 40, 4, "ort-training"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_other_settings_agree_with_the_sdk(
    overrides, steps, batch, backend, digits_model, digits_stream, tmp_path
):
    training = backend == "ort-training"  # its artifacts, asked for
    config = export_digits(digits_model, tmp_path / "a", training=training, **overrides)
    rt = RealmRuntime(tmp_path / "a", threads=1, backend=backend)
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    compare_twins(rt, adapter, digits_stream[0][: steps * batch], source=digits_model, batch=batch)
    assert rt.state.updates > 0


GOOD = np.zeros((1, 1, 32, 32), np.float32)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GOOD.tolist(), "numpy.ndarray"),
        (lambda: GOOD.astype(np.float64), "float32"),
        (lambda: GOOD.astype(np.int32), "float32"),
        (lambda: GOOD[0], "rank 4"),
        (lambda: np.zeros((1, 3, 32, 32), np.float32), "channel count must be 1"),
        (lambda: np.zeros((1, 1, 28, 28), np.float32), "size of axis 2 must be 32"),
        (lambda: np.zeros((0, 1, 32, 32), np.float32), "empty"),
        (lambda: np.full((1, 1, 32, 32), np.nan, np.float32), "NaN"),
        (lambda: np.full((1, 1, 32, 32), np.inf, np.float32), "Inf"),
        (lambda: np.zeros((1, 1, 32, 64), np.float32)[..., ::2], "C-contiguous"),
        (lambda: GOOD.astype(">f4"), "byte order"),
    ],
    ids=[
        "list",
        "float64",
        "int",
        "rank",
        "channels",
        "size",
        "empty",
        "nan",
        "inf",
        "strided",
        "big-endian",
    ],
)
def test_bad_input_is_refused_and_changes_nothing(runtime, make, message):
    before = snapshot(runtime)
    with pytest.raises(ValueError, match=message):
        runtime.adapt(make())
    with pytest.raises(ValueError, match=message):
        runtime.predict(make())
    assert snapshot(runtime) == before


def test_nonfinite_logits_are_refused_and_counted(runtime):
    before, before_state = runtime.trainable_parameters(), runtime.state
    # Finite input whose first convolution overflows float32: the forward yields NaN/Inf.
    result = runtime.adapt(np.full((1, 1, 32, 32), 3e38, np.float32))
    assert result.reason == "nonfinite" and not result.updated
    after, after_state = runtime.trainable_parameters(), runtime.state
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert after_state.skipped_nonfinite == 1 and after_state.updates == before_state.updates


def test_nonfinite_gradient_is_refused(runtime, monkeypatch):
    if runtime.backend == "onnx":  # the decision is the graph's: poison what it computes from
        _poison_lambda(runtime)
        before = runtime.trainable_parameters()
        x = np.random.default_rng(0).standard_normal((1, 1, 32, 32), dtype=np.float32)
        result = runtime.adapt(x)
        assert np.isfinite(result.logits).all() and result.selected.all()
        assert result.reason == "nonfinite" and runtime.state.skipped_nonfinite == 1
        for k in before:
            np.testing.assert_array_equal(before[k], runtime.trainable_parameters()[k])
        assert runtime.state.ema is None and runtime.state.updates == 0
        return
    real = runtime._backend.compute

    def poisoned(x, weights, eata_factor):
        # What each backend reports for a NaN gradient (its own detection: test_portable.py
        # for the step graph's realm.finite, the numpy check on ORT's gradients here).
        candidate = real(x, weights, eata_factor)
        if runtime.backend == "ort-training":
            name = next(iter(candidate.payload))
            candidate.payload[name] = candidate.payload[name] * np.float32("nan")
            finite = all(np.isfinite(g).all() for g in candidate.payload.values())
            return dataclasses.replace(candidate, finite=finite)
        return dataclasses.replace(candidate, finite=False)

    monkeypatch.setattr(runtime._backend, "compute", poisoned)
    runtime.reset()
    before = runtime.trainable_parameters()
    result = runtime.adapt(
        np.random.default_rng(0).standard_normal((1, 1, 32, 32), dtype=np.float32)
    )
    assert result.reason == "nonfinite" and runtime.state.skipped_nonfinite == 1
    for k in before:
        np.testing.assert_array_equal(before[k], runtime.trainable_parameters()[k])
    assert runtime.state.ema is None and runtime.state.updates == 0


def _poison_lambda(runtime) -> None:
    """Fresh state, then λ = NaN: finite logits, a NaN loss and NaN gradients (REALM's ρ)."""
    runtime.reset()
    values, momentum = runtime._backend.tensors()
    values["realm.lambda"] = np.array(np.nan, np.float32)
    runtime._backend.load(values, momentum)


def test_reset_returns_to_the_source(runtime, digits_artifacts, digits_model):
    x = np.random.default_rng(1).standard_normal((1, 1, 32, 32), dtype=np.float32)
    assert runtime.state.updates > 0
    runtime.reset()
    fresh = RealmRuntime(digits_artifacts[0], threads=1, backend=runtime.backend)
    assert snapshot(runtime) == snapshot(fresh)
    with torch.no_grad():
        expected = digits_model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(runtime.predict(x), expected, atol=1e-4)


def test_episodic_mode_resets_after_every_call(digits_model, digits_stream, tmp_path):
    export_digits(digits_model, tmp_path / "e", episodic=True)
    rt = RealmRuntime(tmp_path / "e", threads=1)
    source = rt.trainable_parameters()
    assert rt.adapt(digits_stream[0][:1]).updated
    for n, v in rt.trainable_parameters().items():
        np.testing.assert_array_equal(v, source[n])
    assert rt.state.updates == 1 and rt.state.ema is None


def test_export_inference_model_carries_the_adaptation(runtime, tmp_path):
    import onnxruntime as ort

    path = tmp_path / "adapted.onnx"
    runtime.export_inference_model(path)
    x = np.random.default_rng(2).standard_normal((1, 1, 32, 32), dtype=np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(out, runtime.predict(x), atol=1e-5)
    assert [p.name for p in tmp_path.iterdir()] == ["adapted.onnx"]


class _Exclusive:
    """Wraps a backend and fails if two of its calls ever overlap."""

    def __init__(self, backend):
        self._backend, self._busy, self.calls = backend, threading.Lock(), 0

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr

        def exclusive(*args):
            assert self._busy.acquire(blocking=False), "two threads inside the backend at once"
            try:
                self.calls += 1
                return attr(*args)
            finally:
                self._busy.release()

        return exclusive


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_instance_is_safe_across_threads(backend, digits_artifacts, digits_stream):
    rt = RealmRuntime(digits_artifacts[0], threads=1, backend=backend)
    rt._backend = _Exclusive(rt._backend)
    xs = digits_stream[0][:80]
    errors = []

    def worker(k):
        try:
            for i in range(k, 80, 4):
                rt.adapt(xs[i : i + 1])
                rt.predict(xs[i : i + 1])
                _ = rt.state
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    st = rt.state
    assert st.samples == 80
    assert st.updated_samples + st.skipped_diversity + st.skipped_nonfinite == 80
    assert rt._backend.calls >= 160
    assert all(np.isfinite(v).all() for v in rt.trainable_parameters().values())


def test_artifact_problems_are_named(digits_artifacts, tmp_path):
    src = digits_artifacts[0]
    bad = tmp_path / "copy"
    shutil.copytree(src, bad)
    with open(bad / "training_model.onnx", "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(ArtifactError, match=r"training_model\.onnx.*SHA-256"):
        RealmRuntime(bad)
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    with open(bad / "step_model.onnx", "r+b") as handle:  # the portable graph is listed too
        handle.seek(100)
        handle.write(b"\x00")
    with pytest.raises(ArtifactError, match=r"step_model\.onnx.*SHA-256"):
        RealmRuntime(bad)
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    manifest = json.loads((bad / "realm.json").read_text())
    manifest["versions"]["onnxruntime"] = "1.18.0"
    (bad / "realm.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"realm\.json: its bytes do not hash to its own"):
        RealmRuntime(bad)  # an edit, not re-sealed
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    edit_manifest(bad, lambda m: m["versions"].update(onnxruntime="1.18.0"))
    # Training checkpoints load in their own ORT version only; the portable graph in any.
    with pytest.raises(ArtifactError, match=r"exported with onnxruntime 1\.18\.0"):
        RealmRuntime(bad, backend="ort-training")
    assert RealmRuntime(bad).backend == "onnx"
    (bad / "realm.json").write_text("{ truncated")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        RealmRuntime(bad)
    with pytest.raises(ArtifactError, match="not found"):
        RealmRuntime(tmp_path / "nothing-here")


def test_bad_constructor_arguments(digits_artifacts):
    with pytest.raises(ValueError, match="device"):
        RealmRuntime(digits_artifacts[0], device="tpu")
    with pytest.raises(ValueError, match="schedule"):
        RealmRuntime(digits_artifacts[0], schedule="sometimes")
    with pytest.raises(ValueError, match="threads"):
        RealmRuntime(digits_artifacts[0], threads=0)


@pytest.mark.skipif(has_cuda(), reason="this onnxruntime has CUDA; the error path is moot")
def test_cuda_without_the_gpu_build_says_what_to_install(digits_artifacts):
    with pytest.raises(RuntimeError, match=r"onnxruntime-gpu"):
        RealmRuntime(digits_artifacts[0], device="cuda")
    with pytest.raises(RuntimeError, match=r"onnxruntime-training==1\.19\.2"):
        RealmRuntime(digits_artifacts[0], device="cuda", backend="ort-training")


@pytest.mark.cuda
@pytest.mark.skipif(not has_cuda(), reason="needs onnxruntime-gpu and an NVIDIA GPU")
def test_cuda_agrees_with_the_sdk(digits_artifacts, digits_model, digits_stream):
    directory, config = digits_artifacts
    rt = RealmRuntime(directory, device="cuda", backend="onnx")
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    compare_twins(rt, adapter, digits_stream[0][:100], source=digits_model)


def test_runtime_side_settings_can_be_overridden(digits_artifacts, digits_stream):
    directory, _ = digits_artifacts
    with pytest.raises(ValueError, match="re-export"):
        RealmRuntime(directory, overrides={"method": "tent"})
    with pytest.raises(ValueError, match="diversity_margin"):
        RealmRuntime(directory, overrides={"diversity_margin": 2.0})
    rt = RealmRuntime(directory, threads=1, overrides={"diversity_margin": 1.0, "lr": 0.0})
    assert rt.backend == "onnx"  # the adapt graph is fed the changed settings
    source = rt.trainable_parameters()
    for i in range(10):
        assert rt.adapt(digits_stream[0][i : i + 1]).updated  # d = 1: S_div lets all through
    for n, v in rt.trainable_parameters().items():
        np.testing.assert_array_equal(v, source[n])  # lr = 0: θ unchanged
    assert rt.state.alpha != 0.15  # α, λ still learn at their own rate


OVERRIDDEN = {
    # hyper-parameters of the step and of the decision
    "step": ("realm", {"lr": 0.02, "momentum": 0.5, "diversity_margin": 0.7, "ema_beta": 0.8}),
    # REALM's guardrails: tighter, and the collapse guard switched on
    "guards": (
        "realm",
        {
            "guardrails": Guardrails(
                relax=0.3, anchor=0.02, max_drift=0.001, full_rate=0.8, collapse=0.9
            )
        },
    ),
    "episodic": ("realm", {"episodic": True, "diversity_margin": 0.9}),
    # a baseline exported without guardrails gets them, and a wider entropy cut
    "eata": ("eata", {"entropy_margin": 2.0, "guardrails": Guardrails(max_drift=0.002)}),
}


@pytest.mark.parametrize("case", list(OVERRIDDEN))
def test_overrides_run_in_the_adapt_graph_as_the_sdk_runs_them(
    case, digits_artifacts, digits_model, digits_stream, tmp_path
):
    """Settings changed at run time: the graph, fed them, takes the SDK's steps."""
    method, overrides = OVERRIDDEN[case]
    if method == "realm":  # the session's export
        directory, exported = digits_artifacts
    else:
        directory = tmp_path / "a"
        exported = export_digits(digits_model, directory, method=method)
    rt = RealmRuntime(directory, threads=1, overrides=overrides)
    assert rt.backend == "onnx"
    config = exported.with_overrides(**overrides)
    assert rt.config == config
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    compare_twins(rt, adapter, digits_stream[0][:120], source=digits_model)
    st = rt.state
    assert st.updates > 0
    if case == "guards":  # the changed guardrails acted
        assert st.drift_clips > 0
    if case == "eata":
        assert st.drift_clips > 0 and st.skipped_entropy < 120 - st.updates


def _drop_lr_batch_norm_slot(data: dict) -> None:
    data["adapt"]["settings"].remove("realm.lr_batch_norm")


def _settings_as_constants(data: dict) -> None:
    data["adapt"].pop("settings")
    data["adapt"]["state"] = [e for e in data["adapt"]["state"] if e["input"] != "realm.settings"]


# A manifest or graph of another version, each edit re-sealed: (edit, what the sentence names).
FOREIGN = {
    "no batch_norm list": (
        lambda data: data.pop("batch_norm"),
        r"missing fields \['batch_norm'\]: not a manifest of this realm-tta's export",
    ),
    "a settings slot missing": (
        _drop_lr_batch_norm_slot,
        r"the adapt graph is not this realm-tta's \(adapt\.settings lacks "
        r"\['realm\.lr_batch_norm'\] and has \[\]\)",
    ),
    "settings as constants": (
        _settings_as_constants,
        r"the adapt graph is not this realm-tta's \(adapt\.settings is missing or not a list\)",
    ),
    "slots in another order": (
        lambda data: data["adapt"]["settings"].reverse(),
        r"adapt\.settings lists the settings in another order",
    ),
    "another version": (
        lambda data: data.update(version=1),
        r"artifact format version 1 is not supported \(this realm-tta reads version 2\)",
    ),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_manifest_of_another_version_is_refused_in_one_sentence(case, digits_artifacts, tmp_path):
    """Every backend refuses it before any graph is read: the file, what is wrong, re-export."""
    edit, named = FOREIGN[case]
    directory = tmp_path / "a"
    shutil.copytree(digits_artifacts[0], directory)
    edit_manifest(directory, edit)
    for backend in ("auto", "onnx", "onnx-steps", "ort-training"):
        with pytest.raises(ArtifactError) as caught:
            RealmRuntime(directory, threads=1, backend=backend)
        message = str(caught.value)
        assert message.startswith(f"{directory / 'realm.json'}: "), message
        assert re.search(named, message) and "re-export the model" in message, message
        assert "\n" not in message


def test_ort_training_without_the_training_artifacts_says_to_re_export(digits_model, tmp_path):
    """An export not asked for them: the legacy backend names the flag, the default runs."""
    export_digits(digits_model, tmp_path / "a")
    assert not (tmp_path / "a" / "training_model.onnx").exists()
    with pytest.raises(ArtifactError) as caught:
        RealmRuntime(tmp_path / "a", backend="ort-training")
    message = str(caught.value)
    assert "this export has no training artifacts" in message and "\n" not in message
    assert "realm export --training" in message and "ExportOptions(training=True)" in message
    assert RealmRuntime(tmp_path / "a").backend == "onnx"


def test_auto_runs_the_adapt_graph_unless_asked_otherwise(digits_artifacts):
    """`auto` is the one adapt graph; a twin where an order of graphs is asked for."""
    directory, config = digits_artifacts
    assert RealmRuntime(directory, threads=1).backend == "onnx"
    changed = RealmRuntime(directory, threads=1, overrides={"lr": config.lr / 2})
    assert changed.backend == "onnx"
    ordered = RealmRuntime(directory, threads=1, schedule="train")
    assert (ordered.backend, ordered.schedule) == ("onnx-steps", "train")
    with pytest.raises(ValueError, match="leave schedule out"):
        RealmRuntime(directory, backend="onnx", schedule="train")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_first_runtime_of_a_process_is_freed(backend, digits_artifacts):
    """Dropping the runtime that first imported onnxruntime frees it (and its sessions).

    onnxruntime-training's import-time check keeps an exception whose traceback held every
    frame of the importing stack: the first RealmRuntime of a process lived until shutdown.
    Run in a fresh interpreter, where onnxruntime is not imported yet.
    """
    script = (
        "import gc, sys, weakref\n"
        "from realm_runtime import RealmRuntime\n"
        "assert 'onnxruntime' not in sys.modules\n"
        f"rt = RealmRuntime(sys.argv[1], backend={backend!r})\n"
        "ref = weakref.ref(rt)\n"
        "del rt\n"
        "gc.collect()\n"
        "print('freed' if ref() is None else 'alive')\n"
    )
    last = last_line_in_a_fresh_interpreter(script, str(digits_artifacts[0]), timeout=300)
    assert last == "freed"


def test_onnxruntime_beside_torch_imports_no_ortmodule(tmp_path):
    """ONNX Runtime (and its training artifacts, for the legacy export) imported where torch
    is: nothing on stderr. onnxruntime-training's import-time check would import ORTModule,
    hence torch's cpp_extension, which logs a CUDA_HOME warning amid `realm demo`'s bars."""
    import subprocess
    import sys

    script = (
        "import importlib.util, sys, torch\n"
        "from realm_runtime import onnxruntime_module, training_api\n"
        "onnxruntime_module()\n"
        "if importlib.util.find_spec('onnxruntime.training') is not None:\n"
        "    training_api()\n"
        "    from onnxruntime.training import artifacts\n"
        "print('torch.utils.cpp_extension' in sys.modules)\n"
    )
    # A CUDA toolkit where torch finds no CUDA runtime: what makes cpp_extension warn.
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
    assert done.stderr == ""
