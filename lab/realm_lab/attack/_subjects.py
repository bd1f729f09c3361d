"""The source models an attack is measured on, each with its clean test images."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import numpy as np
from torch import nn

from realm_sdk import RealmAdapter, RealmConfig
from realm_tools.data import (
    DigitsShift,
    ShiftDataset,
    fashion_normalise,
    load_digits,
    load_fashion_mnist,
    load_fmnistc,
)
from realm_tools.models import RECIPES, fashion_model, train_digits_model

FASHION_PREFIX = "fmnist:"
SUBJECTS = ("digits", *(FASHION_PREFIX + name for name in RECIPES))
OWN_IMAGES = 256  # labelled images an attacker holds: from the training split, never scored


@dataclass(frozen=True)
class Subject:
    """A source model as the SDK adapts it, and the clean images it is scored on."""

    name: str
    model: nn.Module  # eval mode, the package's shipped weights
    names: list[str]  # the parameters REALM adapts (the cifar preset: 10 classes)
    images: np.ndarray  # float32 (N, C, H, W), normalised as the model expects
    labels: np.ndarray  # int64 (N,)
    low: float  # a black pixel, normalised: the least value a frame may hold
    high: float  # a white pixel, normalised: the most
    own_images: np.ndarray  # the attacker's labelled images (training split), normalised
    own_labels: np.ndarray  # int64
    shifted: ShiftDataset  # the natural shifted test streams the attack frames mix into


def load_subject(
    name: str,
    *,
    limit: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> Subject:
    """The model ``name`` (:data:`SUBJECTS`) and the first ``limit`` images of its test split.

    Raises:
        ValueError: an unknown name.
        FileNotFoundError: Fashion-MNIST is not installed (the message says how).
    """
    shifted: ShiftDataset
    if name == "digits":
        data = load_digits()
        model = train_digits_model(data)  # the shipped weights of the default recipe
        images, labels = data.prepare(data.test_x), data.test_y
        own, own_labels = data.prepare(data.train_x[:OWN_IMAGES]), data.train_y[:OWN_IMAGES]
        black, white = data.prepare(np.zeros((1, 1, 8, 8))), data.prepare(np.ones((1, 1, 8, 8)))
        shifted = DigitsShift(data)
    elif name.startswith(FASHION_PREFIX) and name[len(FASHION_PREFIX) :] in RECIPES:
        model = fashion_model(name[len(FASHION_PREFIX) :])
        fashion = load_fashion_mnist(data_dir)
        raw, labels = fashion.split("test")
        images = fashion_normalise(raw)
        train, train_labels = fashion.split("train")
        own, own_labels = fashion_normalise(train[:OWN_IMAGES]), train_labels[:OWN_IMAGES]
        black = fashion_normalise(np.zeros((1, *raw.shape[1:]), np.uint8))
        white = fashion_normalise(np.full((1, *raw.shape[1:]), 255, np.uint8))
        shifted = load_fmnistc(data_dir)
    else:
        raise ValueError(f"unknown attack subject {name!r}; known: {', '.join(SUBJECTS)}")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    config = RealmConfig.preset("cifar", num_classes=10)
    names = RealmAdapter(copy.deepcopy(model), config).trainable_names
    return Subject(
        name,
        model.eval(),
        list(names),
        images.astype(np.float32),
        np.asarray(labels, np.int64),
        float(black.min()),
        float(white.max()),
        own.astype(np.float32),
        np.asarray(own_labels, np.int64),
        shifted,
    )
