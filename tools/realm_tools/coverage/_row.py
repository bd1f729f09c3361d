"""One model's row of the coverage table: what was measured, or why it stopped."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

REASON_CHARS = 300  # the table's one-line refusal
# untimed samples before the timed ones: torch's first calls at a new shape run many times slower
WARMUP = 2

Status = Literal["ok", "refused", "failed", "timeout", "crashed"]
# ok: exported, validated, predicted and adapted through RealmRuntime. refused: the export
# raised (the row holds why). failed: building the model, the runtime or torch raised.
# timeout / crashed: the worker gave no row (killed at the timeout, or died).


@dataclass(frozen=True)
class CoverageRow:
    """One architecture's export, validation and adaptation figures (None: not reached)."""

    model: str  # the timm name
    family: str  # the table's grouping label
    status: Status
    input_size: tuple[int, ...] | None = None  # (C, H, W) of the export
    stage: str | None = None  # where it stopped: build, export, runtime, torch (the SDK), worker
    error_type: str | None = None  # the exception's class name
    error: str | None = None  # the exception's full message
    export_s: float | None = None  # export wall time, validation included
    # the graph the figures below validate: portable, training, or refused (the validation
    # that failed the export)
    figures_from: str | None = None
    logits_max_abs: float | None = None  # ORT vs torch, over the export's validation inputs
    loss_max_abs: float | None = None
    grad_max_rel: float | None = None  # the worst trainable tensor's, relative to its scale
    grad_worst_tensor: str | None = None
    atol: float | None = None  # the export's tolerance on logits and loss (absolute)
    grad_rtol: float | None = None  # and on gradients (relative)
    # the tolerances the logits and the worst gradient were held to, where the export widens
    # them (with the logits' scale, with the reference's own spread); else atol, grad_rtol
    logits_tolerance: float | None = None
    grad_tolerance: float | None = None
    validation_passed: bool | None = None
    training_artifacts: bool | None = None  # onnxruntime-training artifacts written
    training_error: str | None = None  # why not, where the export says
    portable_error: str | None = None  # why there is no portable step graph, if there is none
    artifact_mb: float | None = None  # every file of the artifact directory
    trainable_tensors: int | None = None  # the SDK's norm tensors, then α and λ
    backend: str | None = None  # the RealmRuntime backend that ran
    samples: int | None = None  # timed samples per figure (after WARMUP untimed ones)
    runtime_predict_ms: float | None = None  # medians, batch 1
    torch_predict_ms: float | None = None  # the model's forward under no_grad
    runtime_step_ms: float | None = None  # an updating step (S_div forced open)
    sdk_step_ms: float | None = None  # RealmAdapter's, the same samples and overrides
    step_update_rate: float | None = None  # lower of the two sides' share of samples updated
    seconds: float | None = None  # the worker's wall time, start-up included
    log_tail: str | None = None  # the worker's last stderr lines (timeout, crash)

    @property
    def ok(self) -> bool:
        """Exported, validated and adapted."""
        return self.status == "ok"

    @property
    def reason(self) -> str:
        """The error's first sentence on one line (at most ``REASON_CHARS``), or ``""``."""
        if not self.error:
            return ""
        text = one_line(self.error)
        return f"{self.error_type}: {text}" if self.error_type else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``input_size`` a list), with the one-line ``reason`` beside the error."""
        out = asdict(self)
        out["input_size"] = list(self.input_size) if self.input_size else None
        out["reason"] = self.reason or None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CoverageRow:
        """The row of :meth:`to_dict` (unknown keys, such as ``reason``, ignored)."""
        known = {f.name for f in fields(cls)}
        values = {
            k: float(v) if v in ("nan", "inf", "-inf") else v  # finite_figures's strings, read back
            for k, v in data.items()
            if k in known
        }
        if values.get("input_size") is not None:
            values["input_size"] = tuple(values["input_size"])
        return cls(**values)


def one_line(message: str, limit: int = REASON_CHARS) -> str:
    """The first sentence of a message's first non-empty line, at most ``limit`` characters.

    Export errors can run to many lines (a graph dump, a traceback of ONNX's); the table
    shows the sentence that says what is wrong, the JSON keeps the whole message.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z(\[])", lines[0], maxsplit=1)[0]
    first = re.sub(r"\s+", " ", first)
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def finite_figures(row: dict[str, Any]) -> dict[str, Any]:
    """Non-finite figures as strings ("nan", "inf"): strict JSON has no NaN."""
    return {
        k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()
    }
