"""Export time: ``export_realm_artifacts`` beside a bare ``torch.onnx.export`` of the forward.

Both run in this process after a warm-up of each (the first call of either pays for imports
and caches a user pays once), taking turns round by round; a side's figure is its median.
The export is the default one a user runs (portable graphs, the adapt graph, the decision
graph, every graph validated against the PyTorch reference; no legacy training files), and
its time is split by the stages it announces.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from realm_runtime import RealmConfig

from ..models import build_model

TARGET = 4.0  # the export's time over a bare forward export's that the benchmark holds it to


@dataclass(frozen=True)
class ExportTimeRow:
    """One model's export times, seconds (medians over the rounds)."""

    model: str
    input_shape: tuple[int, ...]  # (C, H, W)
    rounds: int
    bare: float  # torch.onnx.export(model, dynamo=True) of the forward, opset 18
    export: float  # export_realm_artifacts with its defaults, validation included
    stages: dict[str, float] = field(default_factory=dict)  # export seconds by stage (medians)

    @property
    def ratio(self) -> float:
        """The export's time over the bare forward export's."""
        return self.export / self.bare


def _bare(model: torch.nn.Module, example: torch.Tensor, directory: Path) -> float:
    quiet = io.StringIO()  # the exporter prints its progress lines
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        start = time.perf_counter()
        torch.onnx.export(
            model, (example,), str(directory / "bare.onnx"), dynamo=True, opset_version=18
        )
        return time.perf_counter() - start


def _export(
    model: torch.nn.Module, config: RealmConfig, shape: tuple[int, ...], directory: Path
) -> tuple[float, dict[str, float]]:
    from realm_export import ExportOptions, export_realm_artifacts

    marks: list[tuple[str, float]] = []
    start = time.perf_counter()
    options = ExportOptions(config=config, input_shape=(1, *shape), training=False)
    export_realm_artifacts(
        model, directory, options, progress=lambda label: marks.append((label, time.perf_counter()))
    )
    end = time.perf_counter()
    stages: dict[str, float] = {}
    for (label, began), (_, ended) in zip(marks, [*marks[1:], ("", end)], strict=True):
        stages[label] = stages.get(label, 0.0) + ended - began
    return end - start, stages


def bench_export(
    name: str, *, rounds: int = 2, image_size: int | None = None, seed: int = 0
) -> ExportTimeRow:
    """Time ``name``'s export beside a bare forward export, in this process after a warm-up.

    Args:
        name: a key of ``realm_tools.models.MODELS`` or ``timm:<model>``.
        rounds: timed rounds, the two sides taking turns in each.
        image_size: square input side instead of the model's.
        seed: of the weights.
    """
    torch.manual_seed(seed)
    model, shape, classes = build_model(name, image_size)
    preset = "cifar" if classes == 10 else "imagenet"
    config = RealmConfig.preset(preset, num_classes=classes)
    example = torch.randn(1, *shape)
    bare: list[float] = []
    exports: list[tuple[float, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(rounds + 1):  # round 0 is the warm-up
            work = Path(tmp) / str(k)
            work.mkdir()
            seconds = _bare(model, example, work)
            result = _export(model, config, shape, work / "artifacts")
            if k:
                bare.append(seconds)
                exports.append(result)
    labels = list(exports[0][1])
    return ExportTimeRow(
        model=name,
        input_shape=tuple(shape),
        rounds=rounds,
        bare=statistics.median(bare),
        export=statistics.median(e[0] for e in exports),
        stages={s: statistics.median(e[1].get(s, 0.0) for e in exports) for s in labels},
    )


def format_export_times(rows: list[ExportTimeRow]) -> str:
    """The table: each model's export beside the bare forward export, then its stages."""
    lines = [
        "| model | input | bare forward export, s | realm export, s "
        f"| ratio (target ≤ {TARGET:g}×) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "" if r.ratio <= TARGET else " (over)"
        lines.append(
            f"| {r.model} | {'×'.join(map(str, r.input_shape))} | {r.bare:.2f} | "
            f"{r.export:.2f} | {r.ratio:.1f}×{mark} |"
        )
    lines += ["", "Where the export's time goes (seconds, medians):", ""]
    for r in rows:
        parts = ", ".join(f"{label} {s:.2f}" for label, s in r.stages.items())
        lines.append(f"- {r.model}: {parts}")
    return "\n".join(lines)
