"""SPEC §10: the guardrails and the watch figures, in the SDK (the runtime: test_parity.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import Tiny, tiny_config, tiny_sample

from realm_sdk import Guardrails, RealmAdapter, RealmConfig


def _two(guardrails: Guardrails, **kw) -> tuple[RealmAdapter, RealmAdapter]:
    plain = RealmAdapter(Tiny(seed=1), tiny_config(**kw))
    guarded = RealmAdapter(Tiny(seed=1), tiny_config(guardrails=guardrails, **kw))
    return plain, guarded


def _rate(rate: float | None, updated: bool) -> float:
    """SPEC §10's update rate: an EMA (β = 0.99) of 1 or 0 per call, in float32 throughout."""
    u = np.float32(updated)
    return float(u if rate is None else np.float32(0.99) * np.float32(rate) + np.float32(0.01) * u)


def test_relax_and_anchor_give_back_a_share_of_each_update():
    kappa_al, kappa_theta = 0.2, 0.1
    plain, guarded = _two(Guardrails(relax=kappa_al, anchor=kappa_theta, max_drift=None))
    x = tiny_sample(3)
    source = plain.trainable_parameters()
    assert plain.adapt(x).updated and guarded.adapt(x).updated
    cfg = plain.config
    for name, p in plain.trainable_parameters().items():
        expected = p - kappa_theta * (p - source[name])
        torch.testing.assert_close(guarded.trainable_parameters()[name], expected)
    a, g = plain.state, guarded.state
    assert g.alpha == pytest.approx(a.alpha - kappa_al * (a.alpha - cfg.settings.alpha0), rel=1e-12)
    assert g.lam == pytest.approx(a.lam - kappa_al * (a.lam - cfg.settings.lambda0), rel=1e-12)


def test_relax_keeps_lambda_from_running_away():
    # A large α/λ learning rate drives λ up; relaxed, it settles far below.
    plain, guarded = _two(Guardrails(relax=0.2, anchor=None, max_drift=None), lr_alpha_lambda=2.0)
    for i in range(60):
        x = tiny_sample(100 + i)
        plain.adapt(x)
        guarded.adapt(x)
    assert plain.state.lam > 2 * guarded.state.lam > 0


def test_the_drift_bound_holds_and_is_counted():
    bound = 0.02
    guard = Guardrails(relax=None, anchor=None, max_drift=bound, collapse=None)
    adapter = RealmAdapter(Tiny(seed=1), tiny_config(lr=0.5, guardrails=guard))
    for i in range(40):
        adapter.adapt(tiny_sample(200 + i))
        assert adapter.state.drift <= bound * (1 + 1e-9)
    assert adapter.state.drift_clips > 0
    assert adapter.state.drift == pytest.approx(bound, rel=1e-6)


def test_the_drift_bound_shrinks_with_the_update_rate():
    # SPEC §10: bound = max_drift·min(1, rate / full_rate), rate the watch's before the call.
    bound, full = 0.02, 0.9
    guard = Guardrails(relax=None, anchor=None, max_drift=bound, full_rate=full, collapse=None)
    adapter = RealmAdapter(Tiny(seed=1), tiny_config(lr=0.5, guardrails=guard))
    rate, shrunk, clipped_below = None, 0, 0
    for i in range(60):
        clips = adapter.state.drift_clips
        in_force = bound if rate is None else bound * min(1.0, rate / full)
        updated = adapter.adapt(tiny_sample(300 + i)).updated
        drift = adapter.state.drift
        if updated:
            assert drift <= in_force * (1 + 1e-6)
            if adapter.state.drift_clips > clips:
                assert drift == pytest.approx(in_force, rel=1e-5)
                clipped_below += in_force < bound
        shrunk += in_force < bound
        rate = _rate(rate, updated)
        assert adapter.state.update_rate == rate
    assert shrunk > 0 and clipped_below > 0, "the stream never tightened the bound"


def test_full_rate_must_be_a_share():
    for bad in (0.0, 1.5, float("nan"), -0.1):
        with pytest.raises(ValueError, match="full_rate must be in"):
            Guardrails(full_rate=bad)


def test_a_collapse_resets_to_the_source():
    # Tent on one repeated input: every prediction is the same class, the marginal collapses.
    guard = Guardrails(relax=None, anchor=None, max_drift=None, collapse=0.5)
    adapter = RealmAdapter(Tiny(seed=1), tiny_config(method="tent", lr=0.2, guardrails=guard))
    source = adapter.trainable_parameters()
    x = tiny_sample(5) * 4
    resets = []
    for _ in range(250):
        adapter.adapt(x)
        resets.append(adapter.state.resets_collapse)
    assert resets[98] == 0, "no reset before the watch has seen 100 samples"
    assert resets[-1] >= 1
    first = resets.index(1)
    # Right after the reset the model is the source again, and the watch starts over.
    again = RealmAdapter(Tiny(seed=1), tiny_config(method="tent", lr=0.2, guardrails=guard))
    for _ in range(first + 1):
        again.adapt(x)
    for name, p in again.trainable_parameters().items():
        torch.testing.assert_close(p, source[name])
    assert again.state.update_rate is None and again.state.marginal is None


