"""A one-byte change anywhere in an artifact directory is refused, naming the file.

The manifest seals itself (``manifest_sha256``: the SHA-256 of its own bytes with that value
as zeros) and lists the SHA-256 of every other file. Every byte of the manifest is flipped
here against the seal; then one flip per class of position (the manifest's header, a JSON
value, the digest itself, a graph, the training checkpoint, the starting parameters) against
``RealmRuntime``. The Node and browser clients get the same classes in
tests/clients/test_node.py and tests/clients/test_web.py.
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import edit_manifest, flip, manifest_offset

from realm_runtime import ArtifactError, RealmRuntime
from realm_runtime.contract import DIGEST_KEY, parse_manifest


def test_every_byte_of_the_manifest_is_sealed(digits_artifacts):
    raw = (digits_artifacts[0] / "realm.json").read_bytes()
    parse_manifest(raw)  # the untouched file passes
    for offset in range(len(raw)):
        for mask in (0x01, 0x20):  # a low bit, and the case / space bit
            bad = bytearray(raw)
            bad[offset] ^= mask
            with pytest.raises(ArtifactError):
                parse_manifest(bytes(bad))


@pytest.mark.parametrize(
    "target",
    [
        *("header", "json value", "file digest", "own digest", "white space"),
        *("step_model.onnx", "weights.bin", "adapt_model.onnx", "checkpoint"),
        "source_params.npy",
    ],
)
def test_runtime_refuses_a_flipped_byte(digits_artifacts, tmp_path, target):
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    if target.count(".") or target == "checkpoint":
        size = (copy / target).stat().st_size
        for offset in (5, size // 2, size - 3):  # header, middle, end of the file
            shutil.copy(digits_artifacts[0] / target, copy / target)
            flip(copy / target, offset)
            with pytest.raises(ArtifactError, match=rf"{target}: SHA-256 .* does not match"):
                RealmRuntime(copy)
    else:
        offset = manifest_offset((copy / "realm.json").read_bytes(), target)
        flip(copy / "realm.json", offset)
        with pytest.raises(ArtifactError, match=r"realm\.json"):
            RealmRuntime(copy)


def test_a_resealed_edit_passes_the_seal_but_not_the_file_list(digits_artifacts, tmp_path):
    """The seal stops corruption and careless edits; a re-sealed edit of a listed file's
    digest still fails on that file; what a re-sealed manifest edit *can* change is what
    signatures are for (tests/runtime/test_signing.py)."""
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    edit_manifest(copy, lambda m: m["files"].update({"step_model.onnx": "0" * 64}))
    with pytest.raises(ArtifactError, match=r"step_model\.onnx: SHA-256"):
        RealmRuntime(copy)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(files=["step_model.onnx"]), r"field 'files' is list"),
        (lambda m: m.update(num_classes="10"), r"field 'num_classes' is str"),
        (lambda m: m.update(num_classes=True), r"field 'num_classes' is bool"),
        (lambda m: m["files"].update({"../outside": "0" * 64}), r"plain names"),
        (lambda m: m["trainable"].update(x="3"), r"integer shapes"),
        (lambda m: m.update(input=[1, 2]), r"field 'input' is list"),
        (lambda m: m.pop("files"), r"missing fields \['files'\]"),
    ],
)
def test_wrong_manifest_fields_are_named(digits_artifacts, tmp_path, edit, message):
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    edit_manifest(copy, edit)
    with pytest.raises(ArtifactError, match=message):
        RealmRuntime(copy)


def test_an_old_or_oversized_manifest_is_named(digits_artifacts, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(digits_artifacts[0], copy)
    data = json.loads((copy / "realm.json").read_text())
    data["version"] = 1
    del data[DIGEST_KEY]
    (copy / "realm.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=r"version 1 is not supported .* re-export"):
        RealmRuntime(copy)
    with open(copy / "realm.json", "wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: nothing is actually written
    with pytest.raises(ArtifactError, match=r"more than the .* this file can hold"):
        RealmRuntime(copy)
