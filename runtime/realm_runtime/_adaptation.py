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

import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ._checkpoint import COUNTERS, StateArrays, load_state, save_state
from ._config import RealmConfig

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

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._init_adaptation_state()
        self._counters = dict.fromkeys(COUNTERS, 0)

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
            realm = self.config.learns_alpha_lambda
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
            if self.config.episodic:
                self._init_adaptation_state()
            return result

    def reset(self) -> None:
        """Back to the source parameters, α0, λ0, no EMA, zero momentum and zero counters."""
        with self._lock:
            self._init_adaptation_state()
            self._counters = dict.fromkeys(COUNTERS, 0)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole adaptation state to ``path`` atomically (temp file, fsync, rename).

        Parameters, momentum buffers, α, λ, the EMA and the counters are saved; the frozen
        rest of the model is not (it is the source model's). One format for both twins: a
        state saved by one restores into the other, for the same model and configuration.
        The runtime's names its artifacts (their ``manifest_sha256``).
        """
        with self._lock:
            state = self._state_arrays()
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

    # ------------------------------------------------------------------ the step

    def _step(self, x: ArrayT) -> ResultT:
        """SPEC §3 on one batch: predict, decide, step; the counters and the reasons."""
        batch = x.shape[0]  # type: ignore[attr-defined]
        logits, forward = self._forward(x)
        self._counters["samples"] += batch
        if not self._finite(logits):
            self._counters["skipped_nonfinite"] += batch
            return self._result(logits, None, False, None, "nonfinite")

        sel = self._select(logits, forward)
        self._counters["skipped_entropy"] += sel.uncertain
        self._counters["skipped_diversity"] += sel.similar
        n_keep = int(sel.keep.sum())
        if n_keep == 0:
            reason = "entropy" if sel.uncertain == batch else "diversity"
            return self._result(logits, sel, False, None, reason)

        candidate = self._compute(x, forward, sel)
        if not candidate.finite:
            self._counters["skipped_nonfinite"] += n_keep
            return self._result(logits, sel, False, candidate.loss, "nonfinite")

        self._accept(candidate, sel)
        self._counters["updates"] += 1
        self._counters["updated_samples"] += n_keep
        return self._result(logits, sel, True, candidate.loss, "updated")

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
        """Apply a computed step: SGD with momentum, α/λ projection, and the EMA update."""

    @abstractmethod
    def _result(
        self, logits: ArrayT, sel: Any | None, updated: bool, loss: float | None, reason: str
    ) -> ResultT:
        """The twin's ``AdaptResult`` (``sel`` None: nothing selected, non-finite logits)."""

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
