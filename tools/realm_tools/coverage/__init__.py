"""Model coverage (``realm coverage``): which timm architectures export, validate and adapt.

Each architecture of :data:`COVERAGE_MODELS` is built with random weights, exported, validated
against the PyTorch reference and adapted through ``RealmRuntime``, each in a fresh worker
process under a timeout (:func:`run_coverage`; the worker runs :func:`measure_model`). A
refused export is a finding: its :class:`CoverageRow` holds why.

    >>> from realm_tools.coverage import format_coverage, run_coverage
    >>> print(format_coverage(run_coverage(["resnet18", "mobilenetv3_small_100"])))
"""

from ._measure import measure_model
from ._models import COVERAGE_MODELS
from ._report import coverage_environment, coverage_summary, coverage_to_json, format_coverage
from ._row import WARMUP, CoverageRow
from ._run import merge_rows, run_coverage
from ._zygote import Zygote, serve

__all__ = [
    "COVERAGE_MODELS",
    "WARMUP",
    "CoverageRow",
    "Zygote",
    "coverage_environment",
    "coverage_summary",
    "coverage_to_json",
    "format_coverage",
    "measure_model",
    "merge_rows",
    "run_coverage",
    "serve",
]
