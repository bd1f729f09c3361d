"""CIFAR-10-C and ImageNet-C loaders on small fixture folders, and the benchmark on them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from realm_lab.bench import bench_quality, quality_table, runs_from_json, runs_to_json
from realm_runtime import Guardrails
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
from realm_tools.models import source_model

PER_SEVERITY = 8  # images per severity in the CIFAR-10-C fixture
FIXED_PIXEL = (17, 130, 255)  # RGB of pixel (10, 10) in every fixture image
WNIDS = ("n01440764", "n01443537", "n01484850")


# ---------------------------------------------------------------------------- fixtures


def _cifar_label(severity: np.ndarray, j: np.ndarray) -> np.ndarray:
    return (3 * j + severity) % 10


def make_cifar10c(root: Path, corruptions=("fog", "gaussian_noise"), per=PER_SEVERITY) -> Path:
    """CIFAR-10-C layout; pixel (0, 0) encodes (severity, index) as 40·(s−1) + 4·j + channel."""
    root.mkdir(parents=True, exist_ok=True)
    s = np.repeat(np.arange(1, 6), per)  # (5·per,) severity of each row
    j = np.tile(np.arange(per), 5)  # index within the severity
    for k, name in enumerate(corruptions):
        images = np.zeros((5 * per, 32, 32, 3), dtype=np.uint8)
        images[:, 0, 0, :] = (40 * (s - 1) + 4 * j)[:, None] + np.arange(3)
        images[:, 10, 10, :] = FIXED_PIXEL
        images[:, 31, 31, 0] = 200 + k  # which file
        np.save(root / f"{name}.npy", images)
    np.save(root / "labels.npy", _cifar_label(s, j).astype(np.uint8))  # uint8, as the real one
    return root


def _decode_cifar(x: np.ndarray, mean=CIFAR10_MEAN, std=CIFAR10_STD) -> tuple[np.ndarray, ...]:
    """(severity, index, file marker) of each normalised (N, 3, 32, 32) fixture image."""
    raw = np.rint((x * np.array(std)[:, None, None] + np.array(mean)[:, None, None]) * 255)
    code = raw[:, 0, 0, 0].astype(int)
    return code // 40 + 1, (code % 40) // 4, raw[:, 0, 31, 31].astype(int) - 200


def _colour(w: int, k: int) -> tuple[int, int, int]:
    return (40 + 80 * w, 60 + 120 * k, 128)  # class w, image k: far apart, JPEG-safe


def make_imagenetc(root: Path, corruptions=("fog", "gaussian_noise"), severities=(5,)) -> Path:
    """ImageNet-C layout: 3 wnid folders × 2 solid-colour 224×224 JPEGs per severity."""
    from PIL import Image

    for c in corruptions:
        for sev in severities:
            for w, wnid in enumerate(WNIDS):
                folder = root / c / str(sev) / wnid
                folder.mkdir(parents=True)
                for k in range(2):
                    img = Image.new("RGB", (224, 224), _colour(w, k))
                    img.save(folder / f"ILSVRC2012_val_{w}{k}.JPEG", quality=95)
    return root


def _decode_imagenet(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class folder index, image index) of each normalised (N, 3, 224, 224) fixture image."""
    rgb = x.mean(axis=(2, 3)) * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)  # (N, 3)
    rgb = rgb * 255
    return np.rint((rgb[:, 0] - 40) / 80).astype(int), np.rint((rgb[:, 1] - 60) / 120).astype(int)


@pytest.fixture
def cifar_root(tmp_path):
    return make_cifar10c(tmp_path / "CIFAR-10-C")


@pytest.fixture
def imagenet_root(tmp_path):
    return make_imagenetc(tmp_path / "ImageNet-C")


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
    assert set(_decode_cifar(x)[2]) == {0}  # the marker of fog.npy, not gaussian_noise.npy


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
    sev, j, marker = _decode_cifar(x)
    assert set(sev) == {severity} and sorted(j) == list(range(PER_SEVERITY))
    assert set(marker) == {1}  # gaussian_noise.npy's marker
    np.testing.assert_array_equal(y, _cifar_label(sev, j))


def test_cifar10c_seeds_shuffle_and_limit_cuts(cifar_root):
    ds = load_cifar10c(cifar_root)
    x0, y0 = ds.stream("fog", seed=0)
    x0_again, y0_again = ds.stream("fog", seed=0)
    x1, y1 = ds.stream("fog", seed=1)
    order0, order1 = _decode_cifar(x0)[1], _decode_cifar(x1)[1]
    assert not np.array_equal(order0, order1)
    assert not np.array_equal(order0, np.arange(PER_SEVERITY))  # shuffled at all
    np.testing.assert_array_equal(x0, x0_again)
    np.testing.assert_array_equal(y0, y0_again)
    np.testing.assert_array_equal(y1, _cifar_label(_decode_cifar(x1)[0], order1))
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
    w, k = _decode_imagenet(x[:])
    r, g, _ = _colour(int(w[0]), int(k[0]))
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
    w, _ = _decode_imagenet(x[:])
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


