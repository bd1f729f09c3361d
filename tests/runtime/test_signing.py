"""Signed artifacts (Ed25519, realm.sig) in Python.

Node's and the page's checks are in test_node.py and test_web.py; the key pairs and the signed
export are conftest's fixtures.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest
from helpers import edit_manifest, export_digits

from realm_runtime import ArtifactError, RealmRuntime, generate_keypair, sign_manifest


def test_keygen_writes_a_private_key_only_its_owner_reads(signing_keys, tmp_path):
    (private, public), _ = signing_keys
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert len(public.read_text().strip()) == 44  # base64 of 32 bytes
    with pytest.raises(FileExistsError, match="never overwritten"):
        generate_keypair(private.with_suffix(""))
    done = subprocess.run(
        [sys.executable, "-m", "realm_tools", "keygen", str(tmp_path / "k")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k.key").is_file() and (tmp_path / "k.pub").is_file()


def test_signed_artifacts_round_trip(signed_artifacts, signing_keys):
    (_, vendor_pub), _ = signing_keys
    rt = RealmRuntime(signed_artifacts, trusted_keys=[vendor_pub])  # a .pub file
    assert rt.manifest.digest
    RealmRuntime(signed_artifacts, trusted_keys=[vendor_pub.read_text()])  # its base64 text
    RealmRuntime(signed_artifacts)  # no keys trusted: the signature present must still verify


def test_wrong_key_missing_signature_and_edits_are_refused(
    signed_artifacts, signing_keys, tmp_path
):
    (_, vendor_pub), (stranger_key, stranger_pub) = signing_keys
    with pytest.raises(ArtifactError, match=r"realm\.sig: signed by key .* not among"):
        RealmRuntime(signed_artifacts, trusted_keys=[stranger_pub])
    copy = tmp_path / "copy"
    shutil.copytree(signed_artifacts, copy)
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


def test_a_damaged_signature_file_is_named(signed_artifacts, signing_keys, tmp_path):
    (_, vendor_pub), _ = signing_keys
    copy = tmp_path / "copy"
    shutil.copytree(signed_artifacts, copy)
    raw = (copy / "realm.sig").read_bytes()
    for offset in range(0, len(raw), 7):
        bad = bytearray(raw)
        bad[offset] ^= 0x01
        (copy / "realm.sig").write_bytes(bytes(bad))
        with pytest.raises(ArtifactError, match=r"realm\.sig"):
            RealmRuntime(copy, trusted_keys=[vendor_pub])


def test_bad_keys_are_named(digits_model, signed_artifacts, signing_keys, tmp_path):
    (_, vendor_pub), _ = signing_keys
    with pytest.raises(ValueError, match="not a PEM private key"):
        export_digits(digits_model, tmp_path / "a", signing_key=vendor_pub)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ValueError, match="not base64"):
        RealmRuntime(signed_artifacts, trusted_keys=["not a key!"])
    with pytest.raises(ValueError, match="trusted_keys is empty"):
        RealmRuntime(signed_artifacts, trusted_keys=[])
