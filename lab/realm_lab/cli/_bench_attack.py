"""``realm-lab bench attack``: the worst clean accuracy inside each drift bound, per model."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from realm_runtime import Guardrails
from realm_runtime.measure import cpu_name
from realm_tools.cli import run_header, write_atomic

from ._args import parse_overrides, runs_folder

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
    attack.add_argument(
        "--shapes",
        nargs="+",
        default=["l2"],
        choices=["l2", "box"],  # attack.SHAPES (importing it would import torch)
        help="l2: the max_drift ball; box: the per-entry max_change box (default: l2)",
    )
    attack.add_argument("--limit", type=int, default=2000, help="clean test images per model")
    attack.add_argument("--steps", type=int, default=None, help="steps per restart")
    attack.add_argument("--restarts", type=int, default=None, help="restarts per bound")
    attack.add_argument("--batch", type=int, default=None, help="images per gradient step")
    attack.add_argument("--threads", type=int, default=None, help="torch threads (all)")
    attack.add_argument("--data-dir", default=None, help="folder of Fashion-MNIST's IDX files")
    attack.add_argument(
        "--frames",
        action="store_true",
        help="instead: streams with the attacker's crafted frames mixed in (frames.{md,json,png})",
    )
    attack.add_argument(
        "--shares", type=float, nargs="+", default=[0.01, 0.1, 1.0], help="attacker's frames"
    )
    attack.add_argument(
        "--methods", nargs="+", default=None, help="tent eta eata sar realm (default: all)"
    )
    attack.add_argument("--iterations", type=int, default=None, help="steps per crafted frame")
    attack.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="guardrails.FIELD=VALUE",
        help="--frames: the guarded rows' guardrails (e.g. guardrails.max_drift=0.01)",
    )
    attack.add_argument(
        "--per-corruption", type=int, default=20, help="natural frames of each corruption"
    )
    attack.add_argument("--seed", type=int, default=0)
    attack.add_argument("--out", default=None, help="write worst_case.{md,json,png} here")
    attack.set_defaults(func=run_attack_command)


def run_attack_command(args: argparse.Namespace) -> int:
    """Run ``realm-lab bench attack`` with parsed arguments; returns the exit code."""
    import dataclasses

    import torch
    from tqdm import tqdm

    from ..attack import (
        NormBall,
        SearchSettings,
        format_worst_case,
        plot_worst_case,
        worst_case,
        worst_case_to_json,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.frames:
        return _run_frames(args)
    asked = (("steps", args.steps), ("restarts", args.restarts), ("batch", args.batch))
    chosen = {k: v for k, v in asked if v}
    settings = dataclasses.replace(SearchSettings(), **chosen)
    subjects = _subjects(args)
    if subjects is None:
        return 2
    curves: dict[str, list[Any]] = {}
    counts = {s.name: len(s.labels) for s in subjects}
    balls = {s.name: NormBall(s.model, s.names) for s in subjects}  # θ0 read once per model
    started = time.perf_counter()
    text = ""
    jobs = [(s, h, b) for s in subjects for h in args.shapes for b in sorted(args.bounds)]
    found: dict[tuple[str, str], Any] = {}  # the worst θ − θ0 of the last, smaller set
    with tqdm(jobs, desc="worst case", unit="bound", file=sys.stderr) as bar:
        for subject, shape, bound in bar:
            bar.set_postfix_str(f"{subject.name} {shape} b={bound:g}")
            point = worst_case(
                balls[subject.name],
                subject.images,
                subject.labels,
                bound,
                settings,
                seed=args.seed,
                shape=shape,
                start=found.get((subject.name, shape)),  # a smaller set lies inside this one
            )
            found[(subject.name, shape)] = point.delta
            curves.setdefault(subject.name, []).append(point)
            machine = (
                f"CPU: {cpu_name()}, torch {torch.__version__} with {torch.get_num_threads()} "
                f"threads; {time.perf_counter() - started:.0f} s so far\n\n"
            )
            text = machine + format_worst_case(curves, settings, counts)
            if args.out:  # kept as each point finishes
                out = Path(args.out)
                header = run_header(
                    "The worst case inside the drift bound", sys.argv, program="realm-lab"
                )
                write_atomic(out / "worst_case.md", header + text)
                meta = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "counts": counts}
                write_atomic(
                    runs_folder(out) / "worst_case.json", worst_case_to_json(curves, settings, meta)
                )
    if args.out:
        plot_worst_case(
            curves, Path(args.out) / "worst_case.png", "Lowest clean accuracy inside the bound"
        )
    print(text)
    return 0


def _run_frames(args: argparse.Namespace) -> int:
    import dataclasses

    import torch
    from tqdm import tqdm

    from ..attack import (
        FRAME_METHODS,
        FrameSettings,
        NotTwiceDifferentiable,
        attack_rows,
        attack_stream,
        format_frame_attacks,
        frame_attacks_to_json,
        plot_frame_attacks,
    )

    methods = args.methods or list(FRAME_METHODS)
    bad = [m for m in methods if m not in FRAME_METHODS]
    if bad:
        print(
            f"realm-lab bench attack: unknown methods {bad}; known: {list(FRAME_METHODS)}",
            file=sys.stderr,
        )
        return 2
    if not all(0 < s <= 1 for s in args.shares):
        print(
            f"realm-lab bench attack: --shares must be in (0, 1], got {args.shares}",
            file=sys.stderr,
        )
        return 2
    chosen = {"iterations": args.iterations} if args.iterations else {}
    settings = dataclasses.replace(FrameSettings(), **chosen)
    overrides = parse_overrides(args.overrides)
    if isinstance(overrides, str) or set(overrides) - {"guardrails"}:
        wrong = overrides if isinstance(overrides, str) else "only guardrails.FIELD=VALUE"
        print(f"realm-lab bench attack: --set: {wrong}", file=sys.stderr)
        return 2
    guardrails = overrides.get("guardrails")
    subjects = _subjects(args)
    if subjects is None:
        return 2
    jobs = [(s, *row) for s in subjects for row in attack_rows(s, args.shares, methods)]
    rows = []
    started = time.perf_counter()
    text = ""
    with tqdm(jobs, desc="attack streams", unit="stream", file=sys.stderr) as bar:
        for subject, method, guarded, share in bar:
            bar.set_postfix_str(f"{subject.name} {method}{'+g' if guarded else ''} {share:.0%}")
            try:
                row = attack_stream(
                    subject,
                    method,
                    guarded,
                    share,
                    settings=settings,
                    seed=args.seed,
                    per_corruption=args.per_corruption,
                    guardrails=guardrails,  # type: ignore[arg-type]
                )
            except NotTwiceDifferentiable as error:
                print(f"realm-lab bench attack: {subject.name}: {error}", file=sys.stderr)
                return 2
            rows.append(row)
            machine = (
                f"CPU: {cpu_name()}, torch {torch.__version__} with {torch.get_num_threads()} "
                f"threads; {time.perf_counter() - started:.0f} s so far\n\n"
            )
            text = machine + format_frame_attacks(rows, settings)
            if args.out:  # kept as each stream finishes
                out = Path(args.out)
                header = run_header(
                    "Attack streams: crafted frames in a natural stream",
                    sys.argv,
                    program="realm-lab",
                )
                write_atomic(out / "frames.md", header + text)
                meta = {
                    "cpu": cpu_name(),
                    "threads": torch.get_num_threads(),
                    "seed": args.seed,
                    "guardrails": dataclasses.asdict(guardrails or Guardrails()),
                }
                write_atomic(
                    runs_folder(out) / "frames.json", frame_attacks_to_json(rows, settings, meta)
                )
    if args.out:
        plot_frame_attacks(rows, Path(args.out) / "frames.png")
    print(text)
    return 0


def _subjects(args: argparse.Namespace) -> list[Any] | None:
    """The models asked for, or None after saying why they cannot be loaded."""
    from ..attack import SUBJECTS, load_subject

    try:
        return [
            load_subject(m, limit=args.limit, data_dir=args.data_dir)
            for m in (args.models or SUBJECTS)
        ]
    except (ValueError, FileNotFoundError) as exc:
        print(f"realm-lab bench attack: {exc}", file=sys.stderr)
        return None
