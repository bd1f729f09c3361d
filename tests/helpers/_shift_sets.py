"""Small CIFAR-10-C and ImageNet-C folders, laid out as the real ones are, and their decoders."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from realm_tools.data import CIFAR10_MEAN, CIFAR10_STD, IMAGENET_MEAN, IMAGENET_STD

PER_SEVERITY = 8  # images per severity in the CIFAR-10-C fixture
FIXED_PIXEL = (17, 130, 255)  # RGB of pixel (10, 10) in every fixture image
WNIDS = ("n01440764", "n01443537", "n01484850")


def cifar_label(severity: np.ndarray, j: np.ndarray) -> np.ndarray:
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
    np.save(root / "labels.npy", cifar_label(s, j).astype(np.uint8))  # uint8, as the real one
    return root


def decode_cifar(x: np.ndarray, mean=CIFAR10_MEAN, std=CIFAR10_STD) -> tuple[np.ndarray, ...]:
    """(severity, index, file marker) of each normalised (N, 3, 32, 32) fixture image."""
    raw = np.rint((x * np.array(std)[:, None, None] + np.array(mean)[:, None, None]) * 255)
    code = raw[:, 0, 0, 0].astype(int)
    return code // 40 + 1, (code % 40) // 4, raw[:, 0, 31, 31].astype(int) - 200


def colour(w: int, k: int) -> tuple[int, int, int]:
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
                    img = Image.new("RGB", (224, 224), colour(w, k))
                    img.save(folder / f"ILSVRC2012_val_{w}{k}.JPEG", quality=95)
    return root


def decode_imagenet(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class folder index, image index) of each normalised (N, 3, 224, 224) fixture image."""
    rgb = x.mean(axis=(2, 3)) * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)  # (N, 3)
    rgb = rgb * 255
    return np.rint((rgb[:, 0] - 40) / 80).astype(int), np.rint((rgb[:, 1] - 60) / 120).astype(int)
