"""Hyper-parameters of an online adaptation run (SPEC §4), as one frozen dataclass.

Torch-free, so the runtime reads the same configuration from an artifact manifest; the
PyTorch SDK re-exports it as ``realm_sdk.RealmConfig``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._guardrails import Guardrails
from ._numbers import finite as _finite
from ._numbers import integer as _integer
from .methods import BY_NAME, REALM, Method, MethodSettings, method_named, setting_owners
from .methods.realm import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, LossScale

Preset = Literal["cifar", "imagenet"]

METHODS: tuple[str, ...] = tuple(BY_NAME)
PRESETS: tuple[str, ...] = ("cifar", "imagenet")

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "LAMBDA_MIN",
    "METHODS",
    "PRESETS",
    "LossScale",
    "Preset",
    "RealmConfig",
]


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
    momentum: float = 0.0  # SGD momentum (PyTorch semantics, dampening 0), shared by θ, α, λ
    diversity_margin: float = 0.4  # d: update only if |cos(p, ema)| < d (EATA's S_div)
    ema_beta: float = 0.9  # β of the EMA of the predictions of updated samples
    entropy_margin: float | None = None  # e0 of the entropy cut (None: the method's share·ln C)
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
    # The method's own settings: an instance of its file's class (``Method.settings``), written
    # under the method's name in manifests and state files; None: its preset's defaults.
    settings: MethodSettings | None = None

    def __post_init__(self) -> None:
        errors = []
        if self.method not in BY_NAME:
            errors.append(f"method must be one of {METHODS}, got {self.method!r}")
        else:
            if self.guardrails is None:
                object.__setattr__(self, "guardrails", self.rules.guardrails)
            own = self.rules.settings
            if self.settings is None and isinstance(self.num_classes, int) and self.num_classes > 1:
                preset, classes = self.preset_name, self.num_classes
                defaults = own.for_preset(preset, num_classes=classes, lr=self.lr)
                object.__setattr__(self, "settings", defaults)
            elif self.settings is not None and type(self.settings) is not own:
                errors.append(
                    f"settings must be {self.rules.label}'s {own.__name__}, got "
                    f"{type(self.settings).__name__}; build the configuration with "
                    "with_overrides(method=...), which gives the new method its defaults"
                )
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            errors.append(f"num_classes must be an integer ≥ 2, got {self.num_classes!r}")
        if not _finite(self.lr) or self.lr < 0:
            errors.append(f"lr must be a finite number ≥ 0, got {self.lr!r}")
        if self.lr_batch_norm is not None and (
            not _finite(self.lr_batch_norm) or self.lr_batch_norm <= 0
        ):
            errors.append(
                f"lr_batch_norm must be a finite number > 0 or None (the same as lr), got "
                f"{self.lr_batch_norm!r}; freeze BatchNorm layers with `frozen` instead"
            )
        if not _finite(self.momentum) or not 0 <= self.momentum < 1:
            errors.append(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not _finite(self.diversity_margin) or not 0 < self.diversity_margin <= 1:
            errors.append(f"diversity_margin (d) must be in (0, 1], got {self.diversity_margin!r}")
        if not _finite(self.ema_beta) or not 0 <= self.ema_beta < 1:
            errors.append(f"ema_beta must be in [0, 1), got {self.ema_beta!r}")
        if self.entropy_margin is not None and (
            not _finite(self.entropy_margin) or self.entropy_margin <= 0
        ):
            errors.append(f"entropy_margin must be > 0 or None, got {self.entropy_margin!r}")
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
                lr=lr, momentum=0.0, diversity_margin=0.4, freeze_last_block=False
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
            base = dict(lr=lr, momentum=0.9, diversity_margin=0.05, freeze_last_block=True)
            rules = BY_NAME.get(method)
            if rules is not None and rules.augments:
                # A batch of views is a batch: the REALM paper's App. B leaves SFT's rate unscaled.
                base["lr"] = lr = 0.00025
            if rules is not None and rules.adapts != "norm":
                base["freeze_last_block"] = False  # SAR's rule is about norm layers
        else:
            raise ValueError(f"unknown preset {name!r}: choose one of {PRESETS}")
        if method in BY_NAME and BY_NAME[method].episodic:
            base["episodic"] = True
        if method not in BY_NAME:  # the constructor names the problem
            return cls(num_classes=num_classes, method=method, preset_name=name, **base)
        shared, own, settings = _split(overrides, method_named(method))
        if settings is None:  # the method's own, as this preset gives them
            settings = method_named(method).settings.for_preset(
                name, num_classes=num_classes, lr=lr
            )
        settings = settings.replaced(own, method_named(method).label)
        base.update(shared)
        return cls(
            num_classes=num_classes, method=method, preset_name=name, settings=settings, **base
        )

    def with_overrides(self, **overrides: Any) -> RealmConfig:
        """A copy with some fields replaced, validated again.

        Args:
            **overrides: fields of the configuration; settings of its method, by name
                (``sam_rho=0.1``) or under the method's name (``sar={"sam_rho": 0.1}``).
                A new ``method`` starts from its own settings' defaults.

        Raises:
            ValueError: an unknown field, another method's setting, or a bad value.
        """
        rules = method_named(overrides.get("method", self.method))
        shared, own, settings = _split(overrides, rules)
        if settings is None:
            settings = (
                self.settings
                if rules.name == self.method and self.settings is not None
                else rules.settings.for_preset(
                    self.preset_name, num_classes=self.num_classes, lr=self.lr
                )
            )
        return dataclasses.replace(self, **shared, settings=settings.replaced(own, rules.label))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary of every field, the method's settings under its name."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "settings":
                continue
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
            if f.name == "method":
                assert self.settings is not None  # resolved on construction
                out[self.method] = self.settings.to_dict()
        out["frozen"] = list(self.frozen)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RealmConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error, not silently dropped."""
        data = dict(data)
        method = data.get("method", REALM.name)
        if not isinstance(method, str):
            raise ValueError(
                f"method must be a method's name, one of {sorted(BY_NAME)}, got {method!r}"
            )
        own = data.pop(method, None) if method in BY_NAME else None
        known = {f.name for f in dataclasses.fields(cls)} - {"settings"}
        unknown = sorted(set(data) - known)
        strays = [k for k in unknown if k in BY_NAME]
        if strays:
            raise ValueError(f"settings of {strays} in a configuration of method {method!r}")
        if unknown:
            raise ValueError(f"unknown RealmConfig fields: {unknown}")
        if method in BY_NAME and method_named(method).clean_state and not own:
            label = method_named(method).label
            raise ValueError(
                f"this configuration of {label} carries none of its settings ({method!r}: "
                f"{{...}}): it was written before {label} had its Fisher regulariser, and its "
                f"graphs run ETA's step; read it as method 'eta', or export again with "
                f"method {method!r} and clean_images"
            )
        try:
            if own is not None:
                rules = method_named(method)
                data["settings"] = rules.settings.from_dict(own, rules.label)
            if "frozen" in data:
                data["frozen"] = tuple(data["frozen"])
            if isinstance(data.get("guardrails"), dict):
                data["guardrails"] = Guardrails(**data["guardrails"])
            return cls(**data)
        except TypeError as exc:  # a missing field, or a value of a type no check expected
            raise ValueError(f"not a RealmConfig: {exc}") from exc


