"""What the twins share: one online step's bookkeeping (SPEC §3) and its state snapshot.

``RealmAdapter`` (the PyTorch reference, ``realm_sdk``) and ``RealmRuntime`` (numpy and ONNX
Runtime, this package) run the same step in two frameworks. :class:`OnlineAdaptation` holds
what is the same in both, written once: the public methods and their locking, the order of a
step's decisions, the counters and the reasons, episodic resets, the state snapshot and the
state file. A twin brings only the maths in its own framework, through the hooks below
(forward, S_div, gradients and SGD, EMA) and its input checks.

Torch-free, like the rest of the package: the SDK imports it through ``realm_runtime``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ._checkpoint import StateArrays, load_state, save_state
from ._config import RealmConfig
from ._graph_state import WatchArrays
from ._names import (
    COUNTER_DRIFT_CLIPS,
    COUNTER_RESETS_COLLAPSE,
    COUNTER_RESETS_RECOVERY,
    COUNTER_SAMPLES,
    COUNTER_SKIPPED_DIVERSITY,
    COUNTER_SKIPPED_ENTROPY,
    COUNTER_SKIPPED_NONFINITE,
    COUNTER_UPDATED_SAMPLES,
    COUNTER_UPDATES,
    COUNTERS,
    REASON_DIVERSITY,
    REASON_ENTROPY,
    REASON_FIXED,
    REASON_NONFINITE,
    REASON_UPDATED,
)
from ._step import entropy, log_softmax

ArrayT = TypeVar("ArrayT")  # torch.Tensor in the SDK, np.ndarray in the runtime
ResultT = TypeVar("ResultT")  # each twin's AdaptResult


@dataclass(frozen=True)
class AdaptationState:
    """A snapshot of the adaptation state besides the model parameters, in either twin.

    Counters count samples, except ``updates`` which counts optimizer steps (one per call
    that updated, whatever its batch size).
    """

    alpha: float | None  # shape α of ρ (REALM only)
    lam: float | None  # scale λ of ρ (REALM only)
    alpha_momentum: float | None  # SGD momentum buffer of α
    lam_momentum: float | None  # SGD momentum buffer of λ
    ema: np.ndarray | None  # (C,) EMA of the predictions of updated samples; None before any
    samples: int  # samples seen by adapt()
    updates: int  # optimizer steps applied
    updated_samples: int  # samples that contributed to an applied step
    skipped_diversity: int  # samples refused by S_div (too similar to the EMA)
    skipped_entropy: int  # samples refused by EATA's entropy threshold
    skipped_nonfinite: int  # samples whose step was refused: non-finite logits, loss or grad
    resets_recovery: int  # SAR's model recoveries: its loss EMA fell below e_m
    resets_collapse: int  # guardrail resets: the mean prediction collapsed onto few classes
    drift_clips: int  # updates the drift bound pulled back toward the source
    # What an app can watch (SPEC §10): EMAs over about the last 100 samples, and the drift.
    update_rate: float | None  # share of recent samples that updated; None before any
    entropy_ema: float | None  # mean entropy (nats) of recent predictions; None before any
    marginal: np.ndarray | None  # (C,) mean of recent predictions; None before any
    drift: float  # ‖θ − θ0‖ / ‖θ0‖ of the adapted parameters now
    loss_ema: float | None  # SAR: EMA of its second-pass loss since the last reset


# The watch's constants, which the adapt graph (realm_export) writes as its own: one source.
# WATCH_WINDOW: the samples the watch EMAs average over (a scene, not a frame), and those the
# collapse guard waits for after a reset.
WATCH_WINDOW = 100
WATCH_BETA = 1 - 1 / WATCH_WINDOW  # the watch EMAs' coefficient
# The update rate's EMA in float32, as the adapt graph computes it: the drift bound reads it.
_RATE_BETA, _RATE_NEW = np.float32(WATCH_BETA), np.float32(1 - WATCH_BETA)


@dataclass
class Watch:
    """Running figures of the recent stream, the same in both twins (host floats)."""

    seen: int = 0  # finite samples since the last reset
    update_rate: float | None = None  # EMA of 1 (updated) / 0 per adapt() call
    entropy_ema: float | None = None  # EMA of the prediction entropy per sample
    marginal: np.ndarray | None = None  # (C,) EMA of the predicted probabilities

    def see(self, logits: np.ndarray) -> None:
        """Take one batch's finite logits, sample by sample."""
        z = logits.astype(np.float64)
        for probs, h in zip(np.exp(log_softmax(z)), entropy(z), strict=True):
            self.entropy_ema = _ema(self.entropy_ema, float(h))
            self.marginal = (
                probs.copy()
                if self.marginal is None
                else (WATCH_BETA * self.marginal + (1 - WATCH_BETA) * probs)
            )
            self.seen += 1

    def saw_update(self, updated: bool) -> None:
        """Take one adapt() call's outcome.

        In float32, operation for operation as the adapt graph: its inputs are exactly 0 or
        1, so every implementation holds the same rate, bit for bit, and the drift bound that
        reads it (:meth:`Guardrails.drift_bound`) is the same threshold everywhere.
        """
        new = np.float32(updated)
        old = self.update_rate
        rate = new if old is None else _RATE_BETA * np.float32(old) + _RATE_NEW * new
        self.update_rate = float(rate)


