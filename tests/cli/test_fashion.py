"""Fashion-MNIST from its IDX files, and Fashion-MNIST-C built from it."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from helpers import needs_fashion_mnist

from realm_tools.data import (
    CIFAR_C_CORRUPTIONS,
    ShiftDataset,
    fashion_preprocessing,
    find_fashion_mnist,
    load_fashion_mnist,
    load_fmnistc,
)

# The official release's file names (independent of the reader's own table).
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _idx(data: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, data.ndim]) + b"".join(d.to_bytes(4, "big") for d in data.shape)
    return header + data.astype(np.uint8).tobytes()


def _write_release(folder, n_train=60_010, n_test=20, *, gz=True):
    """A folder laid out as the official release, with small random contents."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"train": n_train, "test": n_test}
    for split, (images, labels) in FILES.items():
        n = sizes[split]
        for name, arr in (
            (images, rng.integers(0, 256, (n, 28, 28))),
            (labels, rng.integers(0, 10, n)),
        ):
            raw = _idx(arr)
            (folder / (f"{name}.gz" if gz else name)).write_bytes(gzip.compress(raw) if gz else raw)
    return folder


def test_a_release_folder_is_read_from_data_dir_or_the_environment(tmp_path, monkeypatch):
    folder = _write_release(tmp_path / "fm", gz=False)
    data = load_fashion_mnist(folder)
    assert data.split("train")[0].shape == (50_000, 32, 32)
    assert data.split("val")[0].shape == (10_010, 32, 32)
    assert data.split("test")[0].shape == (20, 32, 32)
    # the 28×28 images sit in the middle of the 32×32 black frame
    assert not data.split("test")[0][:, :2].any() and not data.split("test")[0][:, :, -2:].any()
    monkeypatch.setenv("REALM_DATA", str(tmp_path))  # the parent of a fashion-mnist folder
    (tmp_path / "fm").rename(tmp_path / "fashion-mnist")
    assert find_fashion_mnist() == tmp_path / "fashion-mnist"


def test_missing_data_names_both_ways_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv("REALM_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setattr("realm_tools.data._fashion.DEBIAN_DIR", tmp_path / "debian")
    with pytest.raises(FileNotFoundError) as err:
        load_fashion_mnist()
    message = str(err.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "REALM_DATA" in message and "--data-dir" in message


def test_damaged_files_are_named(tmp_path):
    folder = _write_release(tmp_path / "fm")
    labels = folder / "t10k-labels-idx1-ubyte.gz"
    raw = gzip.decompress(labels.read_bytes())
    labels.write_bytes(gzip.compress(raw[:-3]))  # cut short
    with pytest.raises(ValueError, match="cut short"):
        load_fashion_mnist(folder)
    labels.write_bytes(gzip.compress(b"\x00\x00\x0d\x01" + raw[4:]))  # float32 magic
    with pytest.raises(ValueError, match="not an uint8 IDX file"):
        load_fashion_mnist(folder)
    labels.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="unreadable"):
        load_fashion_mnist(folder)


def test_the_installed_dataset_matches_its_release_and_the_constants():
    needs_fashion_mnist()
    data = load_fashion_mnist()
    assert [len(data.split(s)[1]) for s in ("train", "val", "test")] == [50_000, 10_000, 10_000]
    assert (np.bincount(data.split("test")[1]) == 1000).all()  # the test split is balanced
    pixels = data.split("train")[0].astype(np.float64) / 255
    (mean,), (std,) = fashion_preprocessing()["mean"], fashion_preprocessing()["std"]
    assert abs(pixels.mean() - mean) < 1e-4 and abs(pixels.std() - std) < 1e-4


def test_fmnist_c_streams_are_fixed_copies_shuffled_by_seed(tmp_path):
    needs_fashion_mnist()
    test = load_fmnistc(split="test", cache_dir=tmp_path)
    assert isinstance(test, ShiftDataset)
    assert test.default_corruptions == CIFAR_C_CORRUPTIONS and len(CIFAR_C_CORRUPTIONS) == 15
    x, y = test.stream("brightness", 5, seed=3, limit=50)
    assert x.shape == (50, 1, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    # the same corrupted images whatever the stream's seed and limit: only the order changes
    full, labels = test.stream("brightness", 5, seed=3)
    assert np.array_equal(full[:50], x) and np.array_equal(labels[:50], y)
    other, other_y = test.stream("brightness", 5, seed=4)
    assert sorted(map(bytes, other)) == sorted(map(bytes, full))
    assert not np.array_equal(other_y, labels)
    # cached on disk: a second loader reads the file instead of corrupting again
    (cached,) = tmp_path.glob("fmnist-c/*/brightness-5-c0.npy")
    again = load_fmnistc(split="test", cache_dir=tmp_path)
    assert np.array_equal(again.corrupted("brightness", 5), np.load(cached))
    # the validation split: other images, corrupted with another seed
    val = load_fmnistc(split="val", cache_dir=tmp_path)
    assert val.name == "fmnist-c-val" and val.corruption_seed != test.corruption_seed
    with pytest.raises(ValueError, match="seeds other than the test split"):
        load_fmnistc(split="val", corruption_seed=test.corruption_seed)
    with pytest.raises(ValueError, match="unknown corruption 'rain'"):
        test.stream("rain")
    with pytest.raises(ValueError, match="severity must be an integer 1–5"):
        test.stream("brightness", 6)
