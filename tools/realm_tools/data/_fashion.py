"""Fashion-MNIST from the dataset's own IDX files, split for training, validation and test.

Debian's package ``dataset-fashion-mnist`` installs the official release under
``/usr/share/datasets/fashion-mnist/``; a folder given as ``data_dir`` or ``$REALM_DATA``
holding the same four files (gzipped or not) works the same. Images are padded from 28 to
32 pixels with the background's black, the size of the paper's CIFAR models' inputs, so
CIFAR-10-C's corruption tables apply unchanged. numpy only: no torch, no download.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
DATA_ENV = "REALM_DATA"  # a folder holding the four files, or a fashion-mnist/ folder of them
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
SIZE = 32  # padded from 28: CIFAR's input size, for the paper's architecture and tables
TRAIN_SIZE = 50_000  # the first 50,000 training images train; the last 10,000 validate
# Pixel statistics of the padded training images (the first 50,000) in [0, 1].
MEAN = 0.2186
STD = 0.3315


@dataclass(frozen=True)
class FashionMNIST:
    """The three splits of Fashion-MNIST as uint8 ``(N, 32, 32)`` images and int64 labels.

    ``train`` is the first 50,000 training images, ``val`` the last 10,000 (never trained
    on: hyper-parameters are chosen on its corrupted copies), ``test`` the official 10,000
    (only reported).
    """

    root: Path  # the folder the files were read from
    images: dict[str, np.ndarray]  # split -> uint8 (N, 32, 32)
    labels: dict[str, np.ndarray]  # split -> int64 (N,)

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(images, labels)`` of ``"train"``, ``"val"`` or ``"test"``."""
        if name not in self.images:
            raise ValueError(f"unknown Fashion-MNIST split {name!r}; known: {list(self.images)}")
        return self.images[name], self.labels[name]


def normalise(images: np.ndarray) -> np.ndarray:
    """uint8 ``(N, 32, 32)`` → float32 ``(N, 1, 32, 32)``, ``(x/255 − MEAN) / STD``."""
    x = images.astype(np.float32)[:, None] / np.float32(255.0)
    return np.ascontiguousarray((x - np.float32(MEAN)) / np.float32(STD), dtype=np.float32)


def preprocessing() -> dict[str, list]:
    """The models' preprocessing, as timm's ``pretrained_cfg`` keeps it (for the manifest)."""
    return {"input_size": [1, SIZE, SIZE], "mean": [MEAN], "std": [STD]}


def find_fashion_mnist(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding the four Fashion-MNIST files.

    Looks in ``data_dir`` (or its ``fashion-mnist/`` folder), then ``$REALM_DATA``, then
    Debian's ``/usr/share/datasets/fashion-mnist``.

    Raises:
        FileNotFoundError: in none of them, naming both ways to provide the files.
    """
    candidates: list[Path] = []
    for base in (data_dir, os.environ.get(DATA_ENV)):
        if base:
            candidates += [Path(base).expanduser(), Path(base).expanduser() / "fashion-mnist"]
    candidates.append(DEBIAN_DIR)
    for folder in candidates:
        if all(_file(folder, name) is not None for pair in FILES.values() for name in pair):
            return folder
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise FileNotFoundError(
        f"Fashion-MNIST not found (looked in {looked}): install Debian's package "
        "(apt-get install dataset-fashion-mnist), or put the four files of the official "
        "release (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        f"t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in a folder and give it "
        f"as --data-dir or ${DATA_ENV}"
    )


def load_fashion_mnist(data_dir: str | os.PathLike[str] | None = None) -> FashionMNIST:
    """Read and check the four IDX files (see :func:`find_fashion_mnist` for where).

    Raises:
        FileNotFoundError: the files are nowhere.
        ValueError: a file that is not an IDX file of the expected type and size.
    """
    root = find_fashion_mnist(data_dir)
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, (image_name, label_name) in FILES.items():
        images = read_idx(_file(root, image_name), dims=3)  # type: ignore[arg-type]
        labels = read_idx(_file(root, label_name), dims=1)  # type: ignore[arg-type]
        if images.shape[1:] != (28, 28) or len(images) != len(labels):
            raise ValueError(
                f"{root}: {split} images {images.shape} and labels {labels.shape} are not "
                "N 28×28 images with N labels"
            )
        if labels.max() >= len(CLASSES):
            raise ValueError(f"{root}: {split} labels reach {labels.max()}, expected 0–9")
        raw[split] = (np.pad(images, ((0, 0), (2, 2), (2, 2))), labels.astype(np.int64))
    if len(raw["train"][0]) <= TRAIN_SIZE:
        raise ValueError(
            f"{root}: {len(raw['train'][0])} training images, expected 60,000 (the last "
            f"{len(raw['train'][0]) - TRAIN_SIZE} would be the validation split)"
        )
    train_x, train_y = raw["train"]
    images = {"train": train_x[:TRAIN_SIZE], "val": train_x[TRAIN_SIZE:], "test": raw["test"][0]}
    labels = {"train": train_y[:TRAIN_SIZE], "val": train_y[TRAIN_SIZE:], "test": raw["test"][1]}
    return FashionMNIST(root=root, images=images, labels=labels)


def _file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    return None


def read_idx(path: Path, *, dims: int) -> np.ndarray:
    """An uint8 IDX file (gzipped or not) with ``dims`` dimensions, as a numpy array.

    Raises:
        ValueError: not such a file, or cut short.
    """
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: unreadable ({exc}); fetch the file again") from exc
    header = 4 + 4 * dims
    if len(data) < header or data[:3] != b"\x00\x00\x08" or data[3] != dims:
        raise ValueError(
            f"{path}: not an uint8 IDX file of {dims} dimension(s) (magic {data[:4].hex()}); "
            "give the official Fashion-MNIST files"
        )
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    count = int(np.prod(shape))
    if len(data) - header != count:
        raise ValueError(
            f"{path}: {len(data) - header} bytes of data for shape {shape} ({count} expected); "
            "the file is cut short or damaged: fetch it again"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)
