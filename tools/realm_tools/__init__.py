"""realm_tools: the ``realm`` command a user runs on their own model, and what it stands on.

Export, demo, parity, coverage, speed and memory, one subpackage per feature:

- :mod:`realm_tools.cli`: the ``realm`` command (``python -m realm_tools``), one module per
  sub-command;
- :mod:`realm_tools.data`: the digits task and its corruptions, CIFAR-10-C / ImageNet-C
  loaders, long-running test streams (numpy only);
- :mod:`realm_tools.models`: the one model registry and weight loader, and the digits model;
- :mod:`realm_tools.bench`: the speed, adapt-graph, memory and export-time benchmarks, FLOP
  counting, and the one online evaluation loop (:func:`run_online`);
- :mod:`realm_tools.parity`: the parity suite's cases, run and reports;
- :mod:`realm_tools.coverage`: which timm architectures export, validate and adapt;
- :mod:`realm_tools.demo`: the end-to-end digits demo and the one digits export;
- :mod:`realm_tools.workers`: the programs the others start with ``python -m``.

The top of the product's four layers (``realm_runtime`` ← ``realm_sdk`` ← ``realm_export`` ←
``realm_tools``): it imports the others, and only the lab (``lab/``, ``realm_lab``: the
project's own tables) imports it. Install it with the ``dev``
or ``bench`` extras; an app that only adapts needs ``realm_runtime`` (on the device) or
``realm_sdk`` (in PyTorch) alone.

    >>> from realm_tools import build_model, run_case, CASES
    >>> model, shape, classes = build_model("resnet50_gn")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bench import (
        bench_adapt,
        bench_model,
        format_adapt_costs,
        format_speed,
    )
    from .cli import main
    from .coverage import format_coverage, run_coverage
    from .data import (
        CORRUPTIONS,
        build_stream,
        corrupt,
        load_cifar10c,
        load_digits,
        load_imagenetc,
    )
    from .demo import export_digits_artifacts, format_demo, run_demo
    from .models import MODELS, build_model, load_weights, source_model, train_digits_model
    from .parity import CASES, format_reports, run_case

# What a user calls, by the subpackage that defines it. Imported on first use, not here:
# `python -m realm_tools.workers.<name>` runs this file first, in interpreters without torch.
_HOMES = {
    "main": "cli",
    "CORRUPTIONS": "data",
    "build_stream": "data",
    "corrupt": "data",
    "load_cifar10c": "data",
    "load_digits": "data",
    "load_imagenetc": "data",
    "MODELS": "models",
    "build_model": "models",
    "load_weights": "models",
    "source_model": "models",
    "train_digits_model": "models",
    "bench_adapt": "bench",
    "bench_model": "bench",
    "format_adapt_costs": "bench",
    "format_speed": "bench",
    "CASES": "parity",
    "format_reports": "parity",
    "run_case": "parity",
    "format_coverage": "coverage",
    "run_coverage": "coverage",
    "export_digits_artifacts": "demo",
    "format_demo": "demo",
    "run_demo": "demo",
}

__all__ = [
    "CASES",
    "CORRUPTIONS",
    "MODELS",
    "bench_adapt",
    "bench_model",
    "build_model",
    "build_stream",
    "corrupt",
    "export_digits_artifacts",
    "format_adapt_costs",
    "format_coverage",
    "format_demo",
    "format_reports",
    "format_speed",
    "load_cifar10c",
    "load_digits",
    "load_imagenetc",
    "load_weights",
    "main",
    "run_case",
    "run_coverage",
    "run_demo",
    "source_model",
    "train_digits_model",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its subpackage the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
