"""``realm demo``: a trained model adapted on shifted streams, then exported and run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._common import progress_factory


def add_demo_parser(sub: Any) -> None:
    """Register the ``demo`` sub-command on an argparse sub-parser set."""
    demo = sub.add_parser(
        "demo",
        help="adapt the shipped ResNet-26-GN on Fashion-MNIST-C (the digits model where "
        "Fashion-MNIST is not installed)",
    )
    demo.add_argument(
        "--data",
        choices=("auto", "fmnist", "digits"),
        default="auto",
        help="auto: Fashion-MNIST-C where the dataset is found, the digits otherwise",
    )
    demo.add_argument("--data-dir", default=None, help="folder of the four Fashion-MNIST files")
    demo.add_argument("--corruptions", nargs="+", default=None, help="default: the task's")
    demo.add_argument("--severity", type=int, default=5, choices=range(1, 6))
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--preset", choices=("cifar", "imagenet"), default="cifar")
    demo.add_argument("--cache-dir", default=".cache")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.add_argument("--out-dir", default="artifacts", help="where the artifacts are written")
    demo.add_argument("--no-runtime", action="store_true", help="skip export → runtime")
    demo.set_defaults(func=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    """Run ``realm demo`` with parsed arguments; returns the exit code."""
    from ..demo import demo_task, format_demo, run_demo

    try:
        task, note = demo_task(args.data, args.cache_dir, args.data_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"realm demo: {exc}", file=sys.stderr)
        return 2
    corruptions = args.corruptions or list(task.default_corruptions)
    unknown = [c for c in corruptions if c not in task.corruptions]
    if unknown:
        print(
            f"unknown corruptions {unknown} for the {task.name} demo; known: "
            f"{list(task.corruptions)}",
            file=sys.stderr,
        )
        return 2
    if note:
        print(note, flush=True)
    print(
        f"REALM demo: {task.title}. Adapted online with the PyTorch reference SDK on shifted "
        "test streams (no labels used for adaptation).",
        flush=True,
    )
    clean, rows = run_demo(
        task,
        corruptions=corruptions,
        severity=args.severity,
        seed=args.seed,
        preset=args.preset,
        on_stream=None if args.no_progress else progress_factory(),
    )
    samples = len(task.stream(corruptions[0], args.severity, args.seed)[1])
    print(
        format_demo(
            clean, rows, severity=args.severity, samples=samples, model=task.model_info["name"]
        ),
        flush=True,
    )
    if args.no_runtime:
        return 0
    try:
        import realm_export  # noqa: F401  (the export extra)
    except ImportError as exc:
        print(f"(skipping export → runtime: {exc}; pip install 'realm-tta[export]')")
        return 0
    from ..demo import format_runtime_demo, run_runtime_demo

    corruption = corruptions[0]
    print(f"\nexport → RealmRuntime on {corruption}:", flush=True)
    bar = None if args.no_progress else progress_factory()(f"{corruption}/runtime", samples)
    result = run_runtime_demo(
        task,
        corruption=corruption,
        severity=args.severity,
        seed=args.seed,
        preset=args.preset,
        out_dir=args.out_dir,
        progress=bar,
    )
    print(format_runtime_demo(result, severity=args.severity))
    return 0
