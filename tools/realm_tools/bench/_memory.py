"""Memory: where an adapting process's peak goes, beside the floor the graphs allow.

Each figure is the peak RSS (VmHWM) of a fresh torch-free process in one role
(``realm_tools.workers.memory_probe``): the bare runtime, plain inference, and
``RealmRuntime`` adapting with every sample refused (skip) or updating, each under several
session settings. The floor is computed from the graphs, not measured: the inference
process's peak plus what the step must hold beyond inference, the largest sum of tensors
alive at once in ``step_model.onnx`` (the adapt graph's updating branch) less the same in
``inference_model.onnx``, each tensor alive from the node that makes it to its last reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from realm_export.portable import value_bytes
from realm_runtime import RealmConfig

from ..models import build_model
from ..workers import MEMORY_PROBE
from ._client_memory import browser_peak, node_peak
from ._external import checkout_env

MB = 1 << 20
# Session settings of the update role (RealmRuntime's session_config), each against the
# runtime's default: what each of ONNX Runtime's allocations adds to the peak, and costs.
VARIANTS: Mapping[str, Mapping[str, str]] = {
    "default": {},
    "planner on": {"realm.memory_pattern": "1"},
    "arena off": {"realm.cpu_arena": "0"},
    "pre-packing off": {"session.disable_prepacking": "1"},
}


@dataclass(frozen=True)
class MemoryRow:
    """One model's memory figures, MB, and the medians per sample, ms."""

    model: str
    adapt_stages: int | None  # RealmConfig.adapt_stages of the export (None: every stage)
    input_shape: tuple[int, ...]  # (C, H, W)
    samples: int  # samples each process ran
    onnxruntime: str  # the version the probes ran
    bare: float  # numpy, onnxruntime and realm_runtime imported, the stream loaded
    inference: float  # a plain InferenceSession on inference_model.onnx, ORT's defaults
    skip: float  # RealmRuntime, every sample after the first refused
    update: float  # RealmRuntime, every sample updating
    step_extra: float  # live-tensor peak of the step graph less the inference graph's
    variants: dict[str, float] = field(default_factory=dict)  # update peak per VARIANTS
    ms: dict[str, float] = field(default_factory=dict)  # median per sample, by role
    # median ms per sample of each variant, skipping and updating, taking turns in one process
    turns: dict[str, dict[str, float]] = field(default_factory=dict)
    node: float | None = None  # the Node edge app (onnxruntime-node) updating; None: not run
    browser: float | None = None  # the browser page's renderer (onnxruntime-web, WASM) updating
    browser_wasm: float | None = None  # of which onnxruntime-web's WebAssembly memory

    @property
    def floor(self) -> float:
        """The least an updating process needs: inference plus what the step must hold."""
        return self.inference + self.step_extra

    def time_ratio(self, mode: str, variant: str) -> float:
        """``variant``'s median time over the default's, ``mode`` "skip" or "update"."""
        times = self.turns[mode]
        return times[variant] / times["default"]


def live_peak_mb(path: Path) -> float:
    """The largest sum of tensors alive at once when the graph's nodes run in file order.

    Shapes come from ONNX shape inference, a symbolic dimension counted as 1 (batch 1);
    inputs and initializers are not counted (they are alive the whole run in any process).
    A node's outputs are alive from it to their last reader (or to the end, for outputs).
    """
    graph = onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False)).graph
    size = value_bytes(graph)
    last = {name: k for k, node in enumerate(graph.node) for name in node.input}
    made = {name for node in graph.node for name in node.output}  # all that is ever released
    kept = {o.name for o in graph.output}
    live = peak = 0
    for k, node in enumerate(graph.node):
        live += sum(size.get(o, 0) for o in node.output)
        peak = max(peak, live)
        done = {i for i in node.input if last.get(i) == k and i in made and i not in kept}
        live -= sum(size.get(i, 0) for i in done)
    return peak / MB


