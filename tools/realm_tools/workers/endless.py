"""``python -m realm_tools.workers.endless``: one method through the endless stream, torch-free.

Builds the CCC-style stream (``realm_tools.data.build_ccc_stream``) from the arguments,
runs it through ``RealmRuntime`` sample by sample (``none``: predictions only, in chunks;
``rdumb``: a reset to the source every ``--reset-every`` samples) with torch made
unimportable, as on a device, and writes the accuracy of every window and the counters as
JSON. Every sample's prediction is compared with its label; nothing is subsampled.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from realm_runtime import block_torch

MODES = ("none", "adapt", "rdumb")  # predict only; adapt every sample; adapt, reset periodically
CHUNK = 256  # samples per prediction call of the no-adapt row


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stream the arguments describe; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.endless")
    parser.add_argument("artifacts", help="an artifact directory")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--dataset", choices=("digits", "fmnist-c"), default="digits")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument("--severities", required=True, help="JSON: corruption → severity")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--length", type=int, default=1_000_000)
    parser.add_argument("--transition", type=int, default=5000)
    parser.add_argument("--pool-seeds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--window", type=int, default=10_000)
    parser.add_argument("--reset-every", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--progress", default=None, help="a file to keep the samples done in")
    args = parser.parse_args(argv)
    block_torch()  # before numpy and the runtime are imported
    import numpy as np

    from realm_runtime import RealmRuntime

    from ..data import CCCSettings, DigitsShift, build_ccc_stream, load_digits, load_fmnistc

    dataset = (
        DigitsShift(load_digits())
        if args.dataset == "digits"
        else load_fmnistc(args.data_dir, split=args.split)
    )
    settings = CCCSettings(args.length, args.transition, args.pool_seeds, args.limit)
    stream = build_ccc_stream(
        dataset, json.loads(args.severities), seed=args.seed, settings=settings
    )
    rt = RealmRuntime(args.artifacts, threads=args.threads)
    started = time.perf_counter()
    n = len(stream)
    correct = np.zeros(n, dtype=bool)
    resets = updates = clips = 0  # a reset zeroes the runtime's counters: summed here
    if args.mode == "none":
        for start in range(0, n, CHUNK):
            rows = range(start, min(n, start + CHUNK))
            x = np.concatenate([stream.sample(i) for i in rows])
            correct[start : start + len(rows)] = rt.predict(x).argmax(1) == stream.labels[rows]
            if args.progress and (start // CHUNK) % 40 == 39:
                Path(args.progress).write_text(str(start + len(rows)))
    else:
        for i in range(n):
            if args.mode == "rdumb" and i > 0 and i % args.reset_every == 0:
                updates, clips = updates + rt.state.updates, clips + rt.state.drift_clips
                rt.reset()
                resets += 1
            correct[i] = rt.adapt(stream.sample(i)).top1[0] == stream.labels[i]
            if args.progress and (i + 1) % args.window == 0:
                Path(args.progress).write_text(str(i + 1))
    windows = [float(correct[k : k + args.window].mean() * 100) for k in range(0, n, args.window)]
    state = rt.state
    Path(args.out).write_text(
        json.dumps(
            {
                "mode": args.mode,
                "samples": n,
                "accuracy": float(correct.mean() * 100),
                "windows": windows,
                "window": args.window,
                "updates": updates + state.updates,
                "resets": resets,
                "drift_clips": clips + state.drift_clips,
                "drift": state.drift,
                "seconds": time.perf_counter() - started,
                "torch": "torch" in sys.modules,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
