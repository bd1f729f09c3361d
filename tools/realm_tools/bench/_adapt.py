"""What one adapt graph costs per sample, against today's two graphs, in one run.

The adapt graph's cost at update rate u should be ``F + u·(S − F)``: a forward for every
sample, the rest of a step only for the selected ones (F: the forward graph, S: the step
graph, both as ``RealmRuntime`` runs them). Today's runtime pays ``F + u·S`` when it predicts
first (a selected sample runs the step's forward again) or ``S`` when it trains first; its
best schedule costs ``min(F + u·S, S)``.

The benchmark forces the adapt graph's decision, so that u is exact: a REALM sample is
selected when no EMA is known, and refused by S_div when the EMA is the sample's own
prediction (cosine 1). Which branch runs is all that the time depends on. Every side takes
the same samples in interleaved rounds, so a slower minute of a shared machine hits all of
them alike.
"""

from __future__ import annotations

import contextlib
import copy
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realm_runtime import RealmConfig, RealmRuntime, onnxruntime_module
from realm_runtime.contract import (
    ADAPT_INPUT_KEY,
    ADAPT_KEY,
    ADAPT_KNOWN_KEY,
    ADAPT_SELECTED_KEY,
    ADAPT_STATE_KEY,
    EMA_NAME,
    FILE_KEY,
    INFERENCE_MODEL,
    KNOWN_EMA,
    KNOWN_NAME,
    MANIFEST_NAME,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
)
from realm_runtime.measure import updating_overrides
from realm_sdk import RealmAdapter

from ..models import build_model
from ._flops import MachinePeak, machine_peak, step_flops

RATES = (0.03, 0.6, 1.0)  # mostly skipped, mostly updated, every sample updated


@dataclass(frozen=True)
class AdaptCost:
    """One model's figures: today's graphs, the adapt graph's two paths and its streams."""

    model: str
    forward_ms: float  # F: RealmRuntime.predict (the forward graph)
    step_ms: float  # S: RealmRuntime.adapt with the train-first schedule (the step graph)
    skip_ms: float  # the adapt graph on a refused sample
    update_ms: float  # the adapt graph on a selected sample
    stream_ms: dict[float, float]  # u → the adapt graph's mean per sample on a stream at u
    stream_rate: dict[float, float]  # u → the share of that stream the graph selected
    step_gflop: float  # counted FLOPs of one updating step (torch's reference)
    peak_gflops: float  # the measured matmul peak
    threads: int
    onnxruntime: str
    plain_ms: float = math.nan  # a plain InferenceSession on the export's inference graph
    torch_forward_ms: float = math.nan  # RealmAdapter.predict (the reference's forward)
    torch_update_ms: float = math.nan  # RealmAdapter.adapt, every sample updating

    @property
    def update_in_forwards(self) -> float:
        """An updating adapt call in forwards of the same export's inference graph."""
        return self.update_ms / self.plain_ms

    @property
    def torch_ratio(self) -> float:
        """Torch's own: its updating step in its forwards."""
        return self.torch_update_ms / self.torch_forward_ms

    def target_ms(self, u: float) -> float:
        """``F + u·(S − F)``."""
        return self.forward_ms + u * (self.step_ms - self.forward_ms)

    def today_ms(self, u: float) -> float:
        """Today's best schedule: ``min(F + u·S, S)``."""
        return min(self.forward_ms + u * self.step_ms, self.step_ms)

    @property
    def floor_share(self) -> float:
        """The updating adapt call's share of the FLOP floor (counted FLOPs at the peak)."""
        return (self.step_gflop / self.peak_gflops * 1e3) / self.update_ms


