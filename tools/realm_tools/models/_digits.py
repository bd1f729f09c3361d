"""The built-in source model: a GroupNorm CNN trained on the digits, cached, deterministic."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..data import NUM_CLASSES, DigitsData, digits_preprocessing, load_digits

log = logging.getLogger(__name__)

# Weights the package ships (train_digits_model with shipped=False made them; docs/continual.md).
SHIPPED = Path(__file__).with_name("weights")


def _conv_gn(cin: int, cout: int, stride: int, groups: int, batch_norm: bool) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout) if batch_norm else nn.GroupNorm(groups, cout),
        nn.ReLU(inplace=True),
    )


class DigitsGNNet(nn.Module):
    """A small GroupNorm CNN, in the spirit of the paper's ResNet-26-GN for CIFAR.

    ``stem`` then four ``stages`` (32 → 16 → 8 → 4 pixels), global average pooling and a
    linear ``head``. Eight GroupNorm layers, 16 affine tensors to adapt.

    Args:
        num_classes: output classes.
        in_chans: input channels (1 for the digits).
        width: channels of the first stage; later stages double it.
        groups: GroupNorm groups.
        batch_norm_stages: the stem and the first this many stages normalise with BatchNorm
            instead: a model that mixes the two families, as timm's hybrids do.
    """

    def __init__(
        self,
        num_classes: int = NUM_CLASSES,
        in_chans: int = 1,
        width: int = 16,
        groups: int = 4,
        batch_norm_stages: int = 0,
    ) -> None:
        super().__init__()
        w = width
        bn = [batch_norm_stages > 0] + [k < batch_norm_stages for k in range(4)]
        self.stem = _conv_gn(in_chans, w, 1, groups, bn[0])
        self.stages = nn.Sequential(
            nn.Sequential(_conv_gn(w, w, 1, groups, bn[1]), _conv_gn(w, w, 1, groups, bn[1])),
            nn.Sequential(
                _conv_gn(w, 2 * w, 2, groups, bn[2]), _conv_gn(2 * w, 2 * w, 1, groups, bn[2])
            ),
            nn.Sequential(
                _conv_gn(2 * w, 4 * w, 2, groups, bn[3]), _conv_gn(4 * w, 4 * w, 1, groups, bn[3])
            ),
            nn.Sequential(_conv_gn(4 * w, 4 * w, 2, groups, bn[4])),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4 * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 1, 32, 32) -> (B, classes)
        """Logits of a batch."""
        x = self.stages(self.stem(x))  # (B, 4w, 4, 4)
        return self.head(self.pool(x).flatten(1))


def train_digits_model(
    data: DigitsData | None = None,
    *,
    epochs: int = 30,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    build: Callable[[], nn.Module] = DigitsGNNet,
    name: str = "digits_gn",
    shipped: bool = True,
) -> nn.Module:
    """Train (or load) the source model on the digits, deterministically.

    Adam, batch 32, light random-shift augmentation, on one torch thread whatever the
    caller's setting (the thread count changes float sums, hence the weights).
    The result is cached as safetensors keyed by the settings, so later calls load it.

    Training is deterministic on one CPU but not across CPUs: float sums follow the vector
    unit, so another CPU trains another model, and every figure measured on it moves. The
    package therefore ships the weights of the default recipe (30 epochs, seed 0,
    :class:`DigitsGNNet`), and loads those: the same source model on every machine.

    Args:
        data: the split (default: :func:`load_digits`).
        epochs: training epochs.
        seed: initialisation and shuffling seed.
        cache_dir: where to cache the weights (None: no cache).
        build: the architecture (default :class:`DigitsGNNet`); 1 input channel, 10 classes.
        name: the architecture's name in the cache file.
        shipped: load the package's weights where it ships them for this recipe (False:
            train, or load what ``cache_dir`` holds).

    Returns:
        The trained model in eval mode, its preprocessing in ``pretrained_cfg`` (as timm's
        models carry theirs; the export writes it into the manifest).
    """
    from safetensors.torch import load_file, save_file

    data = data or load_digits()
    model = build()
    filename = f"{name}_e{epochs}_s{seed}.safetensors"  # the recipe, shipped or cached
    if shipped and (SHIPPED / filename).is_file():  # the name is the recipe's
        model.load_state_dict(load_file(SHIPPED / filename))
        return _described(model.eval(), data)
    cache = None
    if cache_dir is not None:
        cache = Path(cache_dir) / filename
        if cache.is_file():
            model.load_state_dict(load_file(cache))
            log.info("loaded the digits source model from %s", cache)
            return _described(model.eval(), data)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights on every machine: sums in one order
    try:
        model = _train(build, data, epochs, seed)
    finally:
        torch.set_num_threads(threads)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
        os.replace(tmp, cache)
    return _described(model, data)


def _train(build: Callable[[], nn.Module], data: DigitsData, epochs: int, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = build()  # re-created after seeding: the init is part of the recipe
    x = torch.from_numpy(data.prepare(data.train_x))
    y = torch.from_numpy(data.train_y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        total = 0.0
        for start in range(0, len(x), 32):
            idx = order[start : start + 32]
            xb = _random_shift(x[idx], gen)
            loss = nn.functional.cross_entropy(model(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        sched.step()
        log.info("digits source model: epoch %d/%d, loss %.4f", epoch + 1, epochs, total / len(x))
    return model.eval()


def _described(model: nn.Module, data: DigitsData) -> nn.Module:
    # Its preprocessing, where timm models keep theirs: every export of the model (the demo,
    # `realm export --model digits`, the tests) writes it into the manifest.
    model.pretrained_cfg = digits_preprocessing(data)  # type: ignore[assignment]
    return model


def _random_shift(x: torch.Tensor, gen: torch.Generator, max_shift: int = 2) -> torch.Tensor:
    # Translations of up to 2 pixels: enough to stop the net from memorising pixel positions.
    dx, dy = (int(v) for v in torch.randint(-max_shift, max_shift + 1, (2,), generator=gen))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))
