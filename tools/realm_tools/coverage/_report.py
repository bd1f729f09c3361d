"""The coverage table as Markdown and JSON, with the machine it was measured on."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from realm_runtime import onnxruntime_module
from realm_runtime.measure import cpu_name

from ._models import COVERAGE_CLASSES, COVERAGE_PRESET
from ._row import CoverageRow, finite_figures, one_line

# --------------------------------------------------------------------- reporting


def coverage_environment(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The machine and versions behind a run: CPU, cores, Python, torch, timm, ORT, date."""
    import numpy as np
    import timm
    import torch

    try:
        ort = onnxruntime_module().__version__  # without ORTModule: no CUDA_HOME warning
    except ImportError:
        ort = "not installed"
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "onnxruntime": ort,
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "command": "realm " + " ".join(sys.argv[1:] if argv is None else argv),
    }


def coverage_summary(rows: Sequence[CoverageRow]) -> str:
    """``"N of M export, validate and adapt"``, with the other statuses counted."""
    ok = sum(r.ok for r in rows)
    statuses = ("refused", "failed", "timeout", "crashed")
    others = {s: sum(r.status == s for r in rows) for s in statuses}
    rest = ", ".join(f"{n} {s}" for s, n in others.items() if n)
    return f"{ok} of {len(rows)} export, validate and adapt" + (f" ({rest})" if rest else "")


def format_coverage(rows: Sequence[CoverageRow], environment: dict[str, Any] | None = None) -> str:
    """Markdown: a header (machine, versions, date, command), the summary and the table.

    Validation figures are the largest differences between ONNX Runtime and the PyTorch
    reference (logits and loss absolute, gradients relative to each tensor's scale); times
    are medians in milliseconds per sample, batch 1. A row that is not ok shows its error's
    first sentence; the JSON has the whole message.
    """
    lines = ["# Model coverage: export, validate, adapt", ""]
    if environment is not None:
        e = environment
        lines += [
            f"Command: `{e['command']}`",
            "",
            f"Machine: {e['cpu']}, {e['cores']} CPU cores, {e['system']}; Python {e['python']}, "
            f"torch {e['torch']}, timm {e['timm']}, onnxruntime {e['onnxruntime']}, numpy "
            f"{e['numpy']}. {e['date']}.",
            "",
        ]
        if e.get("jobs", 1) > 1 or e.get("threads"):
            lines += [
                f"{e.get('jobs', 1)} model(s) at a time, {e.get('threads')} thread(s) each: "
                "times compare the runtime with torch inside one row, not across machines.",
                "",
            ]
    lines += [
        f"**{coverage_summary(rows)}.**",
        "",
        f"Random weights, {COVERAGE_CLASSES} classes, the {COVERAGE_PRESET} preset, the export's "
        "default options. Validation: the portable step graph against the PyTorch reference "
        "(logits and loss max abs, worst gradient relative; a tolerance the export widened "
        "stands beside its figure). Times: medians of a few samples, "
        "batch 1; the step is an updating one (S_div forced open) on both sides.",
        "",
        "| model | family | status | input | export s | logits / loss / grad | training "
        "artifacts | MB | trainable | predict ms runtime / torch | step ms runtime / SDK | "
        "note |",
        "|" + "---|" * 12,
    ]
    for r in rows:
        size = "×".join(str(d) for d in r.input_size[1:]) if r.input_size else "—"
        cells = [
            r.model,
            r.family,
            f"{r.status} ({r.stage})" if r.status == "failed" else r.status,
            size,
            _num(r.export_s, ".1f"),
            _figures_cell(r),
            "—" if r.training_artifacts is None else ("yes" if r.training_artifacts else "no"),
            _num(r.artifact_mb, ".1f"),
            "—" if r.trainable_tensors is None else str(r.trainable_tensors),
            _pair(r.runtime_predict_ms, r.torch_predict_ms),
            _pair(r.runtime_step_ms, r.sdk_step_ms),
            _escape(_note(r)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figures_cell(row: CoverageRow) -> str:
    """The logits / loss / grad figures, a widened tolerance beside its figure (``tol``)."""
    if row.logits_max_abs is None or row.loss_max_abs is None or row.grad_max_rel is None:
        return "—"
    logits = f"{row.logits_max_abs:.1e}" + _widened(row.logits_tolerance, row.atol)
    grad = f"{row.grad_max_rel:.1e}" + _widened(row.grad_tolerance, row.grad_rtol)
    cell = f"{logits} / {row.loss_max_abs:.1e} / {grad}"
    return cell + ("" if row.figures_from == "portable" else f" ({row.figures_from})")


def _widened(tolerance: float | None, base: float | None) -> str:
    if tolerance is None or base is None or tolerance <= base:
        return ""
    return f" (tol {tolerance:.1e})"


def _note(row: CoverageRow) -> str:
    if not row.ok:
        return row.reason
    notes = []
    if row.portable_error:
        notes.append(f"no portable step graph ({row.backend}): {one_line(row.portable_error)}")
    if row.training_error:  # the export's own sentence: "not written: …", "refused: …"
        notes.append(f"training artifacts {one_line(row.training_error)}")
    if row.validation_passed is False:
        notes.append("validation outside its tolerance")
    return "; ".join(notes)


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _pair(runtime: float | None, reference: float | None) -> str:
    if runtime is None or reference is None:
        return "—"
    return f"{runtime:.2f} / {reference:.2f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def coverage_to_json(
    rows: Sequence[CoverageRow],
    environment: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> str:
    """``{"environment", "settings", "summary", "rows"}``: every row with its full error."""
    summary = {"ok": sum(r.ok for r in rows), "total": len(rows), "text": coverage_summary(rows)}
    payload = {
        "environment": environment or {},
        "settings": settings or {},
        "summary": summary,
        "rows": [finite_figures(r.to_dict()) for r in rows],
    }
    return json.dumps(payload, indent=2)
