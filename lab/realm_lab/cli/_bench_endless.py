"""``realm-lab bench quality --settings ccc``: the endless stream through ``RealmRuntime``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from realm_runtime.measure import cpu_name
from realm_tools.cli import run_header, write_atomic

from ..rows import ENDLESS_DEFAULT
from ._args import runs_folder


def add_endless_arguments(quality: Any) -> None:
    """The endless setting's own options on the ``quality`` parser."""
    quality.add_argument(
        "--length", type=int, default=1_000_000, help="--settings ccc: samples in the stream"
    )
    quality.add_argument(
        "--transition",
        type=int,
        default=5000,
        help="--settings ccc: samples from one corruption to the next",
    )
    quality.add_argument(
        "--window", type=int, default=10_000, help="--settings ccc: samples per accuracy window"
    )
    quality.add_argument(
        "--target",
        type=float,
        default=None,
        help="--settings ccc: the no-adapt accuracy (%%) the stream is held at (default: the "
        "median of the corruptions' severity-5 accuracy)",
    )


def run_endless(
    args: argparse.Namespace, dataset: Any, source: Any, overrides: dict[str, object]
) -> int:
    """Run the endless setting with parsed arguments; returns the exit code.

    ``overrides``: RealmConfig fields REALM's row gets (``--set``, parsed).
    """
    import dataclasses

    from realm_lab.data import CCCSettings
    from realm_tools.data import DigitsShift, load_digits
    from realm_tools.models import train_digits_model

    from ..bench import (
        ENDLESS_METHODS,
        bench_endless,
        endless_to_json,
        format_endless,
        plot_endless,
    )

    if len(args.settings) != 1:
        print("--settings ccc runs alone (it has its own rows and output)", file=sys.stderr)
        return 2
    if args.dataset not in ("digits", "fmnist-c"):
        print("--settings ccc runs on the digits or fmnist-c", file=sys.stderr)
        return 2
    for flag in ("length", "transition", "window"):
        if getattr(args, flag) < 1:
            print(f"--{flag} must be ≥ 1, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    methods = args.methods or list(ENDLESS_DEFAULT)
    bad = [m for m in methods if m not in ENDLESS_METHODS]
    if bad:
        print(f"unknown methods {bad} with --settings ccc; known: {list(ENDLESS_METHODS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    if dataset is None:
        digits = load_digits()
        dataset = DigitsShift(digits)
        source = train_digits_model(digits, epochs=args.epochs or 30, cache_dir=args.cache_dir)
    settings = dataclasses.replace(
        CCCSettings(), length=args.length, transition=args.transition, limit=args.limit
    )
    seed = args.seeds[0]
    out = Path(args.out)
    runs = runs_folder(out)  # the finished rows and the JSON, beside the tables or in the lab
    try:
        cal, rows = bench_endless(
            source,
            dataset,
            args.dataset,
            seed=seed,
            settings=settings,
            methods=methods,
            window=args.window,
            target=args.target,
            jobs=args.jobs,
            data_dir=args.data_root,
            split=args.split,
            keep=runs / "rows",  # a stopped run keeps its finished rows for the next
            overrides=overrides,
            progress=not args.no_progress,
        )
    except (ValueError, RuntimeError) as exc:
        print(f"realm-lab bench quality: {exc}", file=sys.stderr)
        return 2
    text = format_endless(cal, rows, args.window)
    print(text)
    header = run_header(
        "The endless stream (CCC-style), through RealmRuntime", sys.argv, program="realm-lab"
    )
    model = f" {args.model}" if args.model else ""  # the plot names what ran, as ccc.md does
    variant = f"; REALM {' '.join(args.overrides)}" if args.overrides else ""
    title = (
        f"{args.dataset}{model}: {rows[0].samples:,} samples of changing corruptions "
        f"(seed {seed}){variant}"
    )
    meta = {
        "cpu": cpu_name(),
        "overrides": {k: str(v) for k, v in overrides.items()},
        "dataset": args.dataset,
        "seed": seed,
        "split": args.split,
        "settings": dataclasses.asdict(settings),
        "window": args.window,
        "model": args.model,
        "title": title,  # what `realm-lab replot` draws the plot again with
    }
    write_atomic(out / "ccc.md", header + f"CPU: {cpu_name()}, one thread per row\n\n" + text)
    write_atomic(runs / "ccc.json", endless_to_json(cal, rows, meta))
    plot_endless(rows, args.window, out / "ccc.png", title)
    print(f"written: {out / 'ccc.md'}, {runs / 'ccc.json'}, {out / 'ccc.png'}")
    return 0
