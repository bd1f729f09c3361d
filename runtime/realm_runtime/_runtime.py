"""``RealmRuntime``: per-sample REALM adaptation on exported artifacts, numpy + ORT, no torch."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import numpy as np

from ._adaptation import AdaptationState, OnlineAdaptation
from ._backend import (
    BACKENDS,
    BackendName,
    BackendRequest,
    Candidate,
    GraphFormat,
    StepBackend,
    parse_device,
)
from ._backend_choice import choose_backend, open_backend
from ._checkpoint import StateArrays
from ._config import RealmConfig
from ._graph_state import Slots, read_watch_tensors, watch_tensors
from ._inputs import check_input_shape, input_dtype_error, input_nonfinite_error, input_type_error
from ._manifest import Manifest, load_manifest
from ._names import (
    ADAPT_COUNTERS_KEY,
    ADAPT_KNOWN_KEY,
    ADAPT_LOGITS_KEY,
    ADAPT_LOSS_KEY,
    ADAPT_REASON_KEY,
    ADAPT_REASONS_KEY,
    ADAPT_SELECTED_KEY,
    ADAPT_UPDATED_KEY,
    ADAPT_WATCH_KEY,
    ALPHA_NAME,
    LAMBDA_NAME,
    MANIFEST_NAME,
)
from ._ort import DEFAULT_SESSION_CONFIG
from ._step import F32, Selection, ema_update, select, softmax
from ._untrusted import ArtifactError

Schedule = Literal["infer-first", "train"]
# Fields baked into the exported graph or its trainable set: not overridable at run time
# (besides them, the fields a method's settings declare BAKED).
_GRAPH_FIELDS = frozenset(
    {"num_classes", "method", "frozen", "freeze_last_block", "adapt_stages", "preset_name"}
)


def _exported_part(config: RealmConfig) -> dict[str, Any]:
    """What of ``config`` the export fixes: the graph's fields, its method's baked settings.

    Two configurations with the same exported part run on one export, their other fields
    given to :class:`RealmRuntime` as ``overrides``.
    """
    assert config.settings is not None  # resolved on construction
    own = config.settings.to_dict()
    return {
        **{name: getattr(config, name) for name in sorted(_GRAPH_FIELDS)},
        **{f"{config.method}.{name}": own[name] for name in sorted(config.settings.BAKED)},
    }


@dataclass(frozen=True)
class AdaptResult:
    """What one :meth:`RealmRuntime.adapt` call returns."""

    logits: np.ndarray  # (B, C) pre-update logits: this step's prediction
    probs: np.ndarray  # (B, C) softmax of the logits
    top1: np.ndarray  # (B,) predicted classes
    selected: np.ndarray  # (B,) bool: samples that passed the entropy and S_div filters
    updated: bool  # whether the parameters changed
    loss: float | None  # loss of the selected samples, when a step was computed
    reason: str  # why it did or did not update: one of contract.ADAPT_REASONS


class RealmRuntime(OnlineAdaptation[np.ndarray, AdaptResult]):
    """Online REALM (or Tent, EATA, SAR) adaptation on artifacts written by ``realm export``.

    Needs numpy and onnxruntime only; the manifest is checked (format version, every file's
    SHA-256, ORT version, trainable names) before anything is loaded. The counterpart of
    ``realm_sdk.RealmAdapter``: the public methods, their locking and the step's bookkeeping
    are :class:`OnlineAdaptation`'s, shared by both; every public method holds one lock.

    Backends (docs/runtime.md): ``"onnx"`` runs the one adapt graph (SPEC §11) on a plain
    ``InferenceSession``: one forward per call, a backward only for a sample that updates,
    the state kept where the session computes. ``"onnx-steps"`` and ``"ort-training"`` take
    the decisions on the host over the portable step graph or the legacy training
    artifacts (SPEC §8), the reference the adapt graph is checked against. ``"auto"`` takes
    the adapt graph where the artifacts have it.

    Args:
        artifact_dir: the directory written by ``realm export``.
        device: ``"cpu"`` or ``"cuda"`` / ``"cuda:N"`` (onnxruntime-gpu on the onnx backend,
            the CUDA build of onnxruntime-training on the other).
        threads: intra-op threads of ONNX Runtime (None: its default, all cores).
        schedule: the host-step backends' order of graphs: ``"infer-first"`` (default: the
            forward-only graph, the decision, then the step graph only for an update) or
            ``"train"`` (the step graph at once, its logits as the prediction). The adapt
            graph has one order of its own, and refuses this argument.
        overrides: configuration fields to change on the device without re-exporting: those
            the twins apply (``lr``, ``momentum``, ``diversity_margin``, ``ema_beta``,
            ``entropy_margin``, ``episodic``, the guardrails, and the method's settings that
            are not baked, such as ``lr_alpha_lambda`` or ``sam_rho``, by name or under the
            method's), on every backend (the adapt graph's ``realm.settings``).
        backend: ``"auto"``, ``"onnx"``, ``"onnx-steps"`` or ``"ort-training"``.
        session_config: ONNX Runtime session configuration entries for the backend's
            sessions, on top of :attr:`DEFAULT_SESSION_CONFIG` (an entry named in both takes
            this value). The onnx backend turns pre-packing off where the weights that feed
            matrix products (``portable.weights.gemm_bytes``) pass ``LEAN_GEMM_BYTES``, as it
            would hold a second copy of them; ``{"session.disable_prepacking": "0"}`` or
            ``"1"`` decides it for any model. Two entries are the runtime's own, for switches
            ORT keeps outside its entries: ``"realm.memory_pattern"`` (``"0"``, default: off)
            and ``"realm.cpu_arena"`` (``"1"``, default: on, shared; ``"0"`` off, slower).
        graph_format: which files the onnx backend loads: ``"onnx"``, ``"ort"`` (the
            ORT-format copies of ``realm export --ort-format``, made for ONNX Runtime's mobile
            and minimal builds), or ``"auto"`` (default): ``"ort"`` where the export wrote
            them. Same step either way.
        trusted_keys: Ed25519 public keys (``.pub`` files, their base64 text, 32 raw bytes)
            of whoever may sign artifacts: unsigned artifacts, another key or a bad signature
            are refused before any graph is read. None (default): a signature is not
            required, but one that is present must verify.

    Raises:
        ArtifactError: missing, tampered, truncated or incompatible artifacts, or a backend
            whose graphs the artifacts lack.
        RuntimeError: ``device="cuda"`` without a CUDA-capable onnxruntime.
    """

    # every session's entries unless session_config says otherwise: ORT's workers stop
    # spinning when a Run returns, so the next graph (or the app) gets the cores at once
    DEFAULT_SESSION_CONFIG: ClassVar[Mapping[str, str]] = MappingProxyType(DEFAULT_SESSION_CONFIG)
    exported_part = staticmethod(_exported_part)
    # the configuration fields an export bakes in: ``overrides`` may change every other one
    _state_dtype = F32  # restored states are cast to the graphs' float32

    def __init__(
        self,
        artifact_dir: str | os.PathLike[str],
        device: str = "cpu",
        threads: int | None = None,
        schedule: Schedule | None = None,
        overrides: dict[str, Any] | None = None,
        backend: BackendName = "auto",
        session_config: dict[str, str] | None = None,
        graph_format: GraphFormat = "auto",
        trusted_keys: Iterable[object] | None = None,
    ) -> None:
        if graph_format not in ("auto", "onnx", "ort"):
            raise ValueError(f"graph_format must be 'auto', 'onnx' or 'ort', got {graph_format!r}")
        if schedule not in (None, "infer-first", "train"):
            raise ValueError(f"schedule must be 'infer-first', 'train' or None, got {schedule!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        parse_device(device)  # a ValueError naming the accepted values, before any loading
        self.directory = Path(artifact_dir)
        self.manifest: Manifest = load_manifest(self.directory, trusted_keys=trusted_keys)
        try:  # the export's own config first: its fault is the manifest's, not the overrides'
            exported = RealmConfig.from_dict(self.manifest.config)
        except ValueError as exc:
            raise ArtifactError(f"{self.directory / MANIFEST_NAME}: its config: {exc}") from exc
        baked = sorted(set(overrides or {}) & _GRAPH_FIELDS)
        if not baked:
            self.config = exported.with_overrides(**(overrides or {}))
            was, now = _exported_part(exported), _exported_part(self.config)
            baked = [name for name in was if was[name] != now[name]]
        if baked:
            raise ValueError(
                f"{baked} are part of the exported graph or parameter selection; "
                "re-export to change them"
            )
        self.device = device
        backend = choose_backend(backend, self.manifest, schedule, self.directory)
        # The one adapt graph runs the whole step, its own episodic reset included.
        self._graph = backend == "onnx"
        self._resets_in_step = self._graph
        self.schedule: Schedule | None = None if self._graph else (schedule or "infer-first")
        if session_config is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in session_config.items()
        ):
            raise ValueError(f"session_config must map str to str, got {session_config!r}")
        try:
            self._backend: StepBackend = open_backend(
                backend,
                BackendRequest(
                    self.directory,
                    self.manifest,
                    self.config,
                    device,
                    threads,
                    session_config,
                    graph_format,
                ),
            )
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            # The manifest passed its checks but a field the backend reads does not fit (a
            # re-sealed edit, or a writer this library does not know): say where, not a
            # KeyError from deep inside.
            raise ArtifactError(
                f"{self.directory / MANIFEST_NAME}: a field the {backend} backend reads is "
                f"missing or of the wrong type ({type(exc).__name__}: {exc})"
            ) from exc
        self.backend: str = backend  # "onnx" (the adapt graph), "onnx-steps" or "ort-training"
        # The graphs' file format: "ort" where the onnx backend runs the ORT-format copies.
        self.graph_format: str = self._backend.graph_format
        self._names = [n for n in self._backend.names if n not in (ALPHA_NAME, LAMBDA_NAME)]
        self._source, _ = self._backend.tensors()
        self._artifacts = self.manifest.digest  # a saved state names them; restore checks it
        spec = self.manifest.input
        self._sample_shape = tuple(int(d) for d in spec.shape[1:])
        self._static_batch = spec.shape[0] if isinstance(spec.shape[0], int) else None
        super().__init__()

    # ------------------------------------------------------------------ public API
    # adapt, predict, trainable_names: OnlineAdaptation's. On the adapt graph the state
    # lives in the session's values: the methods that read or write it on the host copy it
    # across here, and only here.

    @property
    def state(self) -> AdaptationState:
        """α, λ, their momentum, the EMA, the counters and the watch figures, as a snapshot."""
        with self._lock:
            self._pull_graph_state()
            return super().state

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole adaptation state to ``path`` atomically (see ``OnlineAdaptation``)."""
        with self._lock:
            self._pull_graph_state()
            super().save(path)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Load a state written by ``save()`` of either twin; a bad file changes nothing."""
        with self._lock:
            super().restore(path)
            self._push_graph_state()

    def reset(self) -> None:
        """Back to the source parameters, α0, λ0, no EMA, zero momentum and zero counters."""
        with self._lock:
            super().reset()
            self._push_graph_state()

    def trainable_parameters(self) -> dict[str, np.ndarray]:
        """Copies of the adapted parameters, keyed as in ``model.named_parameters()``."""
        with self._lock:
            values, _ = self._backend.tensors()
            return {n: values[n] for n in self._names}

    def momentum_buffers(self) -> dict[str, np.ndarray]:
        """Copies of the SGD momentum buffers of the adapted parameters (zeros before a step)."""
        with self._lock:
            _, momentum = self._backend.tensors()
            return {n: momentum[n] for n in self._names}

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

    # ------------------------------------------------------------------ OnlineAdaptation's hooks

    def _check_input(self, x: object) -> None:
        if not isinstance(x, np.ndarray):
            raise input_type_error(x, "numpy.ndarray")
        if x.dtype.kind != "f":
            raise input_dtype_error(x.dtype, "float32")
        if not x.dtype.isnative:
            raise ValueError(
                f"input is in non-native byte order ({x.dtype.str}): convert it "
                "with x.astype(np.float32)"
            )
        if x.dtype != np.float32:
            raise input_dtype_error(x.dtype, "float32")
        check_input_shape(x.shape, self._sample_shape, self._static_batch)
        if not x.flags.c_contiguous:
            raise ValueError("input is not C-contiguous: pass np.ascontiguousarray(x)")
        if not np.isfinite(x).all():
            raise input_nonfinite_error(int(np.isnan(x).sum()), int(np.isinf(x).sum()))

    def _infer(self, x: np.ndarray) -> np.ndarray:
        return self._backend.infer(x)

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, Candidate | None]:
        self._check_step_batch(x)
        # B > 1: the loss weights depend on the decisions, so the twin decides first.
        if self.schedule == "train" and x.shape[0] == 1:
            # batch 1: weight 1; EATA's factor is taken from the same logits
            candidate = self._backend.compute(x, np.ones(1, dtype=F32), None, self._sample_index)
            return candidate.logits, candidate
        return self._infer(x), None

    def _finite(self, logits: np.ndarray) -> bool:
        return bool(np.isfinite(logits).all())

    def _select(self, logits: np.ndarray, forward: Candidate | None) -> Selection:
        return select(logits, self._ema, self.config)

    def _compute(self, x: np.ndarray, forward: Candidate | None, sel: Selection) -> Candidate:
        if forward is not None:  # the schedule trained first: that call is this step
            return forward
        return self._backend.compute(x, sel.weights, sel.eata_factor, self._sample_index)

    def _accept(self, candidate: Candidate, sel: Selection) -> None:
        self._backend.accept(candidate)
        self._ema = ema_update(self._ema, sel.probs[sel.keep], self.config.ema_beta)

    def _result(
        self,
        logits: np.ndarray,
        sel: Selection | None,
        updated: bool,
        loss: float | None,
        reason: str,
    ) -> AdaptResult:
        if sel is None:  # non-finite logits: NaN probabilities, without numpy warnings
            with np.errstate(all="ignore"):
                probs = softmax(logits)
            keep = np.zeros(logits.shape[0], bool)
        else:
            probs, keep = sel.probs, sel.keep
        return AdaptResult(logits, probs, logits.argmax(axis=1), keep, updated, loss, reason)

    def _init_adaptation_state(self) -> None:
        self._backend.load(self._source, {n: np.zeros_like(v) for n, v in self._source.items()})
        self._ema: np.ndarray | None = None

    def _drift_norms(self) -> tuple[float, float]:
        values, _ = self._backend.tensors()
        f64 = np.float64  # as the JavaScript client sums them
        moved = sum(
            float(np.square(values[n].astype(f64) - self._source[n].astype(f64)).sum())
            for n in self._names
        )
        source = sum(float(np.square(self._source[n].astype(f64)).sum()) for n in self._names)
        return moved**0.5, source**0.5

    def _pull_toward_source(self, share: float) -> None:
        values, momentum = self._backend.tensors()
        for n in self._names:
            values[n] = (self._source[n] + F32(share) * (values[n] - self._source[n])).astype(F32)
        self._backend.load(values, momentum)

    def _alpha_lambda(self) -> tuple[float, float, float, float]:
        values, momentum = self._backend.tensors()
        return (
            float(values[ALPHA_NAME]),
            float(values[LAMBDA_NAME]),
            float(momentum[ALPHA_NAME]),
            float(momentum[LAMBDA_NAME]),
        )

    def _to_numpy(self, a: np.ndarray) -> np.ndarray:
        return a.copy()

    def _state_arrays(self) -> StateArrays:
        values, momentum = self._backend.tensors()
        return StateArrays(
            params={n: values[n] for n in self._names},
            momentum={n: momentum[n] for n in self._names},
            alpha=values.get(ALPHA_NAME, np.zeros((), F32)),
            lam=values.get(LAMBDA_NAME, np.zeros((), F32)),
            alpha_momentum=momentum.get(ALPHA_NAME, np.zeros((), F32)),
            lam_momentum=momentum.get(LAMBDA_NAME, np.zeros((), F32)),
            ema=self._ema,
            counters=dict(self._counters),
        )

    def _assign_state(self, state: StateArrays) -> None:
        values, momentum = dict(state.params), dict(state.momentum)
        if self.config.rules.learns_alpha_lambda:
            values[ALPHA_NAME], values[LAMBDA_NAME] = state.alpha, state.lam
            momentum[ALPHA_NAME], momentum[LAMBDA_NAME] = state.alpha_momentum, state.lam_momentum
        self._backend.load(values, momentum)
        self._ema = state.ema

    # ------------------------------------------------------------------ the one adapt graph

    def _pull_graph_state(self) -> None:
        """The host values of the state from the adapt graph's (copied from the device)."""
        if self._graph:
            self._take_graph_state(self._backend.graph_state())  # type: ignore[attr-defined]

    def _push_graph_state(self) -> None:
        """The adapt graph's state from the host values (after a reset or a restore)."""
        if self._graph:
            self._backend.load_graph_state(self._graph_state())  # type: ignore[attr-defined]

    def _step(self, x: np.ndarray) -> AdaptResult:
        if not self._graph:
            return super()._step(x)
        self._check_step_batch(x)
        out = self._backend.adapt(x)  # type: ignore[attr-defined]
        spec = self.manifest.adapt
        logits = np.asarray(out[spec[ADAPT_LOGITS_KEY]], dtype=F32)
        selected = bool(out[spec[ADAPT_SELECTED_KEY]])
        with np.errstate(all="ignore"):  # non-finite logits: NaN probabilities
            probs = softmax(logits)
        return AdaptResult(
            logits,
            probs,
            logits.argmax(axis=1),
            np.array([selected]),
            bool(out[spec[ADAPT_UPDATED_KEY]]),
            float(out[spec[ADAPT_LOSS_KEY]]) if selected else None,
            spec[ADAPT_REASONS_KEY][int(out[spec[ADAPT_REASON_KEY]])],
        )

    def _graph_state(self) -> dict[str, np.ndarray]:
        """The adapt graph's state besides θ and momentum, from the twin's host values."""
        ema = None if self._ema is None else self._ema.astype(F32)
        counters = self._counters
        return watch_tensors(
            ema, self._watch_arrays(), counters, self.config.num_classes, self._slots
        )

    def _take_graph_state(self, out: dict[str, np.ndarray]) -> None:
        """The twin's host values from the adapt graph's state, by input name."""
        ema, watch, counters = read_watch_tensors(out, self._slots)
        self._ema = None if ema is None else ema.astype(F32)
        self._take_watch(watch)
        self._counters = counters

    @property
    def _slots(self) -> Slots:
        """The order of the flags, figures and counters, as the manifest names it."""
        spec = self.manifest.adapt
        return Slots(spec[ADAPT_KNOWN_KEY], spec[ADAPT_WATCH_KEY], spec[ADAPT_COUNTERS_KEY])

    # ------------------------------------------------------------------ helpers

    def _check_step_batch(self, x: np.ndarray) -> None:
        limit = self._backend.max_batch
        if limit is not None and x.shape[0] > limit:
            raise ValueError(
                f"the {self.backend} backend adapts on batches of at most {limit} sample "
                f"(its graphs are exported for the on-device protocol), got batch "
                f"{x.shape[0]}: call adapt() per sample, or use backend='ort-training'"
            )
