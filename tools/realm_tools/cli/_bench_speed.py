"""``realm bench speed``: per-sample latency and memory, torch vs. the runtime."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_speed_parser(bench: Any) -> None:
    """Register ``speed`` on the ``bench`` sub-parser set."""
    speed = bench.add_parser("speed", help="per-sample latency and memory, torch vs runtime")
    speed.add_argument(
        "--models",
        nargs="+",
        default=None,
        help="names in MODELS or timm:<name> (default: digits resnet50_gn; --quick: digits)",
    )
    speed.add_argument("--threads", type=int, default=2)
    speed.add_argument(
        "--samples", type=int, default=None, help="timed samples per measurement (30; quick 5)"
    )
    speed.add_argument("--warmup", type=int, default=None, help="warm-up calls (10; quick 2)")
    speed.add_argument(
        "--methods",
        nargs="*",
        default=None,
        help="methods of the per-method cost table (each exports its artifacts; none given: "
        "skip; default: those whose update costs one forward and one backward)",
    )
    speed.add_argument(
        "--image-size", type=int, default=None, help="square input side instead of the model's"
    )
    speed.add_argument(
        "--quick",
        action="store_true",
        help="digits, 5 samples after 2 warm-up, no torch-only RSS process (a CI smoke run)",
    )
    speed.add_argument(
        "--backends",
        nargs="+",
        default=["onnx", "ort-training"],
        choices=("onnx", "onnx-steps", "ort-training"),
        help="runtime backends to time beside torch (default: both)",
    )
    speed.add_argument(
        "--runtime-python",
        default=None,
        help="also time the onnx backend under this interpreter, e.g. .venv-runtime/bin/python "
        "(the newest onnxruntime, no torch; made by the test suite)",
    )
    speed.add_argument("--json", default=None, help="also write every figure to this file")
    speed.set_defaults(func=run_speed_command)


def run_speed_command(args: argparse.Namespace) -> int:
    """Run ``realm bench speed`` with parsed arguments; returns the exit code."""
    import json

    from realm_runtime.methods import EXPORTED as METHODS  # the bench times exports
    from realm_runtime.methods import methods_costing

    from ..bench import bench_model, format_speed, machine_peak, plot_speed, rows_to_json
    from ..models import MODELS, known_model

    # --quick: a smoke run for CI (seconds): digits only unless --models names others, few
    # samples, a smaller peak matmul, and no torch-only RSS process (a fresh torch import
    # takes seconds; the runtime-only one takes half a second and stays).
    quick = args.quick
    models = args.models or (["digits"] if quick else ["digits", "resnet50_gn"])
    samples = args.samples or (5 if quick else 30)
    # 10 warm-up calls: the first runs of each session allocate and plan.
    warmup = args.warmup if args.warmup is not None else (2 if quick else 10)
    if args.methods is None:
        args.methods = list(methods_costing(1.0))
    unknown = [m for m in models if not known_model(m)]
    bad_methods = [m for m in args.methods if m not in METHODS]
    if unknown or bad_methods:
        print(
            f"unknown models {unknown} / methods {bad_methods}; known: {sorted(MODELS)} or "
            f"timm:<name> / {list(METHODS)}",
            file=sys.stderr,
        )
        return 2
    peak = machine_peak(args.threads, n=1024 if quick else 2048, repeats=3 if quick else 5)
    print(peak.describe(), file=sys.stderr, flush=True)
    rows = []
    for name in models:
        print(
            f"timing {name} ({samples} samples after {warmup} warm-up, {args.threads} threads; "
            f"methods {' '.join(args.methods) or '-'}) …",
            file=sys.stderr,
            flush=True,
        )
        rows.extend(
            bench_model(
                name,
                threads=args.threads,
                samples=samples,
                warmup=warmup,
                methods=args.methods,
                image_size=args.image_size,
                peak=peak,
                torch_rss=not quick,
                backends=args.backends,
                runtime_python=args.runtime_python,
            )
        )
    table = format_speed(rows)
    print(table)
    if args.json:
        text = rows_to_json(rows)
        Path(args.json).write_text(text)
        plot = plot_speed(json.loads(text), Path(args.json).with_suffix(".png"))
        print(f"figures written to {args.json}, ratios plotted in {plot}")
    return 0
