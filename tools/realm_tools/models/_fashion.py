"""Source models trained on Fashion-MNIST, one of each normalisation family, and their recipe.

- ``resnet26_gn``: the paper's CIFAR architecture, ResNet-26 with GroupNorm (Sun et al.'s
  TTT model: pre-activation basic blocks, 16/32/64 channels, 8 groups), on one gray channel;
- ``mobilenetv3_bn``: timm's mobilenetv3_small_100 (BatchNorm, 1.5 M parameters), 32 px;
- ``vit_ln``: a small timm ViT (LayerNorm): patch 4, width 96, depth 6, 3 heads, 32 px.

The package ships the weights of each recipe (``weights/fmnist_*.safetensors``, made by
``realm-lab train``; docs/models.md has the commands, seeds and digests), so every machine
adapts the same source models: training is deterministic on one CPU, not across CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..data import fashion_normalise, fashion_preprocessing
from ._timm import timm_model

SHIPPED = Path(__file__).with_name("weights")  # the weights the package ships


class _Shortcut(nn.Module):
    """TTT's parameter-free shortcut: average-pool by the stride, zero-pad the new channels."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
        self.extra = cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(x)
        return nn.functional.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x


class _Block(nn.Module):
    """Pre-activation basic block: (norm, ReLU, conv) twice, plus the shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.act = nn.ReLU()
        self.shortcut = _Shortcut(cin, cout, stride) if stride > 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(self.act(self.norm1(x)))
        out = self.conv2(self.act(self.norm2(out)))
        return out + (x if self.shortcut is None else self.shortcut(x))


class ResNet26GN(nn.Module):
    """ResNet-26 with GroupNorm for 32 px inputs (the paper's CIFAR-10-C source model).

    Depth 6·4 + 2: a 3×3 stem, three stages of four pre-activation blocks (16, 32, 64
    channels; the last two stages halve the size), a final norm, global pooling and a linear
    head. Stages are ``stages.0``–``stages.2``, so the last-block freeze finds them.
    """

    def __init__(
        self, num_classes: int = 10, in_chans: int = 1, width: int = 1, groups: int = 8
    ) -> None:
        super().__init__()
        widths = [16 * width, 32 * width, 64 * width]
        self.stem = nn.Conv2d(in_chans, 16, 3, 1, 1, bias=False)
        stages, cin = [], 16
        for i, cout in enumerate(widths):
            blocks = [_Block(cin, cout, 2 if i else 1, groups)]
            blocks += [_Block(cout, cout, 1, groups) for _ in range(3)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.norm = nn.GroupNorm(groups, cin)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 1, 32, 32) -> (B, classes)
        x = self.act(self.norm(self.stages(self.stem(x))))
        return self.head(self.pool(x).flatten(1))


def _timm(name: str, **kwargs: object) -> nn.Module:
    return timm_model(name, 10, in_chans=1, **kwargs)


@dataclass(frozen=True)
class Recipe:
    """How one Fashion-MNIST source model is built and trained."""

    build: Callable[[], nn.Module]  # a fresh, randomly initialised model
    family: str  # its normalisation layers, as the reports name them
    epochs: int  # passes over the 50,000 training images
    lr: float  # peak learning rate (one warm-up epoch, then cosine to 0)
    optimizer: str  # "sgd" (momentum 0.9, Nesterov) or "adamw"
    weight_decay: float  # on every parameter but norms and biases
    batch_size: int = 128  # images per step


RECIPES: dict[str, Recipe] = {
    "resnet26_gn": Recipe(ResNet26GN, "GroupNorm", 6, 0.1, "sgd", 5e-4),
    "mobilenetv3_bn": Recipe(
        partial(_timm, "mobilenetv3_small_100"), "BatchNorm", 6, 2e-3, "adamw", 0.01
    ),
    "vit_ln": Recipe(
        partial(
            _timm,
            "vit_tiny_patch16_224",
            img_size=32,
            patch_size=4,
            embed_dim=96,
            depth=6,
            num_heads=3,
        ),
        "LayerNorm",
        6,
        1e-3,
        "adamw",
        0.05,
    ),
}


def weights_file(name: str, epochs: int, seed: int) -> str:
    """The file name of a recipe's weights (shipped or cached)."""
    return f"fmnist_{name}_e{epochs}_s{seed}.safetensors"


def fashion_model(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> nn.Module:
    """A Fashion-MNIST source model with the weights the package ships, in eval mode.

    Args:
        name: a key of :data:`RECIPES`.
        cache_dir: where ``realm-lab train`` put weights the package does not ship (None: the
            shipped ones only).

    Raises:
        ValueError: an unknown name.
        FileNotFoundError: no weights for the recipe, naming the command that makes them.
    """
    from safetensors.torch import load_file

    if name not in RECIPES:
        raise ValueError(f"unknown Fashion-MNIST model {name!r}; known: {sorted(RECIPES)}")
    recipe = RECIPES[name]
    file = weights_file(name, recipe.epochs, 0)
    places = [SHIPPED] + ([Path(cache_dir)] if cache_dir is not None else [])
    found = [folder / file for folder in places if (folder / file).is_file()]
    if not found:
        raise FileNotFoundError(
            f"no weights for the Fashion-MNIST model {name!r} ({file}): make them with "
            f"`realm-lab train --model {name}` (docs/models.md)"
        )
    model = recipe.build()
    model.load_state_dict(load_file(found[0]))
    return described(model.eval())


def described(model: nn.Module) -> nn.Module:
    """``model`` with its preprocessing where timm models keep theirs (the export reads it)."""
    model.pretrained_cfg = fashion_preprocessing()  # type: ignore[assignment]
    return model


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (%) of ``model`` in eval mode on uint8 images."""
    model.eval()
    hits = 0
    with torch.no_grad():
        for begin in range(0, len(images), 500):
            xb = torch.from_numpy(fashion_normalise(images[begin : begin + 500]))
            pred = model(xb).argmax(1).numpy()
            hits += int((pred == labels[begin : begin + 500]).sum())
    return 100.0 * hits / len(images)
