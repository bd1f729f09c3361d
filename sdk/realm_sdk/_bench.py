"""Speed and memory: per-sample predict/adapt latency, torch reference vs. RealmRuntime.

Both sides run in one process, on the same machine, with the same thread count and the same
input stream: torch first, then ONNX Runtime (whose idle worker threads spin for a while and
would otherwise slow torch down). The runtime's peak memory is measured in a separate process
that imports only ``realm_runtime``, with torch made unimportable, as on a device.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from realm_runtime._config import RealmConfig

from ._adapter import RealmAdapter
from ._digits import DigitsGNNet

# name -> (factory, per-sample input shape (C, H, W), classes)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    "digits": (lambda: DigitsGNNet(), (1, 32, 32), 10),
    "resnet50_gn": (lambda: _timm("resnet50_gn"), (3, 224, 224), 1000),
    "vit_tiny": (lambda: _timm("vit_tiny_patch16_224"), (3, 224, 224), 1000),
    "vit_base": (lambda: _timm("vit_base_patch16_224"), (3, 224, 224), 1000),
    "convnext_tiny": (lambda: _timm("convnext_tiny"), (3, 224, 224), 1000),
}


def _timm(name: str) -> nn.Module:
    import timm

    return timm.create_model(name, pretrained=False, num_classes=1000)


@dataclass(frozen=True)
class SpeedRow:
    """One model's figures (milliseconds per sample, batch 1)."""

    model: str
    threads: int
    samples: int  # timed samples per measurement, after warm-up
    update_rate: float  # share of the timed REALM samples that updated
    torch_predict_ms: float  # median
    torch_adapt_ms: float  # median
    torch_adapt_p90_ms: float
    torch_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    runtime_predict_ms: float  # median
    runtime_adapt_ms: float  # median
    runtime_adapt_p90_ms: float
    runtime_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    torch_peak_rss_mb: float  # a process running the torch reference's adapt loop only
    runtime_peak_rss_mb: float  # a process with realm_runtime only, torch unimportable

    @property
    def adapt_ratio(self) -> float:
        """Runtime adapt time / torch adapt time (target ≤ 1)."""
        return self.runtime_adapt_ms / self.torch_adapt_ms

    @property
    def step_ratio(self) -> float:
        """Runtime / torch time of a step that updates (target ≤ 1)."""
        return self.runtime_step_ms / self.torch_step_ms

    @property
    def predict_ratio(self) -> float:
        """Runtime predict time / torch predict time (target ≤ 1)."""
        return self.runtime_predict_ms / self.torch_predict_ms


def _timed(fn: Callable[[np.ndarray], object], xs: np.ndarray, warmup: int) -> np.ndarray:
    for i in range(warmup):
        fn(xs[i % len(xs)][None])
    out = np.empty(len(xs))
    for i in range(len(xs)):
        start = time.perf_counter()
        fn(xs[i][None])
        out[i] = time.perf_counter() - start
    return out * 1e3


