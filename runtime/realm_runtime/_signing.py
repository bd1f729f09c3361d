"""Ed25519 signatures of artifact directories: ``realm.sig`` beside ``realm.json``.

The signature covers the exact bytes of the manifest, which seals itself and lists the
SHA-256 of every other file: one signature covers the whole directory. ``realm.sig`` is JSON::

    {"format": "realm-tta/signature", "version": 1, "algorithm": "Ed25519",
     "signed": "realm.json", "public_key": "<base64, 32 bytes>", "signature": "<base64, 64>"}

Keys: the private key is PKCS#8 PEM (written by ``realm keygen`` with mode 0600); the public
key is its 32 raw bytes in base64 on one line (``*.pub``), the form WebCrypto imports as
``raw``. The crypto is the ``cryptography`` package's; nothing here is home-made beyond
reading and writing these two small files.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._names import (
    MANIFEST_NAME,
    MAX_SIGNATURE_BYTES,
    SIGNATURE_ALGORITHM,
    SIGNATURE_FORMAT,
    SIGNATURE_NAME,
    SIGNATURE_VERSION,
)
from ._untrusted import ArtifactError, json_object, read_bounded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - cryptography is in every runtime extra
        raise ImportError(
            "signed artifacts need the cryptography package: pip install 'cryptography>=42'"
        ) from exc
    return ed25519


def generate_keypair(prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair: ``PREFIX.key`` (private, mode 0600) and ``PREFIX.pub``.

    Raises:
        FileExistsError: either file exists (a key is never overwritten).
    """
    from cryptography.hazmat.primitives import serialization

    prefix = Path(prefix)
    private_path, public_path = (
        prefix.with_name(prefix.name + ".key"),
        prefix.with_name(prefix.name + ".pub"),
    )
    for path in (private_path, public_path):
        if path.exists():
            raise FileExistsError(f"{path} exists; a key is never overwritten")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    key = _ed25519().Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Created with 0600 from the start: the key is never readable by others, not even briefly.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public_path.write_text(public_key_text(key.public_key()) + "\n", encoding="ascii")
    return private_path, public_path


def public_key_text(key: Ed25519PublicKey) -> str:
    """The public key as this project writes it: base64 of its 32 raw bytes."""
    from cryptography.hazmat.primitives import serialization

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def load_private_key(key: str | os.PathLike[str] | bytes | Ed25519PrivateKey) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file, PEM bytes, or the key itself.

    Raises:
        ValueError: not an Ed25519 private key.
    """
    from cryptography.hazmat.primitives import serialization

    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    pem = key if isinstance(key, bytes) else Path(key).read_bytes()
    try:
        loaded = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM private key ({exc})") from exc
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise ValueError(f"the signing key must be Ed25519, got {type(loaded).__name__}")
    return loaded


def load_public_key(key: object) -> Ed25519PublicKey:
    """An Ed25519 public key from a ``.pub`` file, its base64 text, 32 raw bytes, or itself.

    Raises:
        ValueError: naming what the value is not.
    """
    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, bytes) and len(key) == 32:
        raw = key
    else:
        text = key.decode("ascii", "replace") if isinstance(key, bytes) else str(key)
        if isinstance(key, os.PathLike) or Path(text).is_file():
            text = Path(text).read_text(encoding="ascii", errors="replace")
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"trusted key {str(key)[:60]!r}: not base64 ({exc})") from exc
    if len(raw) != 32:
        raise ValueError(f"trusted key {str(key)[:60]!r}: {len(raw)} bytes, Ed25519 keys have 32")
    return ed25519.Ed25519PublicKey.from_public_bytes(raw)


def sign_manifest(directory: str | os.PathLike[str], key: object) -> Path:
    """Sign ``directory/realm.json``'s bytes; write ``realm.sig`` beside it. Returns its path."""
    directory = Path(directory)
    private = load_private_key(key)  # type: ignore[arg-type]
    manifest = (directory / MANIFEST_NAME).read_bytes()
    record = {
        "format": SIGNATURE_FORMAT,
        "version": SIGNATURE_VERSION,
        "algorithm": SIGNATURE_ALGORITHM,
        "signed": MANIFEST_NAME,
        "public_key": public_key_text(private.public_key()),
        "signature": base64.b64encode(private.sign(manifest)).decode("ascii"),
    }
    path = directory / SIGNATURE_NAME
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def check_signature(
    directory: str | os.PathLike[str], manifest: bytes, trusted_keys: Iterable[object] | None
) -> str | None:
    """Check ``realm.sig`` against the manifest's bytes, before anything else is trusted.

    With ``trusted_keys``, the directory must be signed, by one of them. Without, a signature
    that is present must still verify against the key it names (so that a damaged
    ``realm.sig`` is noticed), but nothing is required.

    Returns:
        The signing public key (base64), or None for an unsigned directory.

    Raises:
        ArtifactError: unsigned where keys are trusted, a key not among them, or a signature
            that does not verify; naming ``realm.sig``.
    """
    directory = Path(directory)
    path = directory / SIGNATURE_NAME
    trusted = None if trusted_keys is None else [load_public_key(k) for k in trusted_keys]
    if trusted is not None and not trusted:
        raise ValueError("trusted_keys is empty: pass None to accept unsigned artifacts")
    if not path.is_file():
        if trusted is not None:
            raise ArtifactError(
                f"{path} not found: these artifacts are unsigned, and trusted_keys asks for a "
                "signature (realm export --sign KEY)"
            )
        return None
    record = _read_record(path)
    try:
        signer = load_public_key(record["public_key"])
        signature = base64.b64decode(record["signature"], validate=True)
    except (KeyError, ValueError, binascii.Error, TypeError) as exc:
        raise ArtifactError(f"{path}: damaged ({type(exc).__name__}: {exc})") from exc
    signer_text = public_key_text(signer)
    if trusted is not None and signer_text not in {public_key_text(k) for k in trusted}:
        raise ArtifactError(
            f"{path}: signed by key {signer_text[:12]}…, which is not among the trusted keys"
        )
    from cryptography.exceptions import InvalidSignature

    try:
        signer.verify(signature, manifest)
    except InvalidSignature:
        raise ArtifactError(
            f"{path}: the signature does not verify for {MANIFEST_NAME}'s bytes: the manifest "
            "(or the signature) was changed after signing"
        ) from None
    return signer_text


def _read_record(path: Path) -> dict[str, Any]:
    record = json_object(
        read_bounded(path, MAX_SIGNATURE_BYTES, ArtifactError), str(path), ArtifactError
    )
    if (record.get("format"), record.get("version")) != (SIGNATURE_FORMAT, SIGNATURE_VERSION):
        raise ArtifactError(
            f"{path}: format {record.get('format')!r} version {record.get('version')!r}, "
            f"expected {SIGNATURE_FORMAT!r} version {SIGNATURE_VERSION}"
        )
    if record.get("algorithm") != SIGNATURE_ALGORITHM or record.get("signed") != MANIFEST_NAME:
        raise ArtifactError(
            f"{path}: an {SIGNATURE_ALGORITHM} signature of {MANIFEST_NAME} was expected"
        )
    return record
