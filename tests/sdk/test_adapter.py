"""SPEC §3: one online step, S_div, momentum, projection, guards, state (RealmAdapter).

Saving and restoring a state: test_checkpoint.py.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from helpers import Tiny, snapshot, tiny_config, tiny_sample

from realm_sdk import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmAdapter, RealmConfig


def _hand_step(model: Tiny, x: np.ndarray, cfg: RealmConfig, alpha: float, lam: float):
    """The expected step, derived on paper and written in numpy (no autograd).

    LayerNorm: x̂ = (x − μ)/√(σ² + 1e-5); a = γ⊙x̂ + β; z = W a; p = softmax(z);
    H = −Σ p log p; ∂H/∂z = −p ⊙ (log p + H); ∂H/∂γ = (Wᵀ ∂H/∂z) ⊙ x̂; ∂H/∂β = Wᵀ ∂H/∂z.
    ρ = (ε/α)·C·(b^{α/2} − 1), b = H/(λε) + 1, ε = 2 − α, and with C = 1:
    ∂ρ/∂H = b^{α/2−1}/(2λ); ∂ρ/∂λ = −b^{α/2−1}·H/(2λ²);
    ∂ρ/∂α = −2/α²·(b^{α/2} − 1) + (ε/α)·(½ b^{α/2} ln b + (α/2) b^{α/2−1}·H/(λε²)).
    With C = λ: ρ_λ = λρ₁, so ∂ρ_λ/∂θ = λ ∂ρ₁/∂θ and ∂ρ_λ/∂λ = ρ₁ + λ ∂ρ₁/∂λ.
    """
    gamma = model.norm.weight.detach().numpy().copy()
    beta = model.norm.bias.detach().numpy().copy()
    w = model.fc.weight.detach().numpy()
    x = x[0]
    xhat = (x - x.mean()) / np.sqrt(x.var() + 1e-5)
    z = w @ (gamma * xhat + beta)
    logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
    p = np.exp(logp)
    h = -(p * logp).sum()
    dh_dz = -p * (logp + h)
    g_a = w.T @ dh_dz
    eps = 2 - alpha
    b = h / (lam * eps) + 1
    rho1 = eps / alpha * (b ** (alpha / 2) - 1)
    drho_dh = b ** (alpha / 2 - 1) / (2 * lam)
    drho_dlam = -(b ** (alpha / 2 - 1)) * h / (2 * lam**2)
    drho_dalpha = -2 / alpha**2 * (b ** (alpha / 2) - 1) + eps / alpha * (
        0.5 * b ** (alpha / 2) * np.log(b) + alpha / 2 * b ** (alpha / 2 - 1) * h / (lam * eps**2)
    )
    if cfg.settings.loss_scale == "lambda":
        drho_dh, drho_dalpha, drho_dlam = lam * drho_dh, lam * drho_dalpha, rho1 + lam * drho_dlam
    g_gamma = drho_dh * g_a * xhat
    g_beta = drho_dh * g_a
    return dict(
        logits=z,
        p=p,
        gamma=gamma - cfg.lr * g_gamma,
        beta=beta - cfg.lr * g_beta,
        alpha=min(max(alpha - cfg.settings.lr_alpha_lambda * drho_dalpha, ALPHA_MIN), ALPHA_MAX),
        lam=max(lam - cfg.settings.lr_alpha_lambda * drho_dlam, LAMBDA_MIN),
        g_gamma=g_gamma,
    )


@pytest.mark.parametrize("scale", ["one", "lambda"])
def test_one_step_matches_hand_derivation(scale):
    model = Tiny()
    cfg = tiny_config(loss_scale=scale)
    expected = _hand_step(copy.deepcopy(model), tiny_sample(1).numpy(), cfg, 0.15, 0.1)
    adapter = RealmAdapter(model, cfg)
    result = adapter.adapt(tiny_sample(1))
    assert result.updated and result.reason == "updated"
    np.testing.assert_allclose(result.logits[0].numpy(), expected["logits"], rtol=1e-12)
    params = adapter.trainable_parameters()
    np.testing.assert_allclose(params["norm.weight"].numpy(), expected["gamma"], rtol=1e-10)
    np.testing.assert_allclose(params["norm.bias"].numpy(), expected["beta"], rtol=1e-10)
    st = adapter.state
    assert st.alpha == pytest.approx(expected["alpha"], rel=1e-10)
    assert st.lam == pytest.approx(expected["lam"], rel=1e-10)
    np.testing.assert_allclose(st.ema, expected["p"], rtol=1e-12)  # first EMA = p
    # momentum 0: the buffer holds the last gradient (PyTorch's first-step v = g).
    np.testing.assert_allclose(
        adapter.momentum_buffers()["norm.weight"].numpy(), expected["g_gamma"], rtol=1e-10
    )
    assert (st.samples, st.updates, st.updated_samples) == (1, 1, 1)
    assert set(adapter.trainable_names) == {"norm.weight", "norm.bias"}
    assert not model.fc.weight.requires_grad


class _BatchNormThenLayerNorm(torch.nn.Module):
    """x (B, 6) → BatchNorm1d with running statistics → LayerNorm → Tiny's linear map."""

    def __init__(self) -> None:
        super().__init__()
        tiny = Tiny()
        self.bn = torch.nn.BatchNorm1d(6, dtype=torch.float64)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.linspace(-0.2, 0.3, 6, dtype=torch.float64))
            self.bn.running_var.copy_(torch.linspace(0.5, 2.0, 6, dtype=torch.float64))
            self.bn.weight.copy_(torch.linspace(0.8, 1.3, 6, dtype=torch.float64))
        self.norm, self.fc = tiny.norm, tiny.fc

    def forward(self, x):
        return self.fc(self.norm(self.bn(x)))


