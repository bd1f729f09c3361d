"""The adaptation-state file, in one place: its format, its checks, and its moves between the twins.

``RealmAdapter.save`` and ``RealmRuntime.save`` write one format (``.npz`` of named arrays and a
JSON header, ``realm_runtime.contract``'s ``save_state``/``load_state``), atomically; either
twin restores what either wrote. Here: save → restore → continue equals an uninterrupted run in
each twin and across them; a crash before the rename leaves the old file; a state that does
not fit (method, names, artifacts, a damaged or oversized file) is refused with a
``ValueError`` naming the file and changes nothing. The JavaScript reader and writer of the
same format: test_state_file_js.py.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import struct
import zipfile

import numpy as np
import pytest
import torch
from helpers import (
    CLASSES,
    D64,
    DIM,
    Tiny,
    compare_twins,
    edit_manifest,
    export_digits,
    json_values,
    snapshot,
    tiers,
    tiny_config,
    tiny_sample,
)
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch import nn

from realm_runtime import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmRuntime, read_state
from realm_sdk import RealmAdapter

# ------------------------------------------------------------------ 1. save → restore → continue


def _stream(n):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(1, DIM, generator=g, dtype=D64) * (1 + 3 * (i % 5 == 0)) for i in range(n)]


def test_sdk_save_restore_continue_equals_uninterrupted(tmp_path):
    cfg = tiny_config(momentum=0.9)
    stream = _stream(40)
    straight = RealmAdapter(Tiny(), cfg)
    for x in stream:
        straight.adapt(x)
    first = RealmAdapter(Tiny(), cfg)
    for x in stream[:20]:
        first.adapt(x)
    path = tmp_path / "state.npz"
    first.save(path)
    resumed = RealmAdapter(Tiny(), cfg)  # a new process: fresh source model
    resumed.restore(path)
    for x in stream[20:]:
        resumed.adapt(x)
    assert snapshot(resumed, counters=False) == snapshot(straight, counters=False)
    a, b = straight.state, resumed.state
    for counter in ("samples", "updates", "updated_samples", "skipped_diversity"):
        assert getattr(a, counter) == getattr(b, counter), counter
    assert resumed.state.updates == straight.state.updates > 0
    assert 0 < resumed.state.skipped_diversity == straight.state.skipped_diversity


def test_runtime_save_restore_continue_equals_uninterrupted(
    digits_artifacts, digits_stream, tmp_path
):
    directory, _ = digits_artifacts
    xs = digits_stream[0][:60]
    straight = RealmRuntime(directory, threads=1)
    for i in range(60):
        straight.adapt(xs[i : i + 1])
    first = RealmRuntime(directory, threads=1)
    for i in range(30):
        first.adapt(xs[i : i + 1])
    first.save(tmp_path / "s.npz")
    del first
    resumed = RealmRuntime(directory, threads=1)
    resumed.restore(tmp_path / "s.npz")
    for i in range(30, 60):
        resumed.adapt(xs[i : i + 1])
    assert snapshot(resumed) == snapshot(straight)


@pytest.fixture(scope="module")
def imagenet_case(tmp_path_factory):
    """A parity case on the ImageNet preset (momentum 0.9, C = λ), exported once."""
    from realm_tools.parity import CASES, ExportCache, build_case

    case = next(c for c in CASES if c.name == "digits-imagenet-realm")
    model, config, shape = build_case(case)
    exports = ExportCache(tmp_path_factory.mktemp("imagenet-case"))
    directory, _ = exports.artifacts(case.model, model, config, shape, training=True)
    return case, model, config, shape, directory


@pytest.mark.parity
@pytest.mark.parametrize("side", ["onnx", "ort-training", "sdk"])
def test_save_restore_continue_is_identical_on_each_side(side, imagenet_case, tmp_path):
    """The same on a parity case (ImageNet preset: momentum 0.9, C = λ), in each twin."""
    from realm_tools.parity import make_stream

    case, model, config, shape, directory = imagenet_case
    stream = make_stream(case, shape)

    def make():
        if side != "sdk":
            return RealmRuntime(directory, threads=1, backend=side)
        return RealmAdapter(copy.deepcopy(model), config)

    def feed(obj, xs):
        for x in xs:
            obj.adapt(x if side != "sdk" else torch.from_numpy(x))

    straight = make()
    feed(straight, stream)
    first = make()
    feed(first, stream[:60])
    first.save(tmp_path / "s.npz")
    resumed = make()
    resumed.restore(tmp_path / "s.npz")
    feed(resumed, stream[60:])
    a, b = straight.trainable_parameters(), resumed.trainable_parameters()
    for n in a:
        np.testing.assert_array_equal(np.asarray(a[n]), np.asarray(b[n]))
    va, vb = straight.momentum_buffers(), resumed.momentum_buffers()
    for n in va:
        np.testing.assert_array_equal(np.asarray(va[n]), np.asarray(vb[n]))
    sa, sb = straight.state, resumed.state
    assert (sa.alpha, sa.lam, sa.updates, sa.samples) == (sb.alpha, sb.lam, sb.updates, sb.samples)
    np.testing.assert_array_equal(sa.ema, sb.ema)
    assert sa.updates > 0 and sa.alpha_momentum != 0


def test_states_move_between_sdk_and_runtime(
    digits_artifacts, digits_model, digits_stream, tmp_path
):
    directory, config = digits_artifacts
    xs = digits_stream[0][:80]
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    for i in range(40):
        adapter.adapt(torch.from_numpy(xs[i : i + 1]))
    adapter.save(tmp_path / "sdk.npz")
    rt = RealmRuntime(directory, threads=1)
    rt.restore(tmp_path / "sdk.npz")  # adapted in torch, resumed on the device
    compare_twins(rt, adapter, xs[40:], source=digits_model)
    rt.save(tmp_path / "rt.npz")
    again = RealmAdapter(copy.deepcopy(digits_model), config)
    again.restore(tmp_path / "rt.npz")  # and back
    for n, v in again.trainable_parameters().items():
        np.testing.assert_array_equal(v.numpy(), rt.trainable_parameters()[n])


# ------------------------------------------------------------------ 2. atomic writes


def _save_crashes_before_the_rename(twin, path, monkeypatch) -> None:
    """save() over ``path`` with os.replace failing: the old file stays whole, no temp file."""
    good = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("simulated crash between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        twin.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_sdk_save_is_atomic(tmp_path, monkeypatch):
    adapter = RealmAdapter(Tiny(), tiny_config())
    path = tmp_path / "state.npz"
    adapter.save(path)
    adapter.adapt(tiny_sample(1))
    _save_crashes_before_the_rename(adapter, path, monkeypatch)
    fresh = RealmAdapter(Tiny(), tiny_config())
    fresh.restore(path)
    assert fresh.state.samples == 0


def test_runtime_save_survives_a_crash_before_rename(runtime, digits_stream, tmp_path, monkeypatch):
    path = tmp_path / "state.npz"
    runtime.save(path)
    runtime.adapt(digits_stream[0][10:11])
    _save_crashes_before_the_rename(runtime, path, monkeypatch)
    fresh = RealmRuntime(runtime.directory, threads=1, backend=runtime.backend)
    fresh.restore(path)
    assert fresh.state.samples == 5


# ------------------------------------------------------------------ 3. the header: a state must fit


def test_sdk_restore_refuses_a_mismatching_state(tmp_path):
    adapter = RealmAdapter(Tiny(), tiny_config())
    adapter.adapt(tiny_sample(1))
    path = tmp_path / "s.npz"
    adapter.save(path)
    tent = RealmAdapter(Tiny(), tiny_config(method="tent"))
    with pytest.raises(ValueError, match="method"):
        tent.restore(path)
    other = RealmAdapter(
        nn.Sequential(
            nn.Linear(DIM, DIM, dtype=D64),
            nn.LayerNorm(DIM, dtype=D64),
            nn.Linear(DIM, CLASSES, dtype=D64),
        ),
        tiny_config(),
    )
    before = snapshot(other, counters=False)
    with pytest.raises(ValueError, match="trainable parameter names"):
        other.restore(path)
    assert snapshot(other, counters=False) == before
    with pytest.raises(FileNotFoundError):
        adapter.restore(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable"):
        adapter.restore(tmp_path / "junk.npz")


def test_runtime_restore_refuses_a_mismatching_state(runtime, digits_model, tmp_path):
    export_digits(digits_model, tmp_path / "tent", method="tent")
    tent = RealmRuntime(tmp_path / "tent", threads=1)
    tent.save(tmp_path / "tent.npz")
    before = snapshot(runtime)
    with pytest.raises(ValueError, match="method"):
        runtime.restore(tmp_path / "tent.npz")
    with pytest.raises(FileNotFoundError):
        runtime.restore(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match="not a readable"):
        runtime.restore(tmp_path / "junk.npz")
    assert snapshot(runtime) == before


def test_a_state_file_of_another_version_is_refused_in_one_sentence(runtime, tmp_path):
    """One version of the state file is read: another names the file, the version, the fix."""
    from realm_runtime import read_state, write_state

    runtime.save(tmp_path / "s.npz")
    arrays, header = read_state(tmp_path / "s.npz")
    old = tmp_path / "old.npz"
    write_state(old, arrays, {**header, "version": 2})
    before = snapshot(runtime)
    with pytest.raises(ValueError) as caught:
        runtime.restore(old)
    message = str(caught.value)
    assert message == (
        f"{old}: state format version 2 is not this library's (3): save the state with this "
        "realm-tta, or start from the export"
    )
    assert snapshot(runtime) == before


def test_a_state_names_its_artifacts(digits_artifacts, digits_model, tmp_path, digits_stream):
    """restore() refuses a state saved with other artifacts, accepts the SDK's (none named)."""
    other = tmp_path / "other"
    shutil.copytree(digits_artifacts[0], other)  # another export of the same model: its
    edit_manifest(other, lambda m: m["model"].update(name="another"))  # manifest differs
    a, b = RealmRuntime(digits_artifacts[0]), RealmRuntime(other)
    for x in digits_stream[0][:5]:
        a.adapt(np.ascontiguousarray(x[None]))
    a.save(tmp_path / "a.npz")
    assert read_state(tmp_path / "a.npz")[1]["artifacts"] == a.manifest.digest
    before = b.trainable_parameters()
    with pytest.raises(ValueError, match="saved with other artifacts"):
        b.restore(tmp_path / "a.npz")
    for name, value in b.trainable_parameters().items():
        np.testing.assert_array_equal(value, before[name])
    assert b.state.samples == 0


# ------------------------------------------------------------------ 4. damaged files (fuzzing)
# Truncated, flipped, spliced; members of another dtype or shape, a pickled member, extra
# members, any JSON as the header, and a zip bomb (a directory that declares an oversized
# member): the property, FAST examples here and FULL in the slow tier.


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
