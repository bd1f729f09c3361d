"""``python -m realm_tools.workers.runtime_server``: RealmRuntime timed on request, over a pipe.

The other side of :class:`realm_tools.bench.ExternalRuntime`, in another interpreter (e.g.
``.venv-runtime``: the newest onnxruntime, no torch). It holds runtimes and times the samples
it is told to; the protocol is one JSON object a line each way, every request answered with
``{"ok": ...}`` or ``{"error": traceback}``. Its import chain holds no torch-using module.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime

from realm_runtime import RealmRuntime


class _Server:
    """The runtimes the bench opened, by key, and the samples they run on."""

    def __init__(self, xs: np.ndarray, threads: int) -> None:
        self.xs, self.threads = xs, threads
        self.runtimes: dict[str, RealmRuntime] = {}

    def handle(self, request: dict[str, Any]) -> Any:
        """The answer to one request (``op`` and its fields)."""
        op = request["op"]
        if op == "open":
            forced = request["overrides"]  # timed on the step graph, as the bench's own sides
            self.runtimes[request["key"]] = RealmRuntime(
                request["dir"],
                threads=self.threads,
                backend="onnx-steps" if forced else "onnx",
                schedule="train" if forced else None,
                overrides=forced,
            )
            return True
        if op == "run":
            rt = self.runtimes[request["key"]]
            fn = rt.predict if request["fn"] == "predict" else rt.adapt
            times = []
            for i in request["idx"]:
                start = time.perf_counter()
                fn(self.xs[i][None])
                times.append((time.perf_counter() - start) * 1e3)
            return times
        if op == "rate":
            state = self.runtimes[request["key"]].state
            return state.updates / max(state.samples, 1)
        if op == "close":
            del self.runtimes[request["key"]]
            return True
        if op == "about":
            return {
                "ort": onnxruntime.__version__,
                "python": sys.version.split()[0],
                "torch": "torch" in sys.modules,
            }
        raise ValueError(f"unknown request {op!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Answer requests from stdin until it closes; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.runtime_server")
    parser.add_argument("stream", help="a .npy file of samples, (N, C, H, W)")
    parser.add_argument("threads", type=int, help="ONNX Runtime intra-op threads")
    args = parser.parse_args(argv)
    server = _Server(np.load(args.stream), args.threads)
    for line in sys.stdin:
        try:
            reply = {"ok": server.handle(json.loads(line))}
        except Exception:  # any failure is the bench's to report, with its traceback
            reply = {"error": traceback.format_exc()}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
