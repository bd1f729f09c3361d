"""Per-sample latency of the JavaScript clients beside RealmRuntime, in one run.

Sides: ``runtime`` (RealmRuntime, Python), ``node`` (the Node.js edge app, onnxruntime-node),
and the browser page in headless Chromium on onnxruntime-web: ``wasm-1`` (one WASM thread),
``wasm-mt`` (WASM with ``--browser-threads`` threads; the page is cross-origin isolated) and
``webgpu`` (WebGPU; without a GPU, Chromium's SwiftShader adapter runs it on the CPU). All
on the same artifacts and stream folder (one ``.npy`` a sample, as ``make demo`` writes
``artifacts/digits_stream/``), all on the ``auto`` schedule. The sides take turns, one whole
pass each per round; a pass's figure is its median per-sample time after 5 warm-up samples
(the first calls compile and allocate), and a side's figure is the median over the rounds.
The browser's figure is the page's own ``performance.now()`` around ``adapt``, as the page
shows it. Usage, from the repository root after ``make demo`` and ``make web-deps``::

    PYTHONPATH=runtime .venv/bin/python dev/bench_clients.py \
        artifacts/digits artifacts/digits_stream
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from realm_runtime import RealmRuntime

ROOT = Path(__file__).resolve().parents[1]
NODE_APP = ROOT / "examples" / "node"
WEB = ROOT / "examples" / "web"
WARMUP = 5
SIDES = ("runtime", "node", "wasm-1", "wasm-mt", "webgpu")

sys.path.insert(0, str(WEB))
import build_site  # noqa: E402  (the example's own module, not a package)


def _node_pass(artifacts: Path, stream: Path, threads: int, work: Path, limit: int) -> float:
    state, log = work / "state.npz", work / "steps.jsonl"
    state.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    command = ["node", "edge-app.mjs", "--artifacts", str(artifacts), "--stream", str(stream)]
    command += ["--state", str(state), "--threads", str(threads), "--log", str(log), "--quiet"]
    command += ["--limit", str(limit)]
    subprocess.run(command, cwd=NODE_APP, check=True, capture_output=True)
    times = [json.loads(line)["ms"] for line in log.read_text().splitlines()]
    return float(np.median(times[WARMUP:]))


def _runtime_pass(artifacts: Path, samples: list[np.ndarray], threads: int) -> float:
    rt = RealmRuntime(artifacts, threads=threads)
    times = []
    for x in samples:
        start = time.perf_counter()
        rt.adapt(x)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times[WARMUP:]))


def _browser_pass(url: str, work: Path, *, webgpu: bool, timeout: int) -> tuple[float, dict]:
    out = work / "page.json"
    command = ["node", str(WEB / "drive.mjs"), "--url", url, "--out", str(out)]
    command += ["--timeout", str(timeout), *(["--webgpu"] if webgpu else [])]
    subprocess.run(command, check=True, capture_output=True, timeout=timeout + 60)
    run = json.loads(out.read_text())["runs"][0]
    if run["error"]:
        raise RuntimeError(f"{url}: {run['error']}")
    return float(np.median([s["ms"] for s in run["log"]][WARMUP:])), run["backend"]


def _cpu() -> str:
    """The CPU's model name (figures are only comparable within one run on one CPU)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    """Time every side, print one line per round, the medians and the ratios to RealmRuntime."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path)
    parser.add_argument("stream", type=Path, help="a folder of .npy samples (the Node app's)")
    parser.add_argument("--threads", type=int, default=1, help="RealmRuntime's and Node's")
    parser.add_argument("--browser-threads", type=int, default=2, help="WASM threads (wasm-mt)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=60, help="samples per pass")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per browser pass")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    artifacts, stream = args.artifacts.resolve(), args.stream.resolve()
    files = sorted(stream.glob("*.npy"))[: args.limit]
    samples = [np.load(f)[None] for f in files]
    results: dict[str, list[float]] = {side: [] for side in args.sides}
    backends: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        site = build_site.build(work / "site", artifacts=artifacts, stream=stream, limit=len(files))
        httpd = build_site.server(site)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        page = f"http://127.0.0.1:{httpd.server_address[1]}/?auto=1&persist=0"
        passes: dict[str, Callable[[], float]] = {
            "runtime": lambda: _runtime_pass(artifacts, samples, args.threads),
            "node": lambda: _node_pass(artifacts, stream, args.threads, work, len(files)),
        }
        browser = {
            "wasm-1": (f"{page}&ep=wasm&threads=1", False),
            "wasm-mt": (f"{page}&ep=wasm&threads={args.browser_threads}", False),
            "webgpu": (f"{page}&ep=webgpu", True),
        }

        def run_browser(side: str) -> float:
            url, webgpu = browser[side]
            ms, backends[side] = _browser_pass(url, work, webgpu=webgpu, timeout=args.timeout)
            return ms

        for r in range(args.rounds):
            line = []
            for side in args.sides:
                ms = passes[side]() if side in passes else run_browser(side)
                results[side].append(ms)
                line.append(f"{side} {ms:.2f}")
            print(f"round {r}: " + ", ".join(line) + " ms/sample", flush=True)
        httpd.shutdown()
    medians = {side: float(np.median(v)) for side, v in results.items()}
    base = medians.get("runtime")
    print(f"\n{len(files)} samples a pass, {WARMUP} warm-up, {args.rounds} rounds; {_cpu()}")
    for side, ms in medians.items():
        ratio = f"  {ms / base:.2f}× RealmRuntime" if base else ""
        extra = (
            f"  [{backends[side]['adapter'] or 'wasm'}, {backends[side]['threads']} threads]"
            if side in backends
            else ""
        )
        print(f"{side:8s} {ms:9.2f} ms/sample{ratio}{extra}")
    if args.json:
        args.json.write_text(
            json.dumps({"medians": medians, "rounds": results, "backends": backends}, indent=1)
        )


if __name__ == "__main__":
    main()
