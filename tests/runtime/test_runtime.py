"""RealmRuntime on both backends, against the SDK and under bad input.

Saving and restoring a state (also across the twins): test_checkpoint.py. Settings overridden
at run time: test_runtime_overrides.py. Artifacts, manifests and arguments the runtime refuses:
test_runtime_refusals.py.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading

import numpy as np
import pytest
import torch
from helpers import (
    BACKENDS,
    compare_twins,
    export_digits,
    has_cuda,
    last_line_in_a_fresh_interpreter,
    snapshot,
)

from realm_runtime import RealmRuntime
from realm_sdk import RealmAdapter

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
        (dict(method="eta"), 60, 1, "onnx"),
        (dict(method="eta"), 60, 1, "ort-training"),
        # B > 1 (per-sample S_div against one EMA, mean loss): the training artifacts only;
        # the portable step graph takes one sample per step (test_portable_backend.py).
        (dict(), 40, 4, "ort-training"),
        (dict(method="eta"), 40, 4, "ort-training"),
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

    def poisoned(x, weights, eata_factor, sample=0):
        # What each backend reports for a NaN gradient (its own detection: test_portable_backend.py
        # for the step graph's realm.finite, the numpy check on ORT's gradients here).
        candidate = real(x, weights, eata_factor, sample)
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


@pytest.mark.cuda
@pytest.mark.skipif(not has_cuda(), reason="needs onnxruntime-gpu and an NVIDIA GPU")
def test_cuda_agrees_with_the_sdk(digits_artifacts, digits_model, digits_stream):
    directory, config = digits_artifacts
    rt = RealmRuntime(directory, device="cuda", backend="onnx")
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    compare_twins(rt, adapter, digits_stream[0][:100], source=digits_model)


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