_SHARED = frozenset(f.name for f in dataclasses.fields(RealmConfig)) - {"settings"}


def _split(
    overrides: dict[str, Any], rules: Method
) -> tuple[dict[str, Any], dict[str, Any], MethodSettings | None]:
    """Overrides as shared fields, settings of ``rules``' method, and a whole settings object.

    Raises:
        ValueError: a name that is neither, naming the method it belongs to where it does.
    """
    shared: dict[str, Any] = {}
    own: dict[str, Any] = {}
    whole = overrides.get("settings")
    errors = []
    for key, value in overrides.items():
        if key == "settings":
            continue
        if key in _SHARED:
            shared[key] = value
        elif key == rules.name and isinstance(value, Mapping):
            own.update(value)
        elif key in BY_NAME:
            errors.append(f"{key}'s settings cannot change a {rules.label} configuration")
        elif key in rules.settings.names():
            own[key] = value
        elif setting_owners(key):
            owners = " and ".join(m.label for m in setting_owners(key))
            errors.append(f"{key} is a setting of {owners}, not of {rules.label}")
        else:
            errors.append(f"unknown RealmConfig field or {rules.label} setting {key!r}")
    if errors:
        raise ValueError("invalid RealmConfig: " + "; ".join(errors))
    return shared, own, whole
