"""The artifact manifest ``realm.json``: what an artifact directory holds, checked before use.

Written by ``realm_export`` and read by the runtime; plain JSON and hashlib, no torch, so any
app (or another language's binding) can check an artifact directory the same way.

The manifest seals itself: its last field, ``manifest_sha256``, is the SHA-256 of the file's
own bytes with that field's value written as 64 zeros. A reader finds the value, zeroes it in
the bytes it read, and hashes: any change to any byte of the file (a value, a key, white
space, the digest itself) is refused, and through the SHA-256 list of every other file, any
change to any byte of the directory. The rule works on bytes, not on parsed JSON, so that
JavaScript (clients/js/manifest.js) checks it exactly as Python does, without having to
reproduce Python's float formatting. It catches corruption and careless edits; whoever can
write the directory can also re-seal it, which is what signatures are for (``realm.sig``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._names import (
    ADAPT_KEY,
    ADAPT_SETTINGS,
    ADAPT_SETTINGS_KEY,
    ADAPT_STATE_KEY,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    BATCH_KEY,
    BATCH_NORM_KEY,
    DIGEST_KEY,
    DRIFT_CHECK_KEY,
    FILE_KEY,
    FIT_KEY,
    FORWARD_MODEL_KEY,
    INFERENCE_KEY,
    LAYOUT_KEY,
    MANIFEST_NAME,
    MANIFEST_REQUIRED,
    MAX_MANIFEST_BYTES,
    MEMORY_KEY,
    ORT_FORMAT_KEY,
    PORTABLE_KEY,
    SETTINGS_NAME,
    SIZE_KEY,
    SOURCE_PARAMS_KEY,
    STATE_INPUT_KEY,
    STEP_MODEL_KEY,
)
from ._signing import check_signature
from ._untrusted import ArtifactError, json_object, read_bounded

_UNSEALED = "0" * 64


@dataclass(frozen=True)
class InputSpec:
    """The model input an artifact was exported for."""

    name: str  # graph input name
    shape: list[int | str]  # (batch, C, H, W); the batch axis may be symbolic ("batch")
    dtype: str  # numpy dtype name, "float32"


@dataclass(frozen=True)
class Manifest:
    """Contents of ``realm.json``."""

    format: str  # always ARTIFACT_FORMAT
    version: int  # ARTIFACT_VERSION of the writer
    input: InputSpec  # model input
    logits_name: str  # graph output holding the logits
    num_classes: int  # width of the logits
    config: dict[str, Any]  # RealmConfig.to_dict() of the export
    trainable: dict[str, list[int]]  # trainable tensor name -> shape (norm params, α, λ)
    files: dict[str, str]  # relative file name -> SHA-256 hex digest
    versions: dict[str, Any]  # onnxruntime, onnx, opset, ir_version, torch, timm, realm-tta
    preprocessing: dict[str, Any] = field(default_factory=dict)  # mean/std/size if known
    validation: dict[str, Any] = field(default_factory=dict)  # per-output max differences
    model: dict[str, Any] = field(default_factory=dict)  # model name/class, source
    portable: dict[str, Any] = field(default_factory=dict)  # step graph layout, or its "error"
    training: dict[str, Any] = field(default_factory=dict)  # legacy artifacts: written, or why not
    adapt: dict[str, Any] = field(default_factory=dict)  # the one adapt graph and its state
    memory: dict[str, Any] = field(default_factory=dict)  # measured updating peak; {}: none
    inference: dict[str, Any] = field(default_factory=dict)  # inference_model.onnx's graph, check
    drift_check: dict[str, Any] = field(default_factory=dict)  # max_drift fitted; {}: not asked
    fit: dict[str, Any] = field(default_factory=dict)  # what `realm fit` chose by; {}: no fit
    batch_norm: list[str] = field(default_factory=list)  # BatchNorm's trainable tensors
    digest: str = ""  # manifest_sha256 of the file it was read from ("" before it is written)

    def to_bytes(self) -> bytes:
        """The manifest as the sealed UTF-8 JSON file ``realm.json`` (see the module doc)."""
        data = {
            "format": self.format,
            "version": self.version,
            "input": vars(self.input),
            "logits_name": self.logits_name,
            "num_classes": self.num_classes,
            "config": self.config,
            "trainable": self.trainable,
            "files": self.files,
            "versions": self.versions,
            "preprocessing": self.preprocessing,
            "validation": self.validation,
            "model": self.model,
            PORTABLE_KEY: self.portable,
            "training": self.training,
            ADAPT_KEY: self.adapt,
            MEMORY_KEY: self.memory,
            INFERENCE_KEY: self.inference,
            DRIFT_CHECK_KEY: self.drift_check,
            FIT_KEY: self.fit,
            BATCH_NORM_KEY: self.batch_norm,
            DIGEST_KEY: _UNSEALED,
        }
        return seal(json.dumps(data, indent=2, sort_keys=False).encode("utf-8"))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = MANIFEST_NAME) -> Manifest:
        """Parse and check the fields of a manifest dictionary.

        Raises:
            ArtifactError: another format, an unsupported version, a missing field, or a field
                of the wrong type.
        """
        check_format(data, source)
        missing = [k for k in MANIFEST_REQUIRED if k not in data]
        if missing:
            raise ArtifactError(
                f"{source}: missing fields {missing}: not a manifest of this realm-tta's "
                "export; re-export the model"
            )
        kinds: dict[str, type] = {
            "input": dict,
            "logits_name": str,
            "num_classes": int,
            "config": dict,
            "trainable": dict,
            "files": dict,
            "versions": dict,
            "preprocessing": dict,
            "validation": dict,
            "model": dict,
            PORTABLE_KEY: dict,
            "training": dict,
            ADAPT_KEY: dict,
            MEMORY_KEY: dict,
            INFERENCE_KEY: dict,
            DRIFT_CHECK_KEY: dict,
            FIT_KEY: dict,
        }
        for key, kind in kinds.items():
            if key in data and (not isinstance(data[key], kind) or isinstance(data[key], bool)):
                raise ArtifactError(
                    f"{source}: field {key!r} is {type(data[key]).__name__}, expected "
                    f"{kind.__name__}"
                )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data["files"].items()):
            raise ArtifactError(f"{source}: field 'files' must map file names to SHA-256 strings")
        outside = [k for k in data["files"] if k in ("", ".", "..") or Path(k).name != k]
        if outside:
            # Only plain names: a listed path must never lead a reader outside the directory.
            raise ArtifactError(f"{source}: file names must be plain names, got {outside[:3]}")
        if not all(
            isinstance(v, list) and all(isinstance(d, int) for d in v)
            for v in data["trainable"].values()
        ):
            raise ArtifactError(f"{source}: field 'trainable' must map names to integer shapes")
        try:
            spec = InputSpec(**data["input"])
        except TypeError as exc:
            raise ArtifactError(f"{source}: bad input spec {data['input']!r}: {exc}") from exc
        dims = spec.shape
        if (
            not isinstance(spec.name, str)
            or not isinstance(dims, list)
            or len(dims) < 2
            or not isinstance(dims[0], int | str)
            or not all(_is_size(d) for d in dims[1:])
        ):
            raise ArtifactError(
                f"{source}: input must name a tensor of shape (batch, dims...), "
                f"got {data['input']!r}"
            )
        _check_portable(data.get(PORTABLE_KEY, {}), source)
        _check_adapt(data.get(ADAPT_KEY, {}), source)
        batch_norm = data[BATCH_NORM_KEY]
        if not isinstance(batch_norm, list) or not all(
            isinstance(n, str) and n in data["trainable"] for n in batch_norm
        ):
            raise ArtifactError(
                f"{source}: field {BATCH_NORM_KEY!r} must list trainable tensor names, got "
                f"{batch_norm!r}"
            )
        return cls(
            format=data["format"],
            version=data["version"],
            input=spec,
            logits_name=data["logits_name"],
            num_classes=data["num_classes"],
            config=dict(data["config"]),
            trainable={k: list(v) for k, v in data["trainable"].items()},
            files=dict(data["files"]),
            versions=dict(data.get("versions", {})),
            preprocessing=dict(data.get("preprocessing", {})),
            validation=dict(data.get("validation", {})),
            model=dict(data.get("model", {})),
            portable=dict(data.get(PORTABLE_KEY, {})),
            training=dict(data.get("training", {})),
            adapt=dict(data.get(ADAPT_KEY, {})),
            memory=dict(data.get(MEMORY_KEY, {})),
            inference=dict(data.get(INFERENCE_KEY, {})),
            drift_check=dict(data.get(DRIFT_CHECK_KEY, {})),
            fit=dict(data.get(FIT_KEY, {})),
            batch_norm=list(batch_norm),
            digest=str(data.get(DIGEST_KEY, "")),
        )


def check_format(data: dict[str, Any], source: str) -> None:
    """The format and version fields, checked first: an old directory is told to re-export.

    Raises:
        ArtifactError: another format, or a version this library does not read.
    """
    if data.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(
            f"{source}: format {data.get('format')!r} is not {ARTIFACT_FORMAT!r}: "
            "not a realm-tta artifact directory"
        )
    if data.get("version") != ARTIFACT_VERSION:
        raise ArtifactError(
            f"{source}: artifact format version {data.get('version')!r} is not supported "
            f"(this realm-tta reads version {ARTIFACT_VERSION}); re-export the model"
        )


def seal(raw: bytes) -> bytes:
    """Write the digest into manifest bytes that hold ``manifest_sha256`` as 64 zeros."""
    placeholder = f'"{DIGEST_KEY}": "{_UNSEALED}"'.encode()
    if raw.count(placeholder) != 1:
        raise ValueError(f"the manifest must hold {DIGEST_KEY} = 64 zeros exactly once to seal it")
    digest = hashlib.sha256(raw).hexdigest()
    return raw.replace(placeholder, f'"{DIGEST_KEY}": "{digest}"'.encode())


def check_seal(raw: bytes, data: dict[str, Any], source: str) -> str:
    """Check that manifest bytes hash to their own ``manifest_sha256``; return the digest.

    Raises:
        ArtifactError: no digest, a malformed one, or bytes that do not hash to it.
    """
    digest = data.get(DIGEST_KEY)
    if not isinstance(digest, str) or len(digest) != 64 or not _is_hex(digest):
        raise ArtifactError(
            f"{source}: no valid {DIGEST_KEY} (the manifest's digest of itself): "
            "edited, or not written by realm export"
        )
    field_bytes = f'"{DIGEST_KEY}": "{digest}"'.encode()
    if raw.count(field_bytes) != 1:
        raise ArtifactError(
            f"{source}: {DIGEST_KEY} must appear exactly once, as the exporter wrote it"
        )
    actual = hashlib.sha256(raw.replace(field_bytes, f'"{DIGEST_KEY}": "{_UNSEALED}"'.encode()))
    if actual.hexdigest() != digest:
        raise ArtifactError(
            f"{source}: its bytes do not hash to its own {DIGEST_KEY} "
            f"({actual.hexdigest()[:16]}… vs {digest[:16]}…): the manifest was modified "
            "or damaged after export"
        )
    return digest


def _is_size(value: object) -> bool:
    return type(value) is int and value > 0


def _check_portable(portable: dict[str, Any], source: str) -> None:
    """The portable section's fields, where it describes a graph (not its ``error``)."""
    if STEP_MODEL_KEY not in portable:
        return
    where = f"{source}: {PORTABLE_KEY}"
    for key in (STEP_MODEL_KEY, FORWARD_MODEL_KEY, SOURCE_PARAMS_KEY):
        if not isinstance(portable.get(key), str):
            raise ArtifactError(f"{where}.{key} must be a file name")
    for key in (SIZE_KEY, BATCH_KEY):
        if not _is_size(portable.get(key)):
            raise ArtifactError(f"{where}.{key} must be a positive integer")
    layout = portable.get(LAYOUT_KEY)
    if not isinstance(layout, list) or not all(
        isinstance(slot, dict)
        and isinstance(slot.get("name"), str)
        and type(slot.get("offset")) is int
        and isinstance(slot.get("shape"), list)
        and all(_is_size(d) for d in slot["shape"])
        and set(slot) == {"name", "offset", "shape"}
        for slot in layout
    ):
        raise ArtifactError(f"{where}.layout must list {{name, offset, shape}} per tensor")
    if ORT_FORMAT_KEY in portable and not isinstance(portable[ORT_FORMAT_KEY], dict):
        raise ArtifactError(f"{where}.{ORT_FORMAT_KEY} has the wrong type")


