"""A picture of the shifted test set: a few samples under each corruption, beside the clean."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from realm_tools.data import ShiftDataset


def plot_examples(
    dataset: ShiftDataset,
    corruptions: Sequence[str],
    severity: int,
    out_dir: str | Path,
    *,
    samples: int = 8,
) -> Path | None:
    """``examples.png``: a row per corruption, the first ``samples`` of its seed-0 stream.

    A clean row (other images of the split) on top; one gray scale for all rows, so that
    contrast and brightness show as they are.

    Returns None where the data has no clean split (the rows could not be lined up).
    """
    clean = dataset.clean()
    if clean is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("clean", np.asarray(clean[0][:samples]))]
    rows += [
        (c, np.asarray(dataset.stream(c, severity, seed=0, limit=samples)[0])) for c in corruptions
    ]
    low = min(float(images.min()) for _, images in rows)
    high = max(float(images.max()) for _, images in rows)
    fig, axes = plt.subplots(len(rows), 1, figsize=(samples * 0.9, len(rows) * 0.95), squeeze=False)
    for ax, (name, images) in zip(axes[:, 0], rows, strict=True):
        strip = np.concatenate([img[0] for img in images[:samples]], axis=1)
        ax.imshow(strip, cmap="gray", vmin=low, vmax=high)
        ax.set_yticks([])
        ax.set_xticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(f"{dataset.name}, severity {severity} (stream order, seed 0)", fontsize=9)
    fig.subplots_adjust(left=0.16, right=0.99, top=0.96, bottom=0.01, hspace=0.1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "examples.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
