"""The speed and memory of a model's adaptation, and the one online evaluation loop.

What a developer measures on their own model:

- speed (``realm bench speed``): per-sample predict/adapt latency and peak memory, the torch
  reference beside each ``RealmRuntime`` backend taking turns on one stream
  (:func:`bench_model`, :func:`take_turns`), over the physical floor of FLOPs / peak
  (:func:`count_flops`, :func:`machine_peak`); :class:`ExternalRuntime` times the runtime in
  another interpreter;
- the adapt graph (``realm bench adapt``): its cost per sample at several update rates
  (:func:`bench_adapt`);
- where a step's time goes (``realm bench profile``): ONNX Runtime's profile of the step
  and inference graphs, grouped by what each op computes (:func:`profile_step`);
- memory (``realm bench memory``): the peak of each role of a torch-free process beside the
  floor the graphs allow, and each session setting's share (:func:`bench_memory`);
- export time (``realm bench export``): each stage of an export (:func:`bench_export`);
- :func:`run_online`: a labelled stream through an adapter or a frozen model, scored; the
  demo and every accuracy benchmark of the lab run their streams through it.

    >>> from realm_tools.bench import bench_model, format_speed
    >>> print(format_speed(bench_model("digits", samples=5, warmup=2)))
"""

from .._timing import TURN_BLOCKS, block_ratios, take_turns, timed_side
from ._adapt import AdaptCost, bench_adapt, format_adapt_costs
from ._client_memory import browser_missing, browser_peak, node_missing, node_peak
from ._evaluate import OnlineResult, run_online
from ._export_time import ExportTimeRow, bench_export, format_export_times
from ._external import ExternalRuntime, ExternalSide
from ._flops import MachinePeak, count_flops, machine_peak
from ._memory import MemoryRow, bench_memory, format_memory, live_peak_mb, probe
from ._profile import PROFILE_GROUPS, GroupCost, StepProfile, format_profiles, profile_step
from ._speed import bench_model
from ._speed_report import format_speed, plot_speed, rows_to_json
from ._speed_rows import MethodRow, SpeedRow

__all__ = [
    "PROFILE_GROUPS",
    "TURN_BLOCKS",
    "AdaptCost",
    "ExportTimeRow",
    "ExternalRuntime",
    "ExternalSide",
    "GroupCost",
    "MachinePeak",
    "MemoryRow",
    "MethodRow",
    "OnlineResult",
    "SpeedRow",
    "StepProfile",
    "bench_adapt",
    "bench_export",
    "bench_memory",
    "bench_model",
    "block_ratios",
    "browser_missing",
    "browser_peak",
    "count_flops",
    "format_adapt_costs",
    "format_export_times",
    "format_memory",
    "format_profiles",
    "format_speed",
    "live_peak_mb",
    "machine_peak",
    "node_missing",
    "node_peak",
    "plot_speed",
    "probe",
    "profile_step",
    "rows_to_json",
    "run_online",
    "take_turns",
    "timed_side",
]