def test_the_watch_figures_follow_their_formulas():
    adapter = RealmAdapter(Tiny(seed=1), tiny_config(method="tent"))
    beta = 0.99
    rate = ent = marginal = None
    for i in range(30):
        x = tiny_sample(300 + i)
        logits = adapter.predict(x).detach().numpy()[0].astype(np.float64)
        result = adapter.adapt(x)
        z = logits - logits.max()
        log_p = z - math.log(np.exp(z).sum())
        p = np.exp(log_p)
        h = float(-(p * log_p).sum())
        ent = h if ent is None else beta * ent + (1 - beta) * h
        marginal = p if marginal is None else beta * marginal + (1 - beta) * p
        rate = _rate(rate, result.updated)
    st = adapter.state
    assert st.entropy_ema == pytest.approx(ent, rel=1e-9)
    assert st.update_rate == rate
    np.testing.assert_allclose(st.marginal, marginal, rtol=1e-9)
    theta = adapter.trainable_parameters()
    src = RealmAdapter(Tiny(seed=1), tiny_config()).trainable_parameters()
    moved = math.sqrt(sum(float(((theta[n] - src[n]) ** 2).sum()) for n in theta))
    norm = math.sqrt(sum(float((src[n] ** 2).sum()) for n in src))
    assert st.drift == pytest.approx(moved / norm, rel=1e-9)


def test_defaults_guard_realm_and_leave_the_baselines_as_published():
    realm = RealmConfig.preset("cifar", num_classes=10)
    assert realm.guard == Guardrails()
    assert realm.guard.relax is not None and realm.guard.anchor is not None
    for method in ("tent", "eta", "sar", "deyo"):
        assert RealmConfig.preset("cifar", num_classes=10, method=method).guard == Guardrails.off()
    assert RealmConfig.from_dict(realm.to_dict()) == realm
    # A field left out reads as its default, for the guardrails as for any other field: the
    # method's own.
    brief = realm.to_dict()
    del brief["guardrails"]
    assert RealmConfig.from_dict(brief).guard == Guardrails()
    rated = RealmConfig.preset(
        "cifar", num_classes=10, guardrails=Guardrails(max_drift=0.02, full_rate=0.25)
    )
    assert RealmConfig.from_dict(rated.to_dict()) == rated


@pytest.mark.parametrize(
    ("field", "value"),
    [("relax", 0.0), ("anchor", 1.0), ("max_drift", -0.1), ("collapse", float("nan"))],
)
def test_bad_guardrails_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        Guardrails(**{field: value})


def test_save_and_restore_keep_the_watch(tmp_path):
    guard = Guardrails(relax=0.05, anchor=0.01, max_drift=0.05, collapse=None)
    a = RealmAdapter(Tiny(seed=2), tiny_config(guardrails=guard))
    for i in range(20):
        a.adapt(tiny_sample(400 + i))
    a.save(tmp_path / "s.npz")
    b = RealmAdapter(Tiny(seed=2), tiny_config(guardrails=guard))
    b.restore(tmp_path / "s.npz")
    sa, sb = a.state, b.state
    assert sb.update_rate == pytest.approx(sa.update_rate, rel=1e-6)  # float32 in the file
    assert sb.entropy_ema == pytest.approx(sa.entropy_ema, rel=1e-6)
    np.testing.assert_allclose(sb.marginal, sa.marginal, rtol=1e-6)
    assert (sb.drift_clips, sb.samples) == (sa.drift_clips, sa.samples)
    # Both go on alike from the restored state.
    x = tiny_sample(999)
    ra, rb = a.adapt(x), b.adapt(x)
    assert ra.updated == rb.updated


def test_the_settings_vector_holds_each_setting_in_its_slot():
    from realm_runtime.contract import (
        ADAPT_SETTINGS,
        FULL_RATE_NAME,
        MAX_DRIFT_NAME,
        adapt_settings,
    )

    cfg = RealmConfig.preset(
        "cifar", num_classes=10, guardrails=Guardrails(max_drift=0.02, full_rate=0.5)
    )
    every = adapt_settings(cfg)
    assert every.dtype == np.float32 and every.shape == (len(ADAPT_SETTINGS),)
    assert every[ADAPT_SETTINGS.index(FULL_RATE_NAME)] == np.float32(0.5)
    assert every[ADAPT_SETTINGS.index(MAX_DRIFT_NAME)] == np.float32(0.02)