def test_batch_norm_steps_at_its_own_rate():
    model = _BatchNormThenLayerNorm()
    cfg = tiny_config(lr=0.05, lr_batch_norm=0.01)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "." in n}
    adapter = RealmAdapter(model, cfg)
    assert adapter.adapt(tiny_sample(1)).updated
    grads = adapter.momentum_buffers()  # momentum 0: the buffer is this step's gradient
    after = adapter.trainable_parameters()
    assert set(after) == {"bn.weight", "bn.bias", "norm.weight", "norm.bias"}
    assert adapter.learning_rates == {
        "bn.weight": 0.01,
        "bn.bias": 0.01,
        "norm.weight": 0.05,
        "norm.bias": 0.05,
    }
    for name, rate in [("bn.weight", 0.01), ("bn.bias", 0.01), ("norm.weight", 0.05)]:
        assert grads[name].abs().max() > 0
        np.testing.assert_allclose(
            after[name].numpy(), (before[name] - rate * grads[name]).numpy(), rtol=1e-12
        )


def test_returned_logits_are_pre_update():
    model = Tiny()
    adapter = RealmAdapter(model, tiny_config(lr=1.0))
    before = Tiny()(tiny_sample(2))
    logits = adapter.adapt(tiny_sample(2)).logits
    assert torch.equal(logits, before.detach())
    assert not torch.allclose(adapter.predict(tiny_sample(2)), logits)


def _diverse_pair(adapter_cfg):
    """A sample, and another whose prediction is far from the first's (cos < d)."""
    model = Tiny()
    p0 = torch.softmax(model(tiny_sample(1)), 1)
    for seed in range(2, 400):
        p = torch.softmax(model(tiny_sample(seed)), 1)
        if float(torch.cosine_similarity(p, p0).detach()) < adapter_cfg.diversity_margin / 2:
            return tiny_sample(1), tiny_sample(seed)
    raise AssertionError("no diverse sample found")


def test_sdiv_zero_leaves_state_bit_identical():
    cfg = tiny_config(momentum=0.9)
    a, _ = _diverse_pair(cfg)
    adapter = RealmAdapter(Tiny(), cfg)
    adapter.adapt(a)
    before = snapshot(adapter, counters=False)
    result = adapter.adapt(a)  # same prediction as the EMA: cos ≈ 1 ≥ d
    assert not result.updated and result.reason == "diversity"
    assert not bool(result.selected.any())
    assert snapshot(adapter, counters=False) == before
    st = adapter.state
    assert (st.samples, st.updates, st.skipped_diversity) == (2, 1, 1)


def test_sdiv_one_updates_and_ema_follows_beta():
    cfg = tiny_config()
    a, b = _diverse_pair(cfg)
    adapter = RealmAdapter(Tiny(), cfg)
    adapter.adapt(a)
    ema0 = adapter.state.ema
    p_b = torch.softmax(adapter.predict(b), 1)[0].numpy()
    cos = float(p_b @ ema0 / np.linalg.norm(p_b) / np.linalg.norm(ema0))
    assert abs(cos) < cfg.diversity_margin
    assert adapter.adapt(b).updated
    np.testing.assert_allclose(adapter.state.ema, 0.9 * ema0 + 0.1 * p_b, rtol=1e-12)


