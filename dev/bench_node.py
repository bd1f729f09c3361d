"""Per-sample latency of the Node.js edge app beside RealmRuntime, in one run.

Same artifacts, same stream folder (one ``.npy`` a sample, as ``make demo`` writes
``artifacts/digits_stream/``), same threads, both on the ``auto`` schedule; the two sides
take turns, one whole pass each per round, and the figure per side is the median over the
rounds of each pass's median per-sample time (after 5 warm-up samples). Usage, from the
repository root after ``make demo`` and ``make web-deps``::

    PYTHONPATH=runtime .venv/bin/python dev/bench_node.py artifacts/digits artifacts/digits_stream
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from realm_runtime import RealmRuntime

NODE_APP = Path(__file__).resolve().parents[1] / "examples" / "node"
WARMUP = 5


def _node_pass(artifacts: Path, stream: Path, threads: int, work: Path) -> float:
    state, log = work / "state.npz", work / "steps.jsonl"
    state.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    command = ["node", "edge-app.mjs", "--artifacts", str(artifacts), "--stream", str(stream)]
    command += ["--state", str(state), "--threads", str(threads), "--log", str(log), "--quiet"]
    subprocess.run(command, cwd=NODE_APP, check=True, capture_output=True)
    times = [json.loads(line)["ms"] for line in log.read_text().splitlines()]
    return float(np.median(times[WARMUP:]))


def _runtime_pass(artifacts: Path, samples: list[np.ndarray], threads: int) -> tuple[float, str]:
    rt = RealmRuntime(artifacts, threads=threads)
    times = []
    for x in samples:
        start = time.perf_counter()
        rt.adapt(x)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times[WARMUP:])), f"{rt.state.updates}/{rt.state.samples}"


def main() -> None:
    """Time both sides and print one line per round and the ratio of the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path)
    parser.add_argument("stream", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    artifacts, stream = args.artifacts.resolve(), args.stream.resolve()
    samples = [np.load(f)[None] for f in sorted(stream.glob("*.npy"))]
    node, runtime = [], []
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            node.append(_node_pass(artifacts, stream, args.threads, Path(work)))
            ms, updates = _runtime_pass(artifacts, samples, args.threads)
            runtime.append(ms)
            print(f"round {r}: Node {node[-1]:.3f} ms, RealmRuntime {ms:.3f} ms, updates {updates}")
    n, p = float(np.median(node)), float(np.median(runtime))
    print(f"median over rounds: Node {n:.3f} ms, RealmRuntime {p:.3f} ms per sample: {n / p:.2f}×")


if __name__ == "__main__":
    main()
