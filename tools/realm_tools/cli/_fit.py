"""``realm fit``: flags, files and output over ``realm_tools.fit.fit_realm_artifacts``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from realm_runtime import PRESETS

from ._common import export_extra_missing, progress_factory


def add_fit_parser(sub: Any) -> None:
    """Register the ``fit`` sub-command on an argparse sub-parser set."""
    p = sub.add_parser(
        "fit",
        help="measure what adapting buys on your model and images, choose, prove and export",
        description="Measure every method and its settings on shifted streams built from your "
        "own labelled images, choose by the rule of docs/fit.md (or choose not to adapt), prove "
        "the choice on held-out images, and export it with fit.md, fit.json and fit.png.",
    )
    p.add_argument("--model", required=True, help="as realm export takes it")
    p.add_argument("--weights", default=None, help="as realm export takes it")
    p.add_argument("--num-classes", type=int, required=True)
    p.add_argument("--input-shape", required=True, help="1,C,H,W the model takes")
    p.add_argument("--preset", choices=PRESETS, default="cifar")
    p.add_argument(
        "--data",
        required=True,
        help="labelled clean images: an .npz with 'images' and 'labels', or a folder of image "
        "files with labels.csv (file,label)",
    )
    p.add_argument("--field", default=None, help="unlabelled images from where the app runs")
    p.add_argument("--mean", type=float, nargs="+", default=None, help="input mean, per channel")
    p.add_argument("--std", type=float, nargs="+", default=None, help="input std, per channel")
    p.add_argument("--out", required=True, help="artifact directory to create")
    p.add_argument("--minutes", type=float, required=True, help="the whole fit's time budget")
    p.add_argument("--memory-budget", type=float, metavar="MB", default=None)
    p.add_argument("--sign", metavar="KEY", default=None, help="Ed25519 key to sign realm.json")
    p.add_argument(
        "--worst-drop",
        type=float,
        default=2.0,
        metavar="POINTS",
        help="the rule: points of clean accuracy the worst case inside the drift bound may lose",
    )
    p.add_argument(
        "--clean-drop",
        type=float,
        default=1.0,
        metavar="POINTS",
        help="the rule: points of clean accuracy the long stream may cost",
    )
    p.add_argument("--seed", type=int, default=0, help="of the split, the streams and the search")
    p.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--cache-dir", default=".cache", help="where the digits model is cached")
    p.set_defaults(func=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    """Run ``realm fit`` with parsed arguments; returns the exit code."""
    missing = export_extra_missing("fit")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from ..fit import FitInputError, FitOptions, FitRule, fit_realm_artifacts, read_images
    from ..models import model_from_spec

    try:
        try:
            shape = tuple(int(v) for v in args.input_shape.split(","))
        except ValueError:
            raise FitInputError(f"--input-shape {args.input_shape!r}: expected 1,C,H,W") from None
        if len(shape) != 4:
            raise FitInputError(f"--input-shape {args.input_shape!r}: expected 1,C,H,W")
        model, info = model_from_spec(
            args.model, args.num_classes, args.cache_dir, args.weights or None
        )
        mean, std = _normalisation(model, args)
        data = read_images(args.data, input_shape=shape, num_classes=args.num_classes)
        field = None
        if args.field:
            field = read_images(args.field, input_shape=shape, num_classes=None, what="--field")
        options = FitOptions(
            data=data,
            field_data=field,
            num_classes=args.num_classes,
            input_shape=shape,
            mean=mean,
            std=std,
            minutes=args.minutes,
            preset=args.preset,
            memory_budget_mb=args.memory_budget,
            signing_key=args.sign,
            seed=args.seed,
            workers=args.workers,
            model_info=info,
            overwrite=args.overwrite,
            rule=FitRule(clean_drop=args.clean_drop, worst_drop=args.worst_drop),
        )
    except (FitInputError, ValueError, FileNotFoundError) as exc:
        print(f"realm fit: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()

    def notify(stage: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {stage} …", file=sys.stderr, flush=True)

    try:
        result = fit_realm_artifacts(
            model, args.out, options, progress=progress_factory(), notify=notify
        )
    except FitInputError as exc:
        print(f"realm fit: {exc}; nothing written", file=sys.stderr)
        return 1
    report = result.report
    chosen = report["choice"]
    verdict = f"adapt with {chosen['label']}" if chosen["adapts"] else "do not adapt"
    print(f"choice: {verdict}")
    for label, mean in report["proof"]["mean"].items():
        spread = report["proof"]["spread"][label]
        print(f"  held-out mean {mean:6.2f} ± {spread:.2f}  {label}")
    print(f"wrote {result.directory} (fit.md, fit.json, fit.png) in {result.seconds / 60:.1f} min")
    return 0


def _normalisation(model: Any, args: argparse.Namespace) -> tuple[tuple[float, ...], ...]:
    """``--mean``/``--std``, or a timm model's own."""
    cfg = getattr(model, "pretrained_cfg", None)
    mean, std = args.mean, args.std
    if (mean is None or std is None) and isinstance(cfg, dict) and "mean" in cfg:
        mean = mean or list(cfg["mean"])
        std = std or list(cfg["std"])
    if mean is None or std is None:
        raise ValueError("the model declares no input normalisation: pass --mean and --std")
    return tuple(mean), tuple(std)
