"""The ``realm-lab`` command: ``bench quality``, ``bench attack`` and ``train``.

Importing this package imports no torch: each command imports what it needs when it runs.
"""

from ._args import RUNS_HOME, runs_folder
from ._bench_quality import QUICK_EPOCHS, QUICK_LIMIT
from ._main import build_parser, main

__all__ = ["QUICK_EPOCHS", "QUICK_LIMIT", "RUNS_HOME", "build_parser", "main", "runs_folder"]
