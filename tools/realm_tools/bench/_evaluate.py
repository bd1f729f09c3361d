"""The online evaluation loop: a labelled stream one batch at a time, predictions scored.

The one loop the demo and every accuracy benchmark run their streams through: a torch
adapter, ``RealmRuntime`` or a frozen model, on an array of images or any sequence that
slices into batches (a lazily read data set, a long-running stream).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class _Adapting(Protocol):
    """What the loop reads of an adapter: either twin (``RealmAdapter``, ``RealmRuntime``)."""

    def adapt(self, x: Any) -> Any: ...

    @property
    def state(self) -> Any: ...


@dataclass
class OnlineResult:
    """Per-run figures of an online pass over a stream."""

    accuracy: float  # share of correct pre-update predictions over the whole stream
    online_accuracy: np.ndarray  # (N,) accuracy over the samples seen so far, after each one
    predictions: np.ndarray  # (N,) predicted classes
    updates: int  # optimizer steps applied
    alpha: list[float] = field(default_factory=list)  # α after each step (REALM)
    lam: list[float] = field(default_factory=list)  # λ after each step (REALM)
    seconds: np.ndarray = field(default_factory=lambda: np.empty(0))  # (calls,) each call's time


def run_online(
    subject: Any,
    images: np.ndarray | Sequence[np.ndarray],
    labels: np.ndarray,
    *,
    batch_size: int = 1,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[int], None] | None = None,
    alpha_lambda: bool = True,
) -> OnlineResult:
    """Run a stream through an adapter (predict, then adapt) or a frozen model (no-adapt).

    Args:
        subject: an adapter, either twin (``RealmAdapter``, ``RealmRuntime``: anything with
            ``adapt`` and ``state``), or a frozen model: a torch module, or a function from a
            numpy batch to its logits.
        images: ``(N, C, H, W)`` float32, already normalised, in stream order, or a sequence
            whose slices are such batches.
        labels: ``(N,)`` integer labels, used for scoring only.
        batch_size: samples per call (the paper's protocol is 1).
        progress: called with the number of samples done after each batch.
        on_step: called with the number of samples done after each call, before ``progress``
            (a caller's own traces: the adapter's state is the step's).
        alpha_lambda: read α and λ after each step (a snapshot of the adapter's state per
            call; False where the caller takes its own, more sparsely).

    Returns:
        The figures of the run.
    """
    adapter: _Adapting | None = subject if hasattr(subject, "adapt") else None
    classify = _adapting(adapter) if adapter is not None else _frozen(subject)
    n = len(images)
    preds = np.empty(n, dtype=np.int64)
    seconds = np.empty((n + batch_size - 1) // batch_size)
    alphas: list[float] = []
    lams: list[float] = []
    for call, start in enumerate(range(0, n, batch_size)):
        x = np.ascontiguousarray(images[start : start + batch_size])
        began = time.perf_counter()
        top1 = classify(x)
        seconds[call] = time.perf_counter() - began
        preds[start : start + len(x)] = top1
        if adapter is not None and alpha_lambda:
            st = adapter.state
            if st.alpha is not None and st.lam is not None:
                alphas.append(float(st.alpha))
                lams.append(float(st.lam))
        if on_step is not None:
            on_step(start + len(x))
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
        seconds=seconds,
    )


def _frozen(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A frozen model as ``batch -> predicted classes``, in eval mode and without gradients."""
    torch = sys.modules.get("torch")  # a torch module exists only where torch is imported
    if torch is None or not isinstance(model, torch.nn.Module):
        return lambda x: np.asarray(model(x)).argmax(1)
    model.eval()

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(x)).argmax(1).numpy()

    return predict


def _adapting(adapter: _Adapting) -> Callable[[np.ndarray], np.ndarray]:
    """An adapter as ``batch -> predicted classes`` (pre-update), taking its step on the way."""
    sdk = sys.modules.get("realm_sdk")  # looked up, not imported: the runtime needs no torch
    if sdk is not None and isinstance(adapter, sdk.RealmAdapter):
        tensor = sys.modules["torch"].from_numpy  # the torch twin takes tensors
        return lambda x: adapter.adapt(tensor(x)).top1.numpy()
    return lambda x: np.asarray(adapter.adapt(x).top1)
