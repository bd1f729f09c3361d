"""Where an updating step's time goes: ONNX Runtime's profile, grouped by what each op computes.

The export stamps every node of the step graph with the part of the step it belongs to and
the aten op or layer form it was written for (``realm.part``, ``realm.source``). This bench
profiles the step graph and the inference graph of the same export in one process, maps
each timed kernel back to its node (ONNX Runtime names the nodes it adds or re-lays out
after the ones they replace), and sums time, FLOPs and bytes per group: the forward's
convolutions by kind, their input gradients, the activation masks, the norms' backward,
layout reorders, the loss and the update. Each group's target is what its counterpart
costs in the forward (an input gradient takes a convolution's FLOPs, a mask one pass), so
the targets add up to about two forwards.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from realm_export.portable import AGAIN_PREFIX, graphs_within
from realm_runtime import onnxruntime_module
from realm_runtime.contract import (
    ADAPT_MODEL,
    INFERENCE_MODEL,
    INPUT_NAME,
    NODE_PART_KEY,
    NODE_SOURCE_KEY,
    PARAMS_NAME,
    PART_BACKWARD,
    PART_FORWARD,
    PART_LOSS,
    PART_UPDATE,
    SAMPLE_WEIGHT_NAME,
    SOURCE_PARAMS,
    STEP_MODEL,
)

from ._adapt import _AdaptGraph, exported, plain_session

# The groups, in the order a table lists them, each with its counterpart in the forward:
# the group whose time is this one's target (None: the group's own time is its target;
# "" : nothing should be spent there).
PROFILE_GROUPS: dict[str, str | None] = {
    "convolutions, depthwise": None,
    "convolutions, pointwise": None,
    "convolutions, other": None,
    "matmuls": None,
    "activations": None,
    "norms": None,
    "pooling": None,
    "elementwise and reshapes": None,
    "loss and decision": None,
    "input gradients, depthwise": "convolutions, depthwise",
    "input gradients, pointwise": "convolutions, pointwise",
    "input gradients, other": "convolutions, other",
    "strided input gradients' spreading": None,
    "matmul input gradients": "matmuls",
    "activation masks": "activations",
    "norm backward": "norms",
    "pooling backward": "pooling",
    "elementwise and reshapes, backward": "elementwise and reshapes",
    "update": None,
    "layout reorders": "",
    "unattributed": None,
}
_ACTIVATION_OPS = {
    "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Gelu", "Erf", "Softmax",
    "LeakyRelu", "Elu", "Softplus", "Mish", "FastGelu", "QuickGelu",
}  # fmt: skip
_ACTIVATION_SOURCES = ("hardswish", "hardsigmoid", "threshold", "relu", "hardtanh", "gelu",
                       "silu", "sigmoid", "tanh", "softmax", "elu", "mish")  # fmt: skip
_NORM_OPS = {"BatchNormalization", "LayerNormalization", "GroupNormalization",
             "InstanceNormalization", "SimplifiedLayerNormalization"}  # fmt: skip
_POOL_OPS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean"}
_MATMUL_OPS = {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}
_CONV_OPS = {"Conv", "FusedConv", "ConvTranspose"}


@dataclass
class _Node:
    """One ONNX node as the profile groups it."""

    op: str
    group: str
    flops: float = 0.0
    bytes: float = 0.0


@dataclass
class GroupCost:
    """One group's totals over a graph (ms per call)."""

    ms: float = 0.0
    nodes: int = 0
    gflop: float = 0.0
    mbytes: float = 0.0
    kernels: Counter[str] = field(default_factory=Counter)  # ONNX Runtime op → ms


@dataclass(frozen=True)
class StepProfile:
    """One model's profile: the inference graph's and the step graph's groups."""

    model: str
    forward_ms: float  # the inference graph's median call, profiling off
    step_ms: float  # the step graph's median call, profiling off
    forward: dict[str, GroupCost]
    step: dict[str, GroupCost]
    adapt_ms: float  # the adapt graph's median updating call, profiling off
    adapt: dict[str, GroupCost]  # the adapt graph's updating call
    threads: int
    onnxruntime: str

    def target_ms(self, group: str) -> float:
        """What ``group`` should cost: its forward counterpart's time in the step graph."""
        counterpart = PROFILE_GROUPS.get(group)
        if counterpart == "":
            return 0.0
        if counterpart is None:
            own = self.forward.get(group) if group in self.forward else self.step.get(group)
            return own.ms if own is not None else 0.0
        twin = self.step.get(counterpart)
        return twin.ms if twin is not None else 0.0


