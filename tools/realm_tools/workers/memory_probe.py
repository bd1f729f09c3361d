"""``python -m realm_tools.workers.memory_probe``: one process's peak memory in one role.

Roles: ``bare`` (numpy, onnxruntime and ``realm_runtime`` imported, nothing loaded),
``inference`` (a plain ``InferenceSession`` on ``inference_model.onnx``, ORT's defaults),
``skip`` (``RealmRuntime`` with every sample after the first refused by its decision) and
``update`` (every sample updating); and ``turns``, which times instead of measuring memory:
one runtime per session setting named in ``--variants``, skipping and updating, taking turns
on the stream in this one process, so their ratios hold on a busy machine. Torch is made
unimportable, as on a device. Prints
``{"peak_rss_mb", "median_ms", "updates", "onnxruntime", "torch"}`` (``turns``:
``{"turns": {mode: {variant: median ms}}, "torch"}``) as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from realm_runtime.measure import block_torch, peak_rss_mb

ROLES = ("bare", "inference", "skip", "update", "turns")
# Decision settings that refuse every sample after the first (S_div has no EMA before it).
_REFUSE = {"diversity_margin": 1e-9, "entropy_margin": 1e-9}
WARMUP = 2  # untimed samples of every side in turns (the first runs allocate and plan)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the role named in ``argv`` and print its figures; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.memory_probe")
    parser.add_argument("artifacts", help="an artifact directory")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("stream", help="a .npy file of samples, (N, C, H, W)")
    parser.add_argument("threads", type=int, help="ONNX Runtime intra-op threads")
    parser.add_argument("--session-config", default="{}", help="RealmRuntime's, as JSON")
    parser.add_argument("--variants", default="{}", help="turns: name → session_config, JSON")
    args = parser.parse_args(argv)
    block_torch()  # before numpy and the runtime are imported
    import numpy as np
    import onnxruntime as ort

    from realm_runtime import RealmRuntime
    from realm_runtime.contract import INFERENCE_MODEL

    from .._timing import take_turns

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
    elif args.role == "turns":
        variants = json.loads(args.variants)
        result: dict[str, dict[str, float]] = {}
        for mode in ("skip", "update"):
            sides = {}
            decide = _decision(args.artifacts, mode)
            for name, entries in variants.items():
                runtime = RealmRuntime(
                    args.artifacts, threads=args.threads, overrides=decide, session_config=entries
                )
                sides[name] = _timed(runtime, stream)
            ms = take_turns(sides, len(stream), WARMUP)
            result[mode] = {name: float(np.median(v)) for name, v in ms.items()}
            del sides
        print(json.dumps({"turns": result, "torch": "torch" in sys.modules}))
        return 0
    elif args.role in ("skip", "update"):
        runtime = RealmRuntime(
            args.artifacts,
            threads=args.threads,
            overrides=_decision(args.artifacts, args.role),
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
                "onnxruntime": ort.__version__,
                "torch": "torch" in sys.modules,
            }
        )
    )
    return 0


def _decision(artifacts: str, mode: str) -> dict[str, float]:
    """Overrides under which the runtime skips every sample after the first, or updates all."""
    if mode == "skip":
        return _REFUSE
    from realm_runtime import RealmConfig, load_manifest
    from realm_runtime.measure import updating_overrides

    return updating_overrides(RealmConfig.from_dict(load_manifest(Path(artifacts)).config))


def _timed(runtime: Any, stream: Any) -> Callable[[Any], Any]:
    """A side of ``take_turns``: ``runtime`` adapting on the samples of the given indices."""
    import numpy as np

    def run(indices: Any) -> Any:
        ms = np.empty(len(indices))
        for k, i in enumerate(indices):
            start = time.perf_counter()
            runtime.adapt(stream[i][None])
            ms[k] = (time.perf_counter() - start) * 1000
        return ms

    return run


if __name__ == "__main__":
    raise SystemExit(main())