def bench_adapt(
    name: str,
    *,
    image_size: int | None = None,
    rates: Sequence[float] = RATES,
    samples: int = 20,
    rounds: int = 3,
    threads: int = 2,
    warmup: int = 3,
    peak: MachinePeak | None = None,
    on_round: Callable[[int], None] | None = None,
) -> AdaptCost:
    """Time today's forward and step graphs and the adapt graph on one model (REALM).

    Args:
        name: a model of :data:`realm_tools.models.MODELS` or ``timm:<name>``.
        image_size: the input side (None: the model's).
        rates: update rates of the adapt graph's streams.
        samples: samples per measurement and round.
        rounds: interleaved rounds; each side's figure is its mean over all of them.
        threads: intra-op threads of every session.
        warmup: untimed calls of every side first.
        peak: the machine's measured matmul peak (None: measured here).
        on_round: called after each round with the number done.
    """
    with exported(name, image_size) as (model, shape, config, directory):
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((samples, 1, *shape)).astype(np.float32)
        infer = RealmRuntime(directory, threads=threads, backend="onnx-steps")
        train = RealmRuntime(directory, threads=threads, backend="onnx-steps", schedule="train")
        graph = _AdaptGraph(directory, threads)
        plain = plain_session(directory / INFERENCE_MODEL, threads)
        plain_input = plain.get_inputs()[0].name
        torch.set_num_threads(threads)
        forward = RealmAdapter(copy.deepcopy(model), config)
        updating = RealmAdapter(
            copy.deepcopy(model), config.with_overrides(**updating_overrides(config))
        )
        own = [_softmax(infer.predict(x)) for x in xs]  # each sample's S_div-refusing EMA
        for x, ema in zip(xs[:warmup], own, strict=False):  # first runs allocate and plan
            infer.predict(x), train.adapt(x), graph.run(x, None), graph.run(x, ema)
            plain.run(None, {plain_input: x})
            forward.predict(torch.from_numpy(x)), updating.adapt(torch.from_numpy(x))
        sides: dict[str, list[float]] = {}
        chosen: dict[str, list[float]] = {}  # the streams' selected samples, as run
        for r in range(rounds):
            for i, x in enumerate(xs):
                _add(sides, "forward", _time(lambda: infer.predict(x)))  # noqa: B023
                _add(sides, "step", _time(lambda: train.adapt(x)))  # noqa: B023
                _add(sides, "update", _time(lambda: graph.run(x, None)))  # noqa: B023
                _add(sides, "skip", _time(lambda: graph.run(x, own[i])))  # noqa: B023
                _add(sides, "plain", _time(lambda: plain.run(None, {plain_input: x})))  # noqa: B023
                t = torch.from_numpy(x)
                _add(sides, "torch forward", _time(lambda: forward.predict(t)))  # noqa: B023
                _add(sides, "torch update", _time(lambda: updating.adapt(t)))  # noqa: B023
            for u in rates:
                # Long enough that a low rate selects a few samples per round: ⌊n·u⌋ of n.
                n = max(samples, math.ceil(2 / u)) if u > 0 else samples
                for i in range(n):
                    x = xs[i % samples]
                    selected = int((i + 1) * u) > int(i * u)
                    ema = None if selected else own[i % samples]
                    took: list[bool] = []
                    _add(sides, f"u={u}", _time(lambda: took.append(graph.run(x, ema))))  # noqa: B023
                    _add(chosen, f"u={u}", float(took[0]))
            if on_round is not None:
                on_round(r + 1)
        ort_version = onnxruntime_module().__version__
    step_gflop = step_flops(model, config, torch.from_numpy(xs[0]))[1]
    peak = peak or machine_peak(threads)
    mean = {k: float(np.mean(v)) for k, v in sides.items()}
    return AdaptCost(
        model=name,
        forward_ms=mean["forward"],
        step_ms=mean["step"],
        skip_ms=mean["skip"],
        update_ms=mean["update"],
        stream_ms={u: mean[f"u={u}"] for u in rates},
        stream_rate={u: float(np.mean(chosen[f"u={u}"])) for u in rates},
        step_gflop=step_gflop,
        peak_gflops=peak.measured_gflops,
        threads=threads,
        onnxruntime=ort_version,
        plain_ms=mean["plain"],
        torch_forward_ms=mean["torch forward"],
        torch_update_ms=mean["torch update"],
    )


@contextlib.contextmanager
def exported(
    name: str, image_size: int | None
) -> Iterator[tuple[torch.nn.Module, tuple[int, ...], RealmConfig, Path]]:
    """``name`` built and exported for the benches (ImageNet preset, batch 1, unvalidated).

    Yields the model, its input shape ``(C, H, W)``, the export's configuration and the
    artifact folder, inside a temporary folder removed afterwards.
    """
    from realm_export import ExportOptions, export_realm_artifacts

    model, shape, classes = build_model(name, image_size)
    config = RealmConfig.preset("imagenet", num_classes=classes)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "artifacts"
        options = ExportOptions(
            config=config, input_shape=(1, *shape), training=False, validate=False
        )
        export_realm_artifacts(model, directory, options)
        yield model, shape, config, directory