def test_momentum_survives_skipped_samples():
    cfg = tiny_config(momentum=0.9)
    a, b = _diverse_pair(cfg)
    adapter = RealmAdapter(Tiny(), cfg)
    adapter.adapt(a)
    v_a = adapter.momentum_buffers()
    p_a = adapter.trainable_parameters()
    alpha_v_a = adapter.state.alpha_momentum
    assert not adapter.adapt(a).updated  # skipped: must not decay or touch v
    # The gradient at b, from the hand derivation at the current state.
    model_now = Tiny()
    with torch.no_grad():
        model_now.norm.weight.copy_(p_a["norm.weight"])
        model_now.norm.bias.copy_(p_a["norm.bias"])
    st = adapter.state
    cfg_b = tiny_config(lr=1.0, lr_alpha_lambda=0.0)
    exp = _hand_step(model_now, b.numpy(), cfg_b, st.alpha, st.lam)
    assert adapter.adapt(b).updated
    v_b = adapter.momentum_buffers()
    np.testing.assert_allclose(
        v_b["norm.weight"].numpy(), 0.9 * v_a["norm.weight"].numpy() + exp["g_gamma"], rtol=1e-10
    )
    np.testing.assert_allclose(
        adapter.trainable_parameters()["norm.weight"].numpy(),
        p_a["norm.weight"].numpy() - cfg.lr * v_b["norm.weight"].numpy(),
        rtol=1e-12,
    )
    assert adapter.state.alpha_momentum != pytest.approx(alpha_v_a)


def test_projection_at_the_bounds():
    x = tiny_sample(1)
    # C = 1: ∂ρ/∂λ < 0 always, so a huge step drives λ up (unbounded above); α is pushed
    # past one of its bounds, whichever the gradient's sign says.
    model = Tiny()
    exp = _hand_step(copy.deepcopy(model), x.numpy(), tiny_config(lr_alpha_lambda=1e6), 0.15, 0.1)
    adapter = RealmAdapter(model, tiny_config(lr_alpha_lambda=1e6))
    adapter.adapt(x)
    assert adapter.state.alpha in (ALPHA_MIN, ALPHA_MAX)
    assert adapter.state.alpha == pytest.approx(exp["alpha"])
    assert adapter.state.lam > 1.0
    # C = λ: ∂ρ/∂λ > 0 (ρ_λ grows with λ), so λ is pushed below zero and lands on λ_min.
    adapter = RealmAdapter(Tiny(), tiny_config(lr_alpha_lambda=1e6, loss_scale="lambda"))
    adapter.adapt(x)
    assert adapter.state.lam == pytest.approx(LAMBDA_MIN)
    assert ALPHA_MIN <= adapter.state.alpha <= ALPHA_MAX


class _NaNGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


class _PoisonedBackward(Tiny):
    def forward(self, x):
        return self.fc(_NaNGradient.apply(self.norm(x)))


def test_nonfinite_gradient_is_refused_and_counted():
    adapter = RealmAdapter(_PoisonedBackward(), tiny_config(momentum=0.9))
    before = snapshot(adapter, counters=False)
    result = adapter.adapt(tiny_sample(1))
    assert torch.isfinite(result.logits).all()  # the forward is fine, only grads are NaN
    assert not result.updated and result.reason == "nonfinite"
    assert snapshot(adapter, counters=False) == before
    assert adapter.state.skipped_nonfinite == 1 and adapter.state.ema is None


def test_nonfinite_logits_are_refused_and_counted():
    model = Tiny()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("inf")
    adapter = RealmAdapter(model, tiny_config())
    before = snapshot(adapter, counters=False)
    result = adapter.adapt(tiny_sample(1))
    assert result.reason == "nonfinite"
    assert snapshot(adapter, counters=False) == before
    assert adapter.state.skipped_nonfinite == 1


def test_tent_updates_every_sample_and_has_no_alpha():
    adapter = RealmAdapter(Tiny(), tiny_config(method="tent"))
    for _ in range(3):
        assert adapter.adapt(tiny_sample(1)).updated
    st = adapter.state
    assert st.updates == 3 and st.alpha is None and st.lam is None


def test_eata_skips_uncertain_samples():
    adapter = RealmAdapter(Tiny(), tiny_config(method="eta", entropy_margin=1e-6))
    result = adapter.adapt(tiny_sample(1))
    assert not result.updated and result.reason == "entropy"
    assert adapter.state.skipped_entropy == 1
    adapter = RealmAdapter(Tiny(), tiny_config(method="eta", entropy_margin=10.0))
    assert adapter.adapt(tiny_sample(1)).updated


