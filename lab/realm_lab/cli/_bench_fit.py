"""``realm-lab bench fit``: ``realm fit`` on each shipped model, judged on the test split.

For each model: ``realm fit`` (the product's command, in a process of its own, timed) on
images of Fashion-MNIST's validation split only; then its choice, the defaults and not
adapting in the Table 1 protocol on the test split's Fashion-MNIST-C, kept run by run, so a
stopped bench goes on where it stopped. Writes each model's fit.md and fit.png, and a
summary beside the best row of that model's Table 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from realm_tools.cli import progress_factory, run_header, write_atomic

from ._args import RUNS_HOME, runs_folder

MODELS = ("resnet26_gn", "mobilenetv3_bn", "vit_ln")  # the shipped Fashion-MNIST models
TABLE1_RUNS = "fmnist"  # each model's Table 1 runs, under lab/runs/ (its table in docs/fmnist/)
PRESET = "cifar"  # the Fashion-MNIST tables' preset
TITLE = "realm fit on the shipped models, judged on the test split"
COPIED = ("fit.md", "fit.json", "fit.png")  # what a fit leaves beside its artifacts


def add_fit_parser(bench: Any) -> None:
    """Register ``fit`` on the ``bench`` sub-parser set."""
    p = bench.add_parser(
        "fit",
        help="realm fit on each shipped model (validation split), judged on the test split",
    )
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--minutes", type=float, default=20.0, help="each fit's budget")
    p.add_argument("--images", type=int, default=3000, help="validation images each fit is given")
    p.add_argument(
        "--worst-drop",
        type=float,
        default=2.0,
        help="the rule's floor on the worst case inside the drift bound (realm fit's)",
    )
    p.add_argument(
        "--clean-drop",
        type=float,
        default=1.0,
        help="the rule's floor on clean accuracy after the long stream (realm fit's)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="test stream seeds")
    p.add_argument("--limit", type=int, default=1000, help="samples per test stream")
    p.add_argument("--jobs", type=int, default=2, help="processes of the test runs")
    p.add_argument("--out", default="docs/fit", help="where fit.md and the summary go")
    p.add_argument("--data-root", default=None, help="folder of the Fashion-MNIST files")
    p.add_argument("--cache-dir", default=".cache", help="the corrupted copies and the exports")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_fit_bench)


def run_fit_bench(args: argparse.Namespace) -> int:
    """Run ``realm-lab bench fit`` with parsed arguments; returns the exit code."""
    out, runs = Path(args.out), runs_folder(args.out)
    for name in args.models:
        try:
            fit = _fit(name, args, runs / name)
            _judge(name, args, runs / name, fit)
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            print(f"bench fit, {name}: {exc}", file=sys.stderr)
            return 1
        for file in ("fit.md", "fit.png"):
            if (runs / name / file).is_file() and runs != out:
                (out / name).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(runs / name / file, out / name / file)
    summary = _summary(runs, args)
    write_atomic(out / "summary.md", summary)
    print(summary)
    print(f"written: {out / 'summary.md'}")
    return 0


def _fit(name: str, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """``realm fit`` on the validation images, unless a fit of the same inputs is kept."""
    import numpy as np

    from realm_tools.data import load_fashion_mnist

    images, labels = load_fashion_mnist(args.data_root).split("val")
    rows = np.sort(np.random.default_rng(0).choice(len(labels), args.images, replace=False))
    data = Path(args.cache_dir) / "fit-bench" / f"val-{args.images}.npz"
    data.parent.mkdir(parents=True, exist_ok=True)
    np.savez(data, images=images[rows], labels=labels[rows])
    asked = {
        "model": name,
        "minutes": args.minutes,
        "images": args.images,
        "seed": 0,
        "worst_drop": args.worst_drop,
        "clean_drop": args.clean_drop,
    }
    kept = home / "fit-run.json"
    older = {"worst_drop": 2.0, "clean_drop": 1.0}  # what a fit kept before these were asked
    if kept.is_file() and {**older, **json.loads(kept.read_text())["asked"]} == asked:
        print(f"{name}: the fit kept in {home} is reused")
        return json.loads(kept.read_text())
    export = Path(args.cache_dir) / "fit-bench" / name
    command = [
        sys.executable,
        "-m",
        "realm_tools",
        "fit",
        "--model",
        f"fmnist_{name}",
        "--num-classes",
        "10",
        "--input-shape",
        "1,1,32,32",
        "--preset",
        PRESET,
        "--data",
        str(data),
        "--out",
        str(export),
        "--minutes",
        f"{args.minutes:g}",
        "--worst-drop",
        f"{args.worst_drop:g}",
        "--clean-drop",
        f"{args.clean_drop:g}",
        "--overwrite",
    ]
    print(f"{name}: {' '.join(command[2:])}", flush=True)
    began = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - began
    from realm_runtime import load_manifest

    home.mkdir(parents=True, exist_ok=True)
    for file in COPIED:
        if (export / file).is_file():
            shutil.copyfile(export / file, home / file)
    record = {
        "asked": asked,
        "command": " ".join(["realm fit", *command[4:]]),  # as a user types it
        "seconds": seconds,
        "config": load_manifest(export).config,
        "adapts": json.loads((export / "fit.json").read_text())["choice"]["adapts"],
    }
    from ..bench import write_json

    write_json(kept, record)
    return record


def _judge(name: str, args: argparse.Namespace, home: Path, fit: dict[str, Any]) -> None:
    """The choice, the defaults and not adapting, Table 1's protocol on the test split."""
    from realm_runtime import RealmConfig
    from realm_tools.data import StreamSettings, load_fmnistc
    from realm_tools.models import fashion_model

    from ..bench import FIT_DEFAULTS_ROW as DEFAULTS
    from ..bench import (
        RunLog,
        bench_streams,
        fitted_row,
        import_runs,
        streams_fingerprint,
        write_json,
    )
    from ..rows import NO_ADAPT

    dataset = load_fmnistc(args.data_root, split="test", cache_dir=args.cache_dir)
    source = fashion_model(name, cache_dir=args.cache_dir)
    corruptions = list(dataset.default_corruptions)
    shape = StreamSettings(severity=5, limit=args.limit)
    fingerprint = streams_fingerprint(
        dataset, source, corruptions=corruptions, preset=PRESET, stream_settings=shape
    )
    config = RealmConfig.from_dict(fit["config"]) if fit["adapts"] else None
    row, overrides = fitted_row(config, PRESET, dataset.num_classes)
    on_run = None if args.no_progress else progress_factory()
    table1 = RUNS_HOME / TABLE1_RUNS / name / "runs.jsonl"
    plan = [
        ("runs.jsonl", [NO_ADAPT.key, DEFAULTS], {}),
        ("fitted.jsonl", [row], overrides),
    ]
    for file, methods, extra in plan:
        log = RunLog(home / file, fingerprint)
        if not extra:  # the published rows: their runs in Table 1's log are reused
            copied = import_runs(table1, log, methods)
            if copied:
                print(f"{name}: {copied} runs of {', '.join(methods)} taken from {table1}")
        bench_streams(
            dataset,
            source,
            settings=["episodic"],
            seeds=args.seeds,
            corruptions=corruptions,
            methods=methods,
            preset=PRESET,
            stream_settings=shape,
            on_run=on_run,
            jobs=args.jobs,
            log=log,
            overrides=extra,
        )
    write_json(
        home / "judged.json",
        {"fingerprint": fingerprint, "row": row, "seeds": list(args.seeds)},
    )


