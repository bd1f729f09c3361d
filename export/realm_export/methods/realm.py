"""REALM's loss as ONNX nodes: ρ(H; α, λ) of SPEC §2 (Seto et al., WACV 2024)."""

from __future__ import annotations

from realm_runtime.contract import ALPHA_NAME, LAMBDA_NAME
from realm_runtime.methods.realm import RealmSettings
from realm_sdk import RealmConfig

from .._onnx_builder import GraphBuilder


def per_sample_nodes(b: GraphBuilder, h: str, one: str, config: RealmConfig) -> str:
    """Nodes of REALM's ``ρ(H; α, λ)`` (times λ with ``loss_scale="lambda"``); returns ρ (B,).

    ``ρ = |α−2|/α · ((H / (λ·|α−2|) + 1)^(α/2) − 1)``, the power written as
    ``exp(α/2 · log b)``: ORT's Pow passes no gradient to its exponent.
    """
    alpha_m2 = b.op("Sub", [ALPHA_NAME, b.const("two", 2.0)], "realm.alpha_m2")
    eps = b.op("Abs", [alpha_m2], "realm.eps")
    t = b.op("Div", [h, LAMBDA_NAME], "realm.t")
    t_over_eps = b.op("Div", [t, eps], "realm.t_over_eps")
    base = b.op("Add", [t_over_eps, one], "realm.base")  # ≥ 1
    half_alpha = b.op("Mul", [ALPHA_NAME, b.const("half", 0.5)], "realm.half_alpha")
    log_base = b.op("Log", [base], "realm.log_base")
    exponent = b.op("Mul", [half_alpha, log_base], "realm.exponent")
    power = b.op("Exp", [exponent], "realm.power")
    eps_over_alpha = b.op("Div", [eps, ALPHA_NAME], "realm.eps_over_alpha")
    power_m1 = b.op("Sub", [power, one], "realm.power_m1")
    rho = b.op("Mul", [eps_over_alpha, power_m1], "realm.rho")
    if RealmSettings.of(config).loss_scale == "lambda":
        rho = b.op("Mul", [rho, LAMBDA_NAME], "realm.rho_scaled")
    return rho