# ---------------------------------------------------------------------------- benchmark


class _TinyGN(nn.Module):
    """Three classes, one GroupNorm: enough to adapt on 224-pixel inputs in milliseconds."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 8, stride=8)
        self.norm = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))


def test_bench_quality_streams_lazy_imagenetc_and_has_no_forgetting(imagenet_root):
    torch.manual_seed(0)
    ds = load_imagenetc(imagenet_root)
    runs = bench_quality(
        corruptions=["fog"], seeds=[0, 1], methods=["none", "tent"], dataset=ds, source=_TinyGN()
    )
    assert [(r.method, r.seed) for r in runs] == [(m, s) for s in (0, 1) for m in ("none", "tent")]
    for r in runs:
        assert r.clean_after is None and 0 <= r.accuracy <= 100 and len(r.online_accuracy) == 6
    assert runs[0].updates == 0 and 0 < runs[1].updates <= 6
    table = quality_table(runs)
    assert "clean after" not in table and table.splitlines()[0] == "| method | fog | average |"
    back = runs_from_json(runs_to_json(runs, {}))
    assert [r.clean_after for r in back] == [None] * 4
    assert [r.accuracy for r in back] == [r.accuracy for r in runs]
    with pytest.raises(ValueError, match="needs its source model"):
        bench_quality(corruptions=["fog"], dataset=ds)
    with pytest.raises(ValueError, match=r"unknown corruptions \['snow'\] for imagenetc"):
        bench_quality(corruptions=["snow"], dataset=ds, source=_TinyGN())


def test_source_model_loads_checks_and_refuses_weights(tmp_path):
    import timm

    torch.manual_seed(1)
    trained = timm.create_model("resnet18", num_classes=10)
    path = tmp_path / "w.pth"
    torch.save({"state_dict": trained.state_dict()}, path)  # a wrapped checkpoint
    model = source_model("resnet18", num_classes=10, weights=path)
    assert not model.training
    torch.testing.assert_close(model.fc.weight, trained.fc.weight)
    with pytest.raises(FileNotFoundError, match=r"weights file .*nope\.pth does not exist"):
        source_model("resnet18", num_classes=10, weights=tmp_path / "nope.pth")
    with pytest.raises(ValueError, match=r"fc.weight: file \(10, 512\) vs model \(100, 512\)"):
        source_model("resnet18", num_classes=100, weights=path)
    torch.save({"conv1.weight": trained.conv1.weight, "extra": torch.zeros(1)}, path)
    with pytest.raises(ValueError, match=r"missing keys .*1 unexpected keys \['extra'\]"):
        source_model("resnet18", num_classes=10, weights=path)
    path.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a readable torch state_dict file"):
        source_model("resnet18", num_classes=10, weights=path)


def test_cli_quality_on_cifar10c_fixture(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "q"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "tent", "realm"]
    argv += ["--seeds", "0", "--limit", "8", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "meaningless" in capsys.readouterr().err
    data = json.loads((out / "quality.json").read_text())
    assert data["settings"]["dataset"] == "cifar10c" and data["settings"]["preset"] == "cifar"
    assert data["settings"]["model"] == "resnet18" and data["settings"]["random_init"] is True
    runs = data["runs"]
    assert [(r["corruption"], r["method"]) for r in runs] == [
        (c, m) for c in ("gaussian_noise", "fog") for m in ("none", "tent", "realm")
    ]
    for r in runs:
        assert r["clean_after"] is None and r["severity"] == 5 and r["seed"] == 0
        assert 0 <= r["accuracy"] <= 100 and len(r["online_accuracy"]) == 8
        assert r["updates"] <= 8
    assert [len(r["alpha"]) for r in runs if r["method"] == "realm"] == [8, 8]
    table = (out / "quality.md").read_text()
    assert "| REALM |" in table and "clean after" not in table
    assert (out / "online_accuracy.png").is_file() and (out / "alpha_lambda.png").is_file()


def test_cli_streams_on_data_without_a_clean_split_leave_junk_out(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "all", "--seeds", "0", "--limit", "6", "--passes", "1"]
    argv += ["--horizon", "24", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "no clean split: the junk streams are left out" in capsys.readouterr().out
    data = json.loads((out / "streams.json").read_text())
    assert data["settings"]["settings"] == ["episodic", "continual", "mixed", "gradual",
                                            "correlated", "long"]  # fmt: skip
    assert {r["setting"] for r in data["runs"]} == set(data["settings"]["settings"])
    assert all(r["clean_after"] is None for r in data["runs"])
    # Named explicitly, a junk stream is refused before anything runs.
    argv[argv.index("all")] = "junk-noise"
    assert main(argv) == 2
    assert "junk-noise need clean images of cifar10c" in capsys.readouterr().err


def test_cli_streams_keep_finished_runs_and_go_on(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--out", str(out), "--no-progress"]
    assert main(argv) == 0
    log = (out / "runs.jsonl").read_text().splitlines()  # kept: more seeds add to these
    assert len(log) == 3 and all(json.loads(line)["run"]["seconds"] > 0 for line in log[1:])
    data = json.loads((out / "streams.json").read_text())
    assert len(data["settings"]["source_sha256"]) == 64 and len(data["settings"]["cpus"]) == 1
    # A run log another benchmark left there is refused, not mixed in; --fresh starts over.
    (out / "runs.jsonl").write_text('{"fingerprint": {"dataset": "digits"}}\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds runs of another benchmark" in err and "--fresh" in err
    assert main([*argv, "--fresh"]) == 0
    assert len((out / "runs.jsonl").read_text().splitlines()) == 3
    again = json.loads((out / "streams.json").read_text())["runs"]
    timeless = [{k: v for k, v in r.items() if k != "seconds"} for r in again]
    assert timeless == [{k: v for k, v in r.items() if k != "seconds"} for r in data["runs"]]


def test_cli_streams_count_only_the_runs_they_reused(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--out", str(tmp_path / "s"), "--no-progress"]
    assert main(argv) == 0
    assert main(argv) == 0
    assert "; 2 runs came from an earlier invocation" in capsys.readouterr().out
    # Another configuration of REALM's row: that run is done again, no-adapt's is reused.
    assert main([*argv, "--set", "lr=0.004"]) == 0
    said = capsys.readouterr().out
    assert "2 runs kept there" in said and "; 1 runs came from an earlier invocation" in said


def test_cli_streams_record_a_changed_guardrail(cifar_root, tmp_path):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "realm-guarded"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--set", "guardrails.max_drift=0.01", "guardrails.anchor=none"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    recorded = json.loads((out / "streams.json").read_text())["settings"]["overrides"]
    assert recorded["guardrails"]["max_drift"] == 0.01 and recorded["guardrails"]["anchor"] is None
    assert recorded["guardrails"]["relax"] == Guardrails().relax  # the rest: the defaults


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "resnet18"], "needs --weights"),
        (["--model", "resnet18", "--weights", "missing.pth"], "missing.pth does not exist"),
        (["--random-init"], "--dataset cifar10c needs --model"),
        (["--model", "resnet18", "--random-init", "--corruptions", "snow"],
         "unknown corruptions ['snow']"),
        (["--model", "resnet18", "--random-init", "--epochs", "3"],
         "--epochs trains the digits source model"),
        (["--model", "resnet18", "--random-init", "--limit", "0"], "--limit must be ≥ 1"),
        (["--model", "resnet18", "--random-init", "--classes", "wnids.txt"],
         "--classes is for --dataset imagenetc"),
    ],
)  # fmt: skip
def test_cli_quality_refuses_incomplete_real_data_runs(cifar_root, capsys, extra, message):
    from realm_lab.cli import main

    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root), *extra]
    assert main([*argv, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_cli_quality_refuses_real_data_flags_on_digits(capsys):
    from realm_lab.cli import main

    assert main(["bench", "quality", "--data-root", "x"]) == 2
    assert "are for --dataset fmnist-c, cifar10c or imagenetc" in capsys.readouterr().err


@pytest.mark.slow
def test_runtime_method_exports_at_the_dataset_input_shape(cifar_root):
    # realm-runtime exports the source at (1, 3, 32, 32) for CIFAR-10-C and follows REALM.
    torch.manual_seed(0)
    runs = bench_quality(
        corruptions=["fog"],
        seeds=[0],
        methods=["realm", "realm-runtime"],
        limit=8,
        dataset=load_cifar10c(cifar_root),
        source=source_model("resnet18", num_classes=10),
    )
    reference, runtime = runs
    assert runtime.method == "realm-runtime" and runtime.clean_after is None
    assert runtime.accuracy == reference.accuracy and runtime.updates == reference.updates
    np.testing.assert_allclose(runtime.alpha, reference.alpha, atol=1e-5)
