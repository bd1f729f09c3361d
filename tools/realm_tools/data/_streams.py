"""Test streams beyond the episodic protocol: what a device meets when it is left running.

Each setting is one stream a single adapter sees from start to end, with no reset:

- ``continual``: the corruptions in turn, ``passes`` times, each pass the same samples in
  a new order (CoTTA's protocol);
- ``mixed``: every corruption's samples shuffled together;
- ``gradual``: per corruption, severity 1 → 5 → 1, the domain's samples split over the steps;
- ``correlated``: the corruptions in turn, each with its class order drawn from a Dirichlet
  of small concentration (label shift, as RoTTA and ROID test);
- ``long``: the continual stream repeated past ``horizon`` samples;
- ``junk-noise``, ``junk-image``, ``junk-class``, ``junk-dark``: random frames, one image,
  one class, a constant dark frame; each is followed by clean accuracy (forgetting).

Samples are addressed, not copied: a stream is its sources and an index into them, so a
10^5-sample stream of a lazily loaded data set costs a small array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._realdata import LazyImages, ShiftDataset

Samples = np.ndarray | LazyImages

SETTINGS: tuple[str, ...] = (
    "episodic",
    "continual",
    "mixed",
    "gradual",
    "correlated",
    "long",
    "junk-noise",
    "junk-image",
    "junk-class",
    "junk-dark",
)
JUNK: tuple[str, ...] = tuple(s for s in SETTINGS if s.startswith("junk-"))
GRADUAL_SEVERITIES = (1, 2, 3, 4, 5, 4, 3, 2, 1)  # up and down again, per corruption
NO_LABEL = -1  # junk frames no class is right for


@dataclass(frozen=True)
class StreamSettings:
    """How the non-episodic streams are built (one object per benchmark run)."""

    severity: int = 5  # of continual, mixed, correlated and long (the paper's severity)
    passes: int = 4  # continual: times through the corruptions (the measurement)
    horizon: int = 100_000  # long: at least this many samples, whole passes
    junk_length: int = 3000  # samples of each junk stream
    concentration: float = 0.01  # correlated: Dirichlet α of the class order (ROID's value)
    limit: int | None = None  # samples per corruption stream (None: all; quick runs)


@dataclass(frozen=True)
class Stream:
    """One test stream: its sample sources and the order a device sees them in."""

    setting: str  # a name of SETTINGS
    parts: tuple[Samples, ...]  # the sample sources (normalised model inputs)
    index: np.ndarray  # (N, 2) int64: (part, row) of each sample, in stream order
    labels: np.ndarray  # (N,) int64, NO_LABEL where no class is right
    segments: tuple[tuple[int, str], ...]  # (first sample, name) of each domain, for plots

    def __len__(self) -> int:
        return len(self.index)

    def sample(self, i: int) -> np.ndarray:
        """The ``i``-th input, ``(1, C, H, W)`` float32 (batch size 1)."""
        part, row = self.index[i]
        return np.ascontiguousarray(self.parts[part][row : row + 1], dtype=np.float32)

    def segment_of(self) -> np.ndarray:
        """``(N,)`` the segment number of each sample."""
        starts = np.array([s for s, _ in self.segments])
        return np.searchsorted(starts, np.arange(len(self)), side="right") - 1


class _Builder:
    """Collects sources and index rows of one stream."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self.parts: list[Samples] = []
        self.rows: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.segments: list[tuple[int, str]] = []
        self.size = 0

    def add(self, x: Samples, y: np.ndarray, name: str, order: np.ndarray | None = None) -> None:
        order = np.arange(len(y)) if order is None else order
        self.segments.append((self.size, name))
        self.rows.append(np.stack([np.full(len(order), len(self.parts)), order], axis=1))
        self.labels.append(np.asarray(y)[order])
        self.parts.append(x)
        self.size += len(order)

    def build(self, shuffle: np.random.Generator | None = None) -> Stream:
        index = np.concatenate(self.rows).astype(np.int64)
        labels = np.concatenate(self.labels).astype(np.int64)
        segments = tuple(self.segments)
        if shuffle is not None:
            perm = shuffle.permutation(len(index))
            index, labels, segments = index[perm], labels[perm], ((0, "mixed"),)
        return Stream(self.setting, tuple(self.parts), index, labels, segments)


