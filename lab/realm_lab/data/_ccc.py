"""An endless stream in the manner of CCC: corruptions changing continually, difficulty held.

Press et al., "RDumb: A simple approach that questions our progress in continual test-time
adaptation" (NeurIPS 2023), run 7.5 million images whose corruptions never stop changing
while a source model's accuracy on them stays at a set level. This is the same idea on the
shift sets here, built from what they have (integer severities, one corruption at a time):

- a domain is one corruption at the severity a caller picked for it (the benchmark picks,
  per corruption, the severity whose no-adapt accuracy is nearest a target: that is what
  holds the difficulty);
- the stream never rests: it moves from each domain to the next over ``transition``
  samples, each sample drawn from the next domain with a probability rising linearly from
  0 to 1 (the mixture's difficulty stays that of its two ends);
- the domain order is a walk over the corruptions, a new shuffle each round, never the
  same corruption twice in a row;
- samples are drawn at random from each domain's pool (its test images under
  ``pool_seeds`` corruption draws), so a sample recurs, as the test images of any finite
  set do over a million frames.

Samples are addressed, not copied: the stream is its pools and an index (``Stream``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from realm_tools.data import ShiftDataset, Stream

CCC_SETTING = "ccc"  # the stream's setting name


@dataclass(frozen=True)
class CCCSettings:
    """The shape of one endless stream."""

    length: int = 1_000_000  # samples: the million
    transition: int = 5000  # samples from one domain to the next (CCC's slow speed is 5000)
    pool_seeds: int = 2  # corruption draws per domain: more variety, more memory
    limit: int | None = None  # test images per draw (None: all)

    def __post_init__(self) -> None:
        if self.length < 1 or self.transition < 1 or self.pool_seeds < 1:
            raise ValueError(
                "CCCSettings: length, transition and pool_seeds must be ≥ 1, got "
                f"{self.length}, {self.transition}, {self.pool_seeds}"
            )


def domain_walk(corruptions: Sequence[str], count: int, rng: np.random.Generator) -> list[str]:
    """``count`` domains: shuffled rounds of ``corruptions``, no name twice in a row."""
    if len(corruptions) < 2:
        raise ValueError(f"a changing stream needs at least 2 corruptions, got {corruptions}")
    walk: list[str] = []
    while len(walk) < count:
        order = [str(c) for c in rng.permutation(list(corruptions))]
        if walk and order[0] == walk[-1]:
            order[0], order[-1] = order[-1], order[0]
        walk += order
    return walk[:count]


def build_ccc_stream(
    dataset: ShiftDataset,
    severities: Mapping[str, int],
    *,
    seed: int,
    settings: CCCSettings | None = None,
) -> Stream:
    """The endless stream over the corruptions of ``severities`` (name → severity 1–5).

    Raises:
        ValueError: fewer than two corruptions, or one the data set does not have.
    """
    s = settings or CCCSettings()
    unknown = [c for c in severities if c not in dataset.corruptions]
    if unknown:
        raise ValueError(f"unknown corruptions {unknown}; known: {list(dataset.corruptions)}")
    rng = np.random.default_rng(seed)
    names = list(severities)
    parts, labels = [], []
    for k, name in enumerate(names):
        draws = [
            dataset.stream(name, severities[name], seed=seed * 1000 + k * 10 + d, limit=s.limit)
            for d in range(s.pool_seeds)
        ]
        parts.append(np.concatenate([np.asarray(x, dtype=np.float32) for x, _ in draws]))
        labels.append(np.concatenate([y for _, y in draws]).astype(np.int64))
    walk = domain_walk(names, s.length // s.transition + 2, rng)
    step = np.arange(s.length)
    leg = step // s.transition  # the transition a sample is in: walk[leg] → walk[leg + 1]
    weight = (step % s.transition + 1) / s.transition
    ahead = rng.random(s.length) < weight
    where = np.array([names.index(w) for w in walk], dtype=np.int64)
    part = np.where(ahead, where[leg + 1], where[leg])
    sizes = np.array([len(y) for y in labels])
    row = (rng.random(s.length) * sizes[part]).astype(np.int64)
    index = np.stack([part, row], axis=1)
    stream_labels = np.empty(s.length, dtype=np.int64)
    for k in range(len(names)):
        mine = part == k
        stream_labels[mine] = labels[k][row[mine]]
    segments = tuple(
        (int(i * s.transition), f"{walk[i]}→{walk[i + 1]}")
        for i in range(-(-s.length // s.transition))
    )
    return Stream(CCC_SETTING, tuple(parts), index, stream_labels, segments)
