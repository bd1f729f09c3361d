"""Attack streams: a natural shifted stream with a share of its frames the attacker's.

Per method, with and without the guardrails, and per share of frames: clean accuracy after
the stream (the attacker's goal is to lower it), online accuracy on the benign frames (what
the app sees meanwhile), and how many of the attacker's frames moved θ.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm_export.bound import top1_accuracy
from realm_lab.bench import method_config
from realm_runtime import Guardrails
from realm_sdk import RealmAdapter
from realm_tools.data import StreamSettings, build_stream

from ..rows import FRAME_METHODS, NO_ADAPT, row_named
from ._frames import FrameAttacker, FrameSettings
from ._subjects import Subject

PER_CORRUPTION = 50  # frames of each corruption in the natural stream (one pass)


@dataclass
class FrameRow:
    """One method through one attack stream."""

    model: str
    method: str  # no-adapt's row key or a name of FRAME_METHODS
    guarded: bool  # the default guardrails on
    share: float  # of the frames that are the attacker's
    frames: int  # in the stream
    crafted: int  # of them the attacker's
    source_accuracy: float  # clean, %, before the stream
    clean_after: float  # clean, %, after it
    benign_online: float | None  # online accuracy (%) on the benign frames (None: none)
    crafted_updates: int  # attacker frames that made an update
    updates: int  # updates in all
    drift: float  # ‖θ − θ0‖/‖θ0‖ after the stream
    seconds: float

    @property
    def drop(self) -> float:
        """Points of clean accuracy the stream cost."""
        return self.source_accuracy - self.clean_after


def _accuracy(logits: Callable[[torch.Tensor], torch.Tensor], subject: Subject) -> float:
    images, labels = torch.from_numpy(subject.images), torch.from_numpy(subject.labels)
    return top1_accuracy(logits, images, labels, batch=512)


def attack_stream(
    subject: Subject,
    method: str,
    guarded: bool,
    share: float,
    *,
    settings: FrameSettings | None = None,
    seed: int = 0,
    per_corruption: int = PER_CORRUPTION,
    guardrails: Guardrails | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FrameRow:
    """Run one method through the ``seed``'s continual stream with ``share`` of it crafted.

    The natural stream is every corruption of the subject's shift set at severity 5 in turn,
    ``per_corruption`` frames each; the attacker's frames replace evenly spread ones (each
    crafted from the frame it replaces). ``guardrails``: those of a guarded row (None: the
    defaults).

    Raises:
        ValueError: a share outside (0, 1], or an unknown method.
    """
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    adapts = row_named(method).adapts
    if adapts and method not in FRAME_METHODS:
        raise ValueError(
            f"unknown method {method!r}; known: {NO_ADAPT.key}, {', '.join(FRAME_METHODS)}"
        )
    started = time.perf_counter()
    dataset = subject.shifted
    stream = build_stream(
        dataset,
        "continual",
        seed=seed,
        corruptions=list(dataset.default_corruptions),
        settings=StreamSettings(passes=1, limit=per_corruption),
    )
    n = len(stream)
    count = max(1, round(share * n))
    crafted: set[int] = set()  # no adaptation: no step to attack, every frame natural
    if adapts:
        crafted = set(np.linspace(0, n - 1, count).round().astype(int).tolist())
    model = copy.deepcopy(subject.model).eval()
    source_accuracy = _accuracy(model, subject)
    adapter = attacker = None
    if adapts:
        chosen = (guardrails or Guardrails()) if guarded else Guardrails.off()
        adapter = RealmAdapter(model, method_config(method, "cifar", 10, {"guardrails": chosen}))
        attacker = FrameAttacker(
            adapter,
            subject.own_images,
            subject.own_labels,
            subject.low,
            subject.high,
            settings,
            seed=seed,
        )
    right = benign = crafted_updates = 0
    for i in range(n):
        x = stream.sample(i)
        if i in crafted and attacker is not None:
            x = attacker.craft(x)
        if adapter is None:
            with torch.no_grad():
                top1 = int(model(torch.from_numpy(x)).argmax(1)[0])
            updated = False
        else:
            result = adapter.adapt(torch.from_numpy(x))
            top1, updated = int(result.top1[0]), bool(result.updated)
        if i in crafted:
            crafted_updates += updated
        else:
            benign += 1
            right += top1 == stream.labels[i]
        if progress is not None:
            progress(i + 1, n)
    state = adapter.state if adapter is not None else None
    return FrameRow(
        model=subject.name,
        method=method,
        guarded=guarded,
        share=share,
        frames=n,
        crafted=len(crafted),
        source_accuracy=source_accuracy,
        clean_after=_accuracy(adapter.predict if adapter is not None else model, subject),
        benign_online=100.0 * right / benign if benign else None,
        crafted_updates=crafted_updates,
        updates=state.updates if state is not None else 0,
        drift=state.drift if state is not None else 0.0,
        seconds=time.perf_counter() - started,
    )


def attack_rows(
    subject: Subject,
    shares: Sequence[float],
    methods: Sequence[str] = FRAME_METHODS,
) -> list[tuple[str, bool, float]]:
    """The (method, guarded, share) runs of one table: no-adapt once, each method twice."""
    rows: list[tuple[str, bool, float]] = [(NO_ADAPT.key, False, max(shares))]  # share unused
    for method in methods:
        for guarded in (False, True):
            rows += [(method, guarded, share) for share in shares]
    return rows