def _summary(runs: Path, args: argparse.Namespace) -> str:
    """Every judged model: the fitted row beside the defaults, not adapting and Table 1's best."""
    from ..bench import FIT_DEFAULTS_ROW as DEFAULTS
    from ..bench import RunLog, row_result, table1_best, verdict
    from ..rows import NO_ADAPT

    lines = [
        "| model | fit (budget, took) | choice | fitted | defaults | no-adapt | Table 1's best "
        "row | fitted vs the better of defaults and no-adapt |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for name in MODELS:
        home = runs / name
        if not (home / "judged.json").is_file():
            continue
        judged = json.loads((home / "judged.json").read_text())
        fit = json.loads((home / "fit-run.json").read_text())
        report = json.loads((home / "fit.json").read_text())
        seeds, corruptions = judged["seeds"], judged["fingerprint"]["corruptions"]
        done = RunLog(home / "runs.jsonl", judged["fingerprint"]).done
        fitted_log = RunLog(home / "fitted.jsonl", judged["fingerprint"]).done
        source = done if judged["row"] == NO_ADAPT.key else fitted_log
        fitted = row_result(source, judged["row"], corruptions, seeds, "fitted")
        defaults = row_result(done, DEFAULTS, corruptions, seeds, "the defaults")
        no_adapt = row_result(done, NO_ADAPT.key, corruptions, seeds, "no-adapt")
        table1 = RUNS_HOME / TABLE1_RUNS / name / "runs.jsonl"
        best, why = table1_best(table1, judged["fingerprint"], corruptions, seeds)
        if fitted is None or defaults is None or no_adapt is None:
            continue
        _, said = verdict(fitted, defaults, no_adapt)
        choice = report["choice"]
        lines.append(
            f"| {name} | {fit['asked']['minutes']:g} min, {fit['seconds'] / 60:.1f} min | "
            f"{choice['label'] if choice['adapts'] else 'do not adapt'} | {fitted.text()} | "
            f"{defaults.text()} | {no_adapt.text()} | "
            + (f"{best.label} {best.text()}" if best is not None else why)
            + f" | {said} |"
        )
    return (
        run_header(TITLE, sys.argv, "realm-lab")
        + f"Each fit: {args.images} images of Fashion-MNIST's validation split; judged in Table "
        f"1's protocol on the test split (15 corruptions at severity 5, {args.limit} samples "
        f"per stream, mean ± std over the stream seeds {' '.join(map(str, args.seeds))}).\n\n"
        + "\n".join(lines)
        + "\n"
    )
