"""The updating peak of an artifact directory: a fresh process, every sample updating.

What an app developer plans with: the peak resident memory of a process that loads the
artifacts with :class:`RealmRuntime`'s defaults and adapts on every sample (the decision
opened, so each call runs the backward), measured in a fresh interpreter
(:func:`main`) so nothing of the caller's (torch, an exporter's
buffers) is counted. Torch-free, like the rest of the package.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import math
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._config import RealmConfig
from ._untrusted import ArtifactError

MB = 1 << 20


@dataclass(frozen=True)
class MemoryFigure:
    """One measured updating peak, and what it was measured with."""

    peak_mb: float  # peak resident set of the whole process, MB (2**20 bytes)
    samples: int  # samples the process adapted on, every one updating
    updates: int  # how many of them did update (all, unless a guardrail refused one)
    threads: int | None  # ONNX Runtime intra-op threads (None: its default, all cores)
    onnxruntime: str  # the version that ran
    cpu: str  # the CPU's name (the kernels, and so the buffers, follow its vector unit)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``memory`` section (without the budget, which the exporter adds)."""
        return asdict(self)


class _NoTorch(importlib.abc.MetaPathFinder):
    """As on a device without torch: onnxruntime's import-time probes then skip it."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None


def block_torch() -> None:
    """Make torch unimportable in this process, as on a device (call it before onnxruntime).

    onnxruntime-training's package imports torch where it finds it (hundreds of MB); an app
    on a device has none, so a memory figure must not count it.
    """
    sys.meta_path.insert(0, _NoTorch())


def updating_overrides(config: RealmConfig) -> dict[str, float]:
    """Overrides under which every sample updates: the cost of a step, not of a skip.

    d = 1 lets every sample through S_div (|cos| < 1 unless a prediction equals the EMA);
    an entropy ≤ ln C always passes EATA's and SAR's cut at e0 = ln C + 0.1 (EATA's weights
    exp(e0 − H) stay ≤ 1.11·C). Both are fields the runtime overrides without re-export.
    """
    out = {"diversity_margin": 1.0}
    if config.rules.entropy_cut:
        out["entropy_margin"] = math.log(config.num_classes) + 0.1
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set, MB: VmHWM on Linux, ``ru_maxrss`` elsewhere.

    VmHWM belongs to this process's memory map; ``ru_maxrss`` would survive fork + exec from
    a larger parent on Linux.
    """
    try:
        with open("/proc/self/status", encoding="utf-8") as status:
            hwm = next(line for line in status if line.startswith("VmHWM:"))
        return int(hwm.split()[1]) / 1024
    except (OSError, StopIteration):
        import resource  # Unix only: imported here, so the package still imports on Windows

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / MB if sys.platform == "darwin" else peak / 1024  # bytes on macOS


def cpu_name() -> str:
    """The CPU's model name, family/model and widest vector unit (Linux), else Python's name.

    A vendor's model name can cover several generations, and float sums (so trained weights
    and every figure after them) follow the vector unit: the name says which one ran.
    """
    try:
        info: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model", "flags") and key not in info:
                info[key] = value.strip()
            if len(info) == 4:
                break
    except OSError:
        info = {}
    if "model name" not in info:
        return platform.processor() or platform.machine()
    name = info["model name"]
    flags = set(info.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    details = []
    if "cpu family" in info and "model" in info:
        details.append(f"family {info['cpu family']} model {info['model']}")
    if vector:
        details.append(vector)
    return f"{name} ({', '.join(details)})" if details else name


def measure_update_peak(
    directory: str | Path,
    *,
    python: str | None = None,
    threads: int | None = None,
    samples: int = 8,
    session_config: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> MemoryFigure:
    """The peak memory of a fresh process adapting on every sample with these artifacts.

    Args:
        directory: an artifact directory with the adapt graph.
        python: the interpreter whose onnxruntime measures (the app's, e.g. a venv's
            ``bin/python``); None: this one. It must import ``realm_runtime``.
        threads: ONNX Runtime intra-op threads, as the app sets them (None: ORT's default).
        samples: random samples of the manifest's input shape, every one updating.
        session_config: ``RealmRuntime``'s ``session_config``, as the app passes it.
        timeout: seconds before the process is stopped.

    Raises:
        ArtifactError: the process failed (its last error line is given), or ran past
            ``timeout``.
    """
    # This package's copy runs where the interpreter has none of its own (an app's venv with
    # only onnxruntime and numpy); one installed there comes first on its path.
    here = str(Path(__file__).resolve().parents[1])
    code = (
        f"import sys; sys.path.append({here!r}); from {__name__} import main; "
        "raise SystemExit(main(sys.argv[1:]))"
    )
    command = [python or sys.executable, "-c", code, str(directory), str(samples)]
    if threads is not None:
        command += ["--threads", str(threads)]
    command += ["--session-config", json.dumps(dict(session_config or {}))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ArtifactError(
            f"measuring the updating peak of {directory} ran past {timeout:.0f} s"
        ) from exc
    except OSError as exc:
        raise ArtifactError(
            f"cannot run {command[0]} to measure the updating peak: {exc.strerror}; pass the "
            "path of a Python interpreter that has onnxruntime and numpy installed"
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ArtifactError(f"measuring the updating peak of {directory} failed: {last}")
    return MemoryFigure(**json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> int:
    """The measuring process: adapt on every sample, print a :class:`MemoryFigure` as JSON."""
    parser = argparse.ArgumentParser(prog="python -m realm_runtime._memory")
    parser.add_argument("artifacts", help="an artifact directory")
    parser.add_argument("samples", type=int, help="random samples, every one updating")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    parser.add_argument("--session-config", default="{}", help="RealmRuntime's, as JSON")
    args = parser.parse_args(argv)
    block_torch()  # before onnxruntime is imported
    import numpy as np

    from ._manifest import load_manifest
    from ._ort import onnxruntime_module
    from ._runtime import RealmRuntime

    manifest = load_manifest(Path(args.artifacts))
    config = RealmConfig.from_dict(manifest.config)
    runtime = RealmRuntime(
        args.artifacts,
        threads=args.threads,
        overrides=updating_overrides(config),
        session_config=json.loads(args.session_config),
    )
    shape = (1, *manifest.input.shape[1:])
    rng = np.random.default_rng(0)
    updates = 0
    for _ in range(args.samples):
        updates += bool(runtime.adapt(rng.standard_normal(shape).astype(np.float32)).updated)
    figure = MemoryFigure(
        peak_mb=round(peak_rss_mb(), 1),
        samples=args.samples,
        updates=updates,
        threads=args.threads,
        onnxruntime=onnxruntime_module().__version__,
        cpu=cpu_name(),
    )
    print(json.dumps(figure.to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
