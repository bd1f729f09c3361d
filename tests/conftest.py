"""Shared fixtures: small models, the digits task and its artifacts, built once per session.

The helpers the tests call (comparing the twins, exporting, other processes) are in
``helpers/``, imported as ``from helpers import ...``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    BACKENDS,
    EXPORTS,
    export_digits,
    locked,
    make_cifar10c,
    make_imagenetc,
    run_folder,
    runtime_venv_python,
)


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Bit-for-bit comparisons between two runs need the same reduction order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def digits():
    from realm_tools.data import load_digits

    return load_digits()


@pytest.fixture(scope="session", autouse=True)
def _export_cache(tmp_path_factory):
    EXPORTS[:] = [run_folder(tmp_path_factory) / "digits-exports"]


@pytest.fixture(scope="session")
def digits_cache_dir(tmp_path_factory):
    """The cache folder of :func:`digits_model` (``realm-lab bench quality --quick`` reuses it),
    shared by the run's workers."""
    folder = run_folder(tmp_path_factory) / "weights"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def digits_model(digits, digits_cache_dir):
    """A briefly trained source model (6 epochs: good enough for behaviour, fast to make)."""
    from realm_tools.models import train_digits_model

    with locked(digits_cache_dir.with_suffix(".lock")):  # trained once, by the first worker
        return train_digits_model(digits, epochs=6, cache_dir=digits_cache_dir)


@pytest.fixture(scope="session")
def digits_stream(digits):
    """A shifted stream (gaussian noise, severity 5) of the held-out digits."""
    return digits.stream("gaussian_noise", 5, seed=0)


@pytest.fixture(scope="session")
def digits_artifacts(digits_model, tmp_path_factory):
    """The digits model exported with the CIFAR preset, the training artifacts too (the shared
    tests run on both :data:`BACKENDS`): (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits"
    return directory, export_digits(digits_model, directory, training=True)


@pytest.fixture(scope="session")
def digits_ort_artifacts(digits_model, tmp_path_factory):
    """The same, with the ORT-format graphs (``--ort-format``): (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits-ort"
    return directory, export_digits(digits_model, directory, ort_format=True)


@pytest.fixture
def cifar_root(tmp_path):
    """A small CIFAR-10-C folder, laid out as the real one is."""
    return make_cifar10c(tmp_path / "CIFAR-10-C")


@pytest.fixture
def imagenet_root(tmp_path):
    """A small ImageNet-C folder, laid out as the real one is."""
    return make_imagenetc(tmp_path / "ImageNet-C")


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


@pytest.fixture(params=BACKENDS)
def runtime(request, digits_artifacts, digits_stream):
    """A RealmRuntime on each backend, five samples into the digits stream."""
    from realm_runtime import RealmRuntime

    rt = RealmRuntime(digits_artifacts[0], threads=1, backend=request.param)
    for i in range(5):
        rt.adapt(digits_stream[0][i : i + 1])
    return rt


@pytest.fixture(scope="module")
def adapted(digits_artifacts, digits_stream, tmp_path_factory):
    """A runtime some samples into the stream, and the state file it saved."""
    from realm_runtime import RealmRuntime

    rt = RealmRuntime(digits_artifacts[0], backend="onnx-steps", threads=1)
    for x in digits_stream[0][:12]:
        rt.adapt(np.ascontiguousarray(x[None]))
    path = tmp_path_factory.mktemp("state") / "good.npz"
    rt.save(path)
    return rt, path


@pytest.fixture(scope="session")
def runtime_python() -> Path:
    """``.venv-runtime/bin/python`` with ``.[runtime]`` installed (made when missing/stale)."""
    return runtime_venv_python()


# The files that take longest start first: under xdist's loadfile scheduling a long file
# dispatched last keeps one worker busy while the other idles.
_LONG_FILES = ("test_web.py", "test_node.py", "test_adapt_graph.py", "test_adapt_graph_builds.py")


def pytest_collection_modifyitems(config, items):
    """Move the long files' tests to the front (a stable sort: the rest keep their order)."""
    rank = {name: i for i, name in enumerate(_LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(_LONG_FILES)))