def profile_step(
    name: str,
    *,
    image_size: int | None = None,
    threads: int = 2,
    runs: int = 20,
    warmup: int = 3,
    on_stage: Callable[[str], None] | None = None,
) -> StepProfile:
    """Export ``name`` (REALM, ImageNet preset) and profile its step and inference graphs.

    Args:
        name: a model of :data:`realm_tools.models.MODELS` or ``timm:<name>``.
        image_size: the input side (None: the model's).
        threads: intra-op threads of both sessions.
        runs: profiled calls of each graph (after ``warmup``), and timed calls.
        warmup: calls left out of every figure.
        on_stage: called with a word as each stage starts.
    """
    say = on_stage or (lambda _stage: None)
    say("export")
    with exported(name, image_size) as (_model, shape, _config, directory):
        tmp = str(directory.parent)
        x = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
        graphs = {
            "forward": directory / INFERENCE_MODEL,
            "step": directory / STEP_MODEL,
            "adapt": directory / ADAPT_MODEL,
        }
        walls: dict[str, float] = {}
        groups: dict[str, dict[str, GroupCost]] = {}
        for profiled in (False, True):
            say("profile" if profiled else "time")
            calls = {
                side: _caller(side, path, directory, x, threads, tmp if profiled else None)
                for side, path in graphs.items()
            }
            times: dict[str, list[float]] = defaultdict(list)
            for i in range(warmup + runs):
                for side, (call, _end) in calls.items():
                    start = time.perf_counter()
                    call()
                    if i >= warmup:
                        times[side].append((time.perf_counter() - start) * 1e3)
            if not profiled:
                walls = {side: float(np.median(t)) for side, t in times.items()}
                continue
            step_nodes = _nodes(graphs["step"], step=True)
            for side, (_call, end) in calls.items():
                nodes = _nodes(graphs[side], step=side != "forward")
                if side == "adapt":  # its branch holds the step's nodes, by the same names
                    nodes.update(step_nodes)
                events = json.loads(Path(end()).read_text())
                groups[side] = _scaled(_group_events(events, nodes, runs, warmup), walls[side])
    return StepProfile(
        model=name,
        forward_ms=walls["forward"],
        step_ms=walls["step"],
        forward=groups["forward"],
        step=groups["step"],
        adapt_ms=walls["adapt"],
        adapt=groups["adapt"],
        threads=threads,
        onnxruntime=onnxruntime_module().__version__,
    )


def _caller(
    side: str, path: Path, directory: Path, x: np.ndarray, threads: int, tmp: str | None
) -> tuple[Callable[[], Any], Callable[[], str]]:
    """One call of graph ``side`` on ``x`` and the function that ends its profile.

    The adapt graph's call is a selected sample's: it runs the update branch.
    """
    prefix = str(Path(tmp) / side) if tmp is not None else None
    if side == "adapt":
        graph = _AdaptGraph(directory, threads, profile_prefix=prefix)
        return (lambda: graph.run(x, None)), graph.session.end_profiling
    session = plain_session(path, threads, prefix)
    feeds = _feeds(session, directory, x)
    return (lambda: session.run(None, feeds)), session.end_profiling


def _feeds(session: Any, directory: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """A sample, the source parameters, unit weight, learning rates 0: every op runs."""
    types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
    feeds = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], types[i.type])
        for i in session.get_inputs()
    }
    feeds[INPUT_NAME] = x
    if PARAMS_NAME in feeds:
        feeds[PARAMS_NAME] = np.load(directory / SOURCE_PARAMS)
    if SAMPLE_WEIGHT_NAME in feeds:
        feeds[SAMPLE_WEIGHT_NAME] = np.ones_like(feeds[SAMPLE_WEIGHT_NAME])
    return feeds


