"""Training the shipped Fashion-MNIST models: the recipe's loop, deterministic on one CPU.

The recipes (architecture, epochs, rate) are the product's (``realm_tools.models.RECIPES``):
the lab trains them, the product loads the weights it ships.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

import torch
from torch import nn

from realm_tools.data import fashion_normalise, load_fashion_mnist
from realm_tools.models import RECIPES, Recipe, described, fashion_accuracy

log = logging.getLogger(__name__)


def train_fashion_model(
    name: str,
    *,
    epochs: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[nn.Module, dict[str, float]]:
    """Train a recipe of :data:`RECIPES` on the 50,000 training images, on one torch thread.

    Augmentation: a random shift of up to 2 pixels and a horizontal flip. The validation
    split is never seen; its clean accuracy is measured after each epoch.

    Returns:
        The model in eval mode, and ``{"val_accuracy", "test_accuracy", "seconds"}``.
    """
    if name not in RECIPES:
        raise ValueError(f"unknown Fashion-MNIST model {name!r}; known: {sorted(RECIPES)}")
    recipe = RECIPES[name]
    epochs = epochs or recipe.epochs
    data = load_fashion_mnist(data_dir)
    say = progress or log.info
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # sums in one order: the same weights on a rerun on this CPU
    start = time.perf_counter()
    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        model = recipe.build()
        x = torch.from_numpy(fashion_normalise(data.split("train")[0]))
        y = torch.from_numpy(data.split("train")[1])
        opt = _optimizer(model, recipe)
        steps = epochs * math.ceil(len(x) / recipe.batch_size)
        warm = math.ceil(len(x) / recipe.batch_size)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * s / steps))
        )
        for epoch in range(epochs):
            model.train()
            order = torch.randperm(len(x), generator=gen)
            total = 0.0
            for begin in range(0, len(x), recipe.batch_size):
                idx = order[begin : begin + recipe.batch_size]
                loss = nn.functional.cross_entropy(model(_augment(x[idx], gen)), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            val = fashion_accuracy(model, *data.split("val"))
            say(
                f"{name}: epoch {epoch + 1}/{epochs}, loss {total / len(x):.4f}, "
                f"val {val:.2f} %, {time.perf_counter() - start:.0f} s"
            )
        figures = {
            "val_accuracy": fashion_accuracy(model, *data.split("val")),
            "test_accuracy": fashion_accuracy(model, *data.split("test")),
            "seconds": time.perf_counter() - start,
        }
    finally:
        torch.set_num_threads(threads)
    return described(model.eval()), figures


def _optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=recipe.lr, momentum=0.9, nesterov=True)
    return torch.optim.AdamW(groups, lr=recipe.lr)


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    # One shift of up to 2 pixels per batch (the padding is background) and per-image flips.
    dx, dy = (int(v) for v in torch.randint(-2, 3, (2,), generator=gen))
    x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
    flip = torch.rand(len(x), generator=gen) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(3), x)
