"""Which backend runs a ``RealmRuntime``: the choice checked, then only its module imported."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._backend import BackendName, BackendRequest, StepBackend
from ._config import RealmConfig
from ._manifest import Manifest
from ._names import (
    ADAPT_SETTINGS,
    ADAPT_SETTINGS_KEY,
    ERROR_KEY,
    FILE_KEY,
    MANIFEST_NAME,
    STEP_MODEL_KEY,
)
from ._portable_io import adapt_settings
from ._untrusted import ArtifactError


def open_backend(backend: BackendName, request: BackendRequest) -> StepBackend:
    """The backend that runs ``backend`` (``"onnx"`` and ``"onnx-steps"``: the portable one).

    Each backend's module is imported only when chosen, so the onnx backend never touches
    onnxruntime-training and the other never needs a current onnxruntime.
    """
    if backend in ("onnx", "onnx-steps"):
        from ._backend_onnx import PortableBackend

        return PortableBackend(request, adapt_graph=backend == "onnx")
    if request.graph_format == "ort":
        raise ValueError(
            "graph_format='ort' runs the portable graphs' ORT-format copies: it needs the onnx "
            "backend, not ort-training"
        )
    from ._backend_training import TrainingBackend

    return TrainingBackend(request)


def choose_backend(
    backend: str,
    manifest: Manifest,
    config: RealmConfig,
    overrides: Mapping[str, Any],
    schedule: object,
    directory: Path,
) -> str:
    """The backend that runs: ``"auto"`` resolved, and ``"onnx"`` checked (SPEC §11).

    Args:
        backend: the one asked for.
        manifest: the artifacts' manifest.
        config: the configuration the runtime runs, the manifest's with ``overrides``.
        overrides: the settings the caller changed.
        schedule: the host-step backends' order of graphs, or None.
        directory: the artifacts' folder, for the messages.

    Raises:
        ArtifactError: the artifacts lack what the backend needs.
        ValueError: a setting or a schedule the chosen backend cannot apply.
    """
    portable, adapt = manifest.portable, manifest.adapt
    baked = manifest.config
    changed = sorted(k for k, v in overrides.items() if baked.get(k) != v)
    has_graph = bool(portable.get(STEP_MODEL_KEY) and adapt.get(FILE_KEY))
    # Graphs exported before their settings were state hold them as constants, and a
    # graph exported before a setting's slot runs it as off (0); the config may not differ.
    slots = adapt.get(ADAPT_SETTINGS_KEY)
    if slots is None:
        fixed = changed
    else:
        try:  # the same check as the graph's settings vector is built with
            adapt_settings(config, slots)
        except ValueError as exc:
            raise ArtifactError(f"{directory / MANIFEST_NAME}: {exc}") from None
        ours = zip(ADAPT_SETTINGS, adapt_settings(config).tolist(), strict=True)
        missing = [name for name, value in ours if value and name not in slots]
        fixed = [f"{name} (a setting this graph predates)" for name in missing]
    if backend == "auto":
        if has_graph and not fixed and schedule is None:
            return "onnx"
        return "onnx-steps" if portable.get(STEP_MODEL_KEY) else "ort-training"
    if backend != "onnx":
        return backend
    if not portable.get(STEP_MODEL_KEY):
        why = portable.get(ERROR_KEY, "exported without it")
        raise ArtifactError(
            f"{directory}: these artifacts have no portable step graph ({why}), so no "
            "adapt graph: use backend='ort-training', or re-export with a current realm-tta"
        )
    if not has_graph:
        why = adapt.get(ERROR_KEY, "exported before it existed")
        raise ArtifactError(
            f"{directory}: backend='onnx' runs the one adapt graph, and these "
            f"artifacts have none ({why}); use backend='onnx-steps', or re-export"
        )
    if fixed:
        raise ValueError(
            f"this adapt graph holds the export's settings as constants (it was exported "
            f"before realm.settings), and {fixed} differ from them: re-export, or use "
            "backend='onnx-steps' to apply them at run time"
        )
    if schedule is not None:
        raise ValueError(
            "schedule chooses the order of the host-step backends' graphs; the adapt graph "
            "(backend='onnx') has one order of its own: leave schedule out"
        )
    return backend
