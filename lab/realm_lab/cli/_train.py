"""``realm-lab train``: train a Fashion-MNIST source model of the package's recipes."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def add_train_parser(sub: Any) -> None:
    """Register the ``train`` sub-command on an argparse sub-parser set."""
    train = sub.add_parser(
        "train", help="train a Fashion-MNIST source model (the shipped weights' recipes)"
    )
    train.add_argument(
        "--model", required=True, help="resnet26_gn, mobilenetv3_bn or vit_ln (docs/models.md)"
    )
    train.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--data-dir", default=None, help="folder of the four Fashion-MNIST files")
    train.add_argument(
        "--out",
        default=".cache",
        help="folder for the .safetensors file (tools/realm_tools/models/weights ships them)",
    )
    train.set_defaults(func=run_train_command)


def run_train_command(args: argparse.Namespace) -> int:
    """Run ``realm-lab train`` with parsed arguments; returns the exit code."""
    from safetensors.torch import save_file

    from realm_runtime.measure import cpu_name
    from realm_tools.models import RECIPES, weights_file

    from ..train import train_fashion_model

    if args.epochs is not None and args.epochs < 1:
        print(f"--epochs must be ≥ 1, got {args.epochs}", file=sys.stderr)
        return 2
    if args.model not in RECIPES:
        print(
            f"realm-lab train: unknown --model {args.model!r}; known: {sorted(RECIPES)}",
            file=sys.stderr,
        )
        return 2
    epochs = args.epochs or RECIPES[args.model].epochs
    try:
        model, figures = train_fashion_model(
            args.model, epochs=epochs, seed=args.seed, data_dir=args.data_dir, progress=print
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"realm-lab train: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / weights_file(args.model, epochs, args.seed)
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp)
        os.chmod(tmp, 0o644)  # a package file, not a private one (mkstemp makes it 0600)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(
        f"written: {path} (sha256 {digest}); clean accuracy: val {figures['val_accuracy']:.2f} %, "
        f"test {figures['test_accuracy']:.2f} %; {figures['seconds'] / 60:.1f} min on "
        f"{cpu_name()}, one torch thread"
    )
    return 0
