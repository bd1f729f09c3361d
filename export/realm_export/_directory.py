"""The artifact directory's last stage: the manifest, its file list, and the move into place."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from realm_runtime import InputSpec, Manifest, onnxruntime_module, sign_manifest
from realm_runtime.contract import (
    ADAPT_MODEL_KEY,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    CHECKPOINT,
    EVAL_MODEL,
    FILE_KEY,
    FORWARD_MODEL_KEY,
    INFERENCE_MODEL,
    INPUT_NAME,
    LOGITS_NAME,
    MANIFEST_NAME,
    ORT_FORMAT_KEY,
    SOURCE_PARAMS_KEY,
    STEP_MODEL_KEY,
    TRAINING_MODEL,
    WEIGHTS_KEY,
    sha256_of,
)
from realm_sdk import batch_norm_names

from ._plan import Built, Plan, Traced


def write_manifest(plan: Plan, traced: Traced, built: Built) -> Manifest:
    """Stage 3: the manifest (signed if asked), then the directory moved into place."""
    plan.notify("writing the manifest")
    manifest = _manifest(plan, traced, built)
    (built.directory / MANIFEST_NAME).write_bytes(manifest.to_bytes())
    if plan.signing_key is not None:
        plan.notify("signing the manifest")
        sign_manifest(built.directory, plan.signing_key)
    move_into_place(built.directory, plan.out_dir, overwrite=plan.options.overwrite)
    return manifest


def manifest_bytes(plan: Plan, traced: Traced, built: Built) -> bytes:
    """The manifest of the files in ``built.directory`` as far as built, unsigned."""
    return _manifest(plan, traced, built).to_bytes()


def written_files(plan: Plan, built: Built) -> dict[str, Path]:
    """:attr:`ExportInfo.files`: role → path of every file the export wrote."""
    out_dir, portable = plan.out_dir, built.portable
    files = {"inference_model": out_dir / INFERENCE_MODEL, "manifest": out_dir / MANIFEST_NAME}
    if built.inference.get("graph") is None:  # neither the TorchScript nor the portable forward
        del files["inference_model"]
    if built.training.written:
        files |= {
            "training_model": out_dir / TRAINING_MODEL,
            "eval_model": out_dir / EVAL_MODEL,
            "checkpoint": out_dir / CHECKPOINT,
        }
    if STEP_MODEL_KEY in portable:
        for role in (STEP_MODEL_KEY, FORWARD_MODEL_KEY, SOURCE_PARAMS_KEY):
            files[role] = out_dir / portable[role]
        files["weights"] = out_dir / portable[WEIGHTS_KEY][FILE_KEY]
    if FILE_KEY in built.adapt:
        files[ADAPT_MODEL_KEY] = out_dir / built.adapt[FILE_KEY]
    ort_section = portable.get(ORT_FORMAT_KEY, {})
    for role in (STEP_MODEL_KEY, FORWARD_MODEL_KEY, "operators_config"):
        if role in ort_section:
            files[f"{role}_ort" if role != "operators_config" else role] = (
                out_dir / ort_section[role]
            )
    return files


def _preprocessing(model: nn.Module, given: Mapping[str, Any] | None) -> dict[str, Any]:
    if given is not None:
        return dict(given)
    cfg = getattr(model, "pretrained_cfg", None)
    if not isinstance(cfg, dict):
        return {}
    keys = ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode")
    return {k: (list(cfg[k]) if isinstance(cfg[k], tuple) else cfg[k]) for k in keys if k in cfg}


def _manifest(plan: Plan, traced: Traced, built: Built) -> Manifest:
    """The manifest of the files in ``built.directory``, as :func:`write_manifest` writes it."""
    shape = plan.shape
    inits = {n: list(p.shape) for n, p in traced.source.named_parameters()}
    files = {p.name: sha256_of(p) for p in sorted(built.directory.iterdir()) if p.is_file()}
    return Manifest(
        format=ARTIFACT_FORMAT,
        version=ARTIFACT_VERSION,
        input=InputSpec(
            INPUT_NAME, ["batch" if plan.options.dynamic_batch else shape[0], *shape[1:]], "float32"
        ),
        logits_name=LOGITS_NAME,
        num_classes=plan.config.num_classes,
        config=plan.config.to_dict(),
        trainable={n: inits.get(n, []) for n in traced.requires_grad},  # α, λ are scalars: []
        files=files,
        versions=_versions(traced.versions),
        preprocessing=_preprocessing(traced.source, plan.options.preprocessing),
        validation=built.training.report.to_dict() if built.training.report is not None else {},
        model=_model_info(traced.source, plan.options.model_info),
        portable=built.portable,
        training=_training_section(built),
        adapt=built.adapt,
        memory=built.memory,
        inference=built.inference,
        drift_check=plan.drift_check,
        fit=dict(plan.options.fit or {}),
        batch_norm=batch_norm_names(traced.source, traced.requires_grad),
    )


def _training_section(built: Built) -> dict[str, Any]:
    """The manifest's ``training``: whether the legacy training artifacts are here, and why not."""
    if built.training.error is None:
        return {"written": True}
    return {"written": False, "reason": built.training.error}


def _versions(graph_versions: dict[str, int]) -> dict[str, Any]:
    """The manifest's ``versions``: the libraries of the export, the graph's IR and opset."""
    onnxruntime = onnxruntime_module()
    versions: dict[str, Any] = {
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "torch": torch.__version__,
        **graph_versions,
    }
    with contextlib.suppress(ImportError):
        import timm

        versions["timm"] = timm.__version__
    from realm_sdk import __version__ as realm_version

    versions["realm-tta"] = realm_version
    return versions


def _model_info(model: nn.Module, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The manifest's ``model``: the model's class, then what the caller said about it."""
    info = {"class": f"{type(model).__module__}.{type(model).__qualname__}"}
    info.update(given or {})
    return info


def empty_dir(path: Path) -> bool:
    """An existing empty directory (e.g. from mkdtemp): exporting into it loses nothing."""
    return path.is_dir() and not any(path.iterdir())


def move_into_place(tmp: Path, out_dir: Path, *, overwrite: bool) -> None:
    if out_dir.exists():
        if not overwrite and not empty_dir(out_dir):
            raise FileExistsError(f"{out_dir} appeared during the export; not replacing it")
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
