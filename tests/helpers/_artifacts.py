"""Artifacts the tests share: the digits export (cached per run), edited or damaged copies."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


def run_folder(tmp_path_factory) -> Path:
    """This run's temporary folder, shared by pytest-xdist's workers (each has a child)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (one worker builds, the others wait and reuse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


EXPORTS: list[Path] = []  # the run's export cache folder, set once per session


EXPORTS: list[Path] = []  # the run's export cache folder, set once per session (conftest)


def export_digits(
    model, directory, *, ort_format=False, signing_key=None, training=False, **config_overrides
):
    """Export the digits model with the CIFAR preset (and overrides) into ``directory`` with
    ``realm_export``, its preprocessing in the manifest as the demo writes it; ``training``
    asks for the legacy training artifacts too (the ``ort-training`` backend's).

    Unsigned exports are made once per run for each model state and configuration and
    copied from there (tests export the same few configurations many times); a test that
    tests exporting calls ``export_realm_artifacts`` itself.
    """
    from realm_export import ExportOptions, export_realm_artifacts
    from realm_sdk import RealmConfig
    from realm_tools.data import IMAGE_SIZE, digits_preprocessing, load_digits
    from realm_tools.models import weights_digest

    preset = config_overrides.pop("preset", "cifar")
    config = RealmConfig.preset(preset, num_classes=10, **config_overrides)

    def export(target):
        options = ExportOptions(
            config=config,
            input_shape=(1, 1, IMAGE_SIZE, IMAGE_SIZE),
            overwrite=True,
            model_info={"name": "digits", "source": "realm_tools.train_digits_model"},
            preprocessing=digits_preprocessing(load_digits()),
            ort_format=ort_format,
            signing_key=signing_key,
            training=training,
        )
        export_realm_artifacts(model, target, options)

    if signing_key is not None or not EXPORTS:
        export(directory)
        return config
    made = f"{weights_digest(model)} {config!r} {ort_format} {training}"
    key = hashlib.sha256(made.encode()).hexdigest()
    cached = EXPORTS[0] / key[:16]
    with locked(cached.with_suffix(".lock")):
        if not cached.is_dir():
            building = cached.with_suffix(".part")
            shutil.rmtree(building, ignore_errors=True)
            export(building)
            building.rename(cached)
    shutil.copytree(cached, directory, dirs_exist_ok=True)
    return config


def edit_manifest(directory: Path, edit: Callable[[dict], None]) -> None:
    """Change realm.json's content and re-seal it, as someone who can write the directory could.

    An edit that is not re-sealed is refused by the seal alone; this gets past it, to test
    the checks behind it (and to show what only a signature stops).
    """
    from realm_runtime.contract import DIGEST_KEY, seal

    path = directory / "realm.json"
    data = json.loads(path.read_text())
    edit(data)
    data[DIGEST_KEY] = "0" * 64
    path.write_bytes(seal(json.dumps(data, indent=2).encode()))


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    """Flip bits of one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def manifest_offset(raw: bytes, kind: str) -> int:
    """One byte position of a class in realm.json's bytes."""
    from realm_runtime.contract import DIGEST_KEY

    text = raw.decode()
    return {
        "header": lambda: text.index('"format"') + 2,  # inside the first key
        "json value": lambda: text.index('"lr": ') + len('"lr": ') + 2,  # a learning-rate digit
        "file digest": lambda: text.index('"step_model.onnx": "') + len('"step_model.onnx": "') + 5,
        "own digest": lambda: text.index(f'"{DIGEST_KEY}": "') + len(f'"{DIGEST_KEY}": "') + 10,
        "white space": lambda: text.index("\n  "),
    }[kind]()
