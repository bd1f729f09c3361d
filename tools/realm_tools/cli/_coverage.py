"""``realm coverage``: flags, progress and files over ``run_coverage``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..coverage import COVERAGE_MODELS, WARMUP
from ._common import export_extra_missing, progress_factory


def add_coverage_parser(sub: Any) -> None:
    """Register the ``coverage`` sub-command on an argparse sub-parser set."""
    p = sub.add_parser(
        "coverage",
        help="which timm architectures export, validate and adapt",
        description="Export each timm architecture (random weights, 100 classes, the imagenet "
        "preset, the export's default options), validate it against the PyTorch reference and "
        "adapt a few random samples through RealmRuntime beside torch and the SDK; each model "
        "in a fresh process under a timeout. Writes <out>.md (a table) and <out>.json (every "
        "figure, and each refusal's full message).",
    )
    p.add_argument(
        "--models",
        nargs="+",
        default=None,
        help=f"timm architectures (default: the {len(COVERAGE_MODELS)} of COVERAGE_MODELS)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        default=128,
        help="square input side of convolutional models (those whose pretrained_cfg fixes "
        "the input size, e.g. ViTs, run at their own)",
    )
    p.add_argument("--out", default="docs/coverage", help="writes <out>.md and <out>.json")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per model")
    p.add_argument("--threads", type=int, default=2, help="torch and ONNX Runtime threads")
    p.add_argument(
        "--samples",
        type=int,
        default=3,
        help=f"timed samples per figure, after {WARMUP} untimed ones (a few: not a benchmark)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="models at a time, each in its own process (keep jobs × threads ≤ cores)",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="keep the other rows of an existing <out>.json and replace those of --models",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_coverage_command)


def run_coverage_command(args: argparse.Namespace) -> int:
    """Run ``realm coverage`` with parsed arguments; returns the exit code."""
    missing = export_extra_missing("coverage")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    import timm

    from ..coverage import (
        CoverageRow,
        coverage_environment,
        coverage_summary,
        coverage_to_json,
        format_coverage,
        merge_rows,
        run_coverage,
    )

    models = list(args.models or COVERAGE_MODELS)
    unknown = [m for m in models if not timm.is_model(m)]
    bad = [
        f"--{flag.replace('_', '-')} must be > 0"
        for flag in ("image_size", "timeout", "threads", "samples", "jobs")
        if getattr(args, flag) <= 0
    ]
    if unknown or bad:
        for line in bad + ([f"timm {timm.__version__} has no models {unknown}"] if unknown else []):
            print(f"realm coverage: {line}", file=sys.stderr)
        return 2
    out = str(args.out).removesuffix(".md").removesuffix(".json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)  # before the hour, not after it
    bar = None if args.no_progress else progress_factory(unit="model")("coverage", len(models))
    done: list[CoverageRow] = []

    def on_row(row: CoverageRow) -> None:
        done.append(row)
        took = f"{row.seconds:.0f} s" if row.seconds is not None else "?"
        line = f"[{len(done)}/{len(models)}] {row.model}: {row.status} ({took})" + (
            f": {row.reason}" if row.reason else ""
        )
        if bar is None:
            print(line, file=sys.stderr, flush=True)
        else:
            from tqdm import tqdm

            tqdm.write(line, file=sys.stderr)  # above the bar, which is redrawn below it
            bar(len(done))

    rows = run_coverage(
        models,
        image_size=args.image_size,
        timeout=args.timeout,
        threads=args.threads,
        samples=args.samples,
        jobs=args.jobs,
        on_row=on_row,
    )
    if args.update and Path(f"{out}.json").exists():
        import json

        old = json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))["rows"]
        rows = merge_rows([CoverageRow.from_dict(r) for r in old], rows)
    environment = coverage_environment(getattr(args, "argv", sys.argv[1:]))
    environment |= {"jobs": args.jobs, "threads": args.threads}
    settings = {
        "models": [r.model for r in rows],
        "image_size": args.image_size,
        "timeout_s": args.timeout,
        "threads": args.threads,
        "samples": args.samples,
    }
    table = format_coverage(rows, environment)
    Path(f"{out}.md").write_text(table + "\n", encoding="utf-8")
    Path(f"{out}.json").write_text(
        coverage_to_json(rows, environment, settings) + "\n", encoding="utf-8"
    )
    print(coverage_summary(rows))
    print(f"written: {out}.md, {out}.json")
    return 0
