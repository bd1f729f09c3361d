"""The ``realm`` command line: flags, files and printed output over the four packages."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._streams import SETTINGS as SETTINGS_CHOICES

if TYPE_CHECKING:  # torch stays an import of the commands that need it
    from torch import nn

    from ._realdata import ShiftDataset

# `realm bench quality --quick`, a smoke run for CI (also the tests' recipe).
QUICK_EPOCHS = 6  # epochs of the digits source model: ~10 s to train
QUICK_LIMIT = 150  # samples per stream
# The episodic table's rows (realm-runtime: REALM through the exported artifacts).
QUALITY_DEFAULT_METHODS = ("none", "tent", "eata", "realm", "realm-runtime")


def _tqdm_factory(unit: str = "sample") -> Callable[[str, int], Callable[[int], None]]:
    from tqdm import tqdm

    def factory(label: str, total: int) -> Callable[[int], None]:
        bar = tqdm(total=total, desc=label, leave=False, unit=unit, file=sys.stderr)

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
    import json

    from realm_runtime import METHODS

    from ._bench import bench_model, format_speed, plot_speed, rows_to_json
    from ._flops import machine_peak
    from ._models import MODELS, known_model

    # --quick: a smoke run for CI (seconds): digits only unless --models names others, few
    # samples, a smaller peak matmul, and no torch-only RSS process (a fresh torch import
    # takes seconds; the runtime-only one takes half a second and stays).
    quick = args.quick
    models = args.models or (["digits"] if quick else ["digits", "resnet50_gn"])
    samples = args.samples or (5 if quick else 30)
    # 10 warm-up calls: the first runs of each session allocate and plan.
    warmup = args.warmup if args.warmup is not None else (2 if quick else 10)
    unknown = [m for m in models if not known_model(m)]
    bad_methods = [m for m in args.methods if m not in METHODS]
    if unknown or bad_methods:
        print(
            f"unknown models {unknown} / methods {bad_methods}; known: {sorted(MODELS)} or "
            f"timm:<name> / {list(METHODS)}",
            file=sys.stderr,
        )
        return 2
    peak = machine_peak(args.threads, n=1024 if quick else 2048, repeats=3 if quick else 5)
    print(peak.describe(), file=sys.stderr, flush=True)
    rows = []
    for name in models:
        print(
            f"timing {name} ({samples} samples after {warmup} warm-up, {args.threads} threads; "
            f"methods {' '.join(args.methods) or '-'}) …",
            file=sys.stderr,
            flush=True,
        )
        rows.extend(
            bench_model(
                name,
                threads=args.threads,
                samples=samples,
                warmup=warmup,
                methods=args.methods,
                image_size=args.image_size,
                peak=peak,
                torch_rss=not quick,
                backends=args.backends,
                runtime_python=args.runtime_python,
            )
        )
    table = format_speed(rows)
    print(table)
    if args.json:
        text = rows_to_json(rows)
        Path(args.json).write_text(text)
        plot = plot_speed(json.loads(text), Path(args.json).with_suffix(".png"))
        print(f"figures written to {args.json}, ratios plotted in {plot}")
    return 0


def _quality_data(
    args: argparse.Namespace,
) -> tuple[ShiftDataset | None, nn.Module | None] | str:
    """The dataset and source model of ``bench quality`` (None, None: digits), or an error."""
    if args.dataset == "digits":
        if args.data_root or args.model or args.weights or args.random_init or args.classes:
            return (
                "--data-root, --model, --weights, --random-init and --classes are for "
                "--dataset cifar10c or imagenetc"
            )
        return None, None
    from ._models import source_model
    from ._realdata import load_cifar10c, load_imagenetc

    if args.epochs is not None:
        return "--epochs trains the digits source model: give --weights for real data"
    if not args.data_root:
        return f"--dataset {args.dataset} needs --data-root (the unpacked data folder)"
    model = args.model or ("resnet50_gn" if args.dataset == "imagenetc" else None)
    if model is None:
        return (
            "--dataset cifar10c needs --model: the timm architecture of the --weights "
            "(the paper's ResNet-26-GN is not a timm model; see docs/BENCHMARKS.md)"
        )
    if args.weights is None and not args.random_init:
        return (
            f"--dataset {args.dataset} needs --weights (a state_dict file of the source "
            "model); --random-init runs a randomly initialised model instead (a smoke test)"
        )
    if args.weights is not None and args.random_init:
        return "give either --weights or --random-init, not both"
    try:
        if args.dataset == "cifar10c":
            if args.classes:
                return "--classes is for --dataset imagenetc"
            dataset = load_cifar10c(args.data_root)
        else:
            classes = None
            if args.classes:
                classes = Path(args.classes).read_text().split()
            dataset = load_imagenetc(args.data_root, classes=classes)
        if args.random_init:
            print(
                "WARNING: --random-init: the source model is randomly initialised, so its "
                "accuracies are meaningless (this checks that the pipeline runs)",
                file=sys.stderr,
            )
        source = source_model(model, num_classes=dataset.num_classes, weights=args.weights)
    except (OSError, ValueError) as exc:
        return str(exc)
    return dataset, source


def _cmd_bench_quality(args: argparse.Namespace) -> int:

    from ._quality import METHODS, bench_quality, plot_quality, quality_table, runs_to_json

    for flag in ("epochs", "limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"--{flag} must be ≥ 1, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    data = _quality_data(args)
    if isinstance(data, str):
        print(data, file=sys.stderr)
        return 2
    dataset, source = data
    if args.settings:
        return _bench_streams(args, dataset, source)
    if args.methods is None:
        args.methods = list(QUALITY_DEFAULT_METHODS)
    if dataset is None:  # the built-in digits task
        from ._corruptions import CORRUPTIONS

        known, default = ["clean", *sorted(CORRUPTIONS)], sorted(CORRUPTIONS)
        quick = ["gaussian_noise", "defocus_blur"]
    else:
        known, default = list(dataset.corruptions), list(dataset.default_corruptions)
        quick = default[:2]
    preset = args.preset or ("imagenet" if args.dataset == "imagenetc" else "cifar")
    # --quick: a smoke run; on the digits with a briefly trained source model (own cache file).
    epochs = args.epochs or (QUICK_EPOCHS if args.quick else 30)
    if args.quick:
        corruptions, seeds, limit = args.corruptions or quick, [0], args.limit or QUICK_LIMIT
    else:
        corruptions = args.corruptions or default
        seeds, limit = args.seeds, args.limit
    unknown = [c for c in corruptions if c not in known]
    bad_methods = [m for m in args.methods if m not in METHODS]
    if unknown or bad_methods:
        print(
            f"unknown corruptions {unknown} / methods {bad_methods}; known: "
            f"{known} / {list(METHODS)}",
            file=sys.stderr,
        )
        return 2
    runs = bench_quality(
        corruptions=corruptions,
        severity=args.severity,
        seeds=seeds,
        methods=args.methods,
        preset=preset,
        limit=limit,
        cache_dir=args.cache_dir,
        on_run=None if args.no_progress else _tqdm_factory(),
        source=source,
        dataset=dataset,
        epochs=epochs,
    )
    table = quality_table(runs)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings: dict[str, object] = {
        "dataset": args.dataset,
        "corruptions": corruptions,
        "severity": args.severity,
        "seeds": list(seeds),
        "methods": list(args.methods),
        "preset": preset,
        "limit": limit,
        "batch_size": 1,
    }
    if dataset is None:
        settings["source_epochs"] = epochs
    else:
        settings.update(
            data_root=str(args.data_root),
            model=args.model or "resnet50_gn",
            weights=args.weights,
            random_init=args.random_init,
        )
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


def _bench_streams(
    args: argparse.Namespace, dataset: ShiftDataset | None, source: nn.Module | None
) -> int:
    """``bench quality --settings …``: the long-running streams, every row of the table."""
    from dataclasses import asdict

    from ._continual import (
        STREAM_METHODS,
        bench_streams,
        plot_streams,
        streams_tables,
        streams_to_json,
    )
    from ._digits import load_digits, train_digits_model
    from ._quality import DigitsShift
    from ._streams import SETTINGS, StreamSettings

    settings = list(SETTINGS) if "all" in args.settings else list(args.settings)
    methods = args.methods or list(STREAM_METHODS)
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
            on_run=None if args.no_progress else _tqdm_factory(),
            jobs=args.jobs,
        )
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    tables = streams_tables(runs)
    print(tables)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "dataset": args.dataset,
        "settings": settings,
        "corruptions": corruptions,
        "seeds": list(args.seeds),
        "methods": methods,
        "preset": preset,
        "streams": asdict(stream_settings),
        "batch_size": 1,
        "jobs": args.jobs,
    }
    (out / "streams.json").write_text(streams_to_json(runs, record))
    (out / "streams.md").write_text(
        _run_header("Long-running streams: accuracy, forgetting, interventions", sys.argv)
        + tables
        + "\n"
    )
    plots = plot_streams(runs, out)
    print(f"written: {out / 'streams.md'}, {out / 'streams.json'}, {len(plots)} plots")
    return 0


def _cpu_name() -> str:
    """The CPU's model name where the OS says it (Linux), else the architecture."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


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
        f"# {title}\n\nCommand: `{command}`\n\nMachine: {_cpu_name()}, "
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {ort}, numpy "
        f"{np.__version__}.\n\n"
    )