def dirichlet_order(
    labels: np.ndarray, concentration: float, rng: np.random.Generator
) -> np.ndarray:
    """A label-shifted order: each class's samples spread over time slots by a Dirichlet draw.

    With a small concentration each class falls almost whole into one of ``C`` slots, so
    the stream shows a few classes at a time (RoTTA's and ROID's correlated setting).
    """
    classes = np.unique(labels)
    slots: list[list[int]] = [[] for _ in classes]
    for c in classes:
        idx = rng.permutation(np.flatnonzero(labels == c))
        share = rng.dirichlet(np.full(len(slots), concentration))
        cuts = np.round(np.cumsum(share)[:-1] * len(idx)).astype(int)
        for slot, part in zip(slots, np.split(idx, cuts), strict=True):
            slot.extend(part.tolist())
    return np.concatenate([rng.permutation(s) for s in slots if s]).astype(np.int64)


def build_stream(
    dataset: ShiftDataset,
    setting: str,
    *,
    seed: int,
    corruptions: Sequence[str],
    settings: StreamSettings | None = None,
) -> Stream:
    """The stream of one non-episodic ``setting`` (see the module's docstring).

    Args:
        dataset: the shifted test set (the digits, CIFAR-10-C, ImageNet-C).
        setting: a name of :data:`SETTINGS` other than ``"episodic"``.
        seed: the corruption order (and, for the digits, the corruptions' noise), sample
            orders and junk frames.
        corruptions: the domains, in their order for pass 1.
        settings: severities, lengths and passes.

    Returns:
        The stream.

    Raises:
        ValueError: an unknown setting, or a junk stream of a data set without a clean split.
    """
    if setting not in SETTINGS or setting == "episodic":
        known = [s for s in SETTINGS if s != "episodic"]
        raise ValueError(f"unknown stream setting {setting!r}; known: {known}")
    rng = np.random.default_rng(seed)
    s = settings or StreamSettings()
    b = _Builder(setting)

    def domain(name: str, severity: int, sub: int) -> tuple[Samples, np.ndarray]:
        # Each domain and severity draws its own order and corruption noise from the seed.
        return dataset.stream(name, severity, seed=seed * 1000 + sub, limit=s.limit)

    if setting in ("continual", "long", "correlated", "mixed"):
        # Every pass shows the same corrupted samples in a new order: a pass's accuracy then
        # moves with the adaptation only, which is what "fading" means.
        domains = [domain(name, s.severity, k) for k, name in enumerate(corruptions)]
        passes = 1 if setting in ("mixed", "correlated") else s.passes
        first = True
        while True:
            for name, (x, y) in zip(corruptions, domains, strict=True):
                if setting == "correlated":
                    order = dirichlet_order(y, s.concentration, rng)
                else:
                    order = None if first else rng.permutation(len(y))
                b.add(x, y, name, order)
            first = False
            passes -= 1
            if passes <= 0 and (setting != "long" or b.size >= s.horizon):
                break
        return b.build(shuffle=rng if setting == "mixed" else None)
    if setting == "gradual":
        # A domain's samples are split over its severity steps, each seen once: the stream is
        # as long as one continual pass, and the severity moves while the scene stays.
        for k, name in enumerate(corruptions):
            steps = [domain(name, severity, k) for severity in GRADUAL_SEVERITIES]
            chunks = np.array_split(np.arange(len(steps[0][1])), len(steps))
            for severity, (x, y), rows in zip(GRADUAL_SEVERITIES, steps, chunks, strict=True):
                b.add(x, y, f"{name}@{severity}", rows)
        return b.build()
    return _junk(dataset, setting, rng, s.junk_length, b)


def _junk(
    dataset: ShiftDataset, setting: str, rng: np.random.Generator, n: int, b: _Builder
) -> Stream:
    clean = dataset.clean()
    if clean is None:
        raise ValueError(
            f"the {setting} stream needs clean images of {dataset.name} (to draw frames from "
            "and to measure forgetting after it), and this copy of the data set has none"
        )
    x, y = clean
    frames = np.asarray(x[: min(len(y), 512)], dtype=np.float32)  # their value range
    lo, hi = float(frames.min()), float(frames.max())
    shape = (1, *frames.shape[1:])
    if setting == "junk-noise":  # a sensor's noise: every pixel anywhere in the data's range
        noise = rng.uniform(lo, hi, size=(n, *shape[1:])).astype(np.float32)
        b.add(noise, np.full(n, NO_LABEL), "noise")
    elif setting == "junk-dark":  # a covered lens: the data's black everywhere
        b.add(np.full(shape, lo, np.float32), np.full(1, NO_LABEL), "dark", np.zeros(n, np.int64))
    elif setting == "junk-image":  # one object in front of the camera
        row = int(rng.integers(len(y)))
        b.add(x, y, "one image", np.full(n, row, np.int64))
    else:  # junk-class: one class only, its images cycled
        c = int(rng.choice(np.unique(y)))
        rows = np.flatnonzero(np.asarray(y) == c)
        b.add(x, y, f"class {c}", rng.permutation(np.resize(rows, n)))
    return b.build()
