"""``realm bench export``: each model's export time beside a bare forward ONNX export."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from realm_runtime.measure import cpu_name

from ._common import run_header, write_atomic

# The models: a small CNN, a mobile CNN, a GroupNorm ResNet, a ViT and a ConvNeXt.
DEFAULT_MODELS = [
    "digits",
    "timm:mobilenetv3_large_100",
    "resnet50_gn",
    "vit_tiny",
    "convnext_tiny",
]


def add_export_time_parser(bench: Any) -> None:
    """Register ``export`` on the ``bench`` sub-parser set."""
    export = bench.add_parser(
        "export", help="export time beside a bare torch.onnx.export of the forward, one process"
    )
    export.add_argument(
        "--models", nargs="+", default=DEFAULT_MODELS, help="names in MODELS or timm:<name>"
    )
    export.add_argument("--rounds", type=int, default=2, help="timed rounds after a warm-up")
    export.add_argument("--image-size", type=int, default=None, help="input side (model's)")
    export.add_argument("--out", default=None, help="write export.md and export.json here")
    export.set_defaults(func=run_export_time_command)


def run_export_time_command(args: argparse.Namespace) -> int:
    """Run ``realm bench export`` with parsed arguments; returns the exit code."""
    import torch
    from tqdm import tqdm

    from ..bench import bench_export, format_export_times

    rows: list[Any] = []
    with tqdm(args.models, desc="models", unit="model", file=sys.stderr) as bar:
        for name in bar:
            bar.set_postfix_str(name)
            rows.append(bench_export(name, rounds=args.rounds, image_size=args.image_size))
            text = (
                f"CPU: {cpu_name()}, torch {torch.__version__} with {torch.get_num_threads()} "
                f"threads; {args.rounds} rounds after a warm-up, medians\n\n"
                + format_export_times(rows)
            )
            if args.out:  # kept as each row finishes
                out = Path(args.out)
                write_atomic(out / "export.md", run_header("Export time", sys.argv) + text)
                write_atomic(out / "export.json", json.dumps([asdict(r) for r in rows], indent=1))
    print(text)
    return 0
