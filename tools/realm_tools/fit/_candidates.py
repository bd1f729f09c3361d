"""The configurations a fit measures: every method of the registry, around its paper's settings.

Three tiers, cheapest to cover first, so a small budget still measures every method:

- tier 0: each method at its paper's settings (the preset);
- tier 1: the learning rate a quarter, a half and twice the preset's;
- tier 2: the other guardrails (REALM's relax, anchor and update-rate bound, or the bound
  alone), and, where the model has BatchNorm, the other BatchNorm rate (a fifth of ``lr``,
  or ``lr`` itself where the method already steps BatchNorm slower).

Every adapting candidate carries the drift bound the fit found (``max_drift``), so its worst
case is the one the rule checks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from realm_runtime import Guardrails, RealmConfig
from realm_runtime.methods import EXPORTED, REALM, method_named

LR_FACTORS = (0.25, 0.5, 2.0)  # tier 1: around the preset's rate
BATCH_NORM_SHARE = 0.2  # tier 2: BatchNorm's rate as REALM's preset sets it, a fifth of lr
NO_ADAPT = "no-adapt"


@dataclass(frozen=True)
class Candidate:
    """One configuration measured by the fit; ``config`` None is not adapting."""

    label: str  # as fit.md prints it: method, rate and guardrails
    config: RealmConfig | None  # None: the source model, frozen
    tier: int  # 0: the paper's settings; 1: rates; 2: guardrails and BatchNorm's rate

    @property
    def key(self) -> str:
        """A digest of the configuration: what the resume journal files results under."""
        if self.config is None:
            return NO_ADAPT
        text = json.dumps(self.config.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def method(self) -> str:
        """The method's name, or ``no-adapt``."""
        return NO_ADAPT if self.config is None else self.config.method

    def describe(self) -> dict[str, object]:
        """What fit.json records of it: label, method, rates and guardrails."""
        if self.config is None:
            return {"label": self.label, "method": NO_ADAPT}
        c = self.config
        return {
            "label": self.label,
            "method": c.method,
            "lr": c.lr,
            "lr_batch_norm": c.lr_batch_norm,
            "guardrails": dataclasses.asdict(c.guard),
            "adapt_stages": c.adapt_stages,
            "tier": self.tier,
        }


NO_ADAPT_CANDIDATE = Candidate(label="no adapt", config=None, tier=0)


def guarded(bound: float) -> Guardrails:
    """REALM's guardrails (relax, anchor, the update-rate bound) with ``max_drift`` = bound."""
    return dataclasses.replace(REALM.guardrails, max_drift=bound)


def bound_only(bound: float) -> Guardrails:
    """The drift bound alone: the method runs as its paper does inside it."""
    return dataclasses.replace(Guardrails.off(), max_drift=bound)


def candidates(
    preset: str,
    num_classes: int,
    *,
    bound: float,
    batch_norm: bool,
    adapt_stages: int | None,
    tiers: int = 3,
) -> list[Candidate]:
    """The adapting configurations of the first ``tiers`` tiers, every method of the registry.

    Args:
        preset: the preset every candidate starts from.
        num_classes: the classifier's classes.
        bound: the drift bound found for the adapted layers (``max_drift``).
        batch_norm: whether the model's adapted layers include BatchNorm.
        adapt_stages: the stages the memory budget leaves adapting (None: every one).
        tiers: how many tiers (1–3).
    """
    out: list[Candidate] = []
    for method in EXPORTED:  # the fit's answer is artifacts: the methods that export
        rules = method_named(method)
        base = RealmConfig.preset(preset, num_classes=num_classes, method=method)
        base = dataclasses.replace(base, adapt_stages=adapt_stages)
        own_guard = guarded(bound) if rules.learns_alpha_lambda else bound_only(bound)
        other_guard = bound_only(bound) if rules.learns_alpha_lambda else guarded(bound)
        own_name = "guardrails" if rules.learns_alpha_lambda else "bound"
        other_name = "bound" if rules.learns_alpha_lambda else "guardrails"

        out.append(_variant(base, rules.label, 1.0, own_guard, own_name, 0))
        if tiers >= 2:
            out += [_variant(base, rules.label, f, own_guard, own_name, 1) for f in LR_FACTORS]
        if tiers >= 3:
            out += [_variant(base, rules.label, f, other_guard, other_name, 2) for f in (1.0, 0.5)]
            if batch_norm:
                other_bn = None if base.lr_batch_norm is not None else base.lr * BATCH_NORM_SHARE
                bn = ", BatchNorm at lr" if other_bn is None else ", BatchNorm at lr/5"
                out.append(
                    _variant(
                        base, rules.label, 1.0, own_guard, own_name, 2, bn, lr_batch_norm=other_bn
                    )
                )
    return out


def _variant(
    base: RealmConfig,
    label: str,
    factor: float,
    guard: Guardrails,
    guard_name: str,
    tier: int,
    bn: str = "",
    **extra: object,
) -> Candidate:
    """``base`` at ``factor`` times its rates, with ``guard`` and any other field replaced."""
    config = dataclasses.replace(base, lr=base.lr * factor, guardrails=guard, **extra)  # type: ignore[arg-type]
    if "lr_batch_norm" not in extra and base.lr_batch_norm is not None:
        config = dataclasses.replace(config, lr_batch_norm=base.lr_batch_norm * factor)
    rate = "" if factor == 1 else f" lr×{factor:g}"
    return Candidate(f"{label}{rate} {guard_name}{bn}", config, tier)


def default_config(preset: str, num_classes: int, adapt_stages: int | None) -> RealmConfig:
    """What ``realm export`` writes with no flags: REALM at the preset, its own guardrails."""
    config = RealmConfig.preset(preset, num_classes=num_classes)
    return dataclasses.replace(config, adapt_stages=adapt_stages)