def bench_model(
    name: str,
    *,
    threads: int = 2,
    samples: int = 30,
    warmup: int = 5,
    work_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> SpeedRow:
    """Time one model: torch reference and RealmRuntime, predict and REALM adapt, batch 1.

    The stream is random normal inputs (a fixed seed); the ImageNet preset for the 1000-class
    models, the CIFAR preset for the digits model.
    """
    from realm_export import export_realm_artifacts
    from realm_runtime import RealmRuntime

    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    factory, shape, classes = MODELS[name]
    torch.manual_seed(seed)
    model = factory().eval()
    preset = "cifar" if classes == 10 else "imagenet"
    config = RealmConfig.preset(preset, num_classes=classes)  # type: ignore[arg-type]
    xs = np.random.default_rng(seed).standard_normal((samples, *shape)).astype(np.float32)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        artifacts = Path(tmp) / name
        export_realm_artifacts(model, artifacts, config=config, input_shape=(1, *shape))

        torch.set_num_threads(threads)
        adapter = RealmAdapter(copy.deepcopy(model), config)
        t_pred = _timed(lambda x: adapter.predict(torch.from_numpy(x)), xs, warmup)
        adapter.reset()
        t_adapt = _timed(lambda x: adapter.adapt(torch.from_numpy(x)), xs, warmup)
        # d = 1 lets every sample through S_div: the cost of a step that really updates.
        always = RealmAdapter(copy.deepcopy(model), config.with_overrides(diversity_margin=1.0))
        t_step = _timed(lambda x: always.adapt(torch.from_numpy(x)), xs, warmup)

        rt = RealmRuntime(artifacts, threads=threads)
        r_pred = _timed(rt.predict, xs, warmup)
        rt.reset()
        r_adapt = _timed(rt.adapt, xs, warmup)
        rate = rt.state.updates / max(rt.state.samples, 1)
        del rt
        rt_always = RealmRuntime(artifacts, threads=threads, overrides={"diversity_margin": 1.0})
        r_step = _timed(rt_always.adapt, xs, warmup)
        torch.save(model.state_dict(), Path(tmp) / "weights.pt")
        torch_rss = torch_only_peak_rss(name, Path(tmp) / "weights.pt", preset, xs, threads)
        runtime_rss = runtime_only_peak_rss(artifacts, xs, threads)
    return SpeedRow(
        model=name,
        threads=threads,
        samples=samples,
        update_rate=rate,
        torch_predict_ms=float(np.median(t_pred)),
        torch_adapt_ms=float(np.median(t_adapt)),
        torch_adapt_p90_ms=float(np.percentile(t_adapt, 90)),
        torch_step_ms=float(np.median(t_step)),
        runtime_predict_ms=float(np.median(r_pred)),
        runtime_adapt_ms=float(np.median(r_adapt)),
        runtime_adapt_p90_ms=float(np.percentile(r_adapt, 90)),
        runtime_step_ms=float(np.median(r_step)),
        torch_peak_rss_mb=torch_rss,
        runtime_peak_rss_mb=runtime_rss,
    )


_TORCH_ONLY = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch
    from realm_sdk import RealmAdapter, RealmConfig
    from realm_sdk._bench import MODELS

    factory, shape, classes = MODELS[sys.argv[1]]
    torch.set_num_threads(int(sys.argv[5]))
    model = factory()
    model.load_state_dict(torch.load(sys.argv[2], weights_only=True))
    adapter = RealmAdapter(model, RealmConfig.preset(sys.argv[3], num_classes=classes))
    for x in np.load(sys.argv[4]):
        adapter.adapt(torch.from_numpy(x[None]))
    with open("/proc/self/status") as status:  # VmHWM: ru_maxrss would survive fork + exec
        hwm = next(l for l in status if l.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_mb": int(hwm.split()[1]) / 1024}))
""")


def torch_only_peak_rss(
    name: str, weights: Path, preset: str, xs: np.ndarray, threads: int
) -> float:
    """Peak RSS (MB) of a fresh process that runs the stream with the torch reference only."""
    return _peak_of([_TORCH_ONLY, name, str(weights), preset], xs, threads)


def _peak_of(args: list[str], xs: np.ndarray, threads: int) -> float:
    with tempfile.NamedTemporaryFile(suffix=".npy", delete=False) as handle:
        np.save(handle, xs)
    try:
        out = subprocess.run(
            [sys.executable, "-c", *args, handle.name, str(threads)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        ).stdout
    finally:
        Path(handle.name).unlink(missing_ok=True)
    result = json.loads(out.strip().splitlines()[-1])
    if result.get("torch"):
        raise RuntimeError("the runtime-only process imported torch")
    return float(result["peak_rss_mb"])


_RUNTIME_ONLY = textwrap.dedent("""
    import importlib.abc, json, sys

    class _NoTorch(importlib.abc.MetaPathFinder):
        # As on a device without torch: onnxruntime's import-time probes then skip it.
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
            return None

    sys.meta_path.insert(0, _NoTorch())
    import numpy as np
    from realm_runtime import RealmRuntime

    rt = RealmRuntime(sys.argv[1], threads=int(sys.argv[3]))
    xs = np.load(sys.argv[2])
    for x in xs:
        rt.adapt(x[None])
    with open("/proc/self/status") as status:
        hwm = next(l for l in status if l.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_mb": int(hwm.split()[1]) / 1024,
                      "torch": "torch" in sys.modules}))
""")


def runtime_only_peak_rss(artifacts: Path, xs: np.ndarray, threads: int) -> float:
    """Peak RSS (MB) of a fresh process that runs the stream with realm_runtime only."""
    return _peak_of([_RUNTIME_ONLY, str(artifacts)], xs, threads)


def format_speed(rows: list[SpeedRow]) -> str:
    """A Markdown table of speed rows: milliseconds per sample (median), ratios runtime/torch."""
    head = (
        "| model | threads | predict ms torch / runtime (ratio) | REALM adapt ms torch / "
        "runtime (ratio), update rate | updating step ms torch / runtime (ratio) | "
        "peak RSS MB torch-only / runtime-only (ratio) |"
    )
    lines = [head, "|" + "---|" * 6]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.threads} | {r.torch_predict_ms:.2f} / {r.runtime_predict_ms:.2f} "
            f"({r.predict_ratio:.2f}) | {r.torch_adapt_ms:.2f} / {r.runtime_adapt_ms:.2f} "
            f"({r.adapt_ratio:.2f}), {r.update_rate:.2f} | {r.torch_step_ms:.2f} / "
            f"{r.runtime_step_ms:.2f} ({r.step_ratio:.2f}) | {r.torch_peak_rss_mb:.0f} / "
            f"{r.runtime_peak_rss_mb:.0f} ({r.runtime_peak_rss_mb / r.torch_peak_rss_mb:.2f}) |"
        )
    return "\n".join(lines)


def rows_to_json(rows: list[SpeedRow]) -> str:
    """Every figure of the rows as JSON (ratios included)."""
    return json.dumps(
        [
            asdict(r)
            | {
                "adapt_ratio": r.adapt_ratio,
                "predict_ratio": r.predict_ratio,
                "step_ratio": r.step_ratio,
            }
            for r in rows
        ],
        indent=2,
    )
