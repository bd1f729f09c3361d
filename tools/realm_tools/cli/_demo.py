"""``realm demo``: the digits model adapted on shifted streams, then exported and run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._common import progress_factory


def add_demo_parser(sub: Any) -> None:
    """Register the ``demo`` sub-command on an argparse sub-parser set."""
    demo = sub.add_parser("demo", help="adapt the built-in digits model on shifted streams")
    demo.add_argument(
        "--corruptions",
        nargs="+",
        default=["gaussian_noise", "impulse_noise", "defocus_blur", "motion_blur", "fog"],
    )
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
    from ..data import CORRUPTIONS
    from ..demo import format_demo, run_demo

    unknown = [c for c in args.corruptions if c not in CORRUPTIONS]
    if unknown:
        print(f"unknown corruptions {unknown}; known: {sorted(CORRUPTIONS)}", file=sys.stderr)
        return 2
    print(
        "REALM demo: a GroupNorm CNN trained on scikit-learn's digits (the weights the "
        "package ships), adapted online with the PyTorch reference SDK on shifted "
        "test streams (no labels used for adaptation).",
        flush=True,
    )
    clean, rows = run_demo(
        corruptions=args.corruptions,
        severity=args.severity,
        seed=args.seed,
        preset=args.preset,
        cache_dir=args.cache_dir,
        on_stream=None if args.no_progress else progress_factory(),
    )
    from ..data import load_digits

    samples = len(load_digits().test_y)
    print(format_demo(clean, rows, severity=args.severity, samples=samples), flush=True)
    if args.no_runtime:
        return 0
    try:
        import realm_export  # noqa: F401  (the export extra)
    except ImportError as exc:
        print(f"(skipping export → runtime: {exc}; pip install 'realm-tta[export]')")
        return 0
    from ..demo import format_runtime_demo, run_runtime_demo

    corruption = args.corruptions[0]
    print(f"\nexport → RealmRuntime on {corruption}:", flush=True)
    bar = None if args.no_progress else progress_factory()(f"{corruption}/runtime", samples)
    result = run_runtime_demo(
        corruption=corruption,
        severity=args.severity,
        seed=args.seed,
        preset=args.preset,
        out_dir=args.out_dir,
        cache_dir=args.cache_dir,
        progress=bar,
    )
    print(format_runtime_demo(result, severity=args.severity))
    return 0
