"""Hyper-parameters of an online adaptation run (SPEC §4), as one frozen dataclass.

Torch-free, so the runtime reads the same configuration from an artifact manifest; the
PyTorch SDK re-exports it as ``realm_sdk.RealmConfig``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ._guardrails import Guardrails
from ._numbers import finite as _finite
from ._numbers import integer as _integer
from .methods import BY_NAME, REALM, Method, method_named

Preset = Literal["cifar", "imagenet"]
LossScale = Literal["one", "lambda"]

METHODS: tuple[str, ...] = tuple(BY_NAME)
PRESETS: tuple[str, ...] = ("cifar", "imagenet")

# Projection bounds of the robust-loss parameters (SPEC §2). α must stay below 2 (the loss is
# concave, and |α − 2| > 0) and above 0 (division by α); λ must stay positive.
ALPHA_MIN = 1e-3
ALPHA_MAX = 1.999
LAMBDA_MIN = 1e-4


@dataclass(frozen=True)
class RealmConfig:
    """Everything that decides one online adaptation run, validated on construction.

    Build it from a preset (``RealmConfig.preset("cifar", num_classes=10)``) and override
    fields with ``dataclasses.replace`` or :meth:`with_overrides`. All three implementations
    (the PyTorch reference, the exported ONNX graph and the runtime) read the same fields.
    """

    num_classes: int  # C of the classifier; sets λ0 and e0 of the ImageNet-style presets
    method: str = REALM.name  # which step: a name of realm_runtime.methods, one file each
    lr: float = 0.005  # SGD learning rate of the normalisation affine parameters θ
    # SGD learning rate of BatchNorm's affine parameters (None: lr). Their running statistics
    # stay frozen and re-standardise nothing, so the same step moves the output more.
    lr_batch_norm: float | None = None
    lr_alpha_lambda: float = 5e-7  # SGD learning rate of α and λ (REALM only; docs/fmnist.md)
    momentum: float = 0.0  # SGD momentum (PyTorch semantics, dampening 0), shared by θ, α, λ
    alpha0: float = 0.15  # initial shape α of ρ; small α mimics EATA's reliable-sample cut
    lambda0: float = 0.1  # initial scale λ of ρ (entropy units)
    loss_scale: LossScale = "one"  # C of ρ: 1, or the live λ (removes λ from the grad's scale)
    diversity_margin: float = 0.4  # d: update only if |cos(p, ema)| < d (EATA's S_div)
    ema_beta: float = 0.9  # β of the EMA of the predictions of updated samples
    entropy_margin: float | None = None  # e0 of the entropy cut (None: the method's share·ln C)
    sam_rho: float = 0.05  # SAR: radius ρ of SAM's step to θ + ρ·g/‖g‖ (SAR's and SAM's value)
    recovery_loss: float = 0.2  # SAR: reset to the source when its loss EMA falls below e_m
    plpd_threshold: float = 0.2  # DeYO: update only if PLPD > this (DeYO's τ_PLPD)
    patch_grid: int = 4  # DeYO: patches per side of the shuffle (DeYO's patch_len)
    shuffle_seed: int = 0  # DeYO: seed of the one patch order every implementation applies
    frozen: tuple[str, ...] = ()  # regexes matched at the start of parameter names to freeze
    freeze_last_block: bool = False  # also freeze the model's last block (SAR/REALM ImageNet)
    # Adapt only the norms of the last K stages (and after them): the backward stops there,
    # so less is kept and computed; None: every stage (docs/BENCHMARKS.md, memory).
    adapt_stages: int | None = None
    episodic: bool = False  # reset to the source model after every adapt() call
    # Bounds and resets (SPEC §10); None: REALM's defaults for REALM, none for the baselines,
    # which run as their papers do.
    guardrails: Guardrails | None = None
    preset_name: str | None = field(default=None, compare=True)  # provenance, for manifests

    def __post_init__(self) -> None:
        errors = []
        if self.method not in BY_NAME:
            errors.append(f"method must be one of {METHODS}, got {self.method!r}")
        elif self.guardrails is None:
            object.__setattr__(self, "guardrails", self.rules.guardrails)
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            errors.append(f"num_classes must be an integer ≥ 2, got {self.num_classes!r}")
        if self.loss_scale not in ("one", "lambda"):
            errors.append(f"loss_scale must be 'one' or 'lambda', got {self.loss_scale!r}")
        for name in ("lr", "lr_alpha_lambda"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                errors.append(f"{name} must be a finite number ≥ 0, got {value!r}")
        if self.lr_batch_norm is not None and (
            not _finite(self.lr_batch_norm) or self.lr_batch_norm <= 0
        ):
            errors.append(
                f"lr_batch_norm must be a finite number > 0 or None (the same as lr), got "
                f"{self.lr_batch_norm!r}; freeze BatchNorm layers with `frozen` instead"
            )
        if not _finite(self.momentum) or not 0 <= self.momentum < 1:
            errors.append(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not _finite(self.alpha0) or not 0 < self.alpha0 < 2:
            errors.append(f"alpha0 must be in (0, 2), got {self.alpha0!r}")
        elif not ALPHA_MIN <= self.alpha0 <= ALPHA_MAX:
            errors.append(
                f"alpha0 must lie in the projection range [{ALPHA_MIN}, {ALPHA_MAX}], "
                f"got {self.alpha0!r}"
            )
        if not _finite(self.lambda0) or self.lambda0 < LAMBDA_MIN:
            errors.append(f"lambda0 must be a finite number ≥ {LAMBDA_MIN}, got {self.lambda0!r}")
        if not _finite(self.diversity_margin) or not 0 < self.diversity_margin <= 1:
            errors.append(f"diversity_margin (d) must be in (0, 1], got {self.diversity_margin!r}")
        if not _finite(self.ema_beta) or not 0 <= self.ema_beta < 1:
            errors.append(f"ema_beta must be in [0, 1), got {self.ema_beta!r}")
        if self.entropy_margin is not None and (
            not _finite(self.entropy_margin) or self.entropy_margin <= 0
        ):
            errors.append(f"entropy_margin must be > 0 or None, got {self.entropy_margin!r}")
        if not _finite(self.sam_rho) or self.sam_rho <= 0:
            errors.append(f"sam_rho must be a finite number > 0, got {self.sam_rho!r}")
        if not _finite(self.recovery_loss) or self.recovery_loss < 0:
            errors.append(f"recovery_loss must be a finite number ≥ 0, got {self.recovery_loss!r}")
        if not _finite(self.plpd_threshold) or not -1 <= self.plpd_threshold < 1:
            errors.append(f"plpd_threshold must be in [-1, 1), got {self.plpd_threshold!r}")
        if not _integer(self.patch_grid) or self.patch_grid < 2:
            errors.append(f"patch_grid must be an integer ≥ 2, got {self.patch_grid!r}")
        if not _integer(self.shuffle_seed) or self.shuffle_seed < 0:
            errors.append(f"shuffle_seed must be an integer ≥ 0, got {self.shuffle_seed!r}")
        if self.guardrails is not None and not isinstance(self.guardrails, Guardrails):
            errors.append(f"guardrails must be a Guardrails, got {self.guardrails!r}")
        if self.adapt_stages is not None and (
            not _integer(self.adapt_stages) or self.adapt_stages < 1
        ):
            errors.append(f"adapt_stages must be an integer ≥ 1 or None, got {self.adapt_stages!r}")
        if not isinstance(self.frozen, tuple) or not all(isinstance(p, str) for p in self.frozen):
            errors.append(f"frozen must be a tuple of regex strings, got {self.frozen!r}")
        if errors:
            raise ValueError("invalid RealmConfig: " + "; ".join(errors))

    @property
    def e0(self) -> float:
        """The entropy cut's threshold: ``entropy_margin``, or the method's share of ln C.

        0.4·ln C for EATA and SAR, 0.5·ln C for DeYO.
        """
        if self.entropy_margin is not None:
            return self.entropy_margin
        return self.rules.entropy_share * math.log(self.num_classes)

    @property
    def batch_norm_lr(self) -> float:
        """The learning rate BatchNorm's affine parameters step at: ``lr_batch_norm`` or ``lr``."""
        return self.lr if self.lr_batch_norm is None else self.lr_batch_norm

    def learning_rates(self, names: Iterable[str], batch_norm: Container[str]) -> dict[str, float]:
        """Each norm tensor's SGD rate: :attr:`batch_norm_lr` for those in ``batch_norm``, else lr.

        Args:
            names: the adapted norm tensors (not α, λ, which step at ``lr_alpha_lambda``).
            batch_norm: the names of BatchNorm's tensors among them.
        """
        return {n: self.batch_norm_lr if n in batch_norm else self.lr for n in names}

    @property
    def guard(self) -> Guardrails:
        """The guardrails in force (``guardrails`` with its method's default resolved)."""
        assert self.guardrails is not None  # resolved on construction
        return self.guardrails

    @property
    def rules(self) -> Method:
        """The method's description: which parts of the step it uses (``realm_runtime.methods``)."""
        return method_named(self.method)

    @classmethod
    def preset(
        cls, name: Preset, *, num_classes: int, method: str = REALM.name, **overrides: Any
    ) -> RealmConfig:
        """The paper's hyper-parameters (SPEC §4; REALM Sec. 4.1 and App. B).

        Args:
            name: ``"cifar"`` (plain SGD, C = 1, d = 0.4; REALM's BatchNorm layers step at
                0.001, a fifth of ``lr``) or ``"imagenet"`` (momentum 0.9, C = λ, d = 0.05,
                λ0 = 0.4·ln(num_classes), last block frozen).
            num_classes: number of classes of the classifier.
            method: a name of the method registry (``realm_runtime.methods.BY_NAME``):
                REALM, or a baseline on the same settings (the REALM paper runs all of them
                on SAR's, App. B).
            **overrides: any other field, applied after the preset.

        Returns:
            The validated configuration.
        """
        if name == "cifar":
            lr = 0.005
            base: dict[str, Any] = dict(
                lr=lr,
                # App. D's smaller α/λ rate, chosen on the validation split (docs/fmnist.md);
                # at the main text's 2·lr, λ grows until the updates fade away.
                lr_alpha_lambda=5e-7,
                momentum=0.0,
                alpha0=0.15,
                lambda0=0.1,
                loss_scale="one",
                diversity_margin=0.4,
                freeze_last_block=False,
            )
            rules = BY_NAME.get(method)
            if rules is not None and rules.batch_norm_rate:
                # Chosen on the validation split: at lr the BatchNorm model's endless stream
                # falls below not adapting (docs/continual.md).
                base["lr_batch_norm"] = 0.001
        elif name == "imagenet":
            if not isinstance(num_classes, int) or num_classes < 2:
                raise ValueError(f"num_classes must be an integer ≥ 2, got {num_classes!r}")
            lr = 0.00025 / 16  # SAR's batch-size-1 scaling of the ImageNet learning rate
            base = dict(
                lr=lr,
                lr_alpha_lambda=lr,
                momentum=0.9,
                alpha0=0.15,
                lambda0=0.4 * math.log(num_classes),
                loss_scale="lambda",
                diversity_margin=0.05,
                freeze_last_block=True,
            )
        else:
            raise ValueError(f"unknown preset {name!r}: choose one of {PRESETS}")
        base.update(overrides)
        return cls(num_classes=num_classes, method=method, preset_name=name, **base)

    def with_overrides(self, **overrides: Any) -> RealmConfig:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary of every field (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["frozen"] = list(self.frozen)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RealmConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error, not silently dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown RealmConfig fields: {unknown}")
        data = dict(data)
        try:
            if "frozen" in data:
                data["frozen"] = tuple(data["frozen"])
            if isinstance(data.get("guardrails"), dict):
                data["guardrails"] = Guardrails(**data["guardrails"])
            return cls(**data)
        except TypeError as exc:  # a missing field, or a value of a type no check expected
            raise ValueError(f"not a RealmConfig: {exc}") from exc
