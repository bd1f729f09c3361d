"""``python -m realm_tools.workers.runtime_rss``: the runtime's peak memory, torch out of reach.

Runs a stream through ``RealmRuntime`` in a process that imports ``realm_runtime`` only, with
torch made unimportable as on a device, and prints ``{"peak_rss_mb", "torch"}`` as one JSON
line (``realm bench speed``'s runtime-only RSS). Its import chain holds no torch-using
module: it also runs in interpreters without torch (``.venv-runtime``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from realm_runtime.measure import block_torch, peak_rss_mb


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stream named in ``argv`` and print the peak RSS; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.runtime_rss")
    parser.add_argument("artifacts", help="an artifact directory")
    parser.add_argument("backend", help="the RealmRuntime backend (auto, onnx, ...)")
    parser.add_argument("stream", help="a .npy file of samples, (N, C, H, W)")
    parser.add_argument("threads", type=int, help="ONNX Runtime intra-op threads")
    args = parser.parse_args(argv)
    block_torch()  # before numpy and the runtime are imported
    import numpy as np

    from realm_runtime import RealmRuntime

    rt = RealmRuntime(args.artifacts, threads=args.threads, backend=args.backend)
    for x in np.load(args.stream):
        rt.adapt(x[None])
    print(json.dumps({"peak_rss_mb": peak_rss_mb(), "torch": "torch" in sys.modules}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
