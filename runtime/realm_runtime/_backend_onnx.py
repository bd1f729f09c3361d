"""The ``onnx`` backend: the portable step graph on a plain ``onnxruntime.InferenceSession``.

Runs on any onnxruntime ≥ 1.19 (the current one, onnxruntime-gpu, or the training build's
own InferenceSession) and any Python it has wheels for. The trainable tensors live in one
flat vector (``realm.params``) and its momentum buffer (``realm.velocity``), held as
``OrtValue``s on the execution device: a step binds them as inputs, binds the graph's
``realm.new_params``/``realm.new_velocity`` outputs on the same device, and accepting the
step swaps the two references. On CUDA the model state therefore never crosses to the host
during adaptation; only the logits, the loss and the finite flag do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ._backend import BackendRequest, Candidate, StepBackend, parse_device
from ._names import (
    ADAPT_MODEL_KEY,
    ADAPT_STATE_KEY,
    BATCH_KEY,
    ERROR_KEY,
    FILE_KEY,
    FINITE_NAME,
    FORWARD_MODEL_KEY,
    KEPT_NAME,
    LAYOUT_KEY,
    LOSS_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    ORT_FORMAT_KEY,
    PARAMS_NAME,
    SAMPLE_INDEX_NAME,
    SAMPLE_WEIGHT_NAME,
    SETTINGS_NAME,
    SOURCE_PARAMS_KEY,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
    STEP_MODEL_KEY,
    VELOCITY_NAME,
    WEIGHTS_KEY,
)
from ._ort import (
    CPU_ARENA_ENTRY,
    MEMORY_PATTERN_ENTRY,
    SHARED_ARENA_ENTRY,
    onnxruntime_module,
    session_options,
    share_cpu_arena,
)
from ._portable_io import TensorSlot, adapt_settings, step_settings
from ._step import F32
from ._untrusted import ArtifactError
from ._weights import SharedWeights

MIN_ORT = (1, 19)  # opset 18 and the IO-binding API as used here
_BIG = (PARAMS_NAME, VELOCITY_NAME)  # the state read as trainable tensors (tensors(), load())
_NOT_ADAPTATION = (*_BIG, SETTINGS_NAME)  # what graph_state() leaves to others

# ONNX Runtime pre-packs every constant matrix-product operand into a second copy, once per
# session. Where those weights come to more than this, the sessions run lean: no pre-packing,
# and both sessions on one buffer of the weights (SharedWeights): much less memory for a
# little speed, which is why smaller models keep pre-packing (docs/BENCHMARKS.md, "How much
# memory does the runtime need?"). A session_config entry for "session.disable_prepacking"
# decides instead, either way.
LEAN_GEMM_BYTES = 64 << 20
PREPACKING_ENTRY = "session.disable_prepacking"

# ONNX Runtime's CUDA provider runs float32 Conv, MatMul and Gemm in TF32 by default on Ampere
# and newer GPUs, which puts the logits out of parity with the reference on every case
# (docs/BENCHMARKS.md, "How fast on a GPU"). The runtime promises the SDK's float32.
CUDA_FLOAT32 = {"use_tf32": "0"}


class PortableBackend(StepBackend):
    """Runs ``step_model.onnx`` and ``forward_model.onnx`` with IO binding."""

    name = "onnx"

    def __init__(self, request: BackendRequest, *, adapt_graph: bool = False) -> None:
        directory, manifest, config = request.directory, request.manifest, request.config
        device, threads, session_config = request.device, request.threads, request.session_config
        graph_format = request.graph_format
        portable = manifest.portable
        if not portable.get(STEP_MODEL_KEY):
            reason = portable.get(ERROR_KEY, "exported without it")
            raise ArtifactError(
                f"{directory}: these artifacts have no portable step graph ({reason}); use "
                "backend='ort-training' where they hold the training artifacts, or re-export"
            )
        ort = onnxruntime_module()
        if _version(ort.__version__) < MIN_ORT:
            raise ArtifactError(
                f"the portable step graph needs onnxruntime ≥ {'.'.join(map(str, MIN_ORT))}, "
                f"this is {ort.__version__}"
            )
        self._ort = ort
        self._device_type, self._device_id = _device(device, ort)
        files = _graph_files(directory, portable, graph_format)
        self.graph_format = "ort" if files is not portable else "onnx"
        # The .ort graphs embed their weights; the .onnx graphs point to the shared file.
        weights = (
            SharedWeights(directory, portable[WEIGHTS_KEY])
            if self.graph_format == "onnx" and WEIGHTS_KEY in portable
            else None
        )
        entries = {SHARED_ARENA_ENTRY: "1", **(session_config or {})}
        if entries.get(CPU_ARENA_ENTRY) == "0":
            entries[SHARED_ARENA_ENTRY] = "0"  # no arena: none of its own, nor the shared one
        if entries[SHARED_ARENA_ENTRY] == "1":
            share_cpu_arena(ort)  # before the first session that uses it
        if weights is not None and weights.gemm_bytes > LEAN_GEMM_BYTES:
            entries.setdefault(PREPACKING_ENTRY, "1")
        self._lean = entries.get(PREPACKING_ENTRY) == "1"
        # The memory-pattern planner keeps one block per session sized for a whole run: off,
        # it lowered the updating peak by up to a sixth at no measurable cost in speed.
        entries.setdefault(MEMORY_PATTERN_ENTRY, "0")
        # Lean sessions keep every weight as it is: one buffer for both. Sessions that
        # pre-pack (and re-lay out convolution weights) read the file each and free what they
        # transform; given a shared buffer, they would keep it beside their own copies. On
        # CUDA the weights live on the GPU, so each session reads the file (host buffers
        # handed to CUDA sessions are untried).
        shared = self._lean and self._device_type == "cpu"
        self._weights = weights if shared else None
        self._entries, self._threads = entries, threads
        providers: list[Any] = ["CPUExecutionProvider"]
        if self._device_type == "cuda":
            cuda = {"device_id": str(self._device_id), **CUDA_FLOAT32}
            providers.insert(0, ("CUDAExecutionProvider", cuda))
        self._providers = providers
        # The adapt graph holds the step inside it: only the host-step backend opens the step graph.
        step_file = directory / files[STEP_MODEL_KEY]
        self._step = None if adapt_graph else self._session(step_file, STEP_MODEL_KEY)
        # Made on first use, so an app that only adapts with the "train" schedule never pays
        # for the forward session's buffers (nor, with embedded weights, its weights).
        self._forward: Any = None
        self._layout = [TensorSlot(**slot) for slot in portable[LAYOUT_KEY]]
        self.names = [slot.name for slot in self._layout]
        if self.names != list(manifest.trainable):
            raise ArtifactError(
                f"{directory}: the portable layout's tensors differ from the manifest's trainable"
            )
        self._size = sum(slot.size for slot in self._layout)
        self.max_batch = int(portable.get(BATCH_KEY, 1))
        self._config = config
        self._directory = directory
        self._portable = portable
        self._forward_file = files[FORWARD_MODEL_KEY]
        self._logits_name = manifest.logits_name
        self._input_name = manifest.input.name
        hyper = step_settings(config)
        step = self._step
        graph_inputs = {i.name for i in step.get_inputs()} if step is not None else set()
        # Bind only what the graph declares, so a graph without one of these still loads.
        self._hyper = {k: np.array(v, dtype=F32) for k, v in hyper.items() if k in graph_inputs}
        self._draws = SAMPLE_INDEX_NAME in graph_inputs  # DeYO's patch order, drawn per sample
        self._counts_kept = step is not None and KEPT_NAME in {o.name for o in step.get_outputs()}
        if step is not None and config.rules.step_cut and not self._counts_kept:
            raise ArtifactError(
                f"{directory}: the step graph has no {KEPT_NAME} output, so it is not "
                f"{config.method}'s: these artifacts were exported for method "
                f"{manifest.config.get('method')!r}"
            )
        # The one adapt graph (SPEC §11), opened on first use by the "graph" schedule.
        self._adapt: Any = None
        self._adapt_outputs: list[tuple[str, str | None]] = []  # (output, state it is next of)
        self._adapt_spec = manifest.adapt
        source = _read_source(directory / portable[SOURCE_PARAMS_KEY], self._size)
        # The initial value of every state tensor: θ0 and zero momentum, and with the adapt
        # graph the rest of its state as the export wrote it.
        self._initial: dict[str, np.ndarray] = {
            PARAMS_NAME: source,
            VELOCITY_NAME: np.zeros(self._size, dtype=F32),
        }
        if manifest.adapt.get(FILE_KEY):
            ort_files = portable.get(ORT_FORMAT_KEY, {})
            self._adapt_file = (
                ort_files.get(ADAPT_MODEL_KEY, manifest.adapt[FILE_KEY])
                if self.graph_format == "ort"
                else manifest.adapt[FILE_KEY]
            )
            for entry in manifest.adapt[ADAPT_STATE_KEY]:
                name = entry[STATE_INPUT_KEY]
                if name not in _BIG:
                    self._initial[name] = _read_initial(directory / entry[STATE_INITIAL_KEY])
            # This configuration's settings, overrides included (the manifest checked the slots).
            self._initial[SETTINGS_NAME] = adapt_settings(config)
        self._state: dict[str, Any] = {  # every state tensor, where the session computes
            name: self._on_device(value, value.dtype) for name, value in self._initial.items()
        }
        if adapt_graph:
            self._adapt_session()  # a graph this onnxruntime cannot load fails here, not later

    @property
    def _params(self) -> Any:
        return self._state[PARAMS_NAME]

    @property
    def _momentum(self) -> Any:
        return self._state[VELOCITY_NAME]

    # ------------------------------------------------------------------ the step

    def infer(self, x: np.ndarray) -> np.ndarray:
        if self._forward is None:
            self._forward = self._session(self._directory / self._forward_file, FORWARD_MODEL_KEY)
        rows = []
        for i in range(x.shape[0]):  # the graphs are exported for batch 1
            binding = self._forward.io_binding()
            binding.bind_cpu_input(self._input_name, x[i : i + 1])
            binding.bind_ortvalue_input(PARAMS_NAME, self._params)
            binding.bind_output(self._logits_name, "cpu")
            self._forward.run_with_iobinding(binding)
            rows.append(binding.get_outputs()[0].numpy())
        return np.concatenate(rows).astype(F32, copy=False)

    def compute(
        self,
        x: np.ndarray,
        weights: np.ndarray,
        eata_factor: np.ndarray | None,
        sample: int = 0,
    ) -> Candidate:
        del eata_factor  # EATA's weight is computed inside the step graph
        if self._step is None:
            raise RuntimeError("the adapt graph's backend runs no separate step graph")
        binding = self._step.io_binding()
        binding.bind_cpu_input(self._input_name, x)
        binding.bind_cpu_input(SAMPLE_WEIGHT_NAME, np.ascontiguousarray(weights, dtype=F32))
        for name, value in self._hyper.items():
            binding.bind_cpu_input(name, value)
        if self._draws:
            binding.bind_cpu_input(SAMPLE_INDEX_NAME, np.array(sample, dtype=np.int64))
        binding.bind_ortvalue_input(PARAMS_NAME, self._params)
        binding.bind_ortvalue_input(VELOCITY_NAME, self._momentum)
        for name in (LOSS_NAME, self._logits_name, FINITE_NAME):
            binding.bind_output(name, "cpu")
        for name in (NEW_PARAMS_NAME, NEW_VELOCITY_NAME):
            binding.bind_output(name, self._device_type, self._device_id)
        if self._counts_kept:
            binding.bind_output(KEPT_NAME, "cpu")
        self._step.run_with_iobinding(binding)
        loss, logits, finite, new_params, new_momentum, *kept = binding.get_outputs()
        return Candidate(
            logits=np.asarray(logits.numpy(), dtype=F32),
            loss=float(loss.numpy()),
            finite=bool(finite.numpy()),
            payload=(new_params, new_momentum),
            kept=round(float(kept[0].numpy())) if kept else None,
        )

    def accept(self, candidate: Candidate) -> None:
        new_params, new_momentum = candidate.payload
        self._state.update({PARAMS_NAME: new_params, VELOCITY_NAME: new_momentum})  # no copy

    def adapt(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """One call of the adapt graph (SPEC §11): ``x`` and the state in, the next state kept.

        Every state tensor stays where the session computes (an ``OrtValue`` on the
        execution device) and is swapped for the graph's next one; only the prediction and
        the decision come back to the host.

        Returns:
            The graph's non-state outputs by name (logits, updated, selected, reason, loss).
        """
        session = self._adapt_session()
        binding = session.io_binding()
        binding.bind_cpu_input(self._input_name, x)
        for name, value in self._state.items():
            binding.bind_ortvalue_input(name, value)
        for output, state in self._adapt_outputs:
            if state is None:
                binding.bind_output(output, "cpu")
            else:  # stays where the session computes
                binding.bind_output(output, self._device_type, self._device_id)
        session.run_with_iobinding(binding)
        host: dict[str, np.ndarray] = {}
        nxt: dict[str, Any] = {}
        for (output, state), value in zip(self._adapt_outputs, binding.get_outputs(), strict=True):
            if state is None:
                host[output] = value.numpy()
            else:
                nxt[state] = value
        self._state.update(nxt)  # every reference at once: no half-updated state
        return host

    def graph_state(self) -> dict[str, np.ndarray]:
        """Host copies of the adapt graph's state besides θ, momentum and the settings."""
        return {n: v.numpy() for n, v in self._state.items() if n not in _NOT_ADAPTATION}

    def load_graph_state(self, values: dict[str, np.ndarray]) -> None:
        """Replace the adapt graph's state besides θ, momentum and the settings (each given).

        The settings stay this runtime's configuration's, whatever a restored state held.
        """
        placed = {
            name: self._on_device(np.asarray(values[name]), self._initial[name].dtype)
            for name in self._initial
            if name not in _NOT_ADAPTATION
        }
        self._state.update(placed)

    def _adapt_session(self) -> Any:
        if self._adapt is None:
            self._adapt = self._session(self._directory / self._adapt_file, ADAPT_MODEL_KEY)
            back = {
                e[STATE_OUTPUT_KEY]: e[STATE_INPUT_KEY] for e in self._adapt_spec[ADAPT_STATE_KEY]
            }
            # Each output, and the state input it is the next value of (None: a result).
            self._adapt_outputs = [(o.name, back.get(o.name)) for o in self._adapt.get_outputs()]
        return self._adapt

    # ------------------------------------------------------------------ state

    def tensors(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        return self._split(self._params.numpy()), self._split(self._momentum.numpy())

    def load(self, values: dict[str, np.ndarray], momentum: dict[str, np.ndarray]) -> None:
        params = self._on_device(self._join(values))
        buffers = self._on_device(self._join(momentum))
        self._state.update({PARAMS_NAME: params, VELOCITY_NAME: buffers})

    def export_inference_model(self, path: str | os.PathLike[str]) -> None:
        # Always from forward_model.onnx, also where the sessions run the .ort graphs: the
        # result is an ONNX model (convert it with ONNX Runtime's tool for a minimal build).
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError as exc:
            raise ImportError(
                "export_inference_model on the onnx backend needs the onnx package "
                "(pip install onnx): it rewrites forward_model.onnx with the adapted values"
            ) from exc
        model = onnx.load(str(self._directory / self._portable[FORWARD_MODEL_KEY]))
        flat = numpy_helper.from_array(self._params.numpy(), PARAMS_NAME)
        kept = [i for i in model.graph.initializer if i.name != PARAMS_NAME]
        del model.graph.initializer[:]
        model.graph.initializer.extend([*kept, flat])  # the adapted values, as a constant
        inputs = [i for i in model.graph.input if i.name != PARAMS_NAME]
        del model.graph.input[:]
        model.graph.input.extend(inputs)
        onnx.save_model(model, str(path))

    # ------------------------------------------------------------------ helpers

    def _session(self, path: Path, role: str) -> Any:
        options = session_options(self._ort, self._threads, quiet=True, config=self._entries)
        if self._weights is not None:
            self._weights.add_to(options, role, self._ort)
        try:
            return self._ort.InferenceSession(str(path), options, providers=self._providers)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0]
            raise ArtifactError(
                f"{path}: onnxruntime {self._ort.__version__} could not load the portable "
                f"graph: {first}"
            ) from exc

    def _on_device(self, array: np.ndarray, dtype: Any = F32) -> Any:
        array = np.require(array, dtype=dtype, requirements="C")  # keeps 0-d (ascontiguous: 1-d)
        return self._ort.OrtValue.ortvalue_from_numpy(array, self._device_type, self._device_id)

    def _split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        return {
            s.name: np.array(flat[s.offset : s.offset + s.size], dtype=F32).reshape(s.shape)
            for s in self._layout
        }

    def _join(self, tensors: dict[str, np.ndarray]) -> np.ndarray:
        flat = np.empty(self._size, dtype=F32)
        for s in self._layout:
            flat[s.offset : s.offset + s.size] = np.asarray(tensors[s.name], dtype=F32).reshape(-1)
        return flat