def _cmd_parity(args: argparse.Namespace) -> int:

    from ._parity import BACKENDS, CASES, format_reports, reports_to_json, run_case

    known = {c.name: c for c in CASES}
    if args.cases:
        unknown = [c for c in args.cases if c not in known]
        if unknown:
            print(f"unknown cases {unknown}; known: {sorted(known)}", file=sys.stderr)
            return 2
        cases = [known[c] for c in args.cases]
    else:
        cases = [c for c in CASES if args.all or c.slow == args.slow]
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    reports = []
    for case in cases:
        total = case.steps * len(backends)
        bar = None if args.no_progress else _tqdm_factory()(case.name, total)
        done = run_case(
            case,
            device=args.device,
            threads=args.threads,
            on_step=bar,
            backends=backends,
            reference_device=args.reference_device,
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
        out.with_suffix(".md").write_text(_run_header("Parity", sys.argv) + table + "\n")
        print(f"written: {out.with_suffix('.md')}, {out.with_suffix('.json')}")
    return 0 if all(r.passed for r in reports) else 1


def _cmd_keygen(args: argparse.Namespace) -> int:
    from realm_runtime import generate_keypair

    try:
        private, public = generate_keypair(args.prefix)
    except FileExistsError as exc:
        print(f"realm keygen: {exc}", file=sys.stderr)
        return 1
    print(f"private key: {private} (mode 0600; keep it off devices)")
    print(f"public key:  {public} (give it to RealmRuntime(trusted_keys=[...]) and the clients)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``realm`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="realm",
        description=(
            "realm-tta: REALM test-time adaptation. Export a model to on-device artifacts, "
            "run the demo, check parity with the reference, benchmark, map which models export, "
            "make signing keys."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_demo(sub)
    _add_keygen(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    _add_bench_speed(bench)
    _add_bench_quality(bench)
    _add_bench_adapt(bench)
    _add_parity(sub)
    _add_export(sub)
    _add_coverage(sub)
    return parser


def _add_demo(sub: Any) -> None:
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


def _add_keygen(sub: Any) -> None:
    keygen = sub.add_parser("keygen", help="write an Ed25519 key pair to sign artifacts with")
    keygen.add_argument("prefix", help="writes PREFIX.key (private, 0600) and PREFIX.pub")
    keygen.set_defaults(func=_cmd_keygen)


def _add_bench_speed(bench: Any) -> None:
    speed = bench.add_parser("speed", help="per-sample latency and memory, torch vs runtime")
    speed.add_argument(
        "--models",
        nargs="+",
        default=None,
        help="names in MODELS or timm:<name> (default: digits resnet50_gn; --quick: digits)",
    )
    speed.add_argument("--threads", type=int, default=2)
    speed.add_argument(
        "--samples", type=int, default=None, help="timed samples per measurement (30; quick 5)"
    )
    speed.add_argument("--warmup", type=int, default=None, help="warm-up calls (10; quick 2)")
    speed.add_argument(
        "--methods",
        nargs="*",
        default=["realm", "tent", "eata"],
        help="methods of the per-method cost table (each exports its artifacts; none: skip)",
    )
    speed.add_argument(
        "--image-size", type=int, default=None, help="square input side instead of the model's"
    )
    speed.add_argument(
        "--quick",
        action="store_true",
        help="digits, 5 samples after 2 warm-up, no torch-only RSS process (a CI smoke run)",
    )
    speed.add_argument(
        "--backends",
        nargs="+",
        default=["onnx", "ort-training"],
        choices=("onnx", "onnx-steps", "ort-training"),
        help="runtime backends to time beside torch (default: both)",
    )
    speed.add_argument(
        "--runtime-python",
        default=None,
        help="also time the onnx backend under this interpreter, e.g. .venv-runtime/bin/python "
        "(the newest onnxruntime, no torch; made by the test suite)",
    )
    speed.add_argument("--json", default=None, help="also write every figure to this file")
    speed.set_defaults(func=_cmd_bench_speed)


def _add_bench_adapt(bench: Any) -> None:
    adapt = bench.add_parser(
        "adapt", help="the one adapt graph's cost per sample at several update rates, vs today's"
    )
    adapt.add_argument(
        "--models",
        nargs="+",
        default=["resnet50_gn", "timm:mobilenetv3_large_100"],
        help="names in MODELS or timm:<name>",
    )
    adapt.add_argument("--threads", type=int, default=2)
    adapt.add_argument("--samples", type=int, default=20, help="samples per side and round")
    adapt.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    adapt.add_argument("--image-size", type=int, default=None, help="input side (model's)")
    adapt.add_argument("--no-progress", action="store_true")
    adapt.set_defaults(func=_cmd_bench_adapt)


def _cmd_bench_adapt(args: argparse.Namespace) -> int:
    from ._bench_adapt import bench_adapt, format_adapt_costs
    from ._flops import machine_peak

    peak = machine_peak(args.threads)
    print(peak.describe())
    rows = []
    for name in args.models:
        bar = None if args.no_progress else _tqdm_factory("round")(name, args.rounds)
        rows.append(
            bench_adapt(
                name,
                image_size=args.image_size,
                samples=args.samples,
                rounds=args.rounds,
                threads=args.threads,
                peak=peak,
                on_round=bar,
            )
        )
    print(
        f"CPU: {_cpu_name()}, {args.threads} threads; "
        f"onnxruntime {rows[0].onnxruntime}; {args.samples} samples × {args.rounds} rounds"
    )
    print(format_adapt_costs(rows))
    return 0


def _add_bench_quality(bench: Any) -> None:
    quality = bench.add_parser(
        "quality", help="online accuracy on corrupted streams (digits, CIFAR-10-C, ImageNet-C)"
    )
    quality.add_argument(
        "--quick",
        action="store_true",
        help=f"2 corruptions, 1 seed, {QUICK_LIMIT} samples; on the digits a "
        f"{QUICK_EPOCHS}-epoch source model (a smoke run for CI)",
    )
    quality.add_argument(
        "--dataset",
        choices=("digits", "cifar10c", "imagenetc"),
        default="digits",
        help="the built-in digits task, or real data from --data-root",
    )
    quality.add_argument(
        "--data-root",
        default=None,
        help="CIFAR-10-C: folder of <corruption>.npy + labels.npy; "
        "ImageNet-C: folder of <corruption>/<severity>/<wnid>/*.JPEG",
    )
    quality.add_argument(
        "--model", default=None, help="timm name of the source model (imagenetc: resnet50_gn)"
    )
    quality.add_argument("--weights", default=None, help="state_dict file of the source model")
    quality.add_argument(
        "--random-init",
        action="store_true",
        help="real data without --weights: a random model (pipeline check; accuracy meaningless)",
    )
    quality.add_argument(
        "--classes",
        default=None,
        help="imagenetc: file of wnids in class-index order (default: sorted folders found)",
    )
    quality.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"training epochs of the digits source model (default 30; --quick: {QUICK_EPOCHS})",
    )
    quality.add_argument(
        "--corruptions",
        nargs="+",
        default=None,
        help="default: all of them (digits), the paper's 15 that are present (real data)",
    )
    quality.add_argument("--severity", type=int, default=5, choices=range(1, 6))
    quality.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    quality.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help=f"default: {' '.join(QUALITY_DEFAULT_METHODS)}; with --settings: "
        "none tent eata sar realm realm-guarded",
    )
    quality.add_argument(
        "--settings",
        nargs="+",
        default=None,
        choices=(*SETTINGS_CHOICES, "all"),
        help="long-running streams instead of the episodic table: continual, mixed, "
        "gradual, correlated, long, junk-* (or all, with episodic); writes streams.md",
    )
    quality.add_argument("--passes", type=int, default=4, help="--settings continual: passes")
    quality.add_argument(
        "--horizon", type=int, default=100_000, help="--settings long: at least this many samples"
    )
    quality.add_argument(
        "--junk-length", type=int, default=3000, help="--settings junk-*: samples per stream"
    )
    quality.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="--settings: worker processes, one torch thread each (e.g. the core count)",
    )
    quality.add_argument(
        "--preset",
        choices=("cifar", "imagenet"),
        default=None,
        help="default: imagenet for imagenetc, cifar otherwise",
    )
    quality.add_argument("--limit", type=int, default=None, help="samples per stream")
    quality.add_argument("--cache-dir", default=".cache")
    quality.add_argument("--out", default="docs/quality", help="output folder")
    quality.add_argument("--no-progress", action="store_true")
    quality.set_defaults(func=_cmd_bench_quality)


def _add_parity(sub: Any) -> None:
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
        help="runtime side(s) to compare with the SDK: the one adapt graph (onnx), the numpy "
        "twin over the portable step graph (onnx-steps), and the legacy training artifacts "
        "(ort-training) (default: all)",
    )
    parity.add_argument("--out", default=None, help="write <out>.md and <out>.json")
    parity.add_argument("--no-progress", action="store_true")
    parity.set_defaults(func=_cmd_parity)


def _add_export(sub: Any) -> None:
    if not _export_missing(sub, "export"):
        from ._cli_export import add_export_parser

        add_export_parser(sub)


def _add_coverage(sub: Any) -> None:
    if not _export_missing(sub, "coverage"):
        from ._cli_coverage import add_coverage_parser

        add_coverage_parser(sub)


def _export_missing(sub: Any, command: str) -> bool:
    """Without the export extra (onnx, onnxscript, ONNX Runtime), ``command`` says so."""
    try:
        import realm_export  # noqa: F401
    except ImportError as exc:
        missing = str(exc)

        def _no_export(_args: argparse.Namespace) -> int:
            print(
                f"realm {command} needs the export extra ({missing}): "
                "pip install 'realm-tta[export]'",
                file=sys.stderr,
            )
            return 2

        sub.add_parser(command, help="(needs the export extra)").set_defaults(func=_no_export)
        return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``realm`` command."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line, for reports
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