def test_batch_gradient_is_the_mean_of_selected_samples():
    # lr = 1, no momentum, α/λ frozen: Δθ of a batch is −mean of the per-sample gradients,
    # and Δθ of a single-sample step is −its gradient.
    cfg = tiny_config(lr=1.0, lr_alpha_lambda=0.0)
    xs = [tiny_sample(s) for s in (1, 2, 3)]
    source = RealmAdapter(Tiny(), cfg).trainable_parameters()
    deltas = []
    for x in xs:
        single = RealmAdapter(Tiny(), cfg)
        single.adapt(x)
        deltas.append({k: v - source[k] for k, v in single.trainable_parameters().items()})
    batch = RealmAdapter(Tiny(), cfg)
    result = batch.adapt(torch.cat(xs))
    assert bool(result.selected.all()) and result.updated
    for k, v in batch.trainable_parameters().items():
        mean_delta = sum(d[k] for d in deltas) / 3
        torch.testing.assert_close(v - source[k], mean_delta, rtol=1e-10, atol=1e-12)
    probs = torch.softmax(Tiny()(torch.cat(xs)), 1).detach().numpy()
    np.testing.assert_allclose(batch.state.ema, probs.mean(0), rtol=1e-12)
    assert batch.state.updates == 1 and batch.state.updated_samples == 3


def test_batch_sdiv_is_per_sample_against_the_same_ema():
    cfg = tiny_config()
    a, b = _diverse_pair(cfg)
    adapter = RealmAdapter(Tiny(), cfg)
    adapter.adapt(a)
    result = adapter.adapt(torch.cat([a, b, a]))
    assert result.selected.tolist() == [False, True, False]
    assert adapter.state.skipped_diversity == 2 and adapter.state.updated_samples == 2


def test_episodic_resets_after_each_call():
    adapter = RealmAdapter(Tiny(), tiny_config(episodic=True))
    source = adapter.trainable_parameters()
    assert adapter.adapt(tiny_sample(1)).updated
    for k, v in adapter.trainable_parameters().items():
        assert torch.equal(v, source[k])
    assert adapter.state.alpha == 0.15 and adapter.state.ema is None
    assert adapter.state.updates == 1  # counters keep counting


def test_reset_restores_the_source():
    adapter = RealmAdapter(Tiny(), tiny_config(momentum=0.9))
    fresh = snapshot(adapter, counters=False)
    for s in range(5):
        adapter.adapt(tiny_sample(s))
    adapter.reset()
    assert snapshot(adapter, counters=False) == fresh
    assert adapter.state.samples == 0


@pytest.fixture
def conv_adapter(digits_model):
    return RealmAdapter(copy.deepcopy(digits_model), RealmConfig.preset("cifar", num_classes=10))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torch.zeros(1, 32, 32), "rank 4"),
        (lambda: torch.zeros(1, 3, 32, 32), "channel count must be 1"),
        (lambda: torch.zeros(1, 1, 32, 32, dtype=torch.int64), "floating point"),
        (lambda: torch.zeros(1, 1, 32, 32, dtype=torch.float64), "the model's"),
        (lambda: torch.full((1, 1, 32, 32), float("nan")), "NaN"),
        (lambda: torch.full((1, 1, 32, 32), float("inf")), "Inf"),
        (lambda: torch.zeros(0, 1, 32, 32), "empty"),
        (lambda: np.zeros((1, 1, 32, 32), np.float32), "torch.Tensor"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(conv_adapter, make, message):
    conv_adapter.adapt(torch.randn(1, 1, 32, 32))
    before = snapshot(conv_adapter, counters=False)
    counters = conv_adapter.state.samples
    with pytest.raises(ValueError, match=message):
        conv_adapter.adapt(make())
    with pytest.raises(ValueError, match=message):
        conv_adapter.predict(make())
    assert snapshot(conv_adapter, counters=False) == before
    assert conv_adapter.state.samples == counters


def test_wrong_num_classes_is_named(digits_model):
    adapter = RealmAdapter(copy.deepcopy(digits_model), RealmConfig.preset("cifar", num_classes=7))
    with pytest.raises(ValueError, match=r"logits of shape \(1, 7\)"):
        adapter.adapt(torch.randn(1, 1, 32, 32))


def test_online_smoke_on_shifted_digits(digits, digits_model):
    from realm_tools.bench import run_online

    x, y = digits.stream("gaussian_noise", 5, seed=0)
    x, y = x[:300], y[:300]
    frozen = run_online(digits_model, x, y)
    adapter = RealmAdapter(copy.deepcopy(digits_model), RealmConfig.preset("cifar", num_classes=10))
    adapted = run_online(adapter, x, y)
    st = adapter.state
    assert 0 < st.updates < 300 and st.skipped_diversity > 0
    assert (adapted.predictions != frozen.predictions).any()  # adaptation changed predictions
    assert len(adapted.alpha) == 300
    assert all(ALPHA_MIN <= a <= ALPHA_MAX for a in adapted.alpha)
    assert all(lam >= LAMBDA_MIN and math.isfinite(lam) for lam in adapted.lam)
    assert adapted.alpha[-1] != 0.15 and adapted.lam[-1] != 0.1  # both learned
    assert adapted.accuracy > frozen.accuracy - 0.05  # and it did not collapse
