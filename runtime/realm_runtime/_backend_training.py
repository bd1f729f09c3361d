"""The ``ort-training`` backend: onnxruntime-training 1.19.2's ``Module`` on the artifacts.

The training graph returns the loss, the logits and (in the checkpoint state) the
gradients; the SGD step with momentum, two learning rates and the projection runs here in
numpy (``_step``), because 1.19.2's SGD has no momentum and one learning rate.
"""

from __future__ import annotations

import os

import numpy as np

from ._backend import BackendRequest, Candidate, StepBackend, parse_device
from ._manifest import Manifest
from ._names import (
    ALPHA_NAME,
    CHECKPOINT,
    EVAL_MODEL,
    LAMBDA_NAME,
    LR_ALPHA_LAMBDA_NAME,
    TRAINING_MODEL,
)
from ._ort import onnxruntime_module, session_options, training_api
from ._step import F32, entropy, project_alpha, project_lambda, relax_and_anchor, sgd_momentum
from ._untrusted import ArtifactError


class TrainingBackend(StepBackend):
    """Runs the ONNX Runtime training artifacts (Python 3.11, onnxruntime-training 1.19.2)."""

    name = "ort-training"

    def __init__(self, request: BackendRequest) -> None:
        directory, manifest, config = request.directory, request.manifest, request.config
        device, threads, session_config = request.device, request.threads, request.session_config
        if TRAINING_MODEL not in manifest.files:
            raise ArtifactError(
                f"{directory}: this export has no training artifacts, which "
                "backend='ort-training' runs: re-export with realm export --training "
                "(ExportOptions(training=True)), or use the default backend"
            )
        kind, _ = parse_device(device)
        ort = onnxruntime_module()
        check_training_version(manifest, ort.__version__)
        api = training_api()
        if kind == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError(
                f"device={device!r} on the ort-training backend needs the CUDA build of "
                f"onnxruntime-training and an NVIDIA GPU; this onnxruntime {ort.__version__} "
                f"offers {ort.get_available_providers()}. Install 'onnxruntime-training==1.19.2' "
                "(CUDA 11.8, cuDNN 8; the nvidia-*-cu11 wheels), or use backend='onnx' with "
                "onnxruntime-gpu"
            )
        options = session_options(ort, threads, config=session_config)
        try:
            self._state = api.CheckpointState.load_checkpoint(str(directory / CHECKPOINT))
            self._module = api.Module(
                str(directory / TRAINING_MODEL),
                self._state,
                str(directory / EVAL_MODEL),
                device=device,
                session_options=options,
            )
        except Exception as exc:  # ORT's message is long; say what failed first
            first = str(exc).strip().splitlines()[0]
            if device != "cpu":
                raise RuntimeError(
                    f"onnxruntime could not start the artifacts on {device}: {first}"
                ) from exc
            raise ArtifactError(
                f"{directory}: onnxruntime could not load the artifacts: {first}"
            ) from exc
        self.names = list(manifest.trainable)
        in_ckpt = {n for n, p in self._state.parameters if p.requires_grad}
        if in_ckpt != set(self.names):
            raise ArtifactError(
                f"{directory / CHECKPOINT}: trainable tensors differ from the manifest's "
                f"({len(in_ckpt)} vs {len(self.names)})"
            )
        self.max_batch = None
        self._config = config
        # α and λ step at lr_alpha_lambda; the norm tensors at lr, or BatchNorm's at its own
        assert config.settings is not None  # resolved on construction
        rate = config.settings.slots().get(LR_ALPHA_LAMBDA_NAME, 0.0)
        self._rates = {ALPHA_NAME: rate, LAMBDA_NAME: rate}
        self._rates |= config.learning_rates(
            [n for n in self.names if n not in self._rates], frozenset(manifest.batch_norm)
        )
        self._logits_name = manifest.logits_name
        self._params = {n: self._state.parameters[n] for n in self.names}
        self._shapes = {n: tuple(manifest.trainable[n]) for n in self.names}
        self._values = {n: np.array(self._params[n].data, dtype=F32) for n in self.names}
        self._momentum = {n: np.zeros_like(v) for n, v in self._values.items()}
        self._initial = {n: v.copy() for n, v in self._values.items()}  # θ0, α0, λ0

    def infer(self, x: np.ndarray) -> np.ndarray:
        self._module.eval()
        outputs = self._module(x, np.zeros(x.shape[0], dtype=F32))
        return np.asarray(outputs[1], dtype=F32)

    def compute(
        self,
        x: np.ndarray,
        weights: np.ndarray,
        eata_factor: np.ndarray | None,
        sample: int = 0,
    ) -> Candidate:
        del sample  # no method the legacy artifacts hold draws
        eata = self._config.rules.entropy_weight
        fed = weights * eata_factor if eata and eata_factor is not None else weights
        self._module.train()
        self._module.lazy_reset_grad()
        outputs = self._module(x, fed.astype(F32))
        loss = float(outputs[0])
        logits = np.asarray(outputs[1], dtype=F32)
        grads = {
            n: np.asarray(self._params[n].grad, dtype=F32).reshape(self._shapes[n])
            for n in self.names
        }
        if eata and eata_factor is None:
            # Batch 1, trained with w = 1 before the decision: EATA's weight is a constant of
            # the step (no gradient through it), so it scales the loss and the gradients.
            scale = F32(np.exp(-(entropy(logits).astype(F32)[0] - F32(self._config.e0))))
            grads = {n: (g * scale).astype(F32) for n, g in grads.items()}
            loss *= float(scale)
        finite = bool(np.isfinite(loss)) and all(np.isfinite(g).all() for g in grads.values())
        return Candidate(logits, loss, finite, grads)

    def accept(self, candidate: Candidate) -> None:
        cfg = self._config
        grads: dict[str, np.ndarray] = candidate.payload
        values: dict[str, np.ndarray] = {}
        momentum: dict[str, np.ndarray] = {}
        for n in self.names:
            values[n], momentum[n] = sgd_momentum(
                self._values[n], grads[n], self._momentum[n], self._rates[n], cfg.momentum
            )
        if ALPHA_NAME in values:
            values[ALPHA_NAME] = project_alpha(values[ALPHA_NAME])
            values[LAMBDA_NAME] = project_lambda(values[LAMBDA_NAME])
        self._commit(relax_and_anchor(values, self._initial, cfg))
        self._momentum = momentum

    def tensors(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        return (
            {n: v.copy() for n, v in self._values.items()},
            {n: v.copy() for n, v in self._momentum.items()},
        )

    def load(self, values: dict[str, np.ndarray], momentum: dict[str, np.ndarray]) -> None:
        self._commit({n: np.asarray(values[n], dtype=F32) for n in self.names})
        self._momentum = {n: np.array(momentum[n], dtype=F32) for n in self.names}

    def export_inference_model(self, path: str | os.PathLike[str]) -> None:
        self._module.export_model_for_inferencing(str(path), [self._logits_name])

    def _commit(self, values: dict[str, np.ndarray]) -> None:
        """Write new parameter values into the ORT checkpoint state, all or none."""
        previous = dict(self._values) if hasattr(self, "_values") else {}
        written = []
        try:
            for n, v in values.items():
                self._params[n].data = np.asarray(v, dtype=F32, order="C")  # keeps 0-d α, λ
                written.append(n)
        except BaseException:
            for n in written:  # roll back what was written, so no half-updated state remains
                if n in previous:
                    self._params[n].data = previous[n]
            raise
        self._values = {**previous, **values}


def check_training_version(manifest: Manifest, installed: str) -> None:
    """Training checkpoints and graphs load only in the ORT version that wrote them.

    Raises:
        ArtifactError: another major.minor version of onnxruntime is installed.
    """
    exported = str(manifest.versions.get("onnxruntime", ""))
    if exported.split(".")[:2] != installed.split(".")[:2]:
        raise ArtifactError(
            f"these artifacts were exported with onnxruntime {exported or '(unknown)'}, this is "
            f"onnxruntime {installed}: training checkpoints and graphs are not portable across "
            "ORT versions; re-export, install onnxruntime-training 1.19.2, or use "
            "backend='onnx' (the portable step graph runs on any onnxruntime ≥ 1.19)"
        )
