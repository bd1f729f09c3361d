"""``realm parity``: RealmRuntime against the torch reference, step by step."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._common import progress_factory, run_header


def add_parity_parser(sub: Any) -> None:
    """Register the ``parity`` sub-command on an argparse sub-parser set."""
    parity = sub.add_parser("parity", help="RealmRuntime vs. the torch reference, step by step")
    parity.add_argument("--cases", nargs="+", default=None, help="case names (default: tier)")
    tier = parity.add_mutually_exclusive_group()
    tier.add_argument("--slow", action="store_true", help="the slow tier (224-px models)")
    tier.add_argument("--all", action="store_true", help="both tiers")
    parity.add_argument(
        "--device", default="cpu", choices=("cpu", "cuda"), help="the runtime's execution provider"
    )
    parity.add_argument(
        "--reference-device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="the torch device the SDK reference runs on (cuda: full float32, TF32 off)",
    )
    parity.add_argument("--threads", type=int, default=1)
    parity.add_argument(
        "--backend",
        default="all",
        choices=("all", "onnx", "onnx-steps", "ort-training"),
        help="runtime side(s) to compare with the SDK: the one adapt graph (onnx), the "
        "host-step backend over the portable step graph (onnx-steps), and the legacy "
        "training artifacts (ort-training) (default: all)",
    )
    parity.add_argument("--out", default=None, help="write <out>.md and <out>.json")
    parity.add_argument("--no-progress", action="store_true")
    parity.set_defaults(func=run_parity_command)


def run_parity_command(args: argparse.Namespace) -> int:
    """Run ``realm parity`` with parsed arguments; returns the exit code."""
    from ..parity import BACKENDS, CASES, ExportCache, format_reports, reports_to_json, run_case

    known = {c.name: c for c in CASES}
    if args.cases:
        unknown = [c for c in args.cases if c not in known]
        if unknown:
            print(f"unknown cases {unknown}; known: {sorted(known)}", file=sys.stderr)
            return 2
        cases = [known[c] for c in args.cases]
    else:
        cases = [c for c in CASES if args.all or c.slow == args.slow]
    asked = BACKENDS if args.backend == "all" else (args.backend,)
    reports = []
    with tempfile.TemporaryDirectory() as folder:
        exports = ExportCache(folder)  # cases that differ in device settings share an export
        for case in cases:
            backends = [b for b in asked if b in case.backends]  # those held to the case
            if not backends:
                print(f"{case.name}: not run on {args.backend} ({case.why})", file=sys.stderr)
                continue
            total = case.steps * len(backends)
            bar = None if args.no_progress else progress_factory()(case.name, total)
            done = run_case(
                case,
                device=args.device,
                threads=args.threads,
                on_step=bar,
                backends=backends,
                reference_device=args.reference_device,
                exports=exports,
            )
            reports.extend(done)
            verdict = ", ".join(f"{r.backend} {'pass' if r.passed else 'FAIL'}" for r in done)
            print(f"{case.name}: {verdict}", file=sys.stderr)
    table = format_reports(reports)
    print(table)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(reports_to_json(reports))
        out.with_suffix(".md").write_text(run_header("Parity", sys.argv) + table + "\n")
        print(f"written: {out.with_suffix('.md')}, {out.with_suffix('.json')}")
    return 0 if all(r.passed for r in reports) else 1
