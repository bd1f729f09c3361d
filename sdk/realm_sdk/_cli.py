"""The ``realm`` command line: a thin wrapper over the library (it owns flags and output)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence


def _tqdm_factory() -> Callable[[str, int], Callable[[int], None]]:
    from tqdm import tqdm

    def factory(label: str, total: int) -> Callable[[int], None]:
        bar = tqdm(total=total, desc=label, leave=False, unit="sample", file=sys.stderr)

        def update(done: int) -> None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return update

    return factory


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._corruptions import CORRUPTIONS
    from ._demo import format_demo, run_demo

    unknown = [c for c in args.corruptions if c not in CORRUPTIONS]
    if unknown:
        print(f"unknown corruptions {unknown}; known: {sorted(CORRUPTIONS)}", file=sys.stderr)
        return 2
    print(
        "REALM demo: a GroupNorm CNN trained on scikit-learn's digits (cached in "
        f"{args.cache_dir}/), adapted online with the PyTorch reference SDK on shifted "
        "test streams (no labels used for adaptation).",
        flush=True,
    )
    clean, rows = run_demo(
        corruptions=args.corruptions,
        severity=args.severity,
        seed=args.seed,
        preset=args.preset,
        cache_dir=args.cache_dir,
        on_stream=None if args.no_progress else _tqdm_factory(),
    )
    from ._digits import load_digits

    samples = len(load_digits().test_y)
    print(format_demo(clean, rows, severity=args.severity, samples=samples), flush=True)
    if args.no_runtime:
        return 0
    try:
        import realm_export  # noqa: F401  (the export extra)
    except ImportError as exc:
        print(f"(skipping export → runtime: {exc}; pip install 'realm-tta[export]')")
        return 0
    from ._demo import format_runtime_demo, run_runtime_demo

    corruption = args.corruptions[0]
    print(f"\nexport → RealmRuntime on {corruption}:", flush=True)
    bar = None if args.no_progress else _tqdm_factory()(f"{corruption}/runtime", samples)
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


def _cmd_bench_speed(args: argparse.Namespace) -> int:
    from ._bench import MODELS, bench_model, format_speed, rows_to_json

    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        print(f"unknown models {unknown}; known: {sorted(MODELS)}", file=sys.stderr)
        return 2
    rows = []
    for name in args.models:
        print(
            f"timing {name} ({args.samples} samples after {args.warmup} warm-up, "
            f"{args.threads} threads) …",
            file=sys.stderr,
            flush=True,
        )
        rows.append(
            bench_model(name, threads=args.threads, samples=args.samples, warmup=args.warmup)
        )
    table = format_speed(rows)
    print(table)
    if args.json:
        from pathlib import Path

        Path(args.json).write_text(rows_to_json(rows))
        print(f"figures written to {args.json}")
    return 0


def _cmd_bench_quality(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._corruptions import CORRUPTIONS
    from ._quality import METHODS, bench_quality, plot_quality, quality_table, runs_to_json

    if args.quick:
        corruptions, seeds, limit = ["gaussian_noise", "defocus_blur"], [0], 150
    else:
        corruptions = args.corruptions or sorted(CORRUPTIONS)
        seeds, limit = args.seeds, args.limit
    unknown = [c for c in corruptions if c not in CORRUPTIONS and c != "clean"]
    bad_methods = [m for m in args.methods if m not in METHODS]
    if unknown or bad_methods:
        print(
            f"unknown corruptions {unknown} / methods {bad_methods}; known: "
            f"{sorted(CORRUPTIONS)} / {list(METHODS)}",
            file=sys.stderr,
        )
        return 2
    runs = bench_quality(
        corruptions=corruptions,
        severity=args.severity,
        seeds=seeds,
        methods=args.methods,
        preset=args.preset,
        limit=limit,
        cache_dir=args.cache_dir,
        on_run=None if args.no_progress else _tqdm_factory(),
    )
    table = quality_table(runs)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "corruptions": corruptions,
        "severity": args.severity,
        "seeds": list(seeds),
        "methods": list(args.methods),
        "preset": args.preset,
        "limit": limit,
        "batch_size": 1,
    }
    (out / "quality.json").write_text(runs_to_json(runs, settings))
    (out / "quality.md").write_text(
        _run_header("Quality: online accuracy (%)", sys.argv) + table + "\n"
    )
    plots = plot_quality(runs, out)
    print(
        f"written: {out / 'quality.md'}, {out / 'quality.json'}, "
        + ", ".join(str(p) for p in plots)
    )
    return 0


def _run_header(title: str, argv: Sequence[str]) -> str:
    """Markdown heading with the command, the machine and the versions behind a table."""
    import os
    import platform

    import numpy as np
    import torch

    try:
        import onnxruntime

        ort = onnxruntime.__version__
    except ImportError:
        ort = "not installed"
    command = "realm " + " ".join(argv[1:])
    return (
        f"# {title}\n\nCommand: `{command}`\n\nMachine: {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {ort}, numpy "
        f"{np.__version__}.\n\n"
    )


def _cmd_parity(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._parity import CASES, format_reports, reports_to_json, run_case

    known = {c.name: c for c in CASES}
    if args.cases:
        unknown = [c for c in args.cases if c not in known]
        if unknown:
            print(f"unknown cases {unknown}; known: {sorted(known)}", file=sys.stderr)
            return 2
        cases = [known[c] for c in args.cases]
    else:
        cases = [c for c in CASES if args.all or c.slow == args.slow]
    reports = []
    for case in cases:
        bar = None if args.no_progress else _tqdm_factory()(case.name, case.steps)
        reports.append(run_case(case, device=args.device, threads=args.threads, on_step=bar))
        print(f"{case.name}: {'pass' if reports[-1].passed else 'FAIL'}", file=sys.stderr)
    table = format_reports(reports)
    print(table)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(reports_to_json(reports))
        out.with_suffix(".md").write_text(_run_header("Parity", sys.argv) + table + "\n")
        print(f"written: {out.with_suffix('.md')}, {out.with_suffix('.json')}")
    return 0 if all(r.passed for r in reports) else 1


def build_parser() -> argparse.ArgumentParser:
    """The ``realm`` argument parser."""
    parser = argparse.ArgumentParser(prog="realm", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)

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
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    speed = bench.add_parser("speed", help="per-sample latency and memory, torch vs runtime")
    speed.add_argument("--models", nargs="+", default=["digits", "resnet50_gn"])
    speed.add_argument("--threads", type=int, default=2)
    speed.add_argument("--samples", type=int, default=30, help="timed samples per measurement")
    speed.add_argument("--warmup", type=int, default=5)
    speed.add_argument("--json", default=None, help="also write every figure to this file")
    speed.set_defaults(func=_cmd_bench_speed)
    quality = bench.add_parser("quality", help="online accuracy on corrupted digits streams")
    quality.add_argument(
        "--quick",
        action="store_true",
        help="2 corruptions, 1 seed, 150 samples (a smoke run for CI)",
    )
    quality.add_argument("--corruptions", nargs="+", default=None, help="default: all of them")
    quality.add_argument("--severity", type=int, default=5, choices=range(1, 6))
    quality.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    quality.add_argument(
        "--methods", nargs="+", default=["none", "tent", "eata", "realm", "realm-runtime"]
    )
    quality.add_argument("--preset", choices=("cifar", "imagenet"), default="cifar")
    quality.add_argument("--limit", type=int, default=None, help="samples per stream")
    quality.add_argument("--cache-dir", default=".cache")
    quality.add_argument("--out", default="docs/quality", help="output folder")
    quality.add_argument("--no-progress", action="store_true")
    quality.set_defaults(func=_cmd_bench_quality)

    parity = sub.add_parser("parity", help="RealmRuntime vs. the torch reference, step by step")
    parity.add_argument("--cases", nargs="+", default=None, help="case names (default: tier)")
    tier = parity.add_mutually_exclusive_group()
    tier.add_argument("--slow", action="store_true", help="the slow tier (224-px models)")
    tier.add_argument("--all", action="store_true", help="both tiers")
    parity.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parity.add_argument("--threads", type=int, default=1)
    parity.add_argument("--out", default=None, help="write <out>.md and <out>.json")
    parity.add_argument("--no-progress", action="store_true")
    parity.set_defaults(func=_cmd_parity)

    try:  # the export command needs the export extra (onnx, onnxruntime-training)
        from realm_export._cli import add_export_parser
    except ImportError as exc:
        missing = str(exc)

        def _no_export(_args: argparse.Namespace) -> int:
            print(
                f"realm export needs the export extra ({missing}): pip install 'realm-tta[export]'",
                file=sys.stderr,
            )
            return 2

        sub.add_parser("export", help="(needs the export extra)").set_defaults(func=_no_export)
    else:
        add_export_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``realm`` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
