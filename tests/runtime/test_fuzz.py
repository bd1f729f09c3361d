"""Property-based fuzzing (hypothesis) of everything a device reads from outside.

Three targets here: the input check of ``adapt``, manifests and artifact bytes; the fourth,
state files, is in test_checkpoint.py with the rest of the state-file tests. Each property
asserts the exception type, that the message names the problem (the file, the field or the
input's fault), and that the adaptation state is bit-identical afterwards. The default suite
runs ``FAST`` examples per target; the slow tier runs ``FULL`` (``make test-all``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import edit_manifest, json_values, snapshot, tiers
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from realm_runtime import ArtifactError, RealmRuntime

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


# ------------------------------------------------------------------ 2. manifests (re-sealed)


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


@pytest.mark.parametrize("slots", [True, ["realm.lr", "0"]], ids=["not-a-list", "unknown"])
def test_a_resealed_settings_list_is_named(digits_artifacts, artifact_copy, slots):
    """Two edits the full tier found: each an ArtifactError naming realm.json."""
    shutil.copy(digits_artifacts[0] / "realm.json", artifact_copy / "realm.json")
    edit_manifest(artifact_copy, lambda m: m["adapt"].update(settings=slots))
    with pytest.raises(ArtifactError, match=r"realm\.json: the adapt graph is not this"):
        RealmRuntime(artifact_copy, threads=1)


# ------------------------------------------------------------------ 3. artifact bytes

LISTED = ("step_model.onnx", "forward_model.onnx", "source_params.npy", "adapt_model.onnx",
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
