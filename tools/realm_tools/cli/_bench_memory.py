"""``realm bench memory``: an adapting process's peak memory, where it goes, and its floor."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from realm_runtime.measure import cpu_name

from ._common import run_header, write_atomic

DEFAULT_MODELS = [
    "timm:mobilenetv3_small_100",
    "timm:mobilenetv3_large_100",
    "timm:efficientnet_b0",
    "timm:resnet18",
    "timm:mobilevit_xxs",
    "vit_tiny",
    "resnet50_gn",
    "fmnist_resnet26_gn",
    "fmnist_mobilenetv3_bn",
    "fmnist_vit_ln",
]


def add_memory_parser(bench: Any) -> None:
    """Register ``memory`` on the ``bench`` sub-parser set."""
    memory = bench.add_parser(
        "memory", help="peak memory of inference and adaptation beside the floor, torch-free"
    )
    memory.add_argument(
        "--models", nargs="+", default=DEFAULT_MODELS, help="names in MODELS or timm:<name>"
    )
    memory.add_argument("--threads", type=int, default=2)
    memory.add_argument("--samples", type=int, default=12, help="samples each process runs")
    memory.add_argument("--image-size", type=int, default=None, help="input side (model's)")
    memory.add_argument(
        "--adapt-stages",
        nargs="+",
        type=int,
        default=None,
        help="also measure each model adapting only its last K stages, for each K given",
    )
    memory.add_argument(
        "--runtime-python",
        default=None,
        help="the probes' interpreter, e.g. .venv-runtime/bin/python (default: this one)",
    )
    memory.add_argument(
        "--node",
        action="store_true",
        help="also measure the Node edge app (examples/node; needs `make web-deps`)",
    )
    memory.add_argument(
        "--browser",
        action="store_true",
        help="also measure the browser page (examples/web in headless Chromium, WASM)",
    )
    memory.add_argument("--out", default=None, help="write memory.md and memory.json here")
    memory.set_defaults(func=run_memory_command)


def run_memory_command(args: argparse.Namespace) -> int:
    """Run ``realm bench memory`` with parsed arguments; returns the exit code."""
    from tqdm import tqdm

    from ..bench import bench_memory, browser_missing, node_missing

    for flag, asked, why in (
        ("--node", args.node, node_missing),
        ("--browser", args.browser, browser_missing),
    ):
        missing = why() if asked else None
        if missing:
            print(f"realm bench memory {flag}: {missing}", file=sys.stderr)
            return 2
    rows: list[Any] = []
    failed: list[str] = []
    stage_counts = [None, *(args.adapt_stages or [])]
    jobs = [(name, k) for name in args.models for k in stage_counts]
    with tqdm(jobs, desc="models", unit="export", file=sys.stderr) as bar:
        for name, k in bar:
            label = name if k is None else f"{name}, last {k}"
            try:
                row = bench_memory(
                    name,
                    samples=args.samples,
                    threads=args.threads,
                    image_size=args.image_size,
                    python=args.runtime_python,
                    adapt_stages=k,
                    node=args.node,
                    browser=args.browser,
                    on_step=lambda step, name=name: bar.set_postfix_str(f"{name}: {step}"),
                )
            except (ValueError, RuntimeError) as exc:  # one row's failure keeps the others
                failed.append(f"{label}: {exc}")
                print(f"realm bench memory: {label} failed: {exc}", file=sys.stderr)
            else:
                rows.append(row)
            if rows and args.out:  # kept as each row finishes
                out = Path(args.out)
                text = run_header("Memory", sys.argv) + _report(args, rows, failed)
                write_atomic(out / "memory.md", text)
                write_atomic(out / "memory.json", json.dumps([asdict(r) for r in rows], indent=1))
    if rows:
        print(_report(args, rows, failed))
    return 1 if failed else 0


def _report(args: argparse.Namespace, rows: list[Any], failed: list[str]) -> str:
    """The report's header line and tables (and the rows that failed, each in a sentence)."""
    from ..bench import format_memory

    head = (
        f"CPU: {cpu_name()}, {args.threads} threads; onnxruntime {rows[0].onnxruntime} "
        f"(the probes'); {args.samples} random samples per process; peak RSS (VmHWM), MB"
    )
    table = format_memory(rows)
    if failed:
        table += "\n\nNot measured:\n\n" + "\n".join(f"- {line}" for line in failed)
    return head + "\n\n" + table
