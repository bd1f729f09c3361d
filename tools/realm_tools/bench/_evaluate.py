"""Online evaluation: feed a labelled stream one batch at a time, score the predictions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from realm_sdk import RealmAdapter


@dataclass
class OnlineResult:
    """Per-run figures of an online pass over a stream."""

    accuracy: float  # share of correct pre-update predictions over the whole stream
    online_accuracy: np.ndarray  # (N,) accuracy over the samples seen so far, after each one
    predictions: np.ndarray  # (N,) predicted classes
    updates: int  # optimizer steps applied
    alpha: list[float] = field(default_factory=list)  # α after each step (REALM)
    lam: list[float] = field(default_factory=list)  # λ after each step (REALM)


def run_online(
    model_or_adapter: nn.Module | RealmAdapter,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    batch_size: int = 1,
    progress: Callable[[int], None] | None = None,
) -> OnlineResult:
    """Run a stream through an adapter (predict, then adapt) or a frozen model (no-adapt).

    Args:
        model_or_adapter: a :class:`RealmAdapter` (adapts online) or a plain module.
        images: ``(N, C, H, W)`` float32, already normalised, in stream order.
        labels: ``(N,)`` integer labels, used for scoring only.
        batch_size: samples per call (the paper's protocol is 1).
        progress: called with the number of samples done after each batch.

    Returns:
        The figures of the run.
    """
    adapter = model_or_adapter if isinstance(model_or_adapter, RealmAdapter) else None
    preds = np.empty(len(images), dtype=np.int64)
    alphas: list[float] = []
    lams: list[float] = []
    for start in range(0, len(images), batch_size):
        x = torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size]))
        if adapter is not None:
            logits = adapter.adapt(x).logits
            st = adapter.state
            if st.alpha is not None and st.lam is not None:
                alphas.append(st.alpha)
                lams.append(st.lam)
        else:
            with torch.no_grad():
                logits = model_or_adapter.eval()(x)
        preds[start : start + len(x)] = logits.argmax(dim=1).numpy()
        if progress is not None:
            progress(start + len(x))
    correct = preds == labels
    online = np.cumsum(correct) / np.arange(1, len(correct) + 1)
    return OnlineResult(
        accuracy=float(correct.mean()),
        online_accuracy=online,
        predictions=preds,
        updates=adapter.state.updates if adapter is not None else 0,
        alpha=alphas,
        lam=lams,
    )
