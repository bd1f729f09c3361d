"""``realm-lab bench quality``: online accuracy on corrupted streams, episodic or long-running."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from realm_lab.data import CCC_SETTING
from realm_tools.cli import progress_factory, run_header, write_atomic
from realm_tools.data import SETTINGS as SETTINGS_CHOICES

from ..rows import ENDLESS_DEFAULT, QUALITY_DEFAULT, ROWS, STREAMS_DEFAULT
from ._args import model_name, parse_overrides, runs_folder
from ._bench_endless import add_endless_arguments, run_endless
from ._bench_streams import RUN_LOG, bench_streams_command

if TYPE_CHECKING:  # torch stays an import of the commands that need it
    from torch import nn

    from realm_tools.data import ShiftDataset

# `realm-lab bench quality --quick`, a smoke run for CI (also the tests' recipe).
QUICK_EPOCHS = 6  # epochs of the digits source model: enough for behaviour, quick to train
QUICK_LIMIT = 150  # samples per stream
# The episodic table's rows (realm-runtime: REALM through the exported artifacts).
# --settings: the finished runs, kept as they finish; removed once the tables are written.


def add_quality_parser(bench: Any) -> None:
    """Register ``quality`` on the ``bench`` sub-parser set."""
    quality = bench.add_parser(
        "quality",
        help="online accuracy on corrupted streams (digits, Fashion-MNIST-C, CIFAR-10-C, "
        "ImageNet-C)",
    )
    quality.add_argument(
        "--quick",
        action="store_true",
        help=f"2 corruptions, 1 seed, {QUICK_LIMIT} samples; on the digits a "
        f"{QUICK_EPOCHS}-epoch source model (a smoke run for CI)",
    )
    quality.add_argument(
        "--dataset",
        choices=("digits", "fmnist-c", "cifar10c", "imagenetc"),
        default="digits",
        help="the built-in digits task; Fashion-MNIST-C (built from the Fashion-MNIST files "
        "Debian installs, or --data-root); or CIFAR-10-C / ImageNet-C from --data-root",
    )
    quality.add_argument(
        "--split",
        choices=("test", "val"),
        default="test",
        help="fmnist-c: the test split (reported), or the validation split (part of the "
        "training set, corrupted with other seeds: what settings are chosen on)",
    )
    quality.add_argument(
        "--data-root",
        default=None,
        help="fmnist-c: folder of the four Fashion-MNIST files (default: $REALM_DATA, then "
        "/usr/share/datasets/fashion-mnist); CIFAR-10-C: folder of <corruption>.npy + "
        "labels.npy; ImageNet-C: folder of <corruption>/<severity>/<wnid>/*.JPEG",
    )
    quality.add_argument(
        "--model",
        default=None,
        help="fmnist-c: a shipped source model, resnet26_gn (default), mobilenetv3_bn or vit_ln; "
        "otherwise the timm name of the source model (imagenetc: resnet50_gn)",
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
        help=f"rows of the table, of {' '.join(ROWS)}; default: {' '.join(QUALITY_DEFAULT)}; "
        f"with --settings: {' '.join(STREAMS_DEFAULT)}; with --settings ccc: "
        f"{' '.join(ENDLESS_DEFAULT)}",
    )
    quality.add_argument(
        "--settings",
        nargs="+",
        default=None,
        choices=(*SETTINGS_CHOICES, "all", CCC_SETTING),
        help="long-running streams instead of the episodic table: continual, mixed, "
        "gradual, correlated, long, junk-* (or all, with episodic); writes streams.md. "
        f"{CCC_SETTING}: a million samples of changing corruptions through RealmRuntime "
        "(no-adapt, REALM + guardrails, ETA, RDumb; the first seed); writes ccc.md",
    )
    quality.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="--settings: RealmConfig fields every adapting row gets, a variant of the preset "
        "(e.g. lr=0.0003125 freeze_last_block=true: SAR's reading of the CIFAR settings); "
        f"with {CCC_SETTING}, REALM's row only (ETA and RDumb run their paper's)",
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
        "--fresh",
        action="store_true",
        help=f"--settings: start over, discarding the finished runs kept in OUT/{RUN_LOG} "
        "(by default they are reused: a stopped run goes on, more seeds add to fewer)",
    )
    quality.add_argument(
        "--preset",
        choices=("cifar", "imagenet"),
        default=None,
        help="default: imagenet for imagenetc, cifar otherwise",
    )
    quality.add_argument("--limit", type=int, default=None, help="samples per stream")
    quality.add_argument(
        "--backend",
        choices=("sdk", "runtime"),
        default="sdk",
        help="--settings: what adapts a row whose method exports: the torch SDK, or "
        "RealmRuntime on an export of the row's configuration (several times faster at batch "
        "1); MEMO, SFT and TTAug run in the SDK either way",
    )
    quality.add_argument(
        "--heldout",
        action="store_true",
        help="--settings episodic: on gaussian noise and snow, score the model after 1024, "
        "2048, 4096 and 8000 samples on the stream's last 2000 (the paper's Table 4)",
    )
    add_endless_arguments(quality)
    quality.add_argument("--cache-dir", default=".cache")
    quality.add_argument("--out", default="docs/quality", help="output folder")
    quality.add_argument("--no-progress", action="store_true")
    quality.set_defaults(func=run_quality_command)


def _quality_data(
    args: argparse.Namespace,
) -> tuple[ShiftDataset | None, nn.Module | None] | str:
    """The dataset and source model of ``bench quality`` (None, None: digits), or an error."""
    if args.split != "test" and args.dataset != "fmnist-c":
        return "--split is for --dataset fmnist-c"
    if args.dataset == "digits":
        if args.data_root or args.model or args.weights or args.random_init or args.classes:
            return (
                "--data-root, --model, --weights, --random-init and --classes are for "
                "--dataset fmnist-c, cifar10c or imagenetc"
            )
        return None, None
    if args.dataset == "fmnist-c":
        return _fashion_data(args)
    from realm_tools.data import load_cifar10c, load_imagenetc
    from realm_tools.models import source_model

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


def _fashion_data(args: argparse.Namespace) -> tuple[ShiftDataset, nn.Module] | str:
    """Fashion-MNIST-C and its source model: a shipped one, or ``--weights`` of your own."""
    from realm_tools.data import fashion_preprocessing, load_fmnistc
    from realm_tools.models import RECIPES, fashion_model, load_weights, timm_model

    if args.random_init or args.classes or args.epochs is not None:
        return (
            "--random-init, --classes and --epochs are for the other data sets: --dataset "
            "fmnist-c adapts a shipped source model (--model resnet26_gn, mobilenetv3_bn or "
            "vit_ln), or --weights of your own for --model (one of those or a timm name)"
        )
    name = args.model or "resnet26_gn"
    try:
        dataset = load_fmnistc(args.data_root, split=args.split, cache_dir=args.cache_dir)
        if args.weights is None:
            return dataset, fashion_model(name, cache_dir=args.cache_dir)
        # Your own weights: one of the recipes' architectures, or any timm one (1 channel).
        model = RECIPES[name].build() if name in RECIPES else timm_model(name, 10, in_chans=1)
        model = load_weights(model, args.weights)
        model.pretrained_cfg = fashion_preprocessing()  # type: ignore[assignment]
        return dataset, model
    except (OSError, ValueError) as exc:
        return str(exc)


def run_quality_command(args: argparse.Namespace) -> int:
    """Run ``realm-lab bench quality`` with parsed arguments; returns the exit code."""
    from ..bench import QUALITY_METHODS, bench_quality, plot_quality, quality_table, runs_to_json

    for flag in ("epochs", "limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"--{flag} must be ≥ 1, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    data = _quality_data(args)
    if isinstance(data, str):
        print(data, file=sys.stderr)
        return 2
    dataset, source = data
    if args.overrides and not args.settings:
        print("--set applies to --settings runs (e.g. --settings episodic)", file=sys.stderr)
        return 2
    if args.settings and CCC_SETTING in args.settings:
        overrides = parse_overrides(args.overrides)
        if isinstance(overrides, str):
            print(overrides, file=sys.stderr)
            return 2
        return run_endless(args, dataset, source, overrides)
    if args.settings:
        return bench_streams_command(args, dataset, source)
    if args.methods is None:
        args.methods = list(QUALITY_DEFAULT)
    if dataset is None:  # the built-in digits task
        from realm_tools.data import CORRUPTIONS

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
    bad_methods = [m for m in args.methods if m not in QUALITY_METHODS]
    if unknown or bad_methods:
        print(
            f"unknown corruptions {unknown} / methods {bad_methods}; known: "
            f"{known} / {list(QUALITY_METHODS)}",
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
        on_run=None if args.no_progress else progress_factory(),
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
            model=model_name(args),
            split=args.split,
            weights=args.weights,
            random_init=args.random_init,
        )
    runs_dir = runs_folder(out)
    write_atomic(runs_dir / "quality.json", runs_to_json(runs, settings))
    write_atomic(
        out / "quality.md",
        run_header("Quality: online accuracy (%)", sys.argv, program="realm-lab") + table + "\n",
    )
    plots = plot_quality(runs, out)
    print(
        f"written: {out / 'quality.md'}, {runs_dir / 'quality.json'}, "
        + ", ".join(str(p) for p in plots)
    )
    return 0
