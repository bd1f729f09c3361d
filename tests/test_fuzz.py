"""Issue 13: property-based fuzzing (hypothesis) of everything a device reads from outside.

Four targets: the input check of ``adapt``, state files, manifests and artifact bytes. Each
property asserts the exception type, that the message names the problem (the file, the field
or the input's fault), and that the adaptation state is bit-identical afterwards. The default
suite runs ``FAST`` examples per target; the slow tier runs ``FULL`` (``make test-all``).
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import edit_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from realm_runtime import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, ArtifactError, RealmRuntime

FAST = 150  # examples per target in `make test`
FULL = 1000  # examples per target in the slow tier


def tiers(prop: Callable, **strategies: st.SearchStrategy) -> tuple[Callable, Callable]:
    """The same property as a fast test and a slow-tier one with more examples."""
    common = {
        "deadline": None,
        "derandomize": True,  # the same examples on every run: a failure reproduces
        "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        "database": None,
    }
    fast = settings(max_examples=FAST, **common)(given(**strategies)(prop))
    full = pytest.mark.slow(settings(max_examples=FULL, **common)(given(**strategies)(prop)))
    return fast, full


def snapshot(rt: RealmRuntime) -> tuple:
    """Everything adapt/restore may change, as bytes: equal snapshots are identical states."""
    s = rt.state
    return (
        {k: v.tobytes() for k, v in rt.trainable_parameters().items()},
        {k: v.tobytes() for k, v in rt.momentum_buffers().items()},
        None if s.ema is None else s.ema.tobytes(),
        s.alpha,
        s.lam,
        (s.samples, s.updates, s.skipped_diversity, s.skipped_entropy, s.skipped_nonfinite),
    )


@pytest.fixture(scope="module")
def adapted(digits_artifacts, digits_stream, tmp_path_factory):
    """A runtime some samples into the stream, and the state file it saved."""
    rt = RealmRuntime(digits_artifacts[0], schedule="infer-first", threads=1)
    for x in digits_stream[0][:12]:
        rt.adapt(np.ascontiguousarray(x[None]))
    path = tmp_path_factory.mktemp("state") / "good.npz"
    rt.save(path)
    return rt, path


# ------------------------------------------------------------------ 1. adapt()'s input check

INPUT_FAULTS = ("numpy.ndarray", "dtype", "byte order", "rank", "shape", "batch", "contiguous",
                "non-finite")  # fmt: skip


@st.composite
def bad_inputs(draw) -> object:
    kind = draw(st.sampled_from(["dtype", "shape", "nonfinite", "layout", "object"]))
    if kind == "object":
        return draw(st.one_of(st.none(), st.integers(), st.text(max_size=5),
                              st.lists(st.floats(), max_size=4)))  # fmt: skip
    if kind == "dtype":
        dtype = draw(st.sampled_from(["float64", "float16", "int32", "uint8", "bool", "complex64",
                                      ">f4"]))  # fmt: skip
        return np.zeros((1, 1, 32, 32), dtype=dtype)
    if kind == "shape":
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=40))
        if shape == (1, 1, 32, 32):
            shape = (0, 1, 32, 32)
        return np.zeros(shape, np.float32)
    if kind == "layout":
        return np.zeros((1, 1, 32, 64), np.float32)[..., ::2]  # right shape, not contiguous
    x = draw(hnp.arrays(np.float32, (1, 1, 32, 32), elements=st.floats(-5, 5, width=32)))
    positions = draw(st.lists(st.integers(0, x.size - 1), min_size=1, max_size=5))
    x.reshape(-1)[positions] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return x


def _input_property(adapted, x) -> None:
    rt, _ = adapted
    before = snapshot(rt)
    with pytest.raises(ValueError) as raised:
        rt.adapt(x)  # type: ignore[arg-type]
    message = str(raised.value)
    assert any(fault in message for fault in INPUT_FAULTS), message
    assert snapshot(rt) == before


test_input_check, test_input_check_full = tiers(_input_property, x=bad_inputs())


# ------------------------------------------------------------------ 2. state files


def _zip_with(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(a: np.ndarray, *, pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, a, allow_pickle=pickle)
    return buffer.getvalue()


def _members(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        return {m.filename: archive.read(m) for m in archive.infolist()}


def _bomb(raw: bytes) -> bytes:
    """The same zip whose central directory declares an absurd size for its first member."""
    data = bytearray(raw)
    at = data.find(b"PK\x01\x02")
    data[at + 24 : at + 28] = struct.pack("<I", 0xFFFFFFF0)  # uncompressed size
    return bytes(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def damaged_states(draw, good: bytes) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "splice", "member", "header", "bomb",
                                 "pickle", "extra"]))  # fmt: skip
    if kind == "truncate":
        return good[: draw(st.integers(0, len(good) - 1))]
    if kind == "flip":
        data = bytearray(good)
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return bytes(data)
    if kind == "splice":
        at = draw(st.integers(0, len(good) - 1))
        return good[:at] + draw(st.binary(min_size=1, max_size=64)) + good[at + 1 :]
    members = _members(good)
    name = draw(st.sampled_from(sorted(members)))
    if kind == "member":  # a member of another dtype or shape
        dtype = draw(st.sampled_from(["float64", "int64", "bool", "complex64", "float16"]))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
        members[name] = _npy(np.zeros(shape, dtype))
    elif kind == "header":
        header = draw(json_values)
        members["__header__.npy"] = _npy(np.frombuffer(json.dumps(header).encode(), np.uint8))
    elif kind == "pickle":
        members[name] = _npy(np.array([{"a": 1}, None], dtype=object), pickle=True)
    elif kind == "extra":
        members[draw(st.sampled_from(["notes.txt", "x.npy/", "__header__.npy"]))] = b"\x93NUMPY"
    else:
        return _bomb(good)
    return _zip_with(members)


def _state_property(adapted, tmp_path_factory, data) -> None:
    rt, good_path = adapted
    good = good_path.read_bytes()
    damaged = data.draw(damaged_states(good))
    path = tmp_path_factory.getbasetemp() / "fuzz-state.npz"
    path.write_bytes(damaged)
    before = snapshot(rt)
    try:
        rt.restore(path)
    except ValueError as exc:
        assert str(path) in str(exc), exc  # names the file ...
        assert snapshot(rt) == before  # ... and changes nothing
    else:
        # A change that leaves a valid state (a zip timestamp, an array stored as float64):
        # what was restored must be a state the runtime could have reached.
        s = rt.state
        assert all(np.isfinite(v).all() for v in rt.trainable_parameters().values())
        assert ALPHA_MIN <= s.alpha <= ALPHA_MAX and s.lam >= LAMBDA_MIN, (s.alpha, s.lam)
        rt.restore(good_path)  # the next example starts from the same state


test_state_files, test_state_files_full = tiers(_state_property, data=st.data())


# ------------------------------------------------------------------ 3. manifests (re-sealed)


@st.composite
def manifest_edits(draw) -> Callable[[dict], None]:
    """Replace or delete one value somewhere in the manifest's JSON tree."""
    steps = draw(st.lists(st.integers(0, 50), min_size=1, max_size=4))
    delete = draw(st.booleans())
    value = draw(json_values)

    def edit(manifest: dict) -> None:
        node: dict | list = manifest
        for step in steps:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                return
            key = keys[step % len(keys)]
            child = node[key]  # type: ignore[index]
            if not isinstance(child, dict | list) or step == steps[-1]:
                if delete and isinstance(node, dict):
                    del node[key]
                else:
                    node[key] = value  # type: ignore[index]
                return
            node = child

    return edit


