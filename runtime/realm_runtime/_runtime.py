"""``RealmRuntime``: per-sample REALM adaptation on exported artifacts, numpy + ORT, no torch."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._backend import BACKENDS, BackendName, Candidate, StepBackend, parse_device
from ._checkpoint import COUNTERS, StateArrays, load_state, save_state
from ._config import RealmConfig
from ._manifest import (
    ALPHA_NAME,
    LAMBDA_NAME,
    MANIFEST_NAME,
    ArtifactError,
    Manifest,
    load_manifest,
)
from ._step import F32, Selection, ema_update, select, softmax

Schedule = Literal["auto", "train", "infer-first"]
GraphFormat = Literal["auto", "onnx", "ort"]
# Fields baked into the exported graph or its trainable set: not overridable at run time.
REPROBE_EVERY = 100  # auto schedule: samples between re-timings of the path not taken
# auto schedule: a graph's cost is the fastest of its last few timed calls (noise and stalls
# only ever add time, and one slow call must not pin the choice)
TIMING_WINDOW = 8

_GRAPH_FIELDS = frozenset(
    {
        "num_classes",
        "method",
        "alpha0",
        "lambda0",
        "loss_scale",
        "frozen",
        "freeze_last_block",
        "preset_name",
    }
)


@dataclass(frozen=True)
class RuntimeState:
    """α, λ, their momentum, the EMA and the counters (the SDK's ``AdaptationState`` fields)."""

    alpha: float | None  # shape α of ρ (REALM only)
    lam: float | None  # scale λ of ρ (REALM only)
    alpha_momentum: float | None  # SGD momentum buffer of α
    lam_momentum: float | None  # SGD momentum buffer of λ
    ema: np.ndarray | None  # (C,) EMA of the predictions of updated samples
    samples: int  # samples seen by adapt()
    updates: int  # optimizer steps applied
    updated_samples: int  # samples that contributed to an applied step
    skipped_diversity: int  # samples refused by S_div
    skipped_entropy: int  # samples refused by EATA's entropy threshold
    skipped_nonfinite: int  # samples whose step was refused: non-finite logits, loss or grad


@dataclass(frozen=True)
class AdaptResult:
    """What one :meth:`RealmRuntime.adapt` call returns."""

    logits: np.ndarray  # (B, C) pre-update logits: this step's prediction
    probs: np.ndarray  # (B, C) softmax of the logits
    top1: np.ndarray  # (B,) predicted classes
    selected: np.ndarray  # (B,) bool: samples that passed the entropy and S_div filters
    updated: bool  # whether the parameters changed
    loss: float | None  # loss of the selected samples, when a step was computed
    reason: str  # "updated", "diversity", "entropy" or "nonfinite"


class RealmRuntime:
    """Online REALM (or Tent/EATA) adaptation on artifacts written by ``realm export``.

    Needs numpy and onnxruntime-training only. The manifest is checked (format version,
    SHA-256 of every file, ORT version, trainable names) before anything is loaded.

    Two backends run the same step (SPEC §8): ``"onnx"``, the portable step graph on a plain
    ``onnxruntime.InferenceSession`` (any onnxruntime ≥ 1.19, CPU or CUDA, any Python), and
    ``"ort-training"``, the ONNX Runtime training artifacts (onnxruntime-training 1.19.2,
    Python 3.11). ``"auto"`` (default) takes the portable graph where the artifacts have one.

    A call costs one forward and at most one backward. Two schedules give the same result
    (SPEC §3): ``"train"`` runs the step graph at once and uses its logits as the prediction
    (a backward is spent on samples that S_div then skips); ``"infer-first"`` runs the
    forward-only graph, decides, and runs the step only for samples that update. ``"auto"``
    (default) measures both and picks the cheaper for the observed update rate.

    Every public method holds one lock: an instance may be shared between threads, and calls
    are serialised.

    Args:
        artifact_dir: the directory written by ``realm export``.
        device: ``"cpu"`` or ``"cuda"`` / ``"cuda:N"`` (onnxruntime-gpu on the onnx backend,
            the CUDA build of onnxruntime-training on the other).
        threads: intra-op threads of ONNX Runtime (None: its default, all cores).
        schedule: ``"auto"``, ``"train"`` or ``"infer-first"``.
        overrides: configuration fields to change on the device without re-exporting: those
            the runtime applies (``lr``, ``lr_alpha_lambda``, ``momentum``,
            ``diversity_margin``, ``ema_beta``, ``entropy_margin``, ``episodic``).
        backend: ``"auto"``, ``"onnx"`` or ``"ort-training"``.
        session_config: ONNX Runtime session configuration entries for the backend's
            sessions, e.g. ``{"session.disable_prepacking": "1"}``: vit_base's step session
            then peaks at 1141 MB instead of 1596, for a step ~8 % slower (measured on
            2 cores; docs/BENCHMARKS.md).
        graph_format: which files the onnx backend loads: ``"onnx"``, ``"ort"`` (the
            ORT-format copies of ``realm export --ort-format``, made for ONNX Runtime's mobile
            and minimal builds), or ``"auto"`` (default): ``"ort"`` where the export wrote
            them. Same step either way; on x86 the ``.ort`` graphs (converted for ARM) run
            resnet50_gn's step 8–9 % slower than the ``.onnx`` ones (README).
        trusted_keys: Ed25519 public keys (``.pub`` files, their base64 text, 32 raw bytes)
            of whoever may sign artifacts: unsigned artifacts, another key or a bad signature
            are refused before any graph is read. None (default): a signature is not
            required, but one that is present must verify.

    Raises:
        ArtifactError: missing, tampered, truncated or incompatible artifacts, or a backend
            whose graphs the artifacts lack.
        RuntimeError: ``device="cuda"`` without a CUDA-capable onnxruntime.
    """

    def __init__(
        self,
        artifact_dir: str | os.PathLike[str],
        device: str = "cpu",
        threads: int | None = None,
        schedule: Schedule = "auto",
        overrides: dict[str, Any] | None = None,
        backend: BackendName = "auto",
        session_config: dict[str, str] | None = None,
        graph_format: GraphFormat = "auto",
        trusted_keys: Iterable[object] | None = None,
    ) -> None:
        if graph_format not in ("auto", "onnx", "ort"):
            raise ValueError(f"graph_format must be 'auto', 'onnx' or 'ort', got {graph_format!r}")
        if schedule not in ("auto", "train", "infer-first"):
            raise ValueError(f"schedule must be 'auto', 'train' or 'infer-first', got {schedule!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        parse_device(device)  # a ValueError naming the accepted values, before any loading
        self.directory = Path(artifact_dir)
        self.manifest: Manifest = load_manifest(self.directory, trusted_keys=trusted_keys)
        baked = sorted(set(overrides or {}) & _GRAPH_FIELDS)
        if baked:
            raise ValueError(
                f"{baked} are part of the exported graph or parameter selection; "
                "re-export to change them"
            )
        try:
            RealmConfig.from_dict(self.manifest.config)
        except ValueError as exc:
            raise ArtifactError(f"{self.directory / MANIFEST_NAME}: its config: {exc}") from exc
        self.config = RealmConfig.from_dict({**self.manifest.config, **(overrides or {})})
        self.device = device
        self.schedule: Schedule = schedule
        if session_config is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in session_config.items()
        ):
            raise ValueError(f"session_config must map str to str, got {session_config!r}")
        try:
            self._backend: StepBackend = open_backend(
                backend,
                self.directory,
                self.manifest,
                self.config,
                device,
                threads,
                session_config,
                graph_format,
            )
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            # The manifest passed its checks but a field the backend reads does not fit (a
            # re-sealed edit, or a writer this library does not know): say where, not a
            # KeyError from deep inside.
            raise ArtifactError(
                f"{self.directory / MANIFEST_NAME}: a field the {backend} backend reads is "
                f"missing or of the wrong type ({type(exc).__name__}: {exc})"
            ) from exc
        self.backend: str = self._backend.name
        # The graphs' file format: "ort" where the onnx backend runs the ORT-format copies.
        self.graph_format: str = self._backend.graph_format
        self._all_trainable = list(self._backend.names)
        self._names = [n for n in self._all_trainable if n not in (ALPHA_NAME, LAMBDA_NAME)]
        self._source, _ = self._backend.tensors()
        spec = self.manifest.input
        self._sample_shape = tuple(int(d) for d in spec.shape[1:])
        self._static_batch = spec.shape[0] if isinstance(spec.shape[0], int) else None
        self._lock = threading.RLock()
        self._recent: dict[str, deque[float]] = {  # seconds of the last timed calls
            "train": deque(maxlen=TIMING_WINDOW),
            "infer": deque(maxlen=TIMING_WINDOW),
        }
        self._timed = {"train": 0, "infer": 0}  # calls of each graph so far
        self._rate = 1.0  # EMA of the share of samples that update
        self._calls = 0
        self._init_adaptation_state()
        self._counters = dict.fromkeys(COUNTERS, 0)

    # ------------------------------------------------------------------ public API

    @property
    def trainable_names(self) -> list[str]:
        """Adapted parameter names (as the SDK's and the model's ``named_parameters()``)."""
        return list(self._names)

    def trainable_parameters(self) -> dict[str, np.ndarray]:
        """Copies of the adapted norm parameters, keyed like the SDK's."""
        with self._lock:
            values, _ = self._backend.tensors()
            return {n: values[n] for n in self._names}

    def momentum_buffers(self) -> dict[str, np.ndarray]:
        """Copies of the SGD momentum buffers of the adapted parameters."""
        with self._lock:
            _, velocity = self._backend.tensors()
            return {n: velocity[n] for n in self._names}

    @property
    def state(self) -> RuntimeState:
        """A snapshot of α, λ, their momentum, the EMA and the counters."""
        with self._lock:
            realm = self.config.learns_alpha_lambda
            values, velocity = self._backend.tensors() if realm else ({}, {})
            return RuntimeState(
                alpha=float(values[ALPHA_NAME]) if realm else None,
                lam=float(values[LAMBDA_NAME]) if realm else None,
                alpha_momentum=float(velocity[ALPHA_NAME]) if realm else None,
                lam_momentum=float(velocity[LAMBDA_NAME]) if realm else None,
                ema=None if self._ema is None else self._ema.copy(),
                **self._counters,
            )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Logits of the current model for ``x``, without any update.

        Args:
            x: float32 ``(B, *input)``, C-contiguous, native byte order, finite.

        Returns:
            ``(B, num_classes)`` float32 logits.

        Raises:
            ValueError: bad input, naming the problem.
        """
        self._check_input(x)
        with self._lock:
            return self._infer(x)

    def adapt(self, x: np.ndarray) -> AdaptResult:
        """Predict on ``x``, then take at most one adaptation step (SPEC §3).

        Args:
            x: float32 ``(B, *input)``, C-contiguous, native byte order, finite; B = 1 is the
                on-device protocol, B > 1 a convenience.

        Returns:
            The pre-update logits, probabilities and top-1, and what the step did.

        Raises:
            ValueError: bad input, naming the problem; nothing changes.
        """
        self._check_input(x)
        with self._lock:
            result = self._adapt(x)
            if self.config.episodic:
                self._init_adaptation_state()
            return result

    def reset(self) -> None:
        """Back to the exported source parameters, α0, λ0, no EMA, zero momentum and counters."""
        with self._lock:
            self._init_adaptation_state()
            self._counters = dict.fromkeys(COUNTERS, 0)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole adaptation state atomically (temp file, fsync, rename).

        The format is the SDK's: a state saved here restores into a ``RealmAdapter`` of the
        same model and configuration, and the other way round. It names these artifacts
        (their ``manifest_sha256``); :meth:`restore` of other artifacts refuses it.
        """
        with self._lock:
            values, velocity = self._backend.tensors()
            state = StateArrays(
                params={n: values[n] for n in self._names},
                momentum={n: velocity[n] for n in self._names},
                alpha=values.get(ALPHA_NAME, np.array(self.config.alpha0, F32)),
                lam=values.get(LAMBDA_NAME, np.array(self.config.lambda0, F32)),
                alpha_momentum=velocity.get(ALPHA_NAME, np.zeros((), F32)),
                lam_momentum=velocity.get(LAMBDA_NAME, np.zeros((), F32)),
                ema=self._ema,
                counters=dict(self._counters),
            )
            save_state(path, state, self.config, artifacts=self.manifest.digest)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Load a state written by :meth:`save` or by ``RealmAdapter.save``.

        Everything is read and checked first; a state that does not fit (method, classes,
        names, shapes, non-finite values, α or λ out of bounds, a state saved with other
        artifacts) raises and changes nothing.

        Raises:
            FileNotFoundError: no such file.
            ValueError: unreadable file or a state that does not fit these artifacts.
        """
        shapes = {n: self._source[n].shape for n in self._names}
        state = load_state(path, self.config, shapes, self.manifest.digest, dtype=F32)
        values, velocity = dict(state.params), dict(state.momentum)
        if self.config.learns_alpha_lambda:
            values[ALPHA_NAME], values[LAMBDA_NAME] = state.alpha, state.lam
            velocity[ALPHA_NAME], velocity[LAMBDA_NAME] = state.alpha_momentum, state.lam_momentum
        with self._lock:
            self._backend.load(values, velocity)
            self._ema = state.ema
            self._counters = dict(state.counters)

    def export_inference_model(self, path: str | os.PathLike[str]) -> None:
        """Write the adapted model as a plain ONNX inference model (``input`` → ``logits``).

        Written to a temporary file beside ``path`` and renamed into place.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            with self._lock:
                self._backend.export_inference_model(tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ internals

    def _init_adaptation_state(self) -> None:
        self._backend.load(self._source, {n: np.zeros_like(v) for n, v in self._source.items()})
        self._ema: np.ndarray | None = None

    def _check_input(self, x: object) -> None:
        if not isinstance(x, np.ndarray):
            raise ValueError(f"input must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype.kind != "f":
            raise ValueError(f"input dtype must be float32, got {x.dtype}")
        if not x.dtype.isnative:
            raise ValueError(
                f"input is in non-native byte order ({x.dtype.str}): convert it "
                "with x.astype(np.float32)"
            )
        if x.dtype != np.float32:
            raise ValueError(f"input dtype must be float32, got {x.dtype}")
        want = len(self._sample_shape) + 1
        if x.ndim != want:
            raise ValueError(
                f"input must have rank {want} (batch, "
                f"{', '.join(map(str, self._sample_shape))}), got shape {x.shape}"
            )
        if tuple(x.shape[1:]) != self._sample_shape:
            raise ValueError(
                f"input shape {x.shape} does not match the exported "
                f"(batch, {', '.join(map(str, self._sample_shape))})"
            )
        if x.shape[0] < 1:
            raise ValueError(f"input batch is empty (shape {x.shape})")
        if self._static_batch is not None and x.shape[0] != self._static_batch:
            raise ValueError(
                f"these artifacts were exported for batch {self._static_batch}, got {x.shape[0]}"
            )
        if not x.flags.c_contiguous:
            raise ValueError("input is not C-contiguous: pass np.ascontiguousarray(x)")
        if not np.isfinite(x).all():
            raise ValueError(
                f"input contains non-finite values ({int(np.isnan(x).sum())} NaN, "
                f"{int(np.isinf(x).sum())} Inf)"
            )

    def _check_step_batch(self, x: np.ndarray) -> None:
        limit = self._backend.max_batch
        if limit is not None and x.shape[0] > limit:
            raise ValueError(
                f"the {self.backend} backend adapts on batches of at most {limit} sample "
                f"(its step graph is exported for the on-device protocol), got batch "
                f"{x.shape[0]}: call adapt() per sample, or use backend='ort-training'"
            )

    def _infer(self, x: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        logits = self._backend.infer(x)
        self._note_time("infer", time.perf_counter() - start)
        return logits

    def _compute(
        self, x: np.ndarray, weights: np.ndarray, eata_factor: np.ndarray | None
    ) -> Candidate:
        start = time.perf_counter()
        candidate = self._backend.compute(x, weights, eata_factor)
        self._note_time("train", time.perf_counter() - start)
        return candidate

    def _note_time(self, kind: str, seconds: float) -> None:
        self._timed[kind] += 1
        if self._timed[kind] == 1:
            return  # a graph's first call includes ORT's lazy set-up: not its cost per sample
        self._recent[kind].append(seconds)

    def _cost(self, kind: str) -> float:
        """Seconds per call of a graph: the fastest recent call (0.0 before any)."""
        return min(self._recent[kind], default=0.0)

    def _train_first(self, batch: int) -> bool:
        """Schedule choice: one training call (a), or inference first (b) (SPEC §3, Cost)."""
        if batch != 1 or self.schedule == "infer-first":
            return False  # B > 1: the loss weights depend on the decisions, so decide first
        if self.schedule == "train":
            return True
        t_train, t_infer = self._cost("train"), self._cost("infer")
        if t_train == 0.0:  # measure (a) first (its first call is set-up, then one timed)...
            return True
        if t_infer == 0.0:  # ... then (b)
            return False
        train_first = t_infer + self._rate * t_train >= t_train
        if self._calls % REPROBE_EVERY == 0:
            # (a) never runs the forward-only graph: re-time the path not taken now and then,
            # so one slow measurement cannot pin the choice for the rest of the stream.
            return not train_first
        return train_first

    def _adapt(self, x: np.ndarray) -> AdaptResult:
        cfg = self.config
        batch = x.shape[0]
        self._check_step_batch(x)
        train_first = self._train_first(batch)
        self._calls += 1
        candidate: Candidate | None = None
        if train_first:  # batch 1: weight 1; EATA's factor is taken from the same logits
            candidate = self._compute(x, np.ones(1, dtype=F32), None)
            logits = candidate.logits
        else:
            logits = self._infer(x)
        self._counters["samples"] += batch
        if not np.isfinite(logits).all():
            self._counters["skipped_nonfinite"] += batch
            return self._result(logits, None, np.zeros(batch, bool), False, None, "nonfinite")

        sel: Selection = select(logits, self._ema, cfg)
        self._counters["skipped_entropy"] += sel.uncertain
        self._counters["skipped_diversity"] += sel.similar
        n_keep = int(sel.keep.sum())
        self._rate = 0.95 * self._rate + 0.05 * (n_keep / batch)
        if n_keep == 0:
            reason = "entropy" if sel.uncertain == batch else "diversity"
            return self._result(logits, sel.probs, sel.keep, False, None, reason)

        if candidate is None:
            candidate = self._compute(x, sel.weights, sel.eata_factor)
        if not candidate.finite:
            self._counters["skipped_nonfinite"] += n_keep
            return self._result(logits, sel.probs, sel.keep, False, candidate.loss, "nonfinite")

        self._backend.accept(candidate)
        self._ema = ema_update(self._ema, sel.probs[sel.keep], cfg.ema_beta)
        self._counters["updates"] += 1
        self._counters["updated_samples"] += n_keep
        return self._result(logits, sel.probs, sel.keep, True, candidate.loss, "updated")

    @staticmethod
    def _result(
        logits: np.ndarray,
        probs: np.ndarray | None,
        keep: np.ndarray,
        updated: bool,
        loss: float | None,
        reason: str,
    ) -> AdaptResult:
        if probs is None:  # non-finite logits: NaN probabilities, without numpy warnings
            with np.errstate(all="ignore"):
                probs = softmax(logits)
        return AdaptResult(logits, probs, logits.argmax(axis=1), keep, updated, loss, reason)


def open_backend(
    backend: BackendName,
    directory: Path,
    manifest: Manifest,
    config: RealmConfig,
    device: str,
    threads: int | None,
    session_config: dict[str, str] | None = None,
    graph_format: GraphFormat = "auto",
) -> StepBackend:
    """The backend asked for; ``"auto"``: the portable graph where the artifacts have one.

    Each backend's module is imported only when chosen, so the onnx backend never touches
    onnxruntime-training and the other never needs a current onnxruntime.
    """
    if backend == "auto":
        backend = "onnx" if manifest.portable.get("step_model") else "ort-training"
    if backend == "onnx":
        from ._backend_onnx import PortableBackend

        return PortableBackend(
            directory, manifest, config, device, threads, session_config, graph_format
        )
    if graph_format == "ort":
        raise ValueError(
            "graph_format='ort' runs the portable graphs' ORT-format copies: it needs the onnx "
            "backend, not ort-training"
        )
    from ._backend_training import TrainingBackend

    return TrainingBackend(directory, manifest, config, device, threads, session_config)
