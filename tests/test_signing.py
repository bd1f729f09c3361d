"""Issue 13: signed artifacts (Ed25519, realm.sig) in Python; the browser's in test_web.py."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest
from conftest import edit_manifest, export_digits

from realm_runtime import ArtifactError, RealmRuntime, generate_keypair, sign_manifest


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return generate_keypair(folder / "vendor"), generate_keypair(folder / "stranger")


@pytest.fixture(scope="module")
def signed(digits_model, keys, tmp_path_factory):
    directory = tmp_path_factory.mktemp("signed") / "artifacts"
    from realm_export import export_realm_artifacts
    from realm_sdk import RealmConfig

    (vendor_key, _), _ = keys
    export_realm_artifacts(
        digits_model,
        directory,
        config=RealmConfig.preset("cifar", num_classes=10),
        input_shape=(1, 1, 32, 32),
        signing_key=vendor_key,
        validate=False,
    )
    return directory


def test_keygen_writes_a_private_key_only_its_owner_reads(keys, tmp_path):
    (private, public), _ = keys
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert len(public.read_text().strip()) == 44  # base64 of 32 bytes
    with pytest.raises(FileExistsError, match="never overwritten"):
        generate_keypair(private.with_suffix(""))
    done = subprocess.run(
        [sys.executable, "-m", "realm_sdk._cli", "keygen", str(tmp_path / "k")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k.key").is_file() and (tmp_path / "k.pub").is_file()


def test_signed_artifacts_round_trip(signed, keys):
    (_, vendor_pub), _ = keys
    rt = RealmRuntime(signed, trusted_keys=[vendor_pub])  # a .pub file
    assert rt.manifest.digest
    RealmRuntime(signed, trusted_keys=[vendor_pub.read_text()])  # its base64 text
    RealmRuntime(signed)  # no keys trusted: the signature present must still verify


def test_wrong_key_missing_signature_and_edits_are_refused(signed, keys, tmp_path):
    (_, vendor_pub), (stranger_key, stranger_pub) = keys
    with pytest.raises(ArtifactError, match=r"realm\.sig: signed by key .* not among"):
        RealmRuntime(signed, trusted_keys=[stranger_pub])
    copy = tmp_path / "copy"
    shutil.copytree(signed, copy)
    # A re-sealed edit of the manifest (what the seal alone cannot stop): the signature can.
    edit_manifest(copy, lambda m: m["config"].update(lr=0.5))
    with pytest.raises(ArtifactError, match=r"realm\.sig: the signature does not verify"):
        RealmRuntime(copy, trusted_keys=[vendor_pub])
    with pytest.raises(ArtifactError, match=r"realm\.sig: the signature does not verify"):
        RealmRuntime(copy)  # present, so checked even without trusted keys
    # Re-signed by someone else: verifies, but not with a trusted key.
    sign_manifest(copy, stranger_key)
    with pytest.raises(ArtifactError, match="not among the trusted keys"):
        RealmRuntime(copy, trusted_keys=[vendor_pub])
    (copy / "realm.sig").unlink()
    with pytest.raises(ArtifactError, match=r"realm\.sig not found: these artifacts are unsigned"):
        RealmRuntime(copy, trusted_keys=[vendor_pub])


def test_a_damaged_signature_file_is_named(signed, keys, tmp_path):
    (_, vendor_pub), _ = keys
    copy = tmp_path / "copy"
    shutil.copytree(signed, copy)
    raw = (copy / "realm.sig").read_bytes()
    for offset in range(0, len(raw), 7):
        bad = bytearray(raw)
        bad[offset] ^= 0x01
        (copy / "realm.sig").write_bytes(bytes(bad))
        with pytest.raises(ArtifactError, match=r"realm\.sig"):
            RealmRuntime(copy, trusted_keys=[vendor_pub])


def test_bad_keys_are_named(digits_model, signed, keys, tmp_path):
    (_, vendor_pub), _ = keys
    with pytest.raises(ValueError, match="not a PEM private key"):
        export_digits(digits_model, tmp_path / "a", signing_key=vendor_pub)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ValueError, match="not base64"):
        RealmRuntime(signed, trusted_keys=["not a key!"])
    with pytest.raises(ValueError, match="trusted_keys is empty"):
        RealmRuntime(signed, trusted_keys=[])


def _node_app(artifacts, stream, *extra):
    node = shutil.which("node")
    app = os.path.join(os.path.dirname(__file__), "..", "examples", "node")
    if node is None or not os.path.isdir(os.path.join(app, "node_modules", "onnxruntime-node")):
        pytest.skip("Node.js or examples/node's onnxruntime-node missing: run `make web-deps`")
    command = [node, "edge-app.mjs", "--artifacts", str(artifacts), "--stream", str(stream)]
    return subprocess.run(
        [*command, "--limit", "3", *extra], cwd=app, capture_output=True, text=True, timeout=120
    )


def test_the_node_app_checks_signatures(signed, keys, digits_stream, tmp_path):
    """WebCrypto's Ed25519 in Node: the trusted key loads, another key, edits are refused."""
    import numpy as np

    (_, vendor_pub), (_, stranger_pub) = keys
    stream = tmp_path / "stream"
    stream.mkdir()
    for i, x in enumerate(digits_stream[0][:3]):
        np.save(stream / f"{i:05d}.npy", np.ascontiguousarray(x, dtype=np.float32))
    done = _node_app(signed, stream, "--trusted-key", str(vendor_pub))
    assert done.returncode == 0, done.stderr
    assert "signature verified" in done.stdout and "trusted" in done.stdout
    done = _node_app(signed, stream, "--trusted-key", str(stranger_pub))
    assert done.returncode == 1 and "not among the trusted keys" in done.stderr, done.stderr
    copy = tmp_path / "copy"
    shutil.copytree(signed, copy)
    edit_manifest(copy, lambda m: m["config"].update(lr=0.5))
    done = _node_app(copy, stream, "--trusted-key", str(vendor_pub))
    assert done.returncode == 1 and "signature does not verify" in done.stderr, done.stderr
    (copy / "realm.sig").unlink()
    done = _node_app(copy, stream, "--trusted-key", str(vendor_pub))
    assert done.returncode == 1 and "unsigned" in done.stderr, done.stderr
