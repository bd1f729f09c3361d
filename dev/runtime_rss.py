"""Peak RSS and per-sample time of ``RealmRuntime`` on one backend, in its own process.

Run it with a torch-free interpreter (``.venv-runtime/bin/python``), once per backend, on
artifacts exported beforehand (e.g. ``realm export --model timm:resnet50_gn``)::

    for b in onnx onnx-steps onnx-steps:train; do
        PYTHONPATH=runtime .venv-runtime/bin/python dev/runtime_rss.py DIR $b 14
    done

The samples are random normal images of the manifest's input shape (mostly refused by S_div
on a random-init model: the figure is the skip path's, and the memory of every session the
backend opens).
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np

from realm_runtime import RealmRuntime


def main() -> None:
    """Adapt on `count` random samples; print the peak RSS and the median time."""
    directory, side, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    backend, _, schedule = side.partition(":")
    rt = RealmRuntime(directory, threads=2, backend=backend, schedule=schedule or None)  # type: ignore[arg-type]
    shape = [int(d) if isinstance(d, int) else 1 for d in rt.manifest.input.shape]
    xs = np.random.default_rng(0).standard_normal((count, *shape)).astype(np.float32)
    times = []
    for x in xs:
        start = time.perf_counter()
        rt.adapt(x)
        times.append(time.perf_counter() - start)
    state = rt.state
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"{side}: peak RSS {rss:.0f} MB, median {np.median(times[2:]) * 1e3:.1f} ms "
        f"(after 2 warm-up calls), updates {state.updates}/{state.samples}"
    )


if __name__ == "__main__":
    main()