def probe(
    artifacts: Path,
    role: str,
    stream: Path,
    threads: int,
    python: str | None = None,
    session_config: Mapping[str, str] | None = None,
    variants: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """One fresh torch-free process in ``role``: its peak RSS (MB) and median ms per sample.

    Role ``turns`` times ``variants`` instead: ``{"turns": {mode: {variant: median ms}}}``.

    Raises:
        RuntimeError: the process failed or imported torch, with its last error line.
    """
    command = [python or sys.executable, "-m", MEMORY_PROBE, str(artifacts), role, str(stream)]
    command += [str(threads), "--session-config", json.dumps(dict(session_config or {}))]
    command += ["--variants", json.dumps({k: dict(v) for k, v in (variants or {}).items()})]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=1800, env=checkout_env(), check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the {role} memory probe of {artifacts} failed: {last}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["torch"]:
        raise RuntimeError("the memory probe imported torch")
    if role == "turns":
        return {"turns": result["turns"]}
    return {
        "peak": float(result["peak_rss_mb"]),
        "ms": result["median_ms"],
        "onnxruntime": result["onnxruntime"],
    }


def bench_memory(
    name: str,
    *,
    samples: int = 12,
    threads: int = 2,
    image_size: int | None = None,
    python: str | None = None,
    seed: int = 0,
    adapt_stages: int | None = None,
    node: bool = False,
    browser: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> MemoryRow:
    """Export ``name`` (no legacy files, no validation) and measure every role and variant.

    Args:
        name: a key of ``realm_tools.models.MODELS`` or ``timm:<model>``.
        samples: random samples each process runs (the same stream for all).
        threads: ONNX Runtime intra-op threads.
        image_size: square input side instead of the model's.
        python: the interpreter of the probes (e.g. ``.venv-runtime/bin/python``).
        seed: of the weights and the stream.
        adapt_stages: adapt only the last this many stages (``RealmConfig.adapt_stages``).
        node: also measure the Node edge app (``examples/node``) updating on the stream.
        browser: also measure the browser page (``examples/web``, headless Chromium, WASM).
        on_step: told the name of each step as it starts (a progress bar's hook).
    """
    from realm_export import ExportOptions, export_realm_artifacts

    tell = on_step or (lambda _: None)
    torch.manual_seed(seed)
    model, shape, classes = build_model(name, image_size)
    preset = "cifar" if classes == 10 else "imagenet"
    config = RealmConfig.preset(preset, num_classes=classes, adapt_stages=adapt_stages)
    xs = np.random.default_rng(seed).standard_normal((samples, *shape)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        directory, stream = Path(tmp) / "artifacts", Path(tmp) / "stream.npy"
        np.save(stream, xs)
        tell("export")
        options = ExportOptions(
            config=config, input_shape=(1, *shape), training=False, validate=False
        )
        export_realm_artifacts(model, directory, options)
        extra = live_peak_mb(directory / "step_model.onnx") - live_peak_mb(
            directory / "inference_model.onnx"
        )
        figures: dict[str, dict[str, Any]] = {}
        for role in ("bare", "inference", "skip"):
            tell(role)
            figures[role] = probe(directory, role, stream, threads, python)
        for variant, entries in VARIANTS.items():
            tell(f"update, {variant}")
            figures[variant] = probe(directory, "update", stream, threads, python, entries)
        tell("timing the settings, taking turns")
        turns = probe(directory, "turns", stream, threads, python, variants=VARIANTS)["turns"]
        node_mb = None
        if node:
            tell("the Node edge app")
            node_mb = node_peak(directory, xs, threads, classes)
        page = None
        if browser:
            tell("the browser page")
            page = browser_peak(directory, xs, threads, classes)
    return MemoryRow(
        model=name,
        adapt_stages=adapt_stages,
        input_shape=tuple(shape),
        samples=samples,
        onnxruntime=figures["bare"]["onnxruntime"],
        bare=figures["bare"]["peak"],
        inference=figures["inference"]["peak"],
        skip=figures["skip"]["peak"],
        update=figures["default"]["peak"],
        step_extra=extra,
        variants={v: figures[v]["peak"] for v in VARIANTS},
        ms={k: v["ms"] for k, v in figures.items() if v["ms"] is not None},
        turns=turns,
        node=node_mb,
        browser=None if page is None else page.renderer,
        browser_wasm=None if page is None else page.wasm,
    )


def _label(row: MemoryRow) -> str:
    return row.model if row.adapt_stages is None else f"{row.model}, last {row.adapt_stages}"


def _mb(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _ratio(value: float | None, base: float) -> str:
    return "–" if value is None else f"{value / base:.2f}×"


def format_memory(rows: list[MemoryRow]) -> str:
    """The memory tables: the roles against the floor, then each session setting's effect."""
    lines = [
        "| model | input | bare | inference | adapt, skip¹ | adapt, update | floor "
        "| update / floor | update / inference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_label(r)} | {'×'.join(map(str, r.input_shape))} | {r.bare:.0f} | "
            f"{r.inference:.0f} | {r.skip:.0f} | {r.update:.0f} | {r.floor:.0f} | "
            f"{r.update / r.floor:.2f}× | {r.update / r.inference:.2f}× |"
        )
    clients = [r for r in rows if r.node is not None or r.browser is not None]
    if clients:
        lines += [
            "",
            "The JavaScript clients, every sample updating, peak RSS (MB) of the node process "
            "(examples/node, onnxruntime-node) and of the page's renderer process "
            "(examples/web in headless Chromium, onnxruntime-web on WASM) with the size of "
            "onnxruntime-web's WebAssembly memory in it, beside the Python runtime's:",
            "",
            "| model | Python runtime | Node app | Node / Python | browser page | "
            "of which WebAssembly memory | browser / Python |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {_label(r)} | {r.update:.0f} | {_mb(r.node)} | {_ratio(r.node, r.update)} | "
            f"{_mb(r.browser)} | {_mb(r.browser_wasm)} | {_ratio(r.browser, r.update)} |"
            for r in clients
        ]
    names = [v for v in VARIANTS if v != "default"]
    lines += [
        "",
        "¹ Every sample after the first refused by the decision; the first updates (S_div "
        "has no history yet), so the step's memory is part of this peak too.",
        "",
        "Updating peak (MB) under each session setting, and its time per sample over the "
        "default's, skipping / updating (medians, the settings taking turns in one process):",
        "",
        "| model | default | " + " | ".join(names) + " |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for r in rows:
        base = r.turns.get("update", {}).get("default", float("nan"))
        cells = [f"{r.variants['default']:.0f} MB ({base:.1f} ms updating)"]
        cells += [
            f"{r.variants[v]:.0f} MB, {r.time_ratio('skip', v):.2f}× / "
            f"{r.time_ratio('update', v):.2f}×"
            for v in names
        ]
        lines.append(f"| {_label(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
