"""``realm bench profile``: where an updating step's time goes, op group by op group."""

from __future__ import annotations

import argparse
from typing import Any

from realm_runtime.measure import cpu_name

MOBILE = ["timm:mobilenetv3_large_100", "timm:efficientnet_b0", "resnet50_gn"]


def add_profile_parser(bench: Any) -> None:
    """Register ``profile`` on the ``bench`` sub-parser set."""
    profile = bench.add_parser(
        "profile",
        help="ONNX Runtime's profile of the step graph against the forward, grouped by what "
        "each op computes, with FLOPs, bytes and a target per group",
    )
    profile.add_argument("--models", nargs="+", default=MOBILE, help="MODELS or timm:<name>")
    profile.add_argument("--threads", type=int, default=2)
    profile.add_argument("--runs", type=int, default=20, help="profiled calls per graph")
    profile.add_argument("--image-size", type=int, default=None, help="input side (model's)")
    profile.add_argument("--no-progress", action="store_true")
    profile.set_defaults(func=run_profile_command)


def run_profile_command(args: argparse.Namespace) -> int:
    """Run ``realm bench profile`` with parsed arguments; returns the exit code."""
    from ..bench import format_profiles, profile_step

    rows = []
    for name in args.models:
        stage = None if args.no_progress else (lambda s, n=name: print(f"{n}: {s}", flush=True))
        rows.append(
            profile_step(
                name,
                image_size=args.image_size,
                threads=args.threads,
                runs=args.runs,
                on_stage=stage,
            )
        )
    print(
        f"CPU: {cpu_name()}, {args.threads} threads; onnxruntime {rows[0].onnxruntime}; "
        f"{args.runs} profiled calls a graph; ms per call"
    )
    print(format_profiles(rows))
    return 0
