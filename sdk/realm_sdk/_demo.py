"""The end-to-end demo job: source model on digits, shifted streams, no-adapt vs. adaptation."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ._adapter import RealmAdapter
from ._config import RealmConfig
from ._digits import NUM_CLASSES, load_digits, train_digits_model
from ._evaluate import run_online

DEFAULT_CORRUPTIONS = ("gaussian_noise", "impulse_noise", "defocus_blur", "motion_blur", "fog")
METHOD_ORDER = ("tent", "eata", "realm")


@dataclass(frozen=True)
class DemoRow:
    """One corruption's figures: accuracy (%) per method and REALM's end state."""

    corruption: str
    source: float  # no-adapt accuracy, %
    accuracy: dict[str, float]  # method -> online accuracy over the stream, %
    updates: dict[str, int]  # method -> optimizer steps applied
    alpha: float  # REALM's α at the end of the stream
    lam: float  # REALM's λ at the end of the stream
    ms_per_sample: float  # REALM adapt() wall time per sample


def run_demo(
    *,
    corruptions: Sequence[str] = DEFAULT_CORRUPTIONS,
    severity: int = 5,
    seed: int = 0,
    preset: str = "cifar",
    cache_dir: str | os.PathLike[str] | None = ".cache",
    on_stream: Callable[[str, int], Callable[[int], None]] | None = None,
) -> tuple[float, list[DemoRow]]:
    """Train (or load) the digits source model and adapt it on shifted streams, batch size 1.

    Args:
        corruptions: corruption names to stream.
        severity: 1–5.
        seed: stream order and corruption noise.
        preset: ``"cifar"`` or ``"imagenet"`` hyper-parameters.
        cache_dir: where the source weights are cached.
        on_stream: ``(label, total) -> progress(done)`` for each stream (progress bars).

    Returns:
        ``(clean accuracy %, rows)``.
    """
    data = load_digits()
    source = train_digits_model(data, cache_dir=cache_dir)
    clean_x, clean_y = data.stream("clean", severity, seed=seed)
    clean = run_online(source, clean_x, clean_y).accuracy * 100
    rows = []
    for corruption in corruptions:
        x, y = data.stream(corruption, severity, seed=seed)
        base = run_online(source, x, y).accuracy * 100
        acc: dict[str, float] = {}
        updates: dict[str, int] = {}
        alpha = lam = float("nan")
        ms = float("nan")
        for method in METHOD_ORDER:
            cfg = RealmConfig.preset(preset, num_classes=NUM_CLASSES, method=method)  # type: ignore[arg-type]
            adapter = RealmAdapter(copy.deepcopy(source), cfg)
            progress = on_stream(f"{corruption}/{method}", len(x)) if on_stream else None
            start = time.perf_counter()
            result = run_online(adapter, x, y, progress=progress)
            elapsed = time.perf_counter() - start
            acc[method] = result.accuracy * 100
            updates[method] = result.updates
            if method == "realm":
                st = adapter.state
                alpha, lam = float(st.alpha or 0.0), float(st.lam or 0.0)
                ms = elapsed / len(x) * 1e3
        rows.append(DemoRow(corruption, base, acc, updates, alpha, lam, ms))
    return clean, rows


def format_demo(clean: float, rows: Sequence[DemoRow], *, severity: int, samples: int) -> str:
    """The demo's results as a plain-text table."""
    head = f"{'corruption':<16}{'no-adapt':>9}" + "".join(f"{m:>8}" for m in METHOD_ORDER)
    head += f"{'REALM upd':>11}{'α':>7}{'λ':>7}{'ms/sample':>11}"
    lines = [
        f"digits GN CNN, clean accuracy {clean:.1f}%; severity {severity}, batch 1, "
        f"{samples} samples per stream",
        head,
        "-" * len(head),
    ]
    for r in rows:
        line = f"{r.corruption:<16}{r.source:>9.1f}"
        line += "".join(f"{r.accuracy[m]:>8.1f}" for m in METHOD_ORDER)
        line += f"{r.updates['realm']:>11d}{r.alpha:>7.3f}{r.lam:>7.3f}{r.ms_per_sample:>11.2f}"
        lines.append(line)
    n = max(len(rows), 1)
    avg = f"{'average':<16}{sum(r.source for r in rows) / n:>9.1f}"
    avg += "".join(f"{sum(r.accuracy[m] for r in rows) / n:>8.1f}" for m in METHOD_ORDER)
    lines.append("-" * len(head))
    lines.append(avg)
    torch_threads = torch.get_num_threads()
    lines.append(f"(torch {torch.__version__}, {torch_threads} threads)")
    return "\n".join(lines)
