"""Endurance. 10^5 samples through RealmRuntime, a save every 1000, a restart halfway.

The stream cycles through what a device meets over months: the shifted digits under five
corruptions in turn, Gaussian noise, constant images, and the digits at extreme scales
(×1e-3, ×1e3, and ×1e37, which overflows float32 inside the network). Checked: α, λ, the
parameters and the EMA stay finite and within their bounds; the counters add up; the
process's resident memory does not grow after warm-up (the slope of a least-squares line
through one RSS reading per 1000 samples). The soak runs in a process of its own: the test
worker's own memory (other tests' fixtures and sessions) would move the RSS it reads. Run
directly for the figures (docs/BENCHMARKS.md)::

    .venv/bin/python tests/runtime/test_soak.py [SAMPLES [ARTIFACTS]]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from realm_runtime import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmRuntime

SAMPLES = 100_000
SAVE_EVERY = 1000
WARMUP = 10_000  # samples before the RSS slope is measured (allocator and ORT arenas settle)
CORRUPTIONS = ("gaussian_noise", "impulse_noise", "defocus_blur", "motion_blur", "fog")


def _rss_mib() -> float:
    """Resident memory of this process now (Linux /proc; ru_maxrss elsewhere is the peak)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _stream(digits, rng: np.random.Generator):
    """Endless samples, (1, 1, 32, 32) float32, cycling through the kinds of input."""
    pools = [digits.stream(c, 5, seed=0)[0] for c in CORRUPTIONS]
    i = 0
    while True:
        block, step = divmod(i, 500)  # 500 samples of one kind, then the next
        kind = block % 8
        if kind < 5:
            x = pools[kind][step % len(pools[kind])]
        elif kind == 5:
            x = rng.standard_normal((1, 32, 32)).astype(np.float32)
        elif kind == 6:
            x = np.full((1, 32, 32), rng.uniform(-3, 3), np.float32)
        else:
            x = pools[0][step % len(pools[0])] * np.float32((1e-3, 1e3, 1e37)[step % 3])
        yield np.ascontiguousarray(x[None], dtype=np.float32)
        i += 1


def _check(rt: RealmRuntime) -> None:
    s = rt.state
    for name, value in rt.trainable_parameters().items():
        assert np.isfinite(value).all(), name
    for name, value in rt.momentum_buffers().items():
        assert np.isfinite(value).all(), name
    if s.alpha is not None:
        assert ALPHA_MIN <= s.alpha <= ALPHA_MAX and s.lam >= LAMBDA_MIN, (s.alpha, s.lam)
    if s.ema is not None:
        assert np.isfinite(s.ema).all() and abs(float(s.ema.sum()) - 1) < 1e-3
    assert (
        s.updated_samples + s.skipped_diversity + s.skipped_entropy + s.skipped_nonfinite
        == s.samples
    ), s


def soak(artifacts: Path, digits, samples: int = SAMPLES) -> dict:
    """Run the soak; return its figures (raises AssertionError on a broken invariant)."""
    rng = np.random.default_rng(0)
    stream = _stream(digits, rng)
    readings: list[tuple[int, float]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.npz"
        rt = RealmRuntime(artifacts, threads=1)
        for i in range(1, samples + 1):
            rt.adapt(next(stream))
            if i % SAVE_EVERY == 0:
                rt.save(state)
                _check(rt)
                readings.append((i, _rss_mib()))
            if i == samples // 2:
                # A restart: a new process would do just this (after its last save).
                rt.save(state)
                del rt
                rt = RealmRuntime(artifacts, threads=1)
                rt.restore(state)
                assert rt.state.samples == i
        seconds = time.perf_counter() - start
        s = rt.state
    after = np.array([r for r in readings if r[0] > WARMUP])
    slope = float(np.polyfit(after[:, 0], after[:, 1], 1)[0]) * 1e4 if len(after) > 2 else 0.0
    return {
        "samples": s.samples,
        "seconds": round(seconds, 1),
        "updates": s.updates,
        "skipped": {
            "diversity": s.skipped_diversity,
            "entropy": s.skipped_entropy,
            "nonfinite": s.skipped_nonfinite,
        },
        "alpha": s.alpha,
        "lambda": s.lam,
        "rss_mib_first_last_max": [readings[0][1], readings[-1][1], max(r[1] for r in readings)],
        "rss_slope_mib_per_1e4_samples": round(slope, 3),
    }


@pytest.mark.slow
def test_soak(digits_artifacts):
    done = subprocess.run(
        [sys.executable, __file__, str(SAMPLES), str(digits_artifacts[0])],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads(done.stdout)
    print(json.dumps(figures, indent=1))
    assert figures["samples"] == SAMPLES and figures["updates"] > 0
    assert figures["skipped"]["nonfinite"] > 0, "the extreme scales must reach the guard"
    # No growth after warm-up: a leak of one float32 vector of the digits model's adapted
    # values per sample would grow by tens of MiB per 10^4 samples; the bound is far below.
    assert figures["rss_slope_mib_per_1e4_samples"] < 1.0, figures


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/, where helpers/ is
    from helpers import export_digits

    from realm_tools.data import load_digits
    from realm_tools.models import train_digits_model

    data = load_digits()
    n = int(sys.argv[1]) if len(sys.argv) > 1 else SAMPLES
    if len(sys.argv) > 2:  # the test's artifacts
        print(json.dumps(soak(Path(sys.argv[2]), data, n)))
    else:
        model = train_digits_model(data, epochs=6, cache_dir=".cache")
        with tempfile.TemporaryDirectory() as tmp:
            export_digits(model, Path(tmp) / "a")
            print(json.dumps(soak(Path(tmp) / "a", data, n), indent=1))