def plain_session(path: Path, threads: int, profile_prefix: str | None = None) -> Any:
    """An ``InferenceSession`` on ``path`` as the runtime opens one (CPU, its settings).

    With ``profile_prefix``, ONNX Runtime's profile is written there, and idle workers do
    not spin: the profiled sessions take turns with others.
    """
    ort = onnxruntime_module()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    for key, value in RealmRuntime.DEFAULT_SESSION_CONFIG.items():
        options.add_session_config_entry(key, value)
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class _AdaptGraph:
    """The adapt graph fed like the docs' client, its S_div decision forced by the state."""

    def __init__(self, directory: Path, threads: int, profile_prefix: str | None = None) -> None:
        import json

        self.spec = json.loads((directory / MANIFEST_NAME).read_text())[ADAPT_KEY]
        self.session = plain_session(directory / self.spec[FILE_KEY], threads, profile_prefix)
        self.names = [o.name for o in self.session.get_outputs()]
        self.state = {
            s[STATE_INPUT_KEY]: np.load(directory / s[STATE_INITIAL_KEY])
            for s in self.spec[ADAPT_STATE_KEY]
        }
        self.known_ema = self.spec[ADAPT_KNOWN_KEY].index(KNOWN_EMA)

    def run(self, x: np.ndarray, ema: np.ndarray | None) -> bool:
        """One call; ``ema`` None selects the sample, the sample's own prediction refuses it."""
        known = self.state[KNOWN_NAME].copy()
        known[self.known_ema] = ema is not None
        state = {**self.state, KNOWN_NAME: known}
        if ema is not None:
            state[EMA_NAME] = ema
        out = dict(
            zip(
                self.names,
                self.session.run(None, {self.spec[ADAPT_INPUT_KEY]: x, **state}),
                strict=True,
            )
        )
        for s in self.spec[ADAPT_STATE_KEY]:
            self.state[s[STATE_INPUT_KEY]] = out[s[STATE_OUTPUT_KEY]]
        return bool(out[self.spec[ADAPT_SELECTED_KEY]])


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits[0].astype(np.float64)
    e = np.exp(z - z.max())
    return (e / e.sum()).astype(np.float32)


def _time(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def _add(sides: dict[str, list[float]], key: str, ms: float) -> None:
    sides.setdefault(key, []).append(ms)


def format_adapt_costs(rows: Sequence[AdaptCost], rates: Sequence[float] = RATES) -> str:
    """The markdown table: per model and rate, the adapt graph against its target and today."""
    lines = [
        "| model | u (as run) | adapt graph ms | target F + u·(S − F) ms | measured / target | "
        "today's best min(F + u·S, S) ms | adapt / today |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for u in rates:
            got, target, today = row.stream_ms[u], row.target_ms(u), row.today_ms(u)
            lines.append(
                f"| {row.model} | {u:g} ({row.stream_rate[u]:.2f}) | {got:.1f} | {target:.1f} | "
                f"{got / target:.3f} | {today:.1f} | {got / today:.3f} |"
            )
    lines += [
        "",
        "| model | F forward ms | S step ms | adapt skip ms | adapt update ms | skip / F | "
        "update / S | step GFLOP | floor ms | update's share of the floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        floor = row.step_gflop / row.peak_gflops * 1e3
        lines.append(
            f"| {row.model} | {row.forward_ms:.1f} | {row.step_ms:.1f} | {row.skip_ms:.1f} | "
            f"{row.update_ms:.1f} | {row.skip_ms / row.forward_ms:.3f} | "
            f"{row.update_ms / row.step_ms:.3f} | {row.step_gflop:.2f} | {floor:.1f} | "
            f"{row.floor_share:.0%} |"
        )
    lines += [
        "",
        "| model | inference graph ms (plain session) | updating adapt ms | update in forwards | "
        "torch forward ms | torch update ms | torch's ratio | ≤ 2.5 and ≤ torch's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        met = row.update_in_forwards <= min(2.5, row.torch_ratio)
        lines.append(
            f"| {row.model} | {row.plain_ms:.1f} | {row.update_ms:.1f} | "
            f"**{row.update_in_forwards:.2f}** | {row.torch_forward_ms:.1f} | "
            f"{row.torch_update_ms:.1f} | {row.torch_ratio:.2f} | {'met' if met else 'not met'} |"
        )
    return "\n".join(lines)