def _group_events(
    events: list[dict[str, Any]], nodes: dict[str, _Node], runs: int, warmup: int
) -> dict[str, GroupCost]:
    """Each group's mean ms per call over the profile's last ``runs`` calls."""
    calls = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    start = calls[warmup] if len(calls) > warmup else 0
    groups: dict[str, GroupCost] = {g: GroupCost() for g in PROFILE_GROUPS}
    for node in nodes.values():
        cost = groups[node.group]
        cost.nodes += 1
        cost.gflop += node.flops / 1e9
        cost.mbytes += node.bytes / 1e6
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time") or event["ts"] < start:
            continue
        op = event.get("args", {}).get("op_name", "?")
        if op in ("If", "Loop", "Scan"):
            continue  # its time is its branch's nodes', each timed on its own
        group = _match(name[: -len("_kernel_time")], op, nodes)
        ms = event["dur"] / 1e3 / runs
        groups[group].ms += ms
        groups[group].kernels[op] += ms
    return {g: c for g, c in groups.items() if c.nodes or c.ms}


def _scaled(groups: dict[str, GroupCost], wall_ms: float) -> dict[str, GroupCost]:
    """Each group's share of the profiled time, of the call's unprofiled wall time.

    The profiler times every kernel synchronously, which slows a call; the shares hold.
    """
    total = sum(c.ms for c in groups.values()) or 1.0
    factor = wall_ms / total
    for cost in groups.values():
        cost.ms *= factor
        for op in cost.kernels:
            cost.kernels[op] *= factor
    return groups


def _match(name: str, op: str, nodes: dict[str, _Node]) -> str:
    """The group of the node ONNX Runtime timed as ``name``."""
    if op.startswith("Reorder"):
        return "layout reorders"
    # The adapt graph's branch computes some forward values again under a prefixed name.
    name = name.removeprefix(AGAIN_PREFIX)
    for candidate in (name, name.removesuffix("_nchwc"), "node_" + name.removesuffix("_nchwc")):
        if candidate in nodes:
            return nodes[candidate].group
    return "unattributed"


