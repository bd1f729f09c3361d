"""``ExportOptions``: everything that decides what an export writes, checked on construction."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from realm_sdk import RealmConfig

from .bound import SearchSettings


@dataclass(frozen=True, kw_only=True)
class MemoryCheck:
    """Measure the exported artifacts' updating peak, and optionally fit it to a budget.

    The peak is a fresh process's, running :class:`realm_runtime.RealmRuntime` with its
    defaults and every sample updating (:func:`realm_runtime.measure.measure_update_peak`); it is
    written into the manifest's ``memory`` section. With ``budget_mb``, the export adapts the
    norm layers of as many of the model's last stages as fit (``RealmConfig.adapt_stages``,
    every stage where they all fit; a ``config.adapt_stages`` given is the most it tries),
    measuring each candidate on this machine.

    Raises:
        ValueError: a value of the wrong type or out of range, in one sentence.
    """

    budget_mb: float | None = None  # the most an updating process may take; None: measure only
    python: str | None = None  # the interpreter whose onnxruntime measures (the app's); None: this
    threads: int | None = None  # ONNX Runtime threads as the app sets them; None: ORT's default
    samples: int = 8  # updating samples per measuring process (the peak settles after the first)

    def __post_init__(self) -> None:
        errors = []
        if self.budget_mb is not None and (not _finite(self.budget_mb) or self.budget_mb <= 0):
            errors.append(f"budget_mb must be a number of MB > 0 or None, got {self.budget_mb!r}")
        if self.python is not None and (not isinstance(self.python, str) or not self.python):
            errors.append(f"python must be an interpreter's path or None, got {self.python!r}")
        if self.threads is not None and not _positive_int(self.threads):
            errors.append(f"threads must be an integer ≥ 1 or None, got {self.threads!r}")
        if not _positive_int(self.samples) or self.samples < 2:
            errors.append(f"samples must be an integer ≥ 2, got {self.samples!r}")
        if errors:
            raise ValueError("invalid MemoryCheck: " + "; ".join(errors))


# The search of docs/attack.md's worst-case curve.
DRIFT_SEARCH = SearchSettings(steps=40, restarts=2, batch=128)


@dataclass(frozen=True, kw_only=True, eq=False)
class DriftCheck:
    """Lower ``max_drift`` until no θ inside it costs more than ``allowed_drop`` points.

    Whatever frames reach the device, the guardrails keep the adapted norm parameters within
    ``max_drift`` of the source (SPEC §10): the most any stream can cost is the lowest clean
    accuracy of a θ in that ball. The export searches for it (:func:`realm_export.bound.
    worst_case`, projected gradient ascent on θ, labels known) on the app's own labelled
    images, at each of ``bounds`` from the smallest up, and writes the largest bound whose
    worst case found loses at most ``allowed_drop`` points (never more than the config's
    own ``max_drift``). The figures go into the manifest's ``drift_check`` section. It is a
    search: it bounds what an attacker reaches only as well as it finds the minimum.

    Raises:
        ValueError: a value of the wrong type, shape or range, in one sentence.
    """

    images: np.ndarray  # float (N, C, ...) clean inputs of the app's own: the search's oracle
    labels: np.ndarray  # int (N,) their classes
    allowed_drop: float = 2.0  # points of clean accuracy the worst θ found may lose
    bounds: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.02)  # max_drift's candidates
    search: SearchSettings = field(default_factory=lambda: DRIFT_SEARCH)  # how hard it looks
    seed: int = 0  # of the search's random starts and minibatches

    def __post_init__(self) -> None:
        errors = []
        x, y = self.images, self.labels
        if not isinstance(x, np.ndarray) or x.ndim < 2 or len(x) == 0:
            errors.append("images must be a numpy array (N, C, ...) with N ≥ 1")
        elif not np.issubdtype(x.dtype, np.floating) or not np.isfinite(x).all():
            errors.append(f"images must be finite floats, got dtype {x.dtype} or NaN/inf")
        if not isinstance(y, np.ndarray) or y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            errors.append("labels must be a 1-D numpy array of integer classes")
        elif isinstance(x, np.ndarray) and x.ndim >= 2 and len(y) != len(x):
            errors.append(f"labels must be one per image: {len(y)} labels for {len(x)} images")
        elif (y < 0).any():
            errors.append("labels must be ≥ 0")
        if not _finite(self.allowed_drop) or not 0 < self.allowed_drop < 100:
            errors.append(f"allowed_drop must be points in (0, 100), got {self.allowed_drop!r}")
        bounds = self.bounds
        if (
            not isinstance(bounds, tuple)
            or not bounds
            or not all(_finite(b) and b > 0 for b in bounds)
            or list(bounds) != sorted(set(bounds))
        ):
            errors.append(f"bounds must be a tuple of increasing numbers > 0, got {bounds!r}")
        if not isinstance(self.search, SearchSettings):
            errors.append(f"search must be a SearchSettings, got {type(self.search).__name__}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            errors.append(f"seed must be an integer ≥ 0, got {self.seed!r}")
        if errors:
            raise ValueError("invalid DriftCheck: " + "; ".join(errors))


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """What :func:`~realm_export.export_realm_artifacts` writes, and how hard it checks it.

    The defaults export a timm classifier at the input size it declares, with the SDK's
    default settings, validated; vary one field with ``dataclasses.replace``:

        >>> options = ExportOptions(config=RealmConfig.preset("cifar", num_classes=10),
        ...                         input_shape=(1, 3, 32, 32))
        >>> export_realm_artifacts(model, "artifacts/", options)
        >>> export_realm_artifacts(model, "mobile/", dataclasses.replace(options, ort_format=True))

    Raises:
        ValueError: a value of the wrong type or out of range, or two fields that contradict
            each other, each in one sentence that says what to pass instead.
    """

    # What is adapted, at what size.
    config: RealmConfig | None = None  # method, preset, α0/λ0; None: RealmConfig(num_classes=C)
    input_shape: tuple[int, ...] | None = None  # (batch, C, ...); None: the model's input_size
    # Which artifacts: the portable pipeline (the product), then the legacy one.
    portable: bool = True  # step/forward graphs in standard ONNX ops: any onnxruntime ≥ 1.19
    ort_format: bool = False  # .ort graphs + operator config, for mobile builds (needs portable)
    training: bool = False  # the deprecated onnxruntime-training files too (needs it installed)
    dynamic_batch: bool = True  # a symbolic batch axis (B > 1 at run time) where a graph has one
    standalone_inference: bool = False  # inference_model.onnx with its weights inside it
    # Validation against the PyTorch reference, before anything is moved into place.
    validate: bool = True  # compare every graph with realm_sdk on random inputs
    atol: float = 1e-4  # absolute tolerance on logits and loss
    grad_rtol: float = 1e-3  # tolerance on gradients, relative to each tensor's scale
    validation_inputs: int = 3  # random inputs per check (scales 1, 0.5, 2)
    seed: int = 0  # of the traced example and the validation inputs: same seed, same files
    # The manifest.
    preprocessing: Mapping[str, Any] | None = None  # mean/std/size; None: timm's pretrained_cfg
    model_info: Mapping[str, Any] | None = None  # name, weights, ...: kept as given
    signing_key: object | None = None  # Ed25519 key (PEM path, PEM bytes, key): signs realm.json
    memory: MemoryCheck | None = None  # measure the updating peak (and fit a budget); None: not
    drift_check: DriftCheck | None = None  # fit max_drift to a worst case on labelled images
    # Clean inputs (N, C, ...) of the app's own, for a method with clean_state (EATA's
    # Fisher information, baked into the graphs); None: drift_check's images, if any.
    clean_images: Any = None
    fit: Mapping[str, Any] | None = None  # what `realm fit` chose this config by: kept as given
    # The directory.
    overwrite: bool = False  # replace an existing non-empty output directory

    def __post_init__(self) -> None:
        errors = [*self._type_errors(), *self._range_errors(), *self._contradictions()]
        if errors:
            raise ValueError("invalid ExportOptions: " + "; ".join(errors))
        if self.input_shape is not None:  # a list from a command line compares and hashes too
            object.__setattr__(self, "input_shape", tuple(self.input_shape))

    def _type_errors(self) -> list[str]:
        errors = []
        if self.config is not None and not isinstance(self.config, RealmConfig):
            errors.append(
                f"config must be a RealmConfig (e.g. RealmConfig.preset('cifar', "
                f"num_classes=10)) or None, got {type(self.config).__name__}"
            )
        flags = ("portable", "ort_format", "dynamic_batch", "standalone_inference")
        for name in (*flags, "training", "validate", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                errors.append(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.memory is not None and not isinstance(self.memory, MemoryCheck):
            errors.append(
                f"memory must be a MemoryCheck (e.g. MemoryCheck(budget_mb=160)) or None, "
                f"got {type(self.memory).__name__}"
            )
        if self.drift_check is not None and not isinstance(self.drift_check, DriftCheck):
            errors.append(
                f"drift_check must be a DriftCheck (e.g. DriftCheck(images=x, labels=y)) or "
                f"None, got {type(self.drift_check).__name__}"
            )
        for name in ("preprocessing", "model_info", "fit"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                errors.append(f"{name} must be a dict or None, got {type(value).__name__}")
        return errors

    def _range_errors(self) -> list[str]:
        errors = []
        shape = self.input_shape
        if shape is not None and (
            isinstance(shape, str)
            or not hasattr(shape, "__len__")
            or len(shape) < 2
            or not all(_positive_int(d) for d in shape)
        ):
            errors.append(
                "input_shape must be positive integers (batch, C, ...), e.g. (1, 3, 224, 224), "
                f"or None for the model's own input_size; got {shape!r}"
            )
        for name in ("atol", "grad_rtol"):
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                default = ExportOptions.__dataclass_fields__[name].default
                errors.append(
                    f"{name} must be a finite number > 0 (default {default}), got {value!r}"
                )
        if not _positive_int(self.validation_inputs):
            errors.append(
                f"validation_inputs must be an integer ≥ 1 (validate=False skips validation), "
                f"got {self.validation_inputs!r}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            errors.append(f"seed must be an integer ≥ 0, got {self.seed!r}")
        return errors

    def _contradictions(self) -> list[str]:
        errors = []
        if self.ort_format is True and self.portable is False:
            errors.append("ort_format=True converts the portable graphs: it needs portable=True")
        if not self.portable and not self.training:
            errors.append(
                "nothing to export: portable=False and training=False; keep portable=True "
                "(the product) or ask for the legacy training artifacts with training=True"
            )
        if self.memory is not None and self.portable is False:
            errors.append("memory measures the portable adapt graph: it needs portable=True")
        rules = self.config.rules if isinstance(self.config, RealmConfig) else None
        if rules is not None and rules.clean_state and self.clean_of() is None:
            errors.append(
                f"{rules.label} needs {rules.clean_state}: pass clean_images=x (clean inputs "
                f"of your own, (N, C, ...); realm export --clean-images FILE.npz), or use "
                f"method 'eta', {rules.label} without it"
            )
        return errors

    def clean_of(self) -> Any:
        """The clean images a method's set-up reads: ``clean_images``, else drift_check's."""
        if self.clean_images is not None:
            return self.clean_images
        return self.drift_check.images if isinstance(self.drift_check, DriftCheck) else None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
