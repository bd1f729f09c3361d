"""The ONNX Runtime sessions of the onnx backend and of its twin: ``session_config`` reaches
them (and is read back from the sessions ORT made), the defaults (workers that stop spinning,
one shared CPU arena, no memory-pattern planner, lean sessions for GEMM-heavy weights) hold
unless told otherwise, and none of these switches changes a decision or a number beyond
kernel rounding.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers import edit_manifest

from realm_runtime import RealmRuntime


@pytest.mark.parametrize("backend", ["onnx", "ort-training"])
def test_session_config_reaches_onnx_runtime(backend, digits_artifacts, digits_stream):
    """``session_config`` (e.g. pre-packing off, to save memory) changes nothing but cost."""
    import numpy as np

    plain = RealmRuntime(digits_artifacts[0], threads=1, backend=backend)
    lean = RealmRuntime(
        digits_artifacts[0],
        threads=1,
        backend=backend,
        session_config={"session.disable_prepacking": "1"},
    )
    xs = digits_stream[0][:30]
    for i in range(30):
        a, b = plain.adapt(xs[i : i + 1]), lean.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        np.testing.assert_allclose(a.logits, b.logits, rtol=0, atol=1e-5)
    assert plain.state.updates == lean.state.updates > 0
    key = "session.disable_prepacking"
    if backend == "onnx":
        assert _config_entry(lean, key, xs[:1]) == ["1", "1"]
        with pytest.raises(RuntimeError, match="does not have configuration"):
            _config_entry(plain, key, xs[:1])  # ORT's own answer for an entry never set
    else:  # ORT's training Module offers no read-back: the options it was handed
        assert lean._backend._module._session_options.get_session_config_entry(key) == "1"
    with pytest.raises(ValueError, match="session_config must map str to str"):
        RealmRuntime(digits_artifacts[0], session_config={"session.disable_prepacking": 1})


def _config_entry(rt, key, x):
    """``key`` as ONNX Runtime holds it for the onnx backend's two sessions: the adapt (or, for
    the twin, the step) graph's and the forward graph's."""
    rt.predict(x)  # makes the forward session, made on first use
    b = rt._backend  # white-box: ORT's own objects
    sessions = [s for s in (b._adapt, b._step, b._forward) if s is not None]
    assert len(sessions) == 2
    return [s.get_session_options().get_session_config_entry(key) for s in sessions]


def test_sessions_stop_spinning_after_a_run_unless_told_otherwise(digits_artifacts, digits_stream):
    """Both graphs' sessions carry DEFAULT_SESSION_CONFIG; session_config overrides it.

    ORT's workers spinning on after a Run took the cores from the runtime's next graph
    (docs/BENCHMARKS.md); the entry is read back from the sessions ONNX Runtime made.
    """
    key = "session.force_spinning_stop"
    assert dict(RealmRuntime.DEFAULT_SESSION_CONFIG) == {key: "1"}
    x = digits_stream[0][:1]
    assert _config_entry(RealmRuntime(digits_artifacts[0], backend="onnx"), key, x) == ["1", "1"]
    spinning = RealmRuntime(digits_artifacts[0], backend="onnx", session_config={key: "0"})
    assert _config_entry(spinning, key, x) == ["0", "0"]


def test_onnx_sessions_share_one_arena_unless_told_otherwise(digits_artifacts, digits_stream):
    """The onnx backend's sessions allocate from ORT's shared CPU arena (less peak memory).

    Two runtimes, one on the shared arena and one with an arena per session, run the same
    stream side by side (so the shared arena is in use by the other sessions meanwhile) and
    agree bit for bit: where memory comes from changes nothing in the numbers.
    """
    key = "session.use_env_allocators"
    xs = digits_stream[0][:40]
    shared = RealmRuntime(digits_artifacts[0], backend="onnx-steps")
    own = RealmRuntime(digits_artifacts[0], backend="onnx-steps", session_config={key: "0"})
    assert _config_entry(shared, key, xs[:1]) == ["1", "1"]
    assert _config_entry(own, key, xs[:1]) == ["0", "0"]
    for i in range(len(xs)):
        a, b = shared.adapt(xs[i : i + 1]), own.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        assert np.array_equal(a.logits, b.logits)
    assert shared.state.updates == own.state.updates > 0
    for name, value in shared.trainable_parameters().items():
        assert np.array_equal(value, own.trainable_parameters()[name]), name


def test_planner_and_arena_switches_reach_the_sessions_and_change_no_number(
    digits_artifacts, digits_stream
):
    """``realm.memory_pattern`` and ``realm.cpu_arena`` set the SessionOptions switches ORT
    keeps outside its entries; the runtime reads them and ORT never sees them."""
    entries = {"realm.memory_pattern": "0", "realm.cpu_arena": "0"}
    xs = digits_stream[0][:30]
    plain = RealmRuntime(digits_artifacts[0], backend="onnx")
    bare = RealmRuntime(digits_artifacts[0], backend="onnx", session_config=entries)
    for i in range(len(xs)):
        a, b = plain.adapt(xs[i : i + 1]), bare.adapt(xs[i : i + 1])
        assert a.updated == b.updated
        assert np.array_equal(a.logits, b.logits)
    assert plain.state.updates == bare.state.updates > 0
    bare.predict(xs[:1])  # makes the forward session too
    b = bare._backend  # white-box: ORT's own options
    options = [s.get_session_options() for s in (b._adapt, b._forward)]
    assert [(o.enable_mem_pattern, o.enable_cpu_mem_arena) for o in options] == [(False, False)] * 2
    for o in options:
        assert o.get_session_config_entry("session.use_env_allocators") == "0"
        with pytest.raises(RuntimeError, match="does not have configuration"):
            o.get_session_config_entry("realm.cpu_arena")


def test_gemm_heavy_weights_make_lean_sessions(digits_artifacts, digits_stream, tmp_path):
    """Where many weights feed matrix products: no pre-packing (and, as everywhere, no
    memory-pattern planner unless session_config turns it on).

    ORT's pre-packed copies would double a transformer's weights per session. The rule reads
    the manifest's ``gemm_bytes``; the same stream takes the same decisions (plain and
    pre-packed GEMM kernels sum in another order: logits within 1e-5), and session_config
    still decides where it names the entry.
    """
    key = "session.disable_prepacking"
    copy = tmp_path / "gemm-heavy"
    shutil.copytree(digits_artifacts[0], copy)
    edit_manifest(copy, lambda m: m["portable"]["weights"].update(gemm_bytes=65 << 20))
    xs = digits_stream[0][:30]
    lean = RealmRuntime(copy, backend="onnx-steps")
    usual = RealmRuntime(digits_artifacts[0], backend="onnx-steps")
    asked = RealmRuntime(copy, backend="onnx-steps", session_config={key: "0"})
    assert _config_entry(lean, key, xs[:1]) == ["1", "1"]
    assert _config_entry(asked, key, xs[:1]) == ["0", "0"]
    assert RealmRuntime(digits_artifacts[0]).manifest.portable["weights"]["gemm_bytes"] < 1 << 20
    usual.predict(xs[:1])  # its forward session too
    planned = RealmRuntime(
        digits_artifacts[0], backend="onnx-steps", session_config={"realm.memory_pattern": "1"}
    )
    planned.predict(xs[:1])
    for rt, pattern in ((lean, False), (usual, False), (asked, False), (planned, True)):
        sessions = (rt._backend._step, rt._backend._forward)  # white-box: ORT's own objects
        assert [s.get_session_options().enable_mem_pattern for s in sessions] == [pattern] * 2
    for i in range(len(xs)):
        a, b = lean.adapt(xs[i : i + 1]), usual.adapt(xs[i : i + 1])
        assert a.updated == b.updated and abs(a.logits - b.logits).max() < 1e-5
    assert lean.state.updates == usual.state.updates > 0
    ours, theirs = lean.trainable_parameters(), usual.trainable_parameters()
    assert max(abs(ours[n] - theirs[n]).max() for n in ours) < 1e-6
