"""A stream as the edge apps read it: one ``.npy`` file per sample, in stream order."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np


def write_stream_folder(
    folder: Path, images: Iterable[np.ndarray], labels: Iterable[int] | None = None
) -> None:
    """Write a stream as the Node app reads it.

    ``00000.npy``, ``00001.npy``, … (float32, one sample each, in stream order) and, where
    ``labels`` are given, ``labels.json`` (file name → class).
    """
    images = list(images)
    classes = None if labels is None else [int(label) for label in labels]
    if classes is not None and len(classes) != len(images):  # checked before any file
        raise ValueError(f"{len(images)} images but {len(classes)} labels")
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"{i:05d}.npy" for i in range(len(images))]
    for name, x in zip(names, images, strict=True):
        np.save(folder / name, np.ascontiguousarray(x, dtype=np.float32))
    if classes is not None:
        text = json.dumps(dict(zip(names, classes, strict=True)))
        (folder / "labels.json").write_text(text, encoding="utf-8")
