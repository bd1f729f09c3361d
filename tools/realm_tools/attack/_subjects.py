"""The source models an attack is measured on, each with its clean test images."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import numpy as np
from torch import nn

from realm_sdk import RealmAdapter, RealmConfig

from ..data import fashion_normalise, load_digits, load_fashion_mnist
from ..models import RECIPES, fashion_model, train_digits_model

FASHION_PREFIX = "fmnist:"
SUBJECTS = ("digits", *(FASHION_PREFIX + name for name in RECIPES))


@dataclass(frozen=True)
class Subject:
    """A source model as the SDK adapts it, and the clean images it is scored on."""

    name: str
    model: nn.Module  # eval mode, the package's shipped weights
    names: list[str]  # the parameters REALM adapts (the cifar preset: 10 classes)
    images: np.ndarray  # float32 (N, C, H, W), normalised as the model expects
    labels: np.ndarray  # int64 (N,)


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
    if name == "digits":
        data = load_digits()
        model = train_digits_model(data)  # the shipped weights of the default recipe
        images, labels = data.prepare(data.test_x), data.test_y
    elif name.startswith(FASHION_PREFIX) and name[len(FASHION_PREFIX) :] in RECIPES:
        model = fashion_model(name[len(FASHION_PREFIX) :])
        raw, labels = load_fashion_mnist(data_dir).split("test")
        images = fashion_normalise(raw)
    else:
        raise ValueError(f"unknown attack subject {name!r}; known: {', '.join(SUBJECTS)}")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    config = RealmConfig.preset("cifar", num_classes=10)
    names = RealmAdapter(copy.deepcopy(model), config).trainable_names
    return Subject(name, model.eval(), list(names), images.astype(np.float32), labels)
