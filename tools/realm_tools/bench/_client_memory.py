"""The JavaScript clients' peak memory: the Node edge app and the browser page, updating.

Both run the same artifacts and stream as the Python probes, with the settings opened as
:func:`realm_runtime.measure.updating_overrides` opens the Python runtime's (S_div's d = 1, EATA's
e0 = ln C + 0.1), so that every sample updates. Each figure is a process's own peak RSS
(VmHWM), read on Linux: the node process's, and the page's renderer process's (where
onnxruntime-web's WebAssembly memory and compiled code and the client live; the browser's
main and GPU processes are the browser's own cost, whatever the page does). Beside the
renderer's peak, the size of onnxruntime-web's WebAssembly memory, which holds the graphs'
weights and tensors.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from realm_runtime.contract import DIVERSITY_MARGIN_NAME, ENTROPY_MARGIN_NAME

from ..data import write_stream_folder

_EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NODE_APP = _EXAMPLES / "node" / "edge-app.mjs"
WEB = _EXAMPLES / "web"
MB_PER_KIB = 1 / 1024

# Preloaded into the node process: its own peak (VmHWM, KiB) written as it exits.
_NODE_HWM = """
import { readFileSync, writeFileSync } from "node:fs";
process.on("exit", () => {
  const status = readFileSync("/proc/self/status", "utf8");
  const line = status.split("\\n").find((l) => l.startsWith("VmHWM:"));
  writeFileSync(HWM_FILE, line.split(/\\s+/)[1]);
});
"""


def _updating(classes: int) -> list[str]:
    """The settings, NAME=VALUE, under which every sample updates."""
    return [f"{DIVERSITY_MARGIN_NAME}=1", f"{ENTROPY_MARGIN_NAME}={math.log(classes) + 0.1}"]


def node_missing() -> str | None:
    """Why the Node edge app cannot be measured here, or None where it can."""
    if shutil.which("node") is None:
        return "Node.js not found"
    if not (NODE_APP.parent / "node_modules" / "onnxruntime-node").is_dir():
        return "examples/node/node_modules lacks onnxruntime-node: run `make web-deps`"
    return None


def node_peak(artifacts: Path, stream: np.ndarray, threads: int, classes: int) -> float:
    """The peak RSS (MB) of the Node edge app adapting on ``stream``, every sample updating.

    The node process reports its own VmHWM as it exits (a preloaded module): the OS's
    ``ru_maxrss`` of a child keeps the parent's peak across fork and exec, and this parent
    holds torch.

    Raises:
        RuntimeError: the app failed, with its last error line.
    """
    with tempfile.TemporaryDirectory() as tmp:
        folder, hwm, errors = Path(tmp) / "stream", Path(tmp) / "hwm.txt", Path(tmp) / "err.txt"
        write_stream_folder(folder, stream)
        preload = Path(tmp) / "hwm.mjs"
        preload.write_text(_NODE_HWM.replace("HWM_FILE", json.dumps(str(hwm))))
        command = ["node", "--import", preload.as_uri(), str(NODE_APP)]
        command += ["--artifacts", str(artifacts), "--stream", str(folder)]
        command += ["--threads", str(threads), "--quiet", "--checkpoint-every", "100000"]
        for item in _updating(classes):
            command += ["--set", item]
        with errors.open("w") as sink:  # a file, not a pipe: nothing blocks while it runs
            code = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=sink).returncode
        err = errors.read_text(errors="replace")
        kib = hwm.read_text().strip() if hwm.exists() else ""
    if code != 0 or not kib:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the Node edge app failed on {artifacts}: {last}")
    return int(kib) * MB_PER_KIB


def _chromium() -> str:
    return os.environ.get("CHROMIUM", "/usr/bin/chromium")


def browser_missing() -> str | None:
    """Why the browser page cannot be measured here, or None where it can."""
    if shutil.which("node") is None:
        return "Node.js not found"
    if not Path("/proc/self/status").is_file():
        return "the browser's peak is read from /proc (Linux only)"
    if not Path(_chromium()).is_file():
        return f"no Chromium at {_chromium()} (set CHROMIUM, or install Debian's chromium)"
    for package in ("onnxruntime-web", "playwright-core"):
        if not (WEB / "node_modules" / package).is_dir():
            return f"examples/web/node_modules lacks {package}: run `make web-deps`"
    return None


def _build_site() -> ModuleType:
    """The web example's own site builder (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("realm_web_build_site", WEB / "build_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class BrowserPeak:
    """The browser page's memory, MB, after a stream of updating samples."""

    renderer: float  # the page's renderer process's peak RSS (VmHWM)
    wasm: float  # onnxruntime-web's WebAssembly memory: its tensors and weights (only grows)
    js_heap: float | None  # the page's JavaScript heap in use (Chromium's performance.memory)


def browser_peak(
    artifacts: Path, stream: np.ndarray, threads: int, classes: int, timeout: int = 600
) -> BrowserPeak:
    """The memory of the web example's page in headless Chromium, every sample updating.

    The web example's page runs the stream on onnxruntime-web's WASM provider with
    ``threads`` threads (the page is served cross-origin isolated, as ``build_site.py
    --serve`` serves it), driven by ``examples/web/drive.mjs --memory``.

    Raises:
        RuntimeError: the page or the browser failed, with its error.
    """
    site = _build_site()
    with tempfile.TemporaryDirectory() as tmp:
        folder, out = Path(tmp) / "stream", Path(tmp) / "page.json"
        write_stream_folder(folder, stream)
        root = site.build(Path(tmp) / "site", artifacts=artifacts, stream=folder)
        httpd = site.server(root)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        query = "&".join(f"set={item}" for item in _updating(classes))
        url = (
            f"http://127.0.0.1:{httpd.server_address[1]}/?auto=1&persist=0&ep=wasm"
            f"&threads={threads}&{query}"
        )
        command = ["node", str(WEB / "drive.mjs"), "--url", url, "--out", str(out), "--memory"]
        command += ["--timeout", str(timeout), "--browser", _chromium()]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 60)
        finally:
            httpd.shutdown()
            httpd.server_close()
        result = json.loads(out.read_text()) if out.is_file() else {}
    runs, memory = result.get("runs") or [{}], result.get("memory")
    error = runs[0].get("error") or (done.stderr.strip().splitlines() or [None])[-1]
    if done.returncode != 0 or memory is None or runs[0].get("error"):
        raise RuntimeError(f"the browser page failed on {artifacts}: {error or 'no output'}")
    renderers = [p["hwmKiB"] for p in memory["processes"] if p["type"] == "renderer"]
    if not renderers:
        raise RuntimeError("the browser page ran, but no Chromium renderer process was found")
    if not any(step.get("updated") for step in runs[0].get("log", [])):
        raise RuntimeError("the browser page ran, but no sample updated")
    heap = memory.get("jsHeap")
    return BrowserPeak(
        renderer=max(renderers) * MB_PER_KIB,
        wasm=sum(memory.get("wasmBytes", [])) / (1 << 20),
        js_heap=None if heap is None else heap["usedJSHeapSize"] / (1 << 20),
    )
