"""The lab's benchmarks: accuracy under shift, the project's own tables and figures.

- quality (``realm-lab quality``): online accuracy on corrupted streams, episodic
  (:func:`bench_quality`, Table 1's protocol: :func:`quality_table`) or long-running
  (:func:`bench_streams`), every stream through the product's ``run_online``;
- endless (``realm-lab quality --settings ccc``): a million samples of changing corruptions
  through ``RealmRuntime`` (:func:`bench_endless`);
- :class:`RunLog`: each finished run kept as a JSON line, so a stopped run resumes.

    >>> from realm_lab.bench import bench_quality, quality_table
"""

from ._continual import bench_streams, streams_fingerprint, streams_from_json, streams_to_json
from ._endless import ENDLESS_METHODS, Calibration, EndlessRow, bench_endless, calibrate
from ._endless_report import endless_to_json, format_endless, plot_endless
from ._examples import plot_examples
from ._fit_judge import DEFAULTS as FIT_DEFAULTS_ROW
from ._fit_judge import (
    RowResult,
    fitted_row,
    import_runs,
    row_result,
    table1_best,
    verdict,
    write_json,
)
from ._full_length import doc_tables, full_length_page, paper_rows, read_cells, readme_headline
from ._marked import marked, replace_block, write_block
from ._quality import METHODS as QUALITY_METHODS  # the quality table's rows, not RealmConfig's
from ._quality import (
    QualityRun,
    bench_quality,
    plot_quality,
    quality_table,
    runs_from_json,
    runs_to_json,
)
from ._runlog import RunLog
from ._stream_report import plot_streams, streams_tables
from ._stream_run import (
    DEFAULT_STREAM_METHODS,
    STREAM_METHODS,
    HeldOut,
    StreamRun,
    method_config,
    run_stream,
)

__all__ = [
    "DEFAULT_STREAM_METHODS",
    "ENDLESS_METHODS",
    "FIT_DEFAULTS_ROW",
    "QUALITY_METHODS",
    "STREAM_METHODS",
    "Calibration",
    "EndlessRow",
    "HeldOut",
    "QualityRun",
    "RowResult",
    "RunLog",
    "StreamRun",
    "bench_endless",
    "bench_quality",
    "bench_streams",
    "calibrate",
    "doc_tables",
    "endless_to_json",
    "fitted_row",
    "format_endless",
    "full_length_page",
    "import_runs",
    "marked",
    "method_config",
    "paper_rows",
    "plot_endless",
    "plot_examples",
    "plot_quality",
    "plot_streams",
    "quality_table",
    "read_cells",
    "readme_headline",
    "replace_block",
    "row_result",
    "run_stream",
    "runs_from_json",
    "runs_to_json",
    "streams_fingerprint",
    "streams_from_json",
    "streams_tables",
    "streams_to_json",
    "table1_best",
    "verdict",
    "write_block",
    "write_json",
]
