"""The artifact manifest ``realm.json``: what an artifact directory holds, checked before use.

Written by ``realm_export`` and read by the runtime; plain JSON and hashlib, no torch, so any
app (or another language's binding) can check an artifact directory the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "realm.json"
ARTIFACT_FORMAT = "realm-tta/artifacts"
ARTIFACT_VERSION = 1

# Files of an artifact directory, by role (names relative to the directory).
TRAINING_MODEL = "training_model.onnx"
EVAL_MODEL = "eval_model.onnx"
CHECKPOINT = "checkpoint"
INFERENCE_MODEL = "inference_model.onnx"

# Names the loss graph adds to the model (SPEC §2): trainable scalars and the extra input.
ALPHA_NAME = "realm.alpha"
LAMBDA_NAME = "realm.lambda"
SAMPLE_WEIGHT_NAME = "realm.sample_weight"
LOSS_NAME = "realm.loss"


class ArtifactError(ValueError):
    """An artifact directory is missing, tampered with, truncated or incompatible."""


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

    def to_json(self) -> str:
        """The manifest as indented JSON."""
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
            "portable": self.portable,
        }
        return json.dumps(data, indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = MANIFEST_NAME) -> Manifest:
        """Parse and check the fields of a manifest dictionary.

        Raises:
            ArtifactError: another format, an unsupported version, or a missing field.
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
        required = ("input", "logits_name", "num_classes", "config", "trainable", "files")
        missing = [k for k in required if k not in data]
        if missing:
            raise ArtifactError(f"{source}: missing fields {missing}")
        try:
            spec = InputSpec(**data["input"])
        except TypeError as exc:
            raise ArtifactError(f"{source}: bad input spec {data['input']!r}: {exc}") from exc
        return cls(
            format=data["format"],
            version=data["version"],
            input=spec,
            logits_name=data["logits_name"],
            num_classes=int(data["num_classes"]),
            config=dict(data["config"]),
            trainable={k: list(v) for k, v in data["trainable"].items()},
            files=dict(data["files"]),
            versions=dict(data.get("versions", {})),
            preprocessing=dict(data.get("preprocessing", {})),
            validation=dict(data.get("validation", {})),
            model=dict(data.get("model", {})),
            portable=dict(data.get("portable", {})),
        )


def sha256_of(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_manifest(directory: str | os.PathLike[str], *, verify: bool = True) -> Manifest:
    """Read ``realm.json`` of an artifact directory and, by default, verify every checksum.

    Args:
        directory: the artifact directory.
        verify: also check that every listed file exists and matches its SHA-256.

    Returns:
        The parsed manifest.

    Raises:
        ArtifactError: no directory or manifest, unreadable JSON, wrong format or version,
            a missing file, or a file whose checksum differs (tampered or truncated).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"artifact directory not found: {directory}")
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{path} not found: not an artifact directory written by realm export")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path} is not valid JSON (truncated or edited?): {exc}") from exc
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} does not hold a JSON object")
    manifest = Manifest.from_dict(data, source=str(path))
    if verify:
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
