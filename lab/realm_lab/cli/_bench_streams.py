"""``realm-lab bench quality --settings …``: the long-running streams, every row of the table."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from realm_runtime import Guardrails
from realm_tools.cli import progress_factory, run_header, write_atomic

from ._args import model_name, parse_overrides, runs_folder

if TYPE_CHECKING:
    from torch import nn

    from realm_tools.data import ShiftDataset

RUN_LOG = "runs.jsonl"  # each finished run, so a stopped benchmark goes on where it stopped


def bench_streams_command(
    args: argparse.Namespace, dataset: ShiftDataset | None, source: nn.Module | None
) -> int:
    """``bench quality --settings …``: the long-running streams, every row of the table."""
    from dataclasses import asdict

    from realm_tools.data import SETTINGS, DigitsShift, StreamSettings, load_digits
    from realm_tools.models import train_digits_model

    from ..bench import (
        DEFAULT_STREAM_METHODS,
        STREAM_METHODS,
        HeldOut,
        RunLog,
        bench_streams,
        plot_examples,
        plot_streams,
        streams_fingerprint,
        streams_tables,
        streams_to_json,
    )

    overrides = parse_overrides(args.overrides)
    if isinstance(overrides, str):
        print(overrides, file=sys.stderr)
        return 2
    settings = list(SETTINGS) if "all" in args.settings else list(args.settings)
    methods = args.methods or list(DEFAULT_STREAM_METHODS)
    bad = [m for m in methods if m not in STREAM_METHODS]
    if bad:
        print(
            f"unknown methods {bad} with --settings; known: {list(STREAM_METHODS)}", file=sys.stderr
        )
        return 2
    if dataset is None:
        digits = load_digits()
        dataset = DigitsShift(digits)
        source = train_digits_model(digits, epochs=args.epochs or 30, cache_dir=args.cache_dir)
    assert source is not None
    if "all" in args.settings and dataset.clean() is None:
        print(f"{dataset.name} has no clean split: the junk streams are left out")
        settings = [s for s in settings if not s.startswith("junk-")]
    corruptions = args.corruptions or list(dataset.default_corruptions)
    unknown = [c for c in corruptions if c not in dataset.corruptions]
    if unknown:
        print(f"unknown corruptions {unknown}; known: {list(dataset.corruptions)}", file=sys.stderr)
        return 2
    stream_settings = StreamSettings(
        severity=args.severity,
        passes=args.passes,
        horizon=args.horizon,
        junk_length=args.junk_length,
        limit=args.limit,
    )
    preset = args.preset or ("imagenet" if args.dataset == "imagenetc" else "cifar")
    out, runs_dir = Path(args.out), runs_folder(args.out)
    try:
        fingerprint = streams_fingerprint(
            dataset,
            source,
            corruptions=corruptions,
            preset=preset,
            stream_settings=stream_settings,
            overrides=overrides,
        )
    except (TypeError, ValueError) as exc:
        print(f"--set: {exc}", file=sys.stderr)
        return 2
    log_path = runs_dir / RUN_LOG
    if args.fresh:
        log_path.unlink(missing_ok=True)
    try:
        log = RunLog(log_path, fingerprint)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if log.done:
        cut = f"; {log.dropped} cut-off line(s) run again" if log.dropped else ""
        print(
            f"going on from {log_path}: {len(log.done)} runs kept there; those of the same "
            f"configuration are reused (--fresh starts over){cut}"
        )
    started, prior = time.perf_counter(), dict(log.done)
    try:
        runs = bench_streams(
            dataset,
            source,
            settings=settings,
            seeds=args.seeds,
            corruptions=corruptions,
            methods=methods,
            preset=preset,
            stream_settings=stream_settings,
            on_run=None if args.no_progress else progress_factory(),
            jobs=args.jobs,
            log=log,
            overrides=overrides,
            backend=args.backend,
            heldout=HeldOut() if args.heldout else None,
        )
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    minutes = (time.perf_counter() - started) / 60
    reused = sum(1 for label, run in prior.items() if log.done.get(label) is run)  # not rerun
    timed = [r["seconds"] for r in log.done.values() if r.get("seconds")]
    kept = sum(timed) / 60
    cpus = sorted({cpu for cpu in log.cpus.values() if cpu})  # the runs', not this machine's
    took = (
        f"This invocation took {minutes:.1f} min with {args.jobs} job(s)"
        + (f"; {reused} runs came from an earlier invocation" if reused else "")
        + f". The {len(timed)} of {len(log.done)} runs that kept their time took "
        f"{kept:.0f} core-minutes (one torch thread each)"
        + (f", on {'; '.join(cpus)}." if cpus else ".")
    )
    tables = took + "\n\n" + streams_tables(runs)
    print(tables)
    record = {
        "dataset": args.dataset,
        "split": args.split,
        "model": model_name(args),
        "settings": settings,
        "corruptions": corruptions,
        "seeds": list(args.seeds),
        "methods": methods,
        "preset": preset,
        # A guardrails override is a Guardrails: its fields go into the JSON.
        "overrides": {
            k: asdict(v) if isinstance(v, Guardrails) else v for k, v in overrides.items()
        },
        "streams": asdict(stream_settings),
        "backend": args.backend,
        "batch_size": 1,
        "jobs": args.jobs,
        "minutes": round(minutes, 2),
        "core_minutes": round(kept, 1),  # every run's own time, reused runs included
        "source_sha256": fingerprint["source_sha256"],
        "cpus": cpus,  # more than one where a stopped run went on
    }
    write_atomic(runs_dir / "streams.json", streams_to_json(runs, record))
    write_atomic(
        out / "streams.md",
        run_header(
            "Long-running streams: accuracy, forgetting, interventions",
            sys.argv,
            program="realm-lab",
        )
        + tables
        + "\n",
    )
    plots = plot_streams(runs, out)
    example = plot_examples(dataset, corruptions, args.severity, out)
    plots += [example] if example is not None else []
    print(f"written: {out / 'streams.md'}, {runs_dir / 'streams.json'}, {len(plots)} plots")
    return 0