def _ema(old: float | None, new: float) -> float:
    return new if old is None else WATCH_BETA * old + (1 - WATCH_BETA) * new


class OnlineAdaptation(ABC, Generic[ArrayT, ResultT]):
    """One online adaptation step per call, the bookkeeping of both twins (SPEC §3).

    Every public method holds one lock, so an instance may be shared between threads and
    calls are serialised. A subclass sets ``config``, ``_names`` (the adapted norm tensors,
    in ``named_parameters()`` order) and ``_source`` (their source values, by name) and then
    calls ``super().__init__()``; it implements the hooks, each the maths of one part of the
    step in its framework. ``_ema`` (``None`` before the first update) is the twin's own
    array, set by :meth:`_init_adaptation_state` and :meth:`_accept`.
    """

    config: RealmConfig
    _names: list[str]
    _source: dict[str, Any]
    _ema: Any
    _artifacts: str | None = None  # the manifest_sha256 a saved state names (runtime only)
    _state_dtype: type[np.floating] | None = None  # restore casts to it (None: the file's)
    _resets_in_step = False  # the step itself resets an episodic twin (the adapt graph)

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._reset_state()
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._sample_index = 0  # this step's first sample's index in the stream (DeYO's draw)

    # ------------------------------------------------------------------ public API

    @property
    def trainable_names(self) -> list[str]:
        """Adapted parameter names, in ``model.named_parameters()`` order (the same in both)."""
        return list(self._names)

    @abstractmethod
    def trainable_parameters(self) -> dict[str, ArrayT]:
        """Copies of the adapted parameters, keyed as in ``model.named_parameters()``."""

    @abstractmethod
    def momentum_buffers(self) -> dict[str, ArrayT]:
        """Copies of the SGD momentum buffers of the adapted parameters (zeros before a step)."""

    @property
    def state(self) -> AdaptationState:
        """α, λ, their momentum, the EMA and the counters, as a snapshot."""
        with self._lock:
            realm = self.config.rules.learns_alpha_lambda
            alpha, lam, alpha_momentum, lam_momentum = (
                self._alpha_lambda() if realm else (None, None, None, None)
            )
            return AdaptationState(
                alpha=alpha,
                lam=lam,
                alpha_momentum=alpha_momentum,
                lam_momentum=lam_momentum,
                ema=None if self._ema is None else self._to_numpy(self._ema),
                **self._counters,
                update_rate=self._watch.update_rate,
                entropy_ema=self._watch.entropy_ema,
                marginal=None if self._watch.marginal is None else self._watch.marginal.copy(),
                drift=self._relative_drift(),
                loss_ema=self._loss_ema,
            )

    def predict(self, x: ArrayT) -> ArrayT:
        """Logits of the current model for ``x``, without any update.

        Args:
            x: ``(B, *input)``: a floating-point tensor on :attr:`device` of the model's dtype
                (``RealmAdapter``), float32 C-contiguous in native byte order
                (``RealmRuntime``); finite.

        Returns:
            ``(B, num_classes)`` logits, of the twin's array type.

        Raises:
            ValueError: bad input, naming the problem.
        """
        self._check_input(x)
        with self._lock:
            return self._infer(x)

    def adapt(self, x: ArrayT) -> ResultT:
        """Predict on ``x``, then take at most one adaptation step (SPEC §3).

        Args:
            x: as for :meth:`predict`; B = 1 is the on-device protocol, B > 1 a convenience
                (per-sample S_div against one EMA, the mean loss of the selected samples).

        Returns:
            An ``AdaptResult``: the pre-update logits, probabilities and top-1, and what the
            step did (``selected``, ``updated``, ``loss``, ``reason``).

        Raises:
            ValueError: bad input, naming the problem; nothing changes.
        """
        self._check_input(x)
        with self._lock:
            result = self._step(x)
            if self.config.episodic and not self._resets_in_step:
                self._reset_state()
            return result

    def reset(self) -> None:
        """Back to the source parameters, α0, λ0, no EMA, zero momentum and zero counters."""
        with self._lock:
            self._reset_state()
            self._counters = dict.fromkeys(COUNTERS, 0)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole adaptation state to ``path`` atomically (temp file, fsync, rename).

        Parameters, momentum buffers, α, λ, the EMA and the counters are saved; the frozen
        rest of the model is not (it is the source model's). One format for both twins: a
        state saved by one restores into the other, for the same model and configuration.
        The runtime's names its artifacts (their ``manifest_sha256``).
        """
        with self._lock:
            state = dataclasses.replace(self._state_arrays(), watch=self._watch_arrays())
        save_state(path, state, self.config, artifacts=self._artifacts)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Load a state written by :meth:`save` of either twin.

        Everything is read and checked before anything is assigned: a state that does not
        fit (method, class count, parameter names or shapes, non-finite values, α or λ out
        of bounds, a state saved with other artifacts) raises and changes nothing.

        Raises:
            FileNotFoundError: no such file.
            ValueError: unreadable file, or a state that does not fit.
        """
        shapes = {n: tuple(self._source[n].shape) for n in self._names}
        state = load_state(path, self.config, shapes, self._artifacts, dtype=self._state_dtype)
        with self._lock:
            self._assign_state(state)
            self._counters = dict(state.counters)
            self._take_watch(state.watch)

    # ------------------------------------------------------------------ the step

    def _watch_arrays(self) -> WatchArrays:
        w = self._watch

        # float32 in the file, as every other array: the clients read and write only that.
        def scalar(v: float | None) -> np.ndarray | None:
            return None if v is None else np.array(v, np.float32)

        return WatchArrays(
            seen=w.seen,
            update_rate=scalar(w.update_rate),
            entropy_ema=scalar(w.entropy_ema),
            marginal=None if w.marginal is None else w.marginal.astype(np.float32),
            loss_ema=scalar(self._loss_ema),
        )

    def _take_watch(self, arrays: WatchArrays | None) -> None:
        if arrays is None:
            self._watch, self._loss_ema = Watch(), None
            return

        def scalar(v: np.ndarray | None) -> float | None:
            return None if v is None else float(v)

        self._watch = Watch(
            seen=arrays.seen,
            update_rate=scalar(arrays.update_rate),
            entropy_ema=scalar(arrays.entropy_ema),
            marginal=None if arrays.marginal is None else arrays.marginal.astype(np.float64),
        )
        self._loss_ema = scalar(arrays.loss_ema)

    def _reset_state(self) -> None:
        """The twin's source state, and the shared watch values back to none."""
        self._init_adaptation_state()
        self._loss_ema: float | None = None
        self._watch = Watch()

    def _step(self, x: ArrayT) -> ResultT:
        """SPEC §3 on one batch: predict, decide, step, guard; the counters and the reasons."""
        batch = x.shape[0]  # type: ignore[attr-defined]
        self._sample_index = self._counters[COUNTER_SAMPLES]  # the first of this batch's
        logits, forward = self._forward(x)
        self._counters[COUNTER_SAMPLES] += batch
        finite = self._finite(logits)
        if finite:
            self._watch.see(self._to_numpy(logits))
        result = self._decide_and_step(x, logits, forward, finite, batch)
        self._watch.saw_update(bool(result.updated))  # type: ignore[attr-defined]
        if finite:
            self._guard_collapse()
        return result

    def _decide_and_step(
        self, x: ArrayT, logits: ArrayT, forward: Any, finite: bool, batch: int
    ) -> ResultT:
        if not finite:
            self._counters[COUNTER_SKIPPED_NONFINITE] += batch
            return self._result(logits, None, False, None, REASON_NONFINITE)
        if not self.config.rules.updates:  # TTAug: the prediction was all of it
            return self._result(logits, None, False, None, REASON_FIXED)

        sel = self._select(logits, forward)
        self._counters[COUNTER_SKIPPED_ENTROPY] += sel.uncertain
        self._counters[COUNTER_SKIPPED_DIVERSITY] += sel.similar
        n_keep = int(sel.keep.sum())
        if n_keep == 0:
            reason = REASON_ENTROPY if sel.uncertain == batch else REASON_DIVERSITY
            return self._result(logits, sel, False, None, reason)

        candidate = self._compute(x, forward, sel)
        kept = n_keep if candidate.kept is None else candidate.kept
        if kept == 0:  # the step's own cut refused every kept sample (SAR at θ + ε, DeYO)
            self._counters[COUNTER_SKIPPED_ENTROPY] += n_keep
            return self._result(logits, sel, False, candidate.loss, REASON_ENTROPY)
        if not candidate.finite:
            self._counters[COUNTER_SKIPPED_NONFINITE] += n_keep
            return self._result(logits, sel, False, candidate.loss, REASON_NONFINITE)

        self._accept(candidate, sel)
        self._counters[COUNTER_UPDATES] += 1
        self._counters[COUNTER_UPDATED_SAMPLES] += kept
        self._counters[COUNTER_SKIPPED_ENTROPY] += n_keep - kept
        self._guard_update()
        if self.config.rules.recovery:
            self._recover(candidate.loss)
        if self.config.rules.predicts_after_step:  # MEMO's order: the sample after its step
            logits = self._infer(x)
        return self._result(logits, sel, True, candidate.loss, REASON_UPDATED)

    def _guard_update(self) -> None:
        """The hard drift bound, after an applied update (relax and anchor are the update's)."""
        bound = self.config.guard.drift_bound(self._watch.update_rate)  # the rate before this call
        if bound is not None:
            drift = self._relative_drift()
            if drift > bound:
                self._pull_toward_source(bound / drift)
                self._counters[COUNTER_DRIFT_CLIPS] += 1

    def _guard_collapse(self) -> None:
        """Back to the source when recent predictions fall onto few classes (a collapse).

        Only a model that has moved is reset: the source's own predictions are no collapse
        to recover from (a stream of one class stays one class).
        """
        limit = self.config.guard.collapse_limit(self.config.num_classes)
        marginal = self._watch.marginal
        if limit is None or marginal is None or self._watch.seen < WATCH_WINDOW:
            return
        spread = float(-(marginal * np.log(np.maximum(marginal, 1e-12))).sum())
        if spread < limit and self._relative_drift() > 0:
            self._reset_state()
            self._counters[COUNTER_RESETS_COLLAPSE] += 1

    def _relative_drift(self) -> float:
        """‖θ − θ0‖ / ‖θ0‖ over every adapted norm tensor (0 for a zero source)."""
        moved, source = self._drift_norms()
        return moved / source if source > 0 else 0.0

    def _recover(self, loss: float) -> None:
        """SAR's model recovery: back to the source when the EMA of its loss falls below e_m.

        A low loss EMA means the model has become confidently wrong (SAR's collapse sign).
        """
        assert self.config.settings is not None  # resolved on construction
        self._loss_ema, recovers = self.config.settings.recover(self._loss_ema, loss)
        if recovers:
            self._reset_state()
            self._counters[COUNTER_RESETS_RECOVERY] += 1

    # ------------------------------------------------------------------ hooks: the maths

    @abstractmethod
    def _check_input(self, x: object) -> None:
        """Raise ``ValueError`` naming the problem if ``x`` is not a usable batch."""

    @abstractmethod
    def _infer(self, x: ArrayT) -> ArrayT:
        """Logits of the current parameters, no update."""

    @abstractmethod
    def _forward(self, x: ArrayT) -> tuple[ArrayT, Any]:
        """The pre-update logits, and what of this forward the step may reuse.

        (The SDK: the logits with their autograd graph; the runtime: a training call's
        candidate where its schedule trained first, else ``None``.)
        """

    @abstractmethod
    def _finite(self, logits: ArrayT) -> bool:
        """Whether every logit is finite."""

    @abstractmethod
    def _select(self, logits: ArrayT, forward: Any) -> Any:
        """EATA's entropy cut and S_div, on the pre-update logits.

        Returns an object with ``keep`` ((B,) bool), ``probs`` ((B, C) softmax),
        ``uncertain`` and ``similar`` (the samples refused by each filter).
        """

    @abstractmethod
    def _compute(self, x: ArrayT, forward: Any, sel: Any) -> Any:
        """The loss of the kept samples and its gradients, applying nothing.

        Returns an object with ``loss`` (float) and ``finite`` (the loss and every gradient
        are finite), which :meth:`_accept` applies.
        """

    @abstractmethod
    def _accept(self, candidate: Any, sel: Any) -> None:
        """Apply a computed step: SGD, α/λ projection, relax and anchor (SPEC §10), the EMA."""

    @abstractmethod
    def _result(
        self, logits: ArrayT, sel: Any | None, updated: bool, loss: float | None, reason: str
    ) -> ResultT:
        """The twin's ``AdaptResult`` (``sel`` None: nothing selected, non-finite logits)."""

    @abstractmethod
    def _drift_norms(self) -> tuple[float, float]:
        """``(‖θ − θ0‖, ‖θ0‖)`` over every adapted norm tensor (α, λ excluded)."""

    @abstractmethod
    def _pull_toward_source(self, share: float) -> None:
        """``θ ← θ0 + share·(θ − θ0)`` for every adapted norm tensor (momentum unchanged)."""

    @abstractmethod
    def _init_adaptation_state(self) -> None:
        """Source parameters, α0, λ0, zero momentum buffers and no EMA (not the counters)."""

    @abstractmethod
    def _alpha_lambda(self) -> tuple[float, float, float, float]:
        """α, λ and their momentum buffers as floats (REALM only)."""

    @abstractmethod
    def _to_numpy(self, a: ArrayT) -> np.ndarray:
        """A host numpy copy of one of the twin's arrays."""

    @abstractmethod
    def _state_arrays(self) -> StateArrays:
        """The whole state as host arrays, copies (the content of a state file)."""

    @abstractmethod
    def _assign_state(self, state: StateArrays) -> None:
        """Take a checked state (everything but the counters)."""
