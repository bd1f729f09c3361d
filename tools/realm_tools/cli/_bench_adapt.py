"""``realm bench adapt``: the one adapt graph's cost per sample at several update rates."""

from __future__ import annotations

import argparse
from typing import Any

from realm_runtime.measure import cpu_name

from ._common import progress_factory


def add_adapt_parser(bench: Any) -> None:
    """Register ``adapt`` on the ``bench`` sub-parser set."""
    adapt = bench.add_parser(
        "adapt", help="the one adapt graph's cost per sample at several update rates, vs today's"
    )
    adapt.add_argument(
        "--models",
        nargs="+",
        default=["resnet50_gn", "timm:mobilenetv3_large_100"],
        help="names in MODELS or timm:<name>",
    )
    adapt.add_argument("--threads", type=int, default=2)
    adapt.add_argument("--samples", type=int, default=20, help="samples per side and round")
    adapt.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    adapt.add_argument("--image-size", type=int, default=None, help="input side (model's)")
    adapt.add_argument("--no-progress", action="store_true")
    adapt.set_defaults(func=run_adapt_command)


def run_adapt_command(args: argparse.Namespace) -> int:
    """Run ``realm bench adapt`` with parsed arguments; returns the exit code."""
    from ..bench import bench_adapt, format_adapt_costs, machine_peak

    peak = machine_peak(args.threads)
    print(peak.describe())
    rows = []
    for name in args.models:
        bar = None if args.no_progress else progress_factory("round")(name, args.rounds)
        rows.append(
            bench_adapt(
                name,
                image_size=args.image_size,
                samples=args.samples,
                rounds=args.rounds,
                threads=args.threads,
                peak=peak,
                on_round=bar,
            )
        )
    print(
        f"CPU: {cpu_name()}, {args.threads} threads; "
        f"onnxruntime {rows[0].onnxruntime}; {args.samples} samples × {args.rounds} rounds"
    )
    print(format_adapt_costs(rows))
    return 0
