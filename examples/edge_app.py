"""What an app on a device does with realm-tta: load artifacts, adapt on a live stream.

Runs without torch (numpy + onnxruntime: ``pip install 'realm-tta[runtime]'``, any current
onnxruntime; ``--backend ort-training`` uses the training artifacts instead, on
onnxruntime-training 1.19.2, of an export made with ``realm export --training``). It takes
images one at a time,
shows the running top-1 and the adaptation counters, checkpoints the adaptation state every
N samples (atomically), and on restart resumes from the checkpoint where it stopped.

    make demo                      # writes artifacts/digits and artifacts/digits_stream.npz
    python examples/edge_app.py --artifacts artifacts/digits --stream artifacts/digits_stream.npz
    # stop it with Ctrl-C (it checkpoints), run it again: it resumes

The stream file is an ``.npz`` with ``images`` (N, C, H, W) float32, already preprocessed,
and optionally ``labels`` (N,) for scoring; a camera app would feed frames instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from realm_runtime import RealmRuntime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", default="artifacts/digits", help="artifact directory")
    parser.add_argument("--stream", default="artifacts/digits_stream.npz", help="stream .npz")
    parser.add_argument(
        "--checkpoint",
        default="artifacts/edge_state.npz",
        help="adaptation-state file (resumed from when present)",
    )
    parser.add_argument("--every", type=int, default=100, help="checkpoint every N samples")
    parser.add_argument("--report", type=int, default=50, help="status line every N samples")
    parser.add_argument("--limit", type=int, default=None, help="stop after N samples")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "onnx", "ort-training"),
        help="auto: the portable step graph where the artifacts have one",
    )
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    args = parser.parse_args(argv)

    stream_path = Path(args.stream)
    if not stream_path.is_file():
        print(f"stream file not found: {stream_path} (run `make demo` first)", file=sys.stderr)
        return 2
    with np.load(stream_path, allow_pickle=False) as data:
        images = np.ascontiguousarray(data["images"], dtype=np.float32)
        labels = data["labels"] if "labels" in data.files else None

    rt = RealmRuntime(
        args.artifacts, device=args.device, threads=args.threads, backend=args.backend
    )
    print(f"adapting on the {rt.backend} backend ({args.device})")
    checkpoint = Path(args.checkpoint)
    start_at = 0
    if checkpoint.is_file() and not args.fresh:
        rt.restore(checkpoint)
        start_at = rt.state.samples
        print(
            f"resumed from {checkpoint}: {start_at} samples seen, {rt.state.updates} updates so far"
        )
    end = len(images) if args.limit is None else min(len(images), start_at + args.limit)
    if start_at >= end:
        print(
            f"nothing left to do: the stream has {len(images)} samples and the checkpoint "
            f"has seen {start_at} (use --fresh to start over)"
        )
        return 0

    correct = seen = 0
    latencies: list[float] = []
    try:
        for i in range(start_at, end):
            x = images[i : i + 1]  # one frame, as a camera would deliver it
            t0 = time.perf_counter()
            result = rt.adapt(x)
            latencies.append(time.perf_counter() - t0)
            seen += 1
            if labels is not None:
                correct += int(result.top1[0] == labels[i])
            if (i + 1) % args.report == 0 or i + 1 == end:
                _status(rt, i + 1, len(images), correct, seen, labels is not None, latencies)
            if (i + 1) % args.every == 0:
                rt.save(checkpoint)
    except KeyboardInterrupt:
        print("\ninterrupted: checkpointing before exit")
    rt.save(checkpoint)
    print(f"checkpoint written to {checkpoint} ({rt.state.samples} samples seen)")
    return 0


def _status(
    rt: RealmRuntime,
    done: int,
    total: int,
    correct: int,
    seen: int,
    scored: bool,
    latencies: list[float],
) -> None:
    st = rt.state
    acc = f"top-1 {100 * correct / max(seen, 1):5.1f}% (this run)" if scored else "unlabelled"
    shape = f"α {st.alpha:.3f} λ {st.lam:.3f}" if st.alpha is not None else ""
    ms = 1e3 * float(np.median(latencies[-200:]))
    print(
        f"sample {done:>5}/{total} | {acc} | updates {st.updates} | skipped: "
        f"{st.skipped_diversity} S_div, {st.skipped_entropy} entropy, "
        f"{st.skipped_nonfinite} non-finite | {shape} | {ms:.2f} ms/sample",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