def _check_adapt(adapt: dict[str, Any], source: str) -> None:
    """The adapt section, where it names a graph: this version's settings, fed as state.

    Raises:
        ArtifactError: its settings are not :data:`ADAPT_SETTINGS` in order, or its state
            does not take them: a graph of another version, to re-export.
    """
    if not isinstance(adapt, dict) or not adapt.get(FILE_KEY):
        return
    slots = adapt.get(ADAPT_SETTINGS_KEY)
    state = adapt.get(ADAPT_STATE_KEY)
    inputs = (
        [e.get(STATE_INPUT_KEY) for e in state if isinstance(e, dict)]
        if isinstance(state, list)
        else []
    )
    where = f"{ADAPT_KEY}.{ADAPT_SETTINGS_KEY}"
    if not isinstance(slots, list):
        wrong = f"{where} is missing or not a list"
    elif slots != list(ADAPT_SETTINGS):
        lacks = [n for n in ADAPT_SETTINGS if n not in slots]
        unknown = [n for n in slots if n not in ADAPT_SETTINGS]
        wrong = (
            f"{where} lacks {lacks} and has {unknown}"
            if lacks or unknown
            else f"{where} lists the settings in another order"
        )
    elif SETTINGS_NAME not in inputs:
        wrong = f"{SETTINGS_NAME} is not among its state inputs"
    else:
        return
    raise ArtifactError(
        f"{source}: the adapt graph is not this realm-tta's ({wrong}); re-export the model"
    )


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def sha256_of(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file, read in chunks (never whole into memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_manifest(
    directory: str | os.PathLike[str],
    *,
    verify: bool = True,
    trusted_keys: Iterable[object] | None = None,
) -> Manifest:
    """Read ``realm.json`` of an artifact directory and, by default, verify every checksum.

    Args:
        directory: the artifact directory.
        verify: also check that every listed file exists and matches its SHA-256.
        trusted_keys: Ed25519 public keys one of which must have signed the manifest
            (``realm.sig``); None: a signature is optional, but must verify where present.

    Returns:
        The parsed manifest.

    Raises:
        ArtifactError: no directory or manifest, unreadable JSON, wrong format or version, a
            broken seal, a missing or bad signature, a missing file, or a file whose checksum
            differs (tampered or truncated).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"artifact directory not found: {directory}")
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{path} not found: not an artifact directory written by realm export")
    raw = read_bounded(path, MAX_MANIFEST_BYTES, ArtifactError)
    check_signature(directory, raw, trusted_keys)  # before anything in the manifest is used
    return parse_manifest(raw, str(path), directory=directory if verify else None)


def parse_manifest(
    raw: bytes, source: str = MANIFEST_NAME, *, directory: str | os.PathLike[str] | None = None
) -> Manifest:
    """Parse manifest bytes: JSON, format and version, the seal, the fields.

    Args:
        raw: the bytes of ``realm.json``.
        source: where they came from, for messages.
        directory: also verify every listed file in this directory.

    Raises:
        ArtifactError: naming what is wrong; never another exception type.
    """
    data = json_object(raw, source, ArtifactError)
    check_format(data, source)
    check_seal(raw, data, source)
    manifest = Manifest.from_dict(data, source=source)
    if directory is not None:
        verify_files(directory, manifest)
    return manifest


def verify_files(directory: str | os.PathLike[str], manifest: Manifest) -> None:
    """Check that every file the manifest lists is present and has its recorded SHA-256.

    Raises:
        ArtifactError: naming the first missing or mismatching file.
    """
    directory = Path(directory)
    for name, expected in manifest.files.items():
        target = directory / name
        if not target.is_file():
            raise ArtifactError(f"{target}: listed in {MANIFEST_NAME} but missing")
        actual = sha256_of(target)
        if actual != expected:
            raise ArtifactError(
                f"{target}: SHA-256 {actual[:16]}… does not match the manifest's "
                f"{expected[:16]}… (the file was modified or truncated after export)"
            )