def _read_initial(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable initial state of the adapt graph: {exc}") from exc


def _read_source(path: Path, size: int) -> np.ndarray:
    try:
        source = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable source parameters: {exc}") from exc
    if source.dtype != np.float32 or source.shape != (size,):
        raise ArtifactError(
            f"{path}: source parameters of shape {source.shape} and dtype {source.dtype}, "
            f"expected ({size},) float32"
        )
    return source


def _graph_files(directory: Path, portable: dict[str, Any], graph_format: str) -> dict[str, Any]:
    """The manifest entries naming the graphs to load: ``.onnx``, or the ORT-format copies.

    ``"auto"`` takes the ORT-format graphs where the export wrote them (``--ort-format``).
    """
    converted = portable.get(ORT_FORMAT_KEY) or {}
    if graph_format == "onnx" or (graph_format == "auto" and not converted):
        return portable
    if not converted:
        raise ArtifactError(
            f"{directory}: graph_format='ort', but these artifacts have no ORT-format graphs "
            "(re-export with realm export --ort-format)"
        )
    return converted


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _device(device: str, ort: Any) -> tuple[str, int]:
    kind, index = parse_device(device)
    if kind == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError(
            f"device={device!r} needs onnxruntime-gpu and an NVIDIA GPU; this onnxruntime "
            f"{ort.__version__} offers {ort.get_available_providers()}. Install "
            "'realm-tta[runtime-cuda]' (onnxruntime-gpu) instead of onnxruntime"
        )
    return kind, index
