"""CIFAR-10-C and ImageNet-C loaders (``realm_tools.data``) on small fixture folders."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    FIXED_PIXEL,
    PER_SEVERITY,
    WNIDS,
    cifar_label,
    colour,
    decode_cifar,
    decode_imagenet,
)

from realm_tools.data import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Cifar10C,
    ImageNetC,
    LazyImages,
    ShiftDataset,
    load_cifar10c,
    load_imagenetc,
)

# ---------------------------------------------------------------------------- CIFAR-10-C


def test_cifar10c_lists_files_and_gives_normalised_nchw_streams(cifar_root):
    (cifar_root / "notes.npy").write_bytes(b"not a corruption")  # ignored: not a known name
    ds = load_cifar10c(cifar_root)
    assert isinstance(ds, Cifar10C) and isinstance(ds, ShiftDataset)
    assert ds.corruptions == ("gaussian_noise", "fog")  # the papers' order, not alphabetical
    assert ds.default_corruptions == ("gaussian_noise", "fog")
    assert (ds.per_severity, ds.num_classes, ds.input_shape) == (8, 10, (1, 3, 32, 32))
    x, y = ds.stream("fog", 5, seed=0)
    assert x.shape == (8, 3, 32, 32) and x.dtype == np.float32 and x.flags.c_contiguous
    assert y.shape == (8,) and y.dtype == np.int64
    for c in range(3):  # (v/255 − mean_c) / std_c, by hand
        expected = (FIXED_PIXEL[c] / 255 - CIFAR10_MEAN[c]) / CIFAR10_STD[c]
        np.testing.assert_allclose(x[:, c, 10, 10], expected, atol=1e-6)
    np.testing.assert_allclose(x[:, 0, 5, 5], -CIFAR10_MEAN[0] / CIFAR10_STD[0], atol=1e-6)
    assert set(decode_cifar(x)[2]) == {0}  # the marker of fog.npy, not gaussian_noise.npy


def test_cifar10c_mean_std_override(cifar_root):
    ds = load_cifar10c(cifar_root, mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0))
    x, _ = ds.stream("gaussian_noise", 1, seed=0)
    np.testing.assert_allclose(
        x[0, :, 10, 10], [(17 / 255 - 0.5) / 0.25, (130 / 255 - 0.5) / 0.5, 0.5], atol=1e-6
    )


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_cifar10c_severity_takes_its_rows_and_labels_follow(cifar_root, severity):
    ds = load_cifar10c(cifar_root)
    x, y = ds.stream("gaussian_noise", severity, seed=3)
    sev, j, marker = decode_cifar(x)
    assert set(sev) == {severity} and sorted(j) == list(range(PER_SEVERITY))
    assert set(marker) == {1}  # gaussian_noise.npy's marker
    np.testing.assert_array_equal(y, cifar_label(sev, j))


def test_cifar10c_seeds_shuffle_and_limit_cuts(cifar_root):
    ds = load_cifar10c(cifar_root)
    x0, y0 = ds.stream("fog", seed=0)
    x0_again, y0_again = ds.stream("fog", seed=0)
    x1, y1 = ds.stream("fog", seed=1)
    order0, order1 = decode_cifar(x0)[1], decode_cifar(x1)[1]
    assert not np.array_equal(order0, order1)
    assert not np.array_equal(order0, np.arange(PER_SEVERITY))  # shuffled at all
    np.testing.assert_array_equal(x0, x0_again)
    np.testing.assert_array_equal(y0, y0_again)
    np.testing.assert_array_equal(y1, cifar_label(decode_cifar(x1)[0], order1))
    x3, y3 = ds.stream("fog", seed=0, limit=3)
    np.testing.assert_array_equal(x3, x0[:3])
    np.testing.assert_array_equal(y3, y0[:3])


def test_cifar10c_memory_maps_the_files(cifar_root, monkeypatch):
    modes = []
    real_load = np.load

    def spy(path, *args, **kwargs):
        modes.append((Path(path).name, kwargs.get("mmap_mode")))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", spy)  # the loaders call np.load
    load_cifar10c(cifar_root).stream("fog", 2, seed=0)
    assert ("fog.npy", "r") in modes and ("labels.npy", "r") in modes
    assert all(mode == "r" for _, mode in modes)


def _save(path: Path, array: np.ndarray) -> None:
    np.save(path, array)


@pytest.mark.parametrize(
    ("breakage", "error", "message"),
    [
        (lambda r: _save(r / "fog.npy", np.zeros((40, 32, 32, 3), np.float32)), ValueError,
         "expected uint8 pixels, got dtype float32"),
        (lambda r: _save(r / "fog.npy", np.zeros((40, 32, 32), np.uint8)), ValueError,
         "expected shape (N, 32, 32, 3)"),
        (lambda r: _save(r / "fog.npy", np.zeros((40, 28, 28, 3), np.uint8)), ValueError,
         "got (40, 28, 28, 3)"),
        (lambda r: [_save(r / f"{c}.npy", np.zeros((42, 32, 32, 3), np.uint8))
                    for c in ("fog", "gaussian_noise")], ValueError,
         "42 images is not 5 severities"),
        (lambda r: _save(r / "labels.npy", np.zeros(35, np.int64)), ValueError,
         "has 35 labels but the corruption files have 40 images"),
        (lambda r: _save(r / "labels.npy", np.full(40, 10, np.int64)), ValueError,
         "labels must lie in [0, 10)"),
        (lambda r: _save(r / "labels.npy", np.zeros(40, np.float32)), ValueError,
         "expected a 1-D integer array"),
        (lambda r: (r / "labels.npy").unlink(), FileNotFoundError, "labels.npy is missing"),
        (lambda r: [(r / f"{c}.npy").unlink() for c in ("fog", "gaussian_noise")],
         FileNotFoundError, "no CIFAR-10-C corruption files"),
    ],
)  # fmt: skip
def test_cifar10c_refuses_broken_folders(cifar_root, breakage, error, message):
    breakage(cifar_root)
    with pytest.raises(error, match=re.escape(message)):
        load_cifar10c(cifar_root)


def test_cifar10c_refuses_missing_root_unknown_corruption_and_bad_severity(tmp_path, cifar_root):
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10-C root .*nowhere does not exist"):
        load_cifar10c(tmp_path / "nowhere")
    ds = load_cifar10c(cifar_root)
    with pytest.raises(ValueError, match=r"unknown corruption 'snow'.*present: \['gaussian_noise'"):
        ds.stream("snow")
    for bad in (0, 6, 2.5):
        with pytest.raises(ValueError, match="severity must be an integer 1–5"):
            ds.stream("fog", bad)
    with pytest.raises(ValueError, match="std must be positive"):
        load_cifar10c(cifar_root, std=(0.2, 0.0, 0.2))


# ---------------------------------------------------------------------------- ImageNet-C


def test_imagenetc_classes_shapes_normalisation_and_labels(imagenet_root):
    (imagenet_root / "README.txt").write_text("a file among the corruption folders")
    ds = load_imagenetc(imagenet_root)
    assert isinstance(ds, ImageNetC) and isinstance(ds, ShiftDataset)
    assert ds.corruptions == ("gaussian_noise", "fog")
    assert ds.classes == WNIDS and ds.num_classes == 3
    assert ds.input_shape == (1, 3, 224, 224)
    x, y = ds.stream("fog", 5, seed=0)
    assert isinstance(x, LazyImages) and len(x) == 6 and y.dtype == np.int64
    one = x[0]
    assert one.shape == (1, 3, 224, 224) and one.dtype == np.float32
    np.testing.assert_array_equal(x[0:1], one)
    assert x[2:5].shape == (3, 3, 224, 224)
    w, k = decode_imagenet(x[:])
    r, g, _ = colour(int(w[0]), int(k[0]))
    expected = [(v / 255 - IMAGENET_MEAN[c]) / IMAGENET_STD[c] for c, v in enumerate((r, g))]
    np.testing.assert_allclose(one[0, :2].mean(axis=(1, 2)), expected, atol=2 / 255 / 0.224)
    np.testing.assert_array_equal(y, w)  # label = index of the wnid folder
    assert sorted(zip(w.tolist(), k.tolist(), strict=True)) == [
        (a, b) for a in range(3) for b in range(2)
    ]


def test_imagenetc_explicit_class_list_sets_the_index(imagenet_root):
    listed = ("n09999999", *reversed(WNIDS))  # a class with no folder here, then reversed
    ds = load_imagenetc(imagenet_root, classes=listed)
    assert ds.num_classes == 4
    x, y = ds.stream("gaussian_noise", seed=1)
    w, _ = decode_imagenet(x[:])
    np.testing.assert_array_equal(y, 3 - w)


def test_imagenetc_seeds_and_limit(imagenet_root):
    ds = load_imagenetc(imagenet_root)
    a, ya = ds.stream("fog", seed=0)
    b, yb = ds.stream("fog", seed=0)
    c, _ = ds.stream("fog", seed=1)
    assert a.paths == b.paths and np.array_equal(ya, yb)
    assert a.paths != c.paths and sorted(a.paths) == sorted(c.paths)
    cut, ycut = ds.stream("fog", seed=0, limit=4)
    assert cut.paths == a.paths[:4] and np.array_equal(ycut, ya[:4])


def test_imagenetc_loads_lazily(imagenet_root, monkeypatch):
    from PIL import Image

    opened = []
    real_open = Image.open

    def spy(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Image, "open", spy)
    x, _ = load_imagenetc(imagenet_root).stream("fog", seed=0)
    assert opened == []  # building a stream reads no image
    x[4]
    assert opened == [x.paths[4].name]
    x[1:3]
    assert opened[1:] == [x.paths[1].name, x.paths[2].name]


def test_imagenetc_resizes_and_center_crops_other_sizes(tmp_path):
    from PIL import Image

    folder = tmp_path / "inc" / "fog" / "5"
    for wnid in WNIDS[:2]:
        (folder / wnid).mkdir(parents=True)
    img = Image.new("RGB", (320, 256), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 30, 256))  # a red band left of the center crop
    img.save(folder / WNIDS[0] / "wide.png")
    Image.new("RGB", (100, 100), (0, 255, 0)).save(folder / WNIDS[1] / "small.png")
    x, _ = load_imagenetc(tmp_path / "inc").stream("fog", seed=0)
    for i in range(2):
        assert x[i].shape == (1, 3, 224, 224)
    wide = x[[p.name for p in x.paths].index("wide.png")][0]
    red = (1 - IMAGENET_MEAN[0]) / IMAGENET_STD[0]
    assert wide[0].max() < red - 1  # the short side stayed 256: the band was cropped away


def test_imagenetc_errors(tmp_path, imagenet_root):
    with pytest.raises(FileNotFoundError, match=r"ImageNet-C root .*missing does not exist"):
        load_imagenetc(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no ImageNet-C corruption folders"):
        load_imagenetc(tmp_path / "empty")
    ds = load_imagenetc(imagenet_root)
    with pytest.raises(ValueError, match=r"unknown corruption 'snow'.*present: \["):
        ds.stream("snow")
    with pytest.raises(FileNotFoundError, match="severity 3 of 'fog' is missing"):
        ds.stream("fog", 3)
    with pytest.raises(ValueError, match="severity must be an integer 1–5"):
        ds.stream("fog", 7)
    with pytest.raises(ValueError, match="must be wnids such as n01440764, got \\['cat'\\]"):
        load_imagenetc(imagenet_root, classes=["n01440764", "cat"])
    with pytest.raises(ValueError, match="duplicate wnids"):
        load_imagenetc(imagenet_root, classes=[WNIDS[0], WNIDS[0]])
    with pytest.raises(ValueError, match=f"class {WNIDS[2]} is not in the class list"):
        load_imagenetc(imagenet_root, classes=WNIDS[:2]).stream("fog")
    for image in (imagenet_root / "fog" / "5" / WNIDS[1]).iterdir():
        image.unlink()
    with pytest.raises(FileNotFoundError, match=f"fog/5/{WNIDS[1]} has no images"):
        ds.stream("fog")
    (imagenet_root / "gaussian_noise" / "5" / "cats").mkdir()
    with pytest.raises(ValueError, match=r"must be WordNet ids .*\['cats'\]"):
        load_imagenetc(imagenet_root)
    (imagenet_root / "gaussian_noise" / "5" / "cats").rmdir()
    (imagenet_root / "frost" / "5").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="has no class folders"):
        load_imagenetc(imagenet_root).stream("frost")
