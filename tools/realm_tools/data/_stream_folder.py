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
    folder.mkdir(parents=True, exist_ok=True)
    images = list(images)
    names = {}
    for i, x in enumerate(images):
        name = f"{i:05d}.npy"
        np.save(folder / name, np.ascontiguousarray(x, dtype=np.float32))
        names[name] = i
    if labels is not None:
        classes = [int(label) for label in labels]
        if len(classes) != len(images):
            raise ValueError(f"{len(images)} images but {len(classes)} labels")
        text = json.dumps({name: classes[i] for name, i in names.items()})
        (folder / "labels.json").write_text(text, encoding="utf-8")
