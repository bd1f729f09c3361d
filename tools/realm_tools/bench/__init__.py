"""The benchmarks: speed and memory, the adapt graph's cost, and accuracy under shift.

- speed (``realm bench speed``): per-sample predict/adapt latency and peak memory, the torch
  reference beside each ``RealmRuntime`` backend taking turns on one stream
  (:func:`bench_model`, :func:`take_turns`), over the physical floor of FLOPs / peak
  (:func:`count_flops`, :func:`machine_peak`); :class:`ExternalRuntime` times the runtime in
  another interpreter;
- the adapt graph (``realm bench adapt``): its cost per sample at several update rates
  (:func:`bench_adapt`);
- memory (``realm bench memory``): the peak of each role of a torch-free process beside the
  floor the graphs allow, and each session setting's share (:func:`bench_memory`);
- quality (``realm bench quality``): online accuracy on corrupted streams, episodic
  (:func:`bench_quality`) or long-running (:func:`bench_streams`), through
  :func:`run_online`; and a million samples of changing corruptions through ``RealmRuntime``
  (:func:`bench_endless`).

    >>> from realm_tools.bench import bench_model, format_speed
    >>> print(format_speed(bench_model("digits", samples=5, warmup=2)))
"""

from .._timing import TURN_BLOCKS, block_ratios, take_turns, timed_side
from ._adapt import AdaptCost, bench_adapt, format_adapt_costs
from ._client_memory import browser_missing, browser_peak, node_missing, node_peak
from ._continual import bench_streams, streams_fingerprint, streams_from_json, streams_to_json
from ._endless import ENDLESS_METHODS, Calibration, EndlessRow, bench_endless, calibrate
from ._endless_report import endless_to_json, format_endless, plot_endless
from ._evaluate import OnlineResult, run_online
from ._examples import plot_examples
from ._export_time import ExportTimeRow, bench_export, format_export_times
from ._external import ExternalRuntime, ExternalSide
from ._flops import MachinePeak, count_flops, machine_peak
from ._memory import MemoryRow, bench_memory, format_memory, live_peak_mb, probe
from ._quality import METHODS as QUALITY_METHODS  # the quality table's rows, not RealmConfig's
from ._quality import (
    QualityRun,
    bench_quality,
    plot_quality,
    quality_table,
    runs_from_json,
    runs_to_json,
)
from ._runlog import RunLog, weights_digest
from ._speed import bench_model
from ._speed_report import format_speed, plot_speed, rows_to_json
from ._speed_rows import MethodRow, SpeedRow
from ._stream_report import plot_streams, streams_tables
from ._stream_run import (
    DEFAULT_STREAM_METHODS,
    STREAM_METHODS,
    StreamRun,
    method_config,
    run_stream,
)

__all__ = [
    "DEFAULT_STREAM_METHODS",
    "ENDLESS_METHODS",
    "QUALITY_METHODS",
    "STREAM_METHODS",
    "TURN_BLOCKS",
    "AdaptCost",
    "Calibration",
    "EndlessRow",
    "ExportTimeRow",
    "ExternalRuntime",
    "ExternalSide",
    "MachinePeak",
    "MemoryRow",
    "MethodRow",
    "OnlineResult",
    "QualityRun",
    "RunLog",
    "SpeedRow",
    "StreamRun",
    "bench_adapt",
    "bench_endless",
    "bench_export",
    "bench_memory",
    "bench_model",
    "bench_quality",
    "bench_streams",
    "block_ratios",
    "browser_missing",
    "browser_peak",
    "calibrate",
    "count_flops",
    "endless_to_json",
    "format_adapt_costs",
    "format_endless",
    "format_export_times",
    "format_memory",
    "format_speed",
    "live_peak_mb",
    "machine_peak",
    "method_config",
    "node_missing",
    "node_peak",
    "plot_endless",
    "plot_examples",
    "plot_quality",
    "plot_speed",
    "plot_streams",
    "probe",
    "quality_table",
    "rows_to_json",
    "run_online",
    "run_stream",
    "runs_from_json",
    "runs_to_json",
    "streams_fingerprint",
    "streams_from_json",
    "streams_tables",
    "streams_to_json",
    "take_turns",
    "timed_side",
    "weights_digest",
]
