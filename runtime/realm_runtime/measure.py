"""Measuring the runtime where it runs: its peak memory, the CPU, a torch-free process.

Not the runtime's API but what benchmarks, the export's memory check and the tests use to
measure it, kept apart from ``realm_runtime``'s names:

- :func:`peak_rss_mb` and :func:`cpu_name`: the process's peak resident memory, the CPU's
  name (written beside every figure);
- :func:`block_torch`: make torch unimportable in this process, as on a device;
- :func:`updating_overrides`: the configuration fields that make every sample update (the
  cost of the updating step, whatever the stream);
- :func:`measure_update_peak` and :class:`MemoryFigure`: an updating process's peak memory.
"""

from ._memory import (
    MemoryFigure,
    block_torch,
    cpu_name,
    measure_update_peak,
    peak_rss_mb,
    updating_overrides,
)

__all__ = [
    "MemoryFigure",
    "block_torch",
    "cpu_name",
    "measure_update_peak",
    "peak_rss_mb",
    "updating_overrides",
]
