"""Colour images and a trained model of your own, for ``realm fit``'s walk-through.

Fashion-MNIST's products, each dyed a colour of its own on a background of another, padded
to 32 pixels: images the project ships no model for. Trains :func:`model.build` on the
training split's first 50,000 and writes, under ``--out``:

- ``weights.safetensors``: the trained model (``realm fit --weights``);
- ``clean.npz``: 3,000 labelled images of the validation split (``--data``);
- ``field.npz``: 500 unlabelled ones, darker, as the app meets them (``--field``).

    python examples/fit_your_model/prepare.py --out build/fit-example
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

MEAN = (0.45, 0.45, 0.45)  # the dyed images' statistics, rounded: realm fit --mean
STD = (0.25, 0.25, 0.25)  # realm fit --std


def dye(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 (N, 32, 32) grey → uint8 (N, 32, 32, 3): a colour for the product, one for the rest."""
    ink = rng.uniform(0.35, 1.0, size=(len(gray), 1, 1, 3))
    paper = rng.uniform(0.0, 0.5, size=(len(gray), 1, 1, 3))
    a = gray[..., None].astype(np.float32) / 255.0
    return np.round((a * ink + (1 - a) * paper) * 255).astype(np.uint8)


def tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 NHWC → normalised float NCHW."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    return (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/fit-example")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from realm_tools.data import load_fashion_mnist

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    data = load_fashion_mnist()
    train_x, train_y = data.split("train")
    val_x, val_y = data.split("val")
    x, y = tensor(dye(train_x, rng)), torch.from_numpy(train_y)
    spec = importlib.util.spec_from_file_location(
        "user_model", Path(__file__).with_name("model.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    began = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            rows = order[i : i + 128]
            loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} ({time.perf_counter() - began:.0f} s)")
    model.eval()
    rows = np.sort(rng.choice(len(val_y), 3500, replace=False))
    images = dye(val_x[rows], rng)
    with torch.no_grad():
        accuracy = (model(tensor(images[:3000])).argmax(1).numpy() == val_y[rows][:3000]).mean()
    print(f"validation accuracy {accuracy * 100:.1f} % on the 3,000 clean images")
    save_file(model.state_dict(), out / "weights.safetensors")
    np.savez(out / "clean.npz", images=images[:3000], labels=val_y[rows][:3000])
    field = np.round(images[3000:] * 0.6).astype(np.uint8)  # a dim shop: the app's own shift
    np.savez(out / "field.npz", images=field)
    print(f"written: {out}/weights.safetensors, clean.npz, field.npz")


if __name__ == "__main__":
    main()
