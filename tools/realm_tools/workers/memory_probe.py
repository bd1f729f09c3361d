"""``python -m realm_tools.workers.memory_probe``: one process's peak memory in one role.

Roles: ``bare`` (numpy, onnxruntime and ``realm_runtime`` imported, nothing loaded),
``inference`` (a plain ``InferenceSession`` on ``inference_model.onnx``, ORT's defaults),
``skip`` (``RealmRuntime`` with every sample after the first refused by its decision) and
``update`` (every sample updating). Torch is made unimportable, as on a device. Prints
``{"peak_rss_mb", "median_ms", "updates", "torch"}`` as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from ._memory import peak_rss_mb
from .runtime_rss import block_torch

ROLES = ("bare", "inference", "skip", "update")
# Decision settings that refuse every sample after the first, or keep every one.
_REFUSE = {"diversity_margin": 1e-9, "entropy_margin": 1e-9}
_KEEP = {"diversity_margin": 1.0, "entropy_margin": 1e9}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the role named in ``argv`` and print its figures; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.memory_probe")
    parser.add_argument("artifacts", help="an artifact directory")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("stream", help="a .npy file of samples, (N, C, H, W)")
    parser.add_argument("threads", type=int, help="ONNX Runtime intra-op threads")
    parser.add_argument("--session-config", default="{}", help="RealmRuntime's, as JSON")
    args = parser.parse_args(argv)
    block_torch()  # before numpy and the runtime are imported
    import numpy as np
    import onnxruntime as ort

    from realm_runtime import RealmRuntime
    from realm_runtime.contract import INFERENCE_MODEL

    stream = np.load(args.stream)
    times: list[float] = []
    updates = 0
    if args.role == "inference":
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        path = f"{args.artifacts}/{INFERENCE_MODEL}"
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for x in stream:
            start = time.perf_counter()
            session.run(None, {name: x[None]})
            times.append(time.perf_counter() - start)
    elif args.role in ("skip", "update"):
        decide = _REFUSE if args.role == "skip" else _KEEP
        runtime = RealmRuntime(
            args.artifacts,
            threads=args.threads,
            overrides=decide,
            session_config=json.loads(args.session_config),
        )
        for x in stream:
            start = time.perf_counter()
            updates += bool(runtime.adapt(x[None]).updated)
            times.append(time.perf_counter() - start)
    median = float(np.median(times[1:])) * 1000 if len(times) > 1 else None
    print(
        json.dumps(
            {
                "peak_rss_mb": peak_rss_mb(),
                "median_ms": median,
                "updates": updates,
                "torch": "torch" in sys.modules,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