@pytest.fixture(scope="module")
def artifact_copy(digits_artifacts, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("fuzz") / "artifacts"
    shutil.copytree(digits_artifacts[0], copy)
    return copy


def _manifest_property(digits_artifacts, artifact_copy, edit) -> None:
    shutil.copy(digits_artifacts[0] / "realm.json", artifact_copy / "realm.json")
    edit_manifest(artifact_copy, edit)
    try:
        RealmRuntime(artifact_copy, threads=1)
    except ArtifactError as exc:
        assert str(artifact_copy) in str(exc) or "realm.json" in str(exc), exc
    except ValueError as exc:  # a config value out of range: RealmConfig's own message
        assert "config" in str(exc).lower() or "must" in str(exc), exc


test_manifests, test_manifests_full = tiers(_manifest_property, edit=manifest_edits())


# ------------------------------------------------------------------ 4. artifact bytes

LISTED = ("step_model.onnx", "forward_model.onnx", "source_params.npy", "decide_model.onnx",
          "checkpoint", "training_model.onnx", "eval_model.onnx", "inference_model.onnx",
          "realm.json")  # fmt: skip


def _bytes_property(digits_artifacts, artifact_copy, name, where, mask) -> None:
    shutil.copy(digits_artifacts[0] / "realm.json", artifact_copy / "realm.json")
    target = artifact_copy / name
    original = (digits_artifacts[0] / name).read_bytes()
    data = bytearray(original)
    data[int(where * (len(data) - 1))] ^= mask
    target.write_bytes(bytes(data))
    try:
        with pytest.raises(ArtifactError, match=rf"{name}"):
            RealmRuntime(artifact_copy, threads=1)
    finally:
        target.write_bytes(original)


test_artifact_bytes, test_artifact_bytes_full = tiers(
    _bytes_property, name=st.sampled_from(LISTED), where=st.floats(0, 1), mask=st.integers(1, 255)
)
