"""SPEC §2: the robust loss ρ, checked against closed forms and finite differences."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from realm_sdk import eata_loss, entropy, robust_loss

D64 = torch.float64
GRID_H = (0.0, 1e-3, 0.05, 0.3, 1.0, 2.3)
GRID_ALPHA = (0.01, 0.15, 0.7, 1.3, 1.9)
GRID_LAM = (1e-3, 0.1, 0.92, 3.0)


def _rho(h: float, a: float, lam: float, scale: bool) -> torch.Tensor:
    return robust_loss(
        torch.tensor(h, dtype=D64),
        torch.tensor(a, dtype=D64),
        torch.tensor(lam, dtype=D64),
        scale_by_lambda=scale,
    )


def _closed_form(h: float, a: float, lam: float, scale: bool) -> float:
    # Direct transcription of the paper's formula, no exp/log rewriting.
    eps = abs(a - 2)
    c = lam if scale else 1.0
    return eps / a * c * ((h / lam / eps + 1) ** (a / 2) - 1)


@pytest.mark.parametrize("scale", [False, True], ids=["C=1", "C=lambda"])
def test_value_matches_paper_formula(scale):
    for h, a, lam in itertools.product(GRID_H, GRID_ALPHA, GRID_LAM):
        got = float(_rho(h, a, lam, scale))
        assert got == pytest.approx(_closed_form(h, a, lam, scale), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("scale", [False, True], ids=["C=1", "C=lambda"])
def test_dH_matches_spec_closed_form(scale):
    for h, a, lam in itertools.product(GRID_H, GRID_ALPHA, GRID_LAM):
        ht = torch.tensor(h, dtype=D64, requires_grad=True)
        rho = robust_loss(
            ht, torch.tensor(a, dtype=D64), torch.tensor(lam, dtype=D64), scale_by_lambda=scale
        )
        (grad,) = torch.autograd.grad(rho, ht)
        c = lam if scale else 1.0
        eps = abs(a - 2)
        expected = c / (2 * lam) * (h / lam / eps + 1) ** ((a - 2) / 2)  # SPEC §2
        assert float(grad) == pytest.approx(expected, rel=1e-10)


def _closed_form_mp(h, a, lam, scale):
    # The paper's formula in 60-digit arithmetic: finite differences of it are exact to far
    # below float64's resolution, where float64 differences of ρ ≈ 1e-6 would be noise.
    eps = abs(a - 2)
    c = lam if scale else 1
    return eps / a * c * ((h / lam / eps + 1) ** (a / 2) - 1)


@pytest.mark.parametrize("scale", [False, True], ids=["C=1", "C=lambda"])
def test_dalpha_dlambda_match_central_differences(scale):
    mpmath = pytest.importorskip("mpmath")  # a dependency of torch (through sympy)
    mpmath.mp.dps = 60
    step = mpmath.mpf("1e-20")
    for h, a, lam in itertools.product(GRID_H[1:], GRID_ALPHA, GRID_LAM):
        at = torch.tensor(a, dtype=D64, requires_grad=True)
        lt = torch.tensor(lam, dtype=D64, requires_grad=True)
        rho = robust_loss(torch.tensor(h, dtype=D64), at, lt, scale_by_lambda=scale)
        g_alpha, g_lam = torch.autograd.grad(rho, (at, lt))
        hm, am, lm = mpmath.mpf(h), mpmath.mpf(a), mpmath.mpf(lam)
        fd_alpha = (
            _closed_form_mp(hm, am + step, lm, scale) - _closed_form_mp(hm, am - step, lm, scale)
        ) / (2 * step)
        fd_lam = (
            _closed_form_mp(hm, am, lm + step, scale) - _closed_form_mp(hm, am, lm - step, scale)
        ) / (2 * step)
        # ∂ρ/∂α = −2/α² · (b^(α/2) − 1) + ...: for small α and H the terms nearly cancel, and
        # b^(α/2) − 1 = exp(·) − 1 carries float64's absolute error (~1e-16) times 2/α².
        cancel = 1e-15 * (2 / a**2)
        assert float(g_alpha) == pytest.approx(float(fd_alpha), rel=1e-8, abs=cancel), (h, a, lam)
        assert float(g_lam) == pytest.approx(float(fd_lam), rel=1e-8, abs=1e-12), (h, a, lam)


def test_rho_of_zero_entropy_is_zero():
    for a, lam, scale in itertools.product(GRID_ALPHA, GRID_LAM, (False, True)):
        assert float(_rho(0.0, a, lam, scale)) == 0.0


@pytest.mark.parametrize("scale", [False, True], ids=["C=1", "C=lambda"])
def test_alpha_to_two_limit_is_half_t(scale):
    # As α → 2, ρ → C · t / 2 (the loss becomes the scaled entropy, Tent-like).
    for h, lam in itertools.product((0.01, 0.5, 2.0), (0.1, 1.0)):
        c = lam if scale else 1.0
        limit = c * (h / lam) / 2
        errors = [abs(float(_rho(h, 2 - d, lam, scale)) - limit) for d in (1e-2, 1e-3, 1e-4)]
        assert errors[-1] < 1e-3 * max(limit, 1e-3)
        assert errors[0] > errors[1] > errors[2]  # converging, not accidentally close


def test_scale_modes_differ_by_exactly_lambda():
    for h, a, lam in itertools.product(GRID_H, GRID_ALPHA, GRID_LAM):
        one = float(_rho(h, a, lam, False))
        scaled = float(_rho(h, a, lam, True))
        assert scaled == pytest.approx(lam * one, rel=1e-12, abs=1e-18)


def test_rho_is_increasing_and_concave_in_entropy():
    h = torch.linspace(0, 3, 301, dtype=D64)
    rho = robust_loss(
        h, torch.tensor(0.15, dtype=D64), torch.tensor(0.1, dtype=D64), scale_by_lambda=False
    ).numpy()
    d1 = np.diff(rho)
    assert (d1 > 0).all()
    assert (np.diff(d1) < 0).all()  # robust: large entropies weigh less


def test_entropy_against_definition():
    logits = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [3.0, -1.0, 0.5, 0.0], [50.0, 0.0, 0.0, 0.0]], dtype=D64
    )
    p = torch.softmax(logits, dim=1).numpy()
    expected = [-(row[row > 0] * np.log(row[row > 0])).sum() for row in p]
    got = entropy(logits).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-18)
    assert got[0] == pytest.approx(math.log(4))
    assert torch.isfinite(entropy(torch.tensor([[1e4, -1e4]], dtype=torch.float32))).all()


def test_eata_weight_carries_no_gradient():
    h = torch.tensor([0.2, 0.5], dtype=D64, requires_grad=True)
    (grad,) = torch.autograd.grad(eata_loss(h, 0.9).sum(), h)
    np.testing.assert_allclose(grad.numpy(), np.exp(-(np.array([0.2, 0.5]) - 0.9)), rtol=1e-12)
