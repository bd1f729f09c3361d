"""``python -m realm_tools.coverage._worker``: one model of ``realm coverage``, alone.

Prints the model's row (``CoverageRow.to_dict``) as one JSON line on stdout, and nothing else
there: whatever the export and ONNX Runtime print (Python or C++) goes to stderr. The parent,
``run_coverage``, kills the process at its timeout and reads a missing row as a crash. With
``--serve`` it is the zygote (:mod:`._zygote`) that forks such a process per model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ._measure import measure_model


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the model named in ``argv`` and print its row; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.coverage._worker")
    parser.add_argument("model", help="a timm architecture")
    parser.add_argument("--work-dir", required=True, help="an existing folder for the artifacts")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # File descriptor 1 is the row's alone: native code (ONNX Runtime, the ONNX exporter)
    # writes to the descriptor, past any sys.stdout redirect, so the descriptor moves.
    sys.stdout.flush()
    row_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    row = measure_model(
        args.model,
        args.work_dir,
        image_size=args.image_size,
        threads=args.threads,
        samples=args.samples,
        seed=args.seed,
    )
    sys.stdout.flush()
    row_out.write(json.dumps(row.to_dict()) + "\n")
    row_out.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:  # the zygote of run_coverage: imports once, forks a child
        from ._zygote import serve

        raise SystemExit(serve(main))
    raise SystemExit(main())
