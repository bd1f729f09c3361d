"""Clean images of the app's own for a method with clean state (EATA's Fisher information).

Fashion-MNIST's: its validation split (the last 10,000 training images), never trained on
and never in a reported stream, as EATA's authors take clean ImageNet images the model never
trained on. A dataset with no such split gives its clean split, which the forgetting figure
also reads (as the authors' Fisher set is also their clean evaluation set).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from realm_runtime.methods import method_named
from realm_tools.data import fashion_normalise, load_fashion_mnist

from ..rows import row_named


def clean_state_images(dataset: Any, methods: list[str] | tuple[str, ...]) -> np.ndarray | None:
    """The images every adapter of a method with clean state estimates it on (None: none needs).

    Args:
        dataset: the benchmark's dataset (``realm_tools.data``'s shift datasets).
        methods: the rows of the benchmark, by key.
    """
    needs = [
        m
        for m in methods
        if row_named(m).method is not None and method_named(str(row_named(m).method)).clean_state
    ]
    if not needs:
        return None
    if str(dataset.name).startswith("fmnist-c"):
        images, _ = load_fashion_mnist().split("val")
        return fashion_normalise(images)
    clean = dataset.clean()
    if clean is None:
        raise ValueError(
            f"{needs} need clean images and {dataset.name} has no clean split: leave them out"
        )
    return np.asarray(clean[0], dtype=np.float32)
