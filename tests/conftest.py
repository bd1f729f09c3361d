"""Shared fixtures: small models and the digits task, built once per session."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Bit-for-bit comparisons between two runs need the same reduction order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def digits():
    from realm_sdk import load_digits

    return load_digits()


@pytest.fixture(scope="session")
def digits_cache_dir(tmp_path_factory):
    """The cache folder of :func:`digits_model` (``realm bench quality --quick`` reuses it)."""
    return tmp_path_factory.mktemp("weights")


@pytest.fixture(scope="session")
def digits_model(digits, digits_cache_dir):
    """A briefly trained source model (6 epochs: good enough for behaviour, fast to make)."""
    from realm_sdk import train_digits_model

    return train_digits_model(digits, epochs=6, cache_dir=digits_cache_dir)


@pytest.fixture(scope="session")
def digits_stream(digits):
    """A shifted stream (gaussian noise, severity 5) of the held-out digits."""
    return digits.stream("gaussian_noise", 5, seed=0)


def export_digits(model, directory, *, ort_format=False, signing_key=None, **config_overrides):
    """Export the digits model with the CIFAR preset (and overrides) into ``directory``."""
    from realm_export import export_realm_artifacts
    from realm_sdk import RealmConfig

    preset = config_overrides.pop("preset", "cifar")
    config = RealmConfig.preset(preset, num_classes=10, **config_overrides)
    export_realm_artifacts(
        model,
        directory,
        config=config,
        input_shape=(1, 1, 32, 32),
        ort_format=ort_format,
        signing_key=signing_key,
    )
    return config


@pytest.fixture(scope="session")
def digits_artifacts(digits_model, tmp_path_factory):
    """The digits model exported with the CIFAR preset: (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits"
    return directory, export_digits(digits_model, directory)


@pytest.fixture(scope="session")
def digits_ort_artifacts(digits_model, tmp_path_factory):
    """The same, with the ORT-format graphs (``--ort-format``): (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits-ort"
    return directory, export_digits(digits_model, directory, ort_format=True)


def assert_same_state(a, b, tol: Mapping[str, float]) -> None:
    """Two RealmRuntimes hold the same adaptation state, within ``tol`` (parity's keys).

    Parameters, α and EMA absolutely; λ relative to its scale (it grows under C = 1);
    momentum buffers relative to each buffer's largest entry (sums of raw gradients); the
    counters exactly.
    """
    for name, value in a.trainable_parameters().items():
        np.testing.assert_allclose(
            b.trainable_parameters()[name], value, rtol=0, atol=tol["params"], err_msg=name
        )
    for name, value in a.momentum_buffers().items():
        scale = max(float(np.abs(value).max()), 1e-12)
        got = np.abs(b.momentum_buffers()[name] - value).max() / scale
        assert got <= tol["momentum"], (name, got)
    sa, sb = a.state, b.state
    counters = ("samples", "updates", "updated_samples", "skipped_diversity", "skipped_entropy")
    assert [getattr(sa, k) for k in counters] == [getattr(sb, k) for k in counters]
    if sa.alpha is None:  # Tent, EATA: no α, λ
        assert sb.alpha is None and sb.lam is None
    else:
        assert sa.alpha == pytest.approx(sb.alpha, abs=tol["alpha"])
        assert sa.lam == pytest.approx(sb.lam, abs=tol["lam"] * max(1.0, abs(sa.lam)))
    np.testing.assert_allclose(sa.ema, sb.ema, rtol=0, atol=tol["ema"])


def edit_manifest(directory: Path, edit: Callable[[dict], None]) -> None:
    """Change realm.json's content and re-seal it, as someone who can write the directory could.

    An edit that is not re-sealed is refused by the seal alone; this gets past it, to test
    the checks behind it (and to show what only a signature stops).
    """
    from realm_runtime._manifest import DIGEST_KEY, seal

    path = directory / "realm.json"
    data = json.loads(path.read_text())
    edit(data)
    data[DIGEST_KEY] = "0" * 64
    path.write_bytes(seal(json.dumps(data, indent=2).encode()))


@pytest.fixture(scope="session")
def signing_keys(tmp_path_factory):
    """Two Ed25519 key pairs, ``(vendor, stranger)``, each ``(private .key, public .pub)``."""
    from realm_runtime import generate_keypair

    folder = tmp_path_factory.mktemp("keys")
    return generate_keypair(folder / "vendor"), generate_keypair(folder / "stranger")


@pytest.fixture(scope="session")
def signed_artifacts(digits_model, signing_keys, tmp_path_factory):
    """The digits model exported and signed with the vendor's key (``realm.sig``)."""
    directory = tmp_path_factory.mktemp("signed") / "artifacts"
    export_digits(digits_model, directory, signing_key=signing_keys[0][0])
    return directory


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    """Flip bits of one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def manifest_offset(raw: bytes, kind: str) -> int:
    """One byte position of a class in realm.json's bytes."""
    from realm_runtime._manifest import DIGEST_KEY

    text = raw.decode()
    return {
        "header": lambda: text.index('"format"') + 2,  # inside the first key
        "json value": lambda: text.index('"lr": ') + len('"lr": ') + 2,  # a learning-rate digit
        "file digest": lambda: text.index('"step_model.onnx": "') + len('"step_model.onnx": "') + 5,
        "own digest": lambda: text.index(f'"{DIGEST_KEY}": "') + len(f'"{DIGEST_KEY}": "') + 10,
        "white space": lambda: text.index("\n  "),
    }[kind]()
