"""``python -m realm_lab.workers.endless``: one method through the endless stream, torch-free.

Builds the CCC-style stream (``realm_lab.data.build_ccc_stream``) from the arguments,
runs it through ``RealmRuntime`` sample by sample (:data:`PREDICT`: predictions only, in
chunks; :data:`RESET`: a reset to the source every ``--reset-every`` samples) with torch made
unimportable, as on a device, and writes the accuracy of every window and the counters as
JSON. Every sample's prediction is compared with its label; nothing is subsampled.

With ``--checkpoint DIR`` the run can stop and go on: DIR keeps a copy of the artifacts,
and at every window the runtime's whole state and the outcomes so far; a later run with the
same DIR resumes from the last window and ends with the same figures, sample for sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from realm_runtime.measure import block_torch

from ..rows import NO_ADAPT, RDUMB

STOPPED = 3  # exit code of a run stopped by --stop-after, its checkpoint written
# Predict only; adapt every sample; adapt and reset periodically (named as the rows that do).
PREDICT, ADAPT, RESET = NO_ADAPT.key, "adapt", RDUMB.key
MODES = (PREDICT, ADAPT, RESET)
CHUNK = 256  # samples per prediction call of the no-adapt row
# Arguments that say where, not what: a checkpoint resumes whatever they are.
SITE = ("artifacts", "out", "progress", "checkpoint", "stop_after")
LATEST = "latest.json"  # a checkpoint's mark: the samples done and the sums so far


def checkpoint_done(folder: Path) -> int:
    """Samples done at a checkpoint folder's last mark (0: none yet, or unreadable)."""
    try:
        return int(json.loads((folder / LATEST).read_text())["done"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stream the arguments describe; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_lab.workers.endless")
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
    parser.add_argument("--checkpoint", default=None, help="a folder to resume from and keep in")
    parser.add_argument(
        "--stop-after", type=int, default=None, help="samples, then stop as if interrupted"
    )
    args = parser.parse_args(argv)
    block_torch()  # before numpy and the runtime are imported
    import numpy as np

    from realm_lab.data import CCCSettings, build_ccc_stream
    from realm_runtime import RealmRuntime
    from realm_tools.data import DigitsShift, load_digits, load_fmnistc

    dataset = (
        DigitsShift(load_digits())
        if args.dataset == "digits"
        else load_fmnistc(args.data_dir, split=args.split)
    )
    settings = CCCSettings(args.length, args.transition, args.pool_seeds, args.limit)
    stream = build_ccc_stream(
        dataset, json.loads(args.severities), seed=args.seed, settings=settings
    )
    run = {k: v for k, v in vars(args).items() if k not in SITE}
    keep = Checkpoint(Path(args.checkpoint), run) if args.checkpoint else None
    artifacts = keep.artifacts(Path(args.artifacts)) if keep else Path(args.artifacts)
    rt = RealmRuntime(artifacts, threads=args.threads)
    n = len(stream)
    correct = np.zeros(n, dtype=bool)
    # A reset zeroes the runtime's counters: summed here.
    done, sums = 0, {"resets": 0, "updates": 0, "clips": 0, "seconds": 0.0}
    if keep is not None and keep.saved():
        done, sums = keep.load(rt, correct)
    started = time.perf_counter()

    def mark(end: int) -> bool:
        """After ``end`` samples: progress and checkpoint; True where the run should stop."""
        if args.progress:
            Path(args.progress).write_text(str(end))
        if keep is not None:
            seconds = sums["seconds"] + time.perf_counter() - started
            keep.save(rt, correct[:end], {**sums, "seconds": seconds})
        return args.stop_after is not None and end >= args.stop_after and end < n

    if args.mode == PREDICT:
        start = done
        while start < n:  # chunks end at each window's end, where the marks are
            end = min(n, start + CHUNK, (start // args.window + 1) * args.window)
            x = np.concatenate([stream.sample(i) for i in range(start, end)])
            correct[start:end] = rt.predict(x).argmax(1) == stream.labels[start:end]
            if end % args.window == 0 and mark(end):
                return STOPPED
            start = end
    else:
        for i in range(done, n):
            if args.mode == RESET and i > 0 and i % args.reset_every == 0:
                sums["updates"] += rt.state.updates
                sums["clips"] += rt.state.drift_clips
                rt.reset()
                sums["resets"] += 1
            correct[i] = rt.adapt(stream.sample(i)).top1[0] == stream.labels[i]
            if (i + 1) % args.window == 0 and mark(i + 1):
                return STOPPED
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
                "updates": int(sums["updates"]) + state.updates,
                "resets": int(sums["resets"]),
                "drift_clips": int(sums["clips"]) + state.drift_clips,
                "drift": state.drift,
                "seconds": sums["seconds"] + time.perf_counter() - started,
                "torch": "torch" in sys.modules,
            }
        )
    )
    return 0


class Checkpoint:
    """A run's folder to go on from: its artifacts, state and outcomes at the last mark.

    Each mark writes a new state and outcome file, then names them in :data:`LATEST` by
    an atomic rename, then removes the older ones: a run killed at any moment leaves a
    matching pair to resume from.
    """

    def __init__(self, folder: Path, run: dict[str, Any]) -> None:
        self.folder = folder
        self.run = run  # the arguments of the run the folder is for

    def artifacts(self, fresh: Path) -> Path:
        """The artifacts the run uses: the folder's copy, made from ``fresh`` the first time.

        An export is not byte-for-byte repeatable and a saved state names its artifacts,
        so a resumed run needs the very files it started with.
        """
        mine, run = self.folder / "artifacts", self.folder / "run.json"
        if run.is_file() and json.loads(run.read_text()) != self.run:
            raise SystemExit(
                f"{self.folder} holds the checkpoint of another run ({run.read_text()}): "
                "pass an empty folder, or that run's arguments"
            )
        if not mine.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
            run.write_text(json.dumps(self.run))
            tmp = self.folder / ".artifacts.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(fresh, tmp)
            os.replace(tmp, mine)
        return mine

    def saved(self) -> bool:
        """Whether a mark has been written."""
        return checkpoint_done(self.folder) > 0

    def save(self, rt: Any, correct: Any, sums: dict[str, float]) -> None:
        """Write the state after ``len(correct)`` samples and point :data:`LATEST` at it."""
        import numpy as np

        done = len(correct)
        rt.save(self.folder / f"state-{done}.npz")
        outcome = self.folder / f"correct-{done}.npy"
        with open(outcome.with_suffix(".tmp"), "wb") as f:
            np.save(f, np.packbits(correct))
        os.replace(outcome.with_suffix(".tmp"), outcome)
        latest = self.folder / LATEST
        latest.with_suffix(".tmp").write_text(json.dumps({"done": done, **sums}))
        os.replace(latest.with_suffix(".tmp"), latest)
        for old in [*self.folder.glob("state-*.npz"), *self.folder.glob("correct-*.npy")]:
            if old.stem.split("-")[1] != str(done):
                old.unlink()

    def load(self, rt: Any, correct: Any) -> tuple[int, dict[str, float]]:
        """Restore the runtime and the outcomes; the samples done and the sums so far."""
        import numpy as np

        mark = json.loads((self.folder / LATEST).read_text())
        done = int(mark.pop("done"))
        rt.restore(self.folder / f"state-{done}.npz")
        bits = np.load(self.folder / f"correct-{done}.npy", allow_pickle=False)
        correct[:done] = np.unpackbits(bits, count=done).astype(bool)
        return done, mark


if __name__ == "__main__":
    raise SystemExit(main())
