"""realm_tools: the ``realm`` command, demo, benchmarks, parity suite, data and models.

Everything built on the REALM packages rather than part of them: the digits task and its
corruptions, CIFAR-10-C / ImageNet-C loaders, the speed and quality benchmarks, the parity
suite's cases, FLOP counting, the model coverage report, and the one model registry and
weight loader.

The top of the four layers (``realm_runtime`` ← ``realm_sdk`` ← ``realm_export`` ←
``realm_tools``): it imports the others and nothing imports it. Install it with the ``dev``
or ``bench`` extras; an app that only adapts needs ``realm_runtime`` (on the device) or
``realm_sdk`` (in PyTorch) alone.

    >>> from realm_tools import build_model, run_case, CASES
    >>> model, shape, classes = build_model("resnet50_gn")
"""

from ._bench import (
    MethodRow,
    SpeedRow,
    bench_model,
    block_ratios,
    format_speed,
    plot_speed,
    rows_to_json,
    take_turns,
)
from ._bench_adapt import AdaptCost, bench_adapt, format_adapt_costs
from ._cli import QUICK_EPOCHS, QUICK_LIMIT, main
from ._continual import (
    STREAM_METHODS,
    StreamRun,
    bench_streams,
    method_config,
    plot_streams,
    run_stream,
    streams_from_json,
    streams_tables,
    streams_to_json,
)
from ._corruptions import CORRUPTIONS, corrupt, resize_bilinear
from ._coverage import (
    COVERAGE_MODELS,
    CoverageRow,
    coverage_environment,
    coverage_summary,
    coverage_to_json,
    format_coverage,
    measure_model,
    merge_rows,
    run_coverage,
)
from ._demo import (
    export_digits_artifacts,
    format_demo,
    format_runtime_demo,
    run_demo,
    run_runtime_demo,
    write_stream_folder,
)
from ._digits import (
    IMAGE_SIZE,
    NUM_CLASSES,
    DigitsData,
    DigitsGNNet,
    digits_preprocessing,
    load_digits,
    train_digits_model,
)
from ._evaluate import OnlineResult, run_online
from ._external import ExternalRuntime, ExternalSide
from ._flops import MachinePeak, count_flops, machine_peak
from ._models import (
    MODELS,
    ModelSpec,
    build_model,
    known_model,
    load_weights,
    model_from_spec,
    source_model,
    timm_model,
)
from ._parity import (
    BACKENDS as PARITY_BACKENDS,
)
from ._parity import (
    CASES,
    OVERFLOW_INPUT,
    TIE_MARGIN,
    TOLERANCES,
    ParityCase,
    ParityReport,
    build_case,
    decision_margin,
    format_reports,
    judge_step,
    make_stream,
    reports_to_json,
    run_case,
)
from ._quality import (
    METHODS as QUALITY_METHODS,  # the rows of the quality table (not RealmConfig's methods)
)
from ._quality import (
    DigitsShift,
    QualityRun,
    bench_quality,
    plot_quality,
    quality_table,
    runs_from_json,
    runs_to_json,
)
from ._realdata import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Cifar10C,
    ImageNetC,
    LazyImages,
    ShiftDataset,
    load_cifar10c,
    load_imagenetc,
)
from ._streams import JUNK, NO_LABEL, SETTINGS, Stream, StreamSettings, build_stream

__all__ = [
    "CASES",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CORRUPTIONS",
    "COVERAGE_MODELS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_SIZE",
    "JUNK",
    "MODELS",
    "NO_LABEL",
    "NUM_CLASSES",
    "OVERFLOW_INPUT",
    "PARITY_BACKENDS",
    "QUALITY_METHODS",
    "QUICK_EPOCHS",
    "QUICK_LIMIT",
    "SETTINGS",
    "STREAM_METHODS",
    "TIE_MARGIN",
    "TOLERANCES",
    "AdaptCost",
    "Cifar10C",
    "CoverageRow",
    "DigitsData",
    "DigitsGNNet",
    "DigitsShift",
    "ExternalRuntime",
    "ExternalSide",
    "ImageNetC",
    "LazyImages",
    "MachinePeak",
    "MethodRow",
    "ModelSpec",
    "OnlineResult",
    "ParityCase",
    "ParityReport",
    "QualityRun",
    "ShiftDataset",
    "SpeedRow",
    "Stream",
    "StreamRun",
    "StreamSettings",
    "bench_adapt",
    "bench_model",
    "bench_quality",
    "bench_streams",
    "block_ratios",
    "build_case",
    "build_model",
    "build_stream",
    "corrupt",
    "count_flops",
    "coverage_environment",
    "coverage_summary",
    "coverage_to_json",
    "decision_margin",
    "digits_preprocessing",
    "export_digits_artifacts",
    "format_adapt_costs",
    "format_coverage",
    "format_demo",
    "format_reports",
    "format_runtime_demo",
    "format_speed",
    "judge_step",
    "known_model",
    "load_cifar10c",
    "load_digits",
    "load_imagenetc",
    "load_weights",
    "machine_peak",
    "main",
    "make_stream",
    "measure_model",
    "merge_rows",
    "method_config",
    "model_from_spec",
    "plot_quality",
    "plot_speed",
    "plot_streams",
    "quality_table",
    "reports_to_json",
    "resize_bilinear",
    "rows_to_json",
    "run_case",
    "run_coverage",
    "run_demo",
    "run_online",
    "run_runtime_demo",
    "run_stream",
    "runs_from_json",
    "runs_to_json",
    "source_model",
    "streams_from_json",
    "streams_tables",
    "streams_to_json",
    "take_turns",
    "timm_model",
    "train_digits_model",
    "write_stream_folder",
]