def _nodes(path: Path, *, step: bool) -> dict[str, _Node]:
    """Every node of the graph and its branches (by name, and by its first output), grouped."""
    model = onnx.load(str(path), load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes: dict[str, list[int]] = {}
    for graph in graphs_within(inferred.graph):
        for value in (*graph.value_info, *graph.input, *graph.output):
            dims = value.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                shapes[value.name] = [d.dim_value for d in dims]
        for init in graph.initializer:
            shapes[init.name] = list(init.dims)
    table: dict[str, _Node] = {}
    for graph in graphs_within(model.graph):
        for node in graph.node:
            if node.op_type == "If":
                continue  # its branches' nodes are timed, not the If
            props = {p.key: p.value for p in node.metadata_props}
            kind = _conv_kind(node, shapes)
            part, source = props.get(NODE_PART_KEY), props.get(NODE_SOURCE_KEY)
            group = (
                _step_group(node.op_type, kind, part, source)
                if step
                else _forward_group(node.op_type, kind)
            )
            entry = _Node(node.op_type, group, _flops(node, shapes), _bytes(node, shapes))
            table[node.name] = entry
            if node.output:
                table.setdefault(node.output[0], entry)
    return table


def _conv_kind(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> str:
    """``depthwise``, ``pointwise`` or ``other`` for a convolution; ``""`` otherwise."""
    if node.op_type not in _CONV_OPS:
        return ""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if group > 1 and weight is not None and weight[1] == 1:
        return "depthwise"
    if group == 1 and weight is not None and all(k == 1 for k in weight[2:]):
        return "pointwise"
    return "other"


def _forward_group(op: str, kind: str) -> str:
    if kind:
        return f"convolutions, {kind}"
    if op in _MATMUL_OPS:
        return "matmuls"
    if op in _ACTIVATION_OPS:
        return "activations"
    if op in _NORM_OPS:
        return "norms"
    if op in _POOL_OPS:
        return "pooling"
    return "elementwise and reshapes"


def _step_group(op: str, kind: str, part: str | None, source: str | None) -> str:
    src = (source or "").removeprefix("aten.")
    if part == PART_FORWARD:
        if src.startswith("realm.") and src.endswith("norm"):
            return "norms"
        if src.startswith(("realm.avg_pool", "mean", "max_pool")):
            return "pooling"
        return _forward_group(op, kind)
    if part == PART_BACKWARD:
        if kind:
            return f"input gradients, {kind}"
        if src.startswith("convolution_backward"):
            return "strided input gradients' spreading"
        if src.startswith("realm.") and src.endswith("norm"):
            return "norm backward"
        if src.startswith(_ACTIVATION_SOURCES):
            return "activation masks"
        if op in _MATMUL_OPS or src.startswith(("mm", "bmm", "addmm")):
            return "matmul input gradients"
        if src.startswith(("realm.avg_pool", "max_pool", "_adaptive", "mean", "avg_pool")):
            return "pooling backward"
        return "elementwise and reshapes, backward"
    if part == PART_LOSS:
        return "loss and decision"
    if part == PART_UPDATE:
        return "update"
    return "unattributed"


def _size(shapes: dict[str, list[int]], name: str) -> int:
    return math.prod(shapes.get(name, [0])) if name else 0


def _flops(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> float:
    """Multiply-adds ×2 of a convolution or matmul (0 for other ops)."""
    weight = shapes.get(node.input[1], []) if len(node.input) > 1 else []
    if node.op_type in ("Conv", "FusedConv") and weight:
        return 2.0 * _size(shapes, node.output[0]) * math.prod(weight[1:])
    if node.op_type == "ConvTranspose" and weight:
        return 2.0 * _size(shapes, node.input[0]) * math.prod(weight[1:])
    if node.op_type in _MATMUL_OPS:
        a = shapes.get(node.input[0], [])
        transposed = any(at.name == "transA" and at.i for at in node.attribute)
        k = (a[-2] if transposed else a[-1]) if a else 0
        return 2.0 * _size(shapes, node.output[0]) * k
    return 0.0


def _bytes(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> float:
    """Bytes read and written, at 4 a value (the graphs are float32)."""
    return 4.0 * sum(_size(shapes, n) for n in (*node.input, *node.output))


def format_profiles(rows: Sequence[StepProfile]) -> str:
    """Per model, a markdown table: each group's time in the three graphs, FLOPs, bytes, target."""
    out: list[str] = []
    for row in rows:
        total_target = sum(row.target_ms(g) for g in row.step)
        out += [
            f"**{row.model}**: inference graph {row.forward_ms:.1f} ms, step graph "
            f"{row.step_ms:.1f} ms ({row.step_ms / row.forward_ms:.2f} forwards), the adapt "
            f"graph's update {row.adapt_ms:.1f} ms (**{row.adapt_ms / row.forward_ms:.2f} "
            f"forwards**); the groups' targets add up to {total_target:.1f} ms "
            f"({total_target / row.forward_ms:.2f} forwards). A group's ms: its share of ONNX "
            "Runtime's profile of the call, of the call's unprofiled median.",
            "",
            "| group | nodes | inference ms | step ms | adapt update ms | share | target ms | "
            "GFLOP | MB | ONNX Runtime kernels in the adapt update (ms) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        adapt_total = sum(c.ms for c in row.adapt.values()) or 1.0
        for group in PROFILE_GROUPS:
            fwd, step, adapt = row.forward.get(group), row.step.get(group), row.adapt.get(group)
            if fwd is None and step is None and adapt is None:
                continue
            step, adapt = step or GroupCost(), adapt or GroupCost()
            kernels = ", ".join(f"{k} {v:.2f}" for k, v in adapt.kernels.most_common(3))
            out.append(
                f"| {group} | {step.nodes} | {fwd.ms if fwd else 0:.2f} | {step.ms:.2f} | "
                f"{adapt.ms:.2f} | {adapt.ms / adapt_total:.0%} | {row.target_ms(group):.2f} | "
                f"{step.gflop:.3f} | {step.mbytes:.1f} | {kernels} |"
            )
        out.append("")
    return "\n".join(out)
