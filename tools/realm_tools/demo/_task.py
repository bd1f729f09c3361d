"""What the demo adapts: Fashion-MNIST-C with the shipped ResNet-26-GN, or the digits fallback."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

FASHION_CORRUPTIONS = ("gaussian_noise", "defocus_blur", "fog")
DIGITS_CORRUPTIONS = ("gaussian_noise", "impulse_noise", "defocus_blur", "motion_blur", "fog")
FASHION_SAMPLES = 400  # per stream: four methods on three streams keep the demo short


@dataclass(frozen=True)
class DemoTask:
    """A source model and the shifted streams the demo runs it on."""

    name: str  # artifact folder and stream file prefix ("fmnist" or "digits")
    title: str  # one line saying what runs, printed first
    source: nn.Module  # the trained source model, eval mode
    corruptions: tuple[str, ...]  # every corruption the task has
    default_corruptions: tuple[str, ...]  # what the demo streams unless told otherwise
    stream: Callable[[str, int, int], tuple[np.ndarray, np.ndarray]]  # (name, severity, seed)
    clean: Callable[[int], tuple[np.ndarray, np.ndarray]]  # seed -> the clean stream
    # Clean images of the app's own, as the model takes them, that no stream shows: what a
    # method's set-up reads (EATA's Fisher information).
    clean_state: Callable[[], np.ndarray]
    input_shape: tuple[int, int, int, int]  # (1, C, H, W)
    preprocessing: dict[str, list]  # mean, std, input size: written into the manifest
    model_info: dict[str, Any]  # the manifest's model description


def fashion_task(
    cache_dir: str | os.PathLike[str] | None = ".cache",
    data_dir: str | os.PathLike[str] | None = None,
    samples: int | None = FASHION_SAMPLES,
) -> DemoTask:
    """The shipped ResNet-26-GN on Fashion-MNIST-C's test split (``samples`` per stream).

    Raises:
        FileNotFoundError: Fashion-MNIST is not installed (the message says how to get it).
    """
    from ..data import fashion_normalise, fashion_preprocessing, load_fashion_mnist, load_fmnistc
    from ..models import fashion_model

    data = load_fmnistc(data_dir, cache_dir=cache_dir)

    def clean_state() -> np.ndarray:
        # The validation split: training images the model never trained on, in no stream.
        images, _ = load_fashion_mnist(data_dir).split("val")
        return fashion_normalise(images)

    def clean(seed: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = data.clean()
        order = np.random.default_rng(seed).permutation(len(y))[:samples]
        return x[order], y[order]

    return DemoTask(
        name="fmnist",
        title="the ResNet-26-GN the package ships, trained on Fashion-MNIST, adapted on "
        "Fashion-MNIST-C (the paper's CIFAR-10-C protocol)",
        source=fashion_model("resnet26_gn"),
        corruptions=data.corruptions,
        default_corruptions=FASHION_CORRUPTIONS,
        stream=lambda c, s, seed: data.stream(c, s, seed=seed, limit=samples),
        clean=clean,
        clean_state=clean_state,
        input_shape=data.input_shape,
        preprocessing=fashion_preprocessing(),
        model_info={"name": "fmnist_resnet26_gn", "source": "realm_tools.fashion_model"},
    )


def digits_task(cache_dir: str | os.PathLike[str] | None = ".cache") -> DemoTask:
    """The digits GroupNorm CNN the package ships, on the corrupted digits test split."""
    from ..data import CORRUPTIONS, IMAGE_SIZE, digits_preprocessing, load_digits
    from ..models import train_digits_model

    data = load_digits()
    return DemoTask(
        name="digits",
        title="a GroupNorm CNN trained on scikit-learn's digits (the weights the package "
        "ships), the fallback where Fashion-MNIST is not installed",
        source=train_digits_model(data, cache_dir=cache_dir),
        corruptions=tuple(sorted(CORRUPTIONS)),
        default_corruptions=DIGITS_CORRUPTIONS,
        stream=lambda c, s, seed: data.stream(c, s, seed=seed),
        clean=lambda seed: data.stream("clean", 5, seed=seed),
        # The digits have no split beside train and test: the clean test split, as the lab's.
        clean_state=lambda: data.stream("clean", 1, seed=0)[0],
        input_shape=(1, 1, IMAGE_SIZE, IMAGE_SIZE),
        preprocessing=digits_preprocessing(data),
        model_info={"name": "digits", "source": "realm_tools.train_digits_model"},
    )


def demo_task(
    kind: str = "auto",
    cache_dir: str | os.PathLike[str] | None = ".cache",
    data_dir: str | os.PathLike[str] | None = None,
) -> tuple[DemoTask, str]:
    """The demo's task: ``"fmnist"``, ``"digits"``, or ``"auto"`` (Fashion-MNIST where found).

    Returns:
        ``(task, note)``: the note says why the digits ran where Fashion-MNIST was asked for
        or missing ("" otherwise).

    Raises:
        FileNotFoundError: ``"fmnist"`` asked for and not installed.
    """
    if kind == "digits":
        return digits_task(cache_dir), ""
    try:
        return fashion_task(cache_dir, data_dir), ""
    except FileNotFoundError as exc:
        if kind == "fmnist":
            raise
        return digits_task(cache_dir), f"{exc}. Running the digits instead."
