"""``realm export``: flags, files and output over ``realm_export.export_realm_artifacts``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from realm_runtime import METHODS, PRESETS
from realm_runtime.methods import REALM

from ._common import export_extra_missing

if TYPE_CHECKING:  # torch stays an import of the export itself
    from torch import nn


def add_export_parser(sub: Any) -> None:
    """Register the ``export`` sub-command on an argparse sub-parser set."""
    p = sub.add_parser(
        "export",
        help="export a model as validated on-device artifacts",
        description="Export a torch/timm classifier as on-device artifacts whose loss is "
        "REALM's: the portable graphs (any onnxruntime >= 1.19) and, with --training, the "
        "deprecated onnxruntime-training 1.19.2 artifacts, each validated against the "
        "PyTorch reference before anything is written.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="timm:<name> (random init unless --weights), digits (the built-in demo model, "
        "trained and cached), or path/to/file.py:factory (a function returning an nn.Module)",
    )
    p.add_argument("--out", required=True, help="artifact directory to create")
    p.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="classes of the classifier (default: 10 for digits, else 1000)",
    )
    p.add_argument("--preset", choices=PRESETS, default="cifar")
    p.add_argument("--method", choices=METHODS, default=REALM.name, help="the adaptation method")
    p.add_argument(
        "--input-shape",
        default=None,
        help="B,C,H,W of the export, e.g. 1,3,224,224 (default: the model's own)",
    )
    p.add_argument(
        "--weights",
        default=None,
        help="local state dict (.pt/.pth, loaded with weights_only) or .safetensors",
    )
    p.add_argument("--atol", type=float, default=1e-4, help="tolerance on logits and loss")
    p.add_argument("--grad-rtol", type=float, default=1e-3, help="relative tolerance on grads")
    p.add_argument("--static-batch", action="store_true", help="fix the batch axis")
    p.add_argument(
        "--standalone-inference",
        action="store_true",
        help="inference_model.onnx with its weights inside, to copy apart from the directory "
        "(default: its weights are in weights.bin with the other graphs')",
    )
    p.add_argument(
        "--no-portable",
        action="store_true",
        help="skip the portable step graph (step_model.onnx: any onnxruntime ≥ 1.19)",
    )
    p.add_argument(
        "--training",
        action="store_true",
        help="also write the deprecated onnxruntime-training 1.19.2 artifacts (for "
        "RealmRuntime's ort-training backend; needs onnxruntime-training installed): their "
        "failure fails the export (default: not written)",
    )
    p.add_argument(
        "--ort-format",
        action="store_true",
        help="also write the portable graphs in ORT format (step_model.ort, forward_model.ort) "
        "and required_operators.config, for ONNX Runtime's mobile and reduced-size builds",
    )
    p.add_argument(
        "--sign",
        metavar="KEY",
        default=None,
        help="sign the manifest with this Ed25519 private key (realm.sig; `realm keygen`)",
    )
    memory = p.add_argument_group("memory (a fresh process adapting, every sample updating)")
    memory.add_argument(
        "--memory-budget",
        type=float,
        metavar="MB",
        default=None,
        help="adapt the norms of as many of the model's last stages as keep the measured "
        "updating peak within MB (every stage where they all fit); the peak goes into the "
        "manifest",
    )
    memory.add_argument(
        "--measure-memory",
        action="store_true",
        help="measure the updating peak into the manifest, without a budget",
    )
    memory.add_argument(
        "--memory-python",
        metavar="PYTHON",
        default=None,
        help="the interpreter whose onnxruntime measures, e.g. the app's venv (default: this one)",
    )
    memory.add_argument(
        "--memory-threads",
        type=int,
        default=None,
        help="ONNX Runtime threads while measuring, as the app sets them (default: ORT's)",
    )
    drift = p.add_argument_group("drift bound (the worst case inside max_drift)")
    drift.add_argument(
        "--drift-check",
        metavar="NPZ",
        default=None,
        help="labelled clean images of the app's own (an .npz with 'images' (N, C, ...) and "
        "'labels' (N,)): max_drift becomes the largest bound whose worst case found on them "
        "loses at most --allowed-drop points; the figures go into the manifest",
    )
    drift.add_argument(
        "--allowed-drop",
        type=float,
        default=2.0,
        help="points of clean accuracy the worst case inside max_drift may lose (default 2)",
    )
    p.add_argument(
        "--clean-images",
        metavar="NPZ",
        default=None,
        help="clean images of the app's own (an .npz with 'images' (N, C, ...), preprocessed "
        "as the model's inputs) for a method that needs them: EATA's Fisher information "
        "(default: --drift-check's images)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--cache-dir", default=".cache", help="where the digits model is cached")
    p.set_defaults(func=run_export)


def _clean_images(path: str | None) -> Any:
    """The images of ``--clean-images`` (None: not given; ValueError: not an .npz of them)."""
    if path is None:
        return None
    import numpy as np

    try:
        with np.load(path) as data:
            if "images" not in data.files:
                raise ValueError("no array 'images' (N, C, ...)")
            return data["images"]
    except ValueError as exc:
        raise ValueError(f"--clean-images {path}: {exc}") from None
    except OSError as exc:
        raise ValueError(f"--clean-images {path}: not a readable .npz ({exc})") from None


def _drift_check(path: str, allowed_drop: float) -> Any:
    """The ``DriftCheck`` of ``--drift-check`` (ValueError: a file that does not hold one)."""
    import numpy as np

    from realm_export import DriftCheck

    try:
        with np.load(path) as data:
            missing = [k for k in ("images", "labels") if k not in data.files]
            if missing:
                raise ValueError(f"no array {missing} (it needs 'images' and 'labels')")
            images, labels = data["images"], data["labels"]
    except ValueError as exc:
        raise ValueError(f"--drift-check {path}: {exc}") from None
    except OSError as exc:
        raise ValueError(f"--drift-check {path}: not a readable .npz ({exc})") from None
    return DriftCheck(images=images, labels=labels, allowed_drop=allowed_drop)


def _default_shape(model: nn.Module, spec: str) -> tuple[int, ...]:
    if spec == "digits":
        return (1, 1, 32, 32)
    cfg = getattr(model, "pretrained_cfg", None)
    if isinstance(cfg, dict) and cfg.get("input_size"):
        return (1, *(int(d) for d in cfg["input_size"]))
    raise ValueError("the model declares no input size: pass --input-shape B,C,H,W")


def run_export(args: argparse.Namespace) -> int:
    """Run ``realm export`` with parsed arguments; returns the exit code."""
    missing = export_extra_missing("export")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from realm_export import (
        DriftBoundError,
        ExportOptions,
        MemoryBudgetError,
        MemoryCheck,
        UnsupportedModelError,
        ValidationError,
        export_realm_artifacts,
    )
    from realm_runtime import RealmConfig

    from ..models import model_from_spec

    num_classes = args.num_classes or (10 if args.model == "digits" else 1000)
    try:
        model, info = model_from_spec(args.model, num_classes, args.cache_dir, args.weights or None)
        if args.input_shape:
            try:
                shape = tuple(int(v) for v in args.input_shape.split(","))
            except ValueError:
                raise ValueError(f"--input-shape {args.input_shape!r}: expected B,C,H,W") from None
        else:
            shape = _default_shape(model, args.model)
        config = RealmConfig.preset(args.preset, num_classes=num_classes, method=args.method)
        memory = None
        if args.memory_budget is not None or args.measure_memory:
            memory = MemoryCheck(
                budget_mb=args.memory_budget,
                python=args.memory_python,
                threads=args.memory_threads,
            )
        drift = (
            None if args.drift_check is None else _drift_check(args.drift_check, args.allowed_drop)
        )
        clean = _clean_images(args.clean_images)
    except (ValueError, FileNotFoundError) as exc:
        print(f"realm export: {exc}", file=sys.stderr)
        return 2

    start = time.perf_counter()

    def progress(stage: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {stage} …", file=sys.stderr, flush=True)

    print(
        f"exporting {args.model} ({type(model).__name__}), input {shape}, "
        f"{args.preset} preset, method {args.method}",
        flush=True,
    )
    try:
        result = export_realm_artifacts(
            model,
            args.out,
            ExportOptions(
                config=config,
                input_shape=shape,
                atol=args.atol,
                grad_rtol=args.grad_rtol,
                dynamic_batch=not args.static_batch,
                standalone_inference=args.standalone_inference,
                portable=not args.no_portable,
                training=args.training,
                ort_format=args.ort_format,
                signing_key=args.sign,
                overwrite=args.overwrite,
                model_info=info,
                memory=memory,
                drift_check=drift,
                clean_images=clean,
            ),
            progress=progress,
        )
    except ValidationError as exc:
        print(f"realm export: validation FAILED, nothing written.\n{exc}", file=sys.stderr)
        return 1
    except (MemoryBudgetError, DriftBoundError) as exc:
        print(f"realm export: {exc}; nothing written", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"realm export: {exc}", file=sys.stderr)
        return 2
    except FileExistsError:
        print(f"realm export: {args.out} exists; add --overwrite to replace it", file=sys.stderr)
        return 1
    except (UnsupportedModelError, FileNotFoundError, ValueError) as exc:
        print(f"realm export: {exc}", file=sys.stderr)
        return 1
    n_norm = len(result.trainable) - (2 if config.rules.learns_alpha_lambda else 0)
    print(
        f"wrote {result.directory} in {result.seconds:.1f} s: {n_norm} norm tensors"
        f"{' + α, λ' if config.rules.learns_alpha_lambda else ''} trainable"
    )
    for role, path in result.files.items():
        size = path.stat().st_size
        print(f"  {role:<18} {path.name:<26} {size / 1e6:9.2f} MB")
    if result.validation is not None:
        print("validation against the PyTorch reference (training artifacts):")
        print(result.validation.table())
    if result.portable_validation is not None and result.portable_error is None:
        print("validation against the PyTorch reference (portable step graph):")
        print(result.portable_validation.table())
    inference = result.manifest.inference
    if "validation" in inference:
        v = inference["validation"]
        sizes = ", ".join(str(b) for b in v["batch_sizes"])
        print(f"validation against the PyTorch reference (inference graph, {inference['graph']}):")
        print(
            f"  logits max abs {v['logits_max_abs_diff']:.3g} (tolerance "
            f"{v['logits_tolerance']:.0e}), {v['inputs']} inputs of batch {sizes}"
        )
    if inference.get("reason"):
        stand_in = f"the {inference['graph']} stands in" if inference.get("graph") else "none"
        print(f"inference graph: {inference['reason']}; {stand_in}")
    adapt = result.manifest.adapt
    for figures, what in zip(
        adapt.get("validation", []), ("", ", entropy cut opened"), strict=False
    ):
        print(f"validation against the PyTorch reference (adapt graph{what}):")
        print(f"  {figures['summary']}")
    if "error" in adapt:
        print(f"no adapt graph: {adapt['error']}")
    if result.ort_format_validation is not None:
        print("validation against the PyTorch reference (ORT-format graphs):")
        print(result.ort_format_validation.table())
    if result.portable_error is not None:
        print(
            f"no portable step graph (RealmRuntime will use backend 'ort-training'): "
            f"{result.portable_error}"
        )
    if result.training_error is not None:
        print(f"legacy training artifacts {result.training_error}")
    if result.manifest.memory:
        print(memory_summary(result.manifest.memory))
    if result.manifest.drift_check:
        print(drift_summary(result.manifest.drift_check))
    return 0


def drift_summary(section: dict[str, Any]) -> str:
    """The manifest's ``drift_check`` section as the lines ``realm export`` prints."""
    lines = [
        f"drift bound: max_drift {section['max_drift']:g}, the largest whose worst case found "
        f"on {section['images']} labelled images loses at most {section['allowed_drop']:g} "
        "points of clean accuracy:"
    ]
    for t in section["tried"]:
        lines.append(
            f"  max_drift {t['bound']:<7g} source {t['source_accuracy']:6.2f} %  worst found "
            f"{t['worst_accuracy']:6.2f} %  (−{t['drop']:.2f})  {t['seconds']:.0f} s"
        )
    return "\n".join(lines)


def memory_summary(memory: dict[str, Any]) -> str:
    """The manifest's ``memory`` section as the lines ``realm export`` prints."""
    count = memory.get("threads")
    threads = f"{count} thread{'s' * (count != 1)}" if count else "ORT's default threads"
    lines = [
        f"updating peak: {memory['peak_mb']:.1f} MB (a fresh process, {memory['samples']} "
        f"samples every one updating; onnxruntime {memory['onnxruntime']}, {threads}, "
        f"{memory['cpu']})"
    ]
    if "budget_mb" in memory:
        stages = memory["adapt_stages"]
        chosen = "every stage" if stages is None else f"the last {stages} of the stages"
        tried = ", ".join(
            f"{'all' if t['adapt_stages'] is None else t['adapt_stages']}: {t['peak_mb']:.1f} MB"
            for t in memory["tried"]
        )
        lines.append(f"memory budget {memory['budget_mb']:g} MB: adapting {chosen} (tried {tried})")
    return "\n".join(lines)
