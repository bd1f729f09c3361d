"""The onnx backend on CUDA (onnxruntime-gpu, I/O binding) against the SDK on CUDA torch.

For each model: export the portable graphs (ImageNet preset, 224 px, no training artifacts),
then time the updating step and predict of ``RealmRuntime(device="cuda", backend="onnx")`` (the
one adapt graph), the updating step of its ``"onnx-steps"`` twin (forward, step and decide
graphs), and of ``RealmAdapter`` on CUDA torch (full float32, TF32 off), interleaved, every sample
updating (diversity_margin=1). Also profiles a few steps of the step graph on a plain CUDA
session: which execution provider ran each node (a node that falls back to the CPU costs two
copies per step) and where the time goes. Usage, on a machine with a GPU and
onnxruntime-gpu, from the repository root::

    PYTHONPATH=sdk:export:runtime python dev/cuda_speed.py out.json resnet50_gn vit_base_patch16_224
"""

from __future__ import annotations

import collections
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import timm
import torch

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import RealmRuntime, load_manifest
from realm_runtime.contract import (
    PARAMS_NAME,
    SAMPLE_WEIGHT_NAME,
    SOURCE_PARAMS_KEY,
    STEP_MODEL_KEY,
    VELOCITY_NAME,
)
from realm_sdk import RealmAdapter, RealmConfig

STEPS, WARMUP = int(os.environ.get("STEPS", 30)), 5
DEVICE = os.environ.get("DEVICE", "cuda")  # DEVICE=cpu: a dry run of this script without a GPU
CUDA = ("CUDAExecutionProvider", {"use_tf32": "0"})  # as RealmRuntime: float32, not TF32
PROVIDERS = [CUDA, "CPUExecutionProvider"] if DEVICE == "cuda" else None


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(fn, x) -> float:
    _sync()
    start = time.perf_counter()
    fn(x)
    _sync()
    return (time.perf_counter() - start) * 1e3


def _profile(directory: Path, x: np.ndarray) -> dict:
    """Node placement and per-op time of the step graph over 5 runs on a CUDA session."""
    manifest = load_manifest(directory)
    portable = manifest.portable
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = f"/tmp/prof-{directory.name}"
    session = ort.InferenceSession(
        str(directory / portable[STEP_MODEL_KEY]),
        options,
        providers=PROVIDERS or ["CPUExecutionProvider"],
    )
    source = np.load(directory / portable[SOURCE_PARAMS_KEY])
    feeds = {i.name: np.array(0.01, np.float32) for i in session.get_inputs() if not i.shape}
    feeds.update(
        {
            manifest.input.name: x,
            SAMPLE_WEIGHT_NAME: np.ones(1, np.float32),
            PARAMS_NAME: source,
            VELOCITY_NAME: np.zeros_like(source),
        }
    )
    for _ in range(6):
        session.run(None, feeds)
    trace = json.loads(Path(session.end_profiling()).read_text())
    nodes = [e for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    by_provider: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    time_by_op: collections.Counter = collections.Counter()
    for e in nodes[len(nodes) // 6 :]:  # the first run is set-up
        args = e.get("args", {})
        by_provider[args.get("provider", "?")][args.get("op_name", "?")] += 1
        time_by_op[(args.get("provider", "?"), args.get("op_name", "?"))] += e["dur"]
    runs = 5
    return {
        "nodes_per_step_by_provider": {
            p: {op: n // runs for op, n in c.most_common()} for p, c in by_provider.items()
        },
        "top_ops_us_per_step": [
            [p, op, round(us / runs)] for (p, op), us in time_by_op.most_common(12)
        ],
        "kernel_ms_per_step": round(sum(time_by_op.values()) / runs / 1e3, 2),
    }


def main(out: str, names: list[str]) -> None:
    """Export, time and profile each named timm model; write the figures to ``out``."""
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    results = {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "none",
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "models": {},
    }
    rng = np.random.default_rng(0)
    for name in names:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        config = RealmConfig.preset("imagenet", num_classes=1000, diversity_margin=1.0)
        directory = Path(f"/tmp/art-{name}")
        start = time.perf_counter()
        export_realm_artifacts(
            copy.deepcopy(model),
            directory,
            ExportOptions(
                config=config,
                input_shape=(1, 3, 224, 224),
                training=False,
                overwrite=True,
            ),
        )
        export_s = time.perf_counter() - start
        xs = rng.standard_normal((WARMUP + STEPS, 1, 3, 224, 224), dtype=np.float32)
        rt = RealmRuntime(directory, backend="onnx", device=DEVICE)
        twin = RealmRuntime(directory, backend="onnx-steps", device=DEVICE)
        adapter = RealmAdapter(model.to(DEVICE), config)
        sides = {
            "runtime_step": rt.adapt,
            "steps_twin_step": twin.adapt,
            "sdk_step": lambda x, a=adapter: a.adapt(torch.from_numpy(x).to(DEVICE)),
            "runtime_predict": rt.predict,
            "sdk_predict": lambda x, a=adapter: a.predict(torch.from_numpy(x).to(DEVICE)),
        }
        times: dict[str, list[float]] = {k: [] for k in sides}
        for i, x in enumerate(xs):  # interleaved: the sides see the same moments of the GPU
            for key, fn in sides.items():
                t = _timed(fn, x)
                if i >= WARMUP:
                    times[key].append(t)
        median = {k: round(statistics.median(v), 3) for k, v in times.items()}
        record = {
            "export_s": round(export_s, 1),
            "median_ms": median,
            "step_ratio": round(median["runtime_step"] / median["sdk_step"], 3),
            "twin_step_ratio": round(median["steps_twin_step"] / median["sdk_step"], 3),
            "predict_ratio": round(median["runtime_predict"] / median["sdk_predict"], 3),
            "runtime_updates": rt.state.updates,
            "sdk_updates": adapter.state.updates,
            "twin_updates": twin.state.updates,
            "state_devices": sorted({v.device_name() for v in rt._backend._state.values()}),
            "profile": _profile(directory, xs[0]),
        }
        logits = adapter.predict(torch.from_numpy(xs[0]).to(DEVICE)).detach().cpu().numpy()
        record["max_logits_diff"] = float(np.abs(rt.predict(xs[0]) - logits).max())
        mine, ref = rt.trainable_parameters(), adapter.trainable_parameters()
        record["max_param_diff_after_run"] = float(
            max(np.abs(mine[n] - ref[n].detach().cpu().numpy()).max() for n in ref)
        )
        results["models"][name] = record
        print(name, json.dumps({k: v for k, v in record.items() if k != "profile"}), flush=True)
        print(name, "profile", json.dumps(record["profile"]), flush=True)
        Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
