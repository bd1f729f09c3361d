"""``realm bench attack``: the worst clean accuracy inside each drift bound, per model."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from realm_runtime import cpu_name

from ._common import run_header, write_atomic

DEFAULT_BOUNDS = [0.0025, 0.005, 0.01, 0.02, 0.05]  # the default max_drift (0.02) inside


def add_attack_parser(bench: Any) -> None:
    """Register ``attack`` on the ``bench`` sub-parser set."""
    attack = bench.add_parser(
        "attack",
        help="the lowest clean accuracy any θ inside each drift bound reaches (worst case)",
    )
    attack.add_argument(
        "--models", nargs="+", default=None, help="digits, fmnist:<recipe> (default: all)"
    )
    attack.add_argument("--bounds", type=float, nargs="+", default=DEFAULT_BOUNDS)
    attack.add_argument("--limit", type=int, default=2000, help="clean test images per model")
    attack.add_argument("--steps", type=int, default=None, help="steps per restart")
    attack.add_argument("--restarts", type=int, default=None, help="restarts per bound")
    attack.add_argument("--threads", type=int, default=None, help="torch threads (all)")
    attack.add_argument("--data-dir", default=None, help="folder of Fashion-MNIST's IDX files")
    attack.add_argument("--seed", type=int, default=0)
    attack.add_argument("--out", default=None, help="write worst_case.{md,json,png} here")
    attack.set_defaults(func=run_attack_command)


def run_attack_command(args: argparse.Namespace) -> int:
    """Run ``realm bench attack`` with parsed arguments; returns the exit code."""
    import dataclasses

    import torch
    from tqdm import tqdm

    from ..attack import (
        SUBJECTS,
        NormBall,
        SearchSettings,
        format_worst_case,
        load_subject,
        plot_worst_case,
        worst_case,
        worst_case_to_json,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    chosen = {k: v for k, v in (("steps", args.steps), ("restarts", args.restarts)) if v}
    settings = dataclasses.replace(SearchSettings(), **chosen)
    try:
        subjects = [
            load_subject(m, limit=args.limit, data_dir=args.data_dir)
            for m in (args.models or SUBJECTS)
        ]
    except (ValueError, FileNotFoundError) as exc:
        print(f"realm bench attack: {exc}", file=sys.stderr)
        return 2
    curves: dict[str, list[Any]] = {}
    counts = {s.name: len(s.labels) for s in subjects}
    balls = {s.name: NormBall(s.model, s.names) for s in subjects}  # θ0 read once per model
    started = time.perf_counter()
    text = ""
    jobs = [(s, b) for s in subjects for b in sorted(args.bounds)]
    with tqdm(jobs, desc="worst case", unit="bound", file=sys.stderr) as bar:
        for subject, bound in bar:
            bar.set_postfix_str(f"{subject.name} b={bound:g}")
            point = worst_case(
                balls[subject.name], subject.images, subject.labels, bound, settings, seed=args.seed
            )
            curves.setdefault(subject.name, []).append(point)
            machine = (
                f"CPU: {cpu_name()}, torch {torch.__version__} with {torch.get_num_threads()} "
                f"threads; {time.perf_counter() - started:.0f} s so far\n\n"
            )
            text = machine + format_worst_case(curves, settings, counts)
            if args.out:  # kept as each point finishes
                out = Path(args.out)
                header = run_header("The worst case inside the drift bound", sys.argv)
                write_atomic(out / "worst_case.md", header + text)
                meta = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "counts": counts}
                write_atomic(out / "worst_case.json", worst_case_to_json(curves, settings, meta))
    if args.out:
        plot_worst_case(
            curves, Path(args.out) / "worst_case.png", "Lowest clean accuracy inside the bound"
        )
    print(text)
    return 0
