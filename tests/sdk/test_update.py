"""SPEC §3's update in torch (``realm_sdk.FlatUpdate``): what the SDK and the step graph run."""

from __future__ import annotations

import pytest
import torch

from realm_sdk import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, FlatUpdate

F32 = torch.float32


def _settings(**kw: float) -> dict[str, torch.Tensor]:
    base = dict(lr=0.1, lr_alpha_lambda=0.0, lr_batch_norm=0.0, momentum=0.0, anchor=0.0, relax=0.0)
    base.update(kw)
    return {k: torch.tensor(v, dtype=F32) for k, v in base.items()}


def test_it_is_pytorch_sgd_with_momentum():
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(3, generator=g), torch.randn(2, 2, generator=g)]
    update = FlatUpdate(start, [False, False], learns_alpha_lambda=False)
    reference = [p.clone().requires_grad_(True) for p in start]
    sgd = torch.optim.SGD(reference, lr=0.1, momentum=0.9)
    values, velocity = update.initial.clone(), torch.zeros(update.total)
    for _ in range(4):
        grads = [torch.randn(p.shape, generator=g) for p in start]
        for p, grad in zip(reference, grads, strict=True):
            p.grad = grad.clone()
        sgd.step()
        values, velocity = update.step(
            values, velocity, update.flatten(grads), **_settings(momentum=0.9)
        )
    for mine, theirs in zip(update.unflatten(values), reference, strict=True):
        torch.testing.assert_close(mine, theirs.detach(), rtol=0, atol=1e-6)


def test_batch_norm_steps_at_its_own_rate_where_it_is_above_zero():
    update = FlatUpdate([torch.zeros(2), torch.zeros(3)], [True, False], learns_alpha_lambda=False)
    grad = torch.ones(5)
    own, _ = update.step(torch.zeros(5), torch.zeros(5), grad, **_settings(lr_batch_norm=0.5))
    assert own.tolist() == pytest.approx([-0.5, -0.5, -0.1, -0.1, -0.1])
    same, _ = update.step(torch.zeros(5), torch.zeros(5), grad, **_settings())
    assert same.tolist() == pytest.approx([-0.1] * 5)


def test_alpha_and_lambda_step_at_their_rate_into_their_bounds():
    start = [torch.zeros(2), torch.tensor(0.15), torch.tensor(0.1)]
    update = FlatUpdate(start, [False] * 3, learns_alpha_lambda=True)
    grad = torch.tensor([1.0, 1.0, -1e9, 1e9])  # α pushed up, λ pushed down, far past the bounds
    values, velocity = update.step(
        update.initial, torch.zeros(4), grad, **_settings(lr_alpha_lambda=1.0)
    )
    assert values[:2].tolist() == pytest.approx([-0.1, -0.1])
    assert values[2] == pytest.approx(ALPHA_MAX) and values[3] == pytest.approx(LAMBDA_MIN)
    assert torch.equal(velocity, grad)  # a zero buffer: v' = g
    low, _ = update.step(update.initial, torch.zeros(4), -grad, **_settings(lr_alpha_lambda=1.0))
    assert low[2] == pytest.approx(ALPHA_MIN)


def test_anchor_and_relax_give_back_their_share_of_the_way_from_the_start():
    start = [torch.ones(2), torch.tensor(0.15), torch.tensor(0.1)]
    update = FlatUpdate(start, [False] * 3, learns_alpha_lambda=True)
    grad = torch.tensor([-1.0, -1.0, -0.1, -0.1])
    plain, _ = update.step(update.initial, torch.zeros(4), grad, **_settings(lr_alpha_lambda=1.0))
    shared, _ = update.step(
        update.initial,
        torch.zeros(4),
        grad,
        **_settings(lr_alpha_lambda=1.0, anchor=0.25, relax=0.5),
    )
    kappa = torch.tensor([0.25, 0.25, 0.5, 0.5])
    torch.testing.assert_close(shared, plain - kappa * (plain - update.initial))


def test_the_flat_layout_round_trips():
    start = [torch.arange(6.0).reshape(2, 3), torch.tensor(7.0)]
    update = FlatUpdate(start, [False, False], learns_alpha_lambda=False)
    assert update.sizes == [6, 1] and update.shapes == [(2, 3), ()]
    back = update.unflatten(update.flatten(start))
    assert all(torch.equal(a, b) for a, b in zip(back, start, strict=True))
    with pytest.raises(ValueError, match="batch_norm"):
        FlatUpdate(start, [False], learns_alpha_lambda=False)


def test_the_fused_anchor_is_torch_lerp_and_an_ulp_from_the_graph_form():
    g = torch.Generator().manual_seed(3)
    start = [torch.randn(300, generator=g), torch.tensor(0.15), torch.tensor(0.1)]
    update = FlatUpdate(start, [False] * 3, learns_alpha_lambda=True)
    values = update.initial + 0.01 * torch.randn(update.total, generator=g)
    grad = torch.randn(update.total, generator=g)
    settings = _settings(lr_alpha_lambda=0.01, anchor=0.003, relax=0.1)
    graph, _ = update.step(values, torch.zeros(update.total), grad, **settings)
    eager, _ = update.step(values, torch.zeros(update.total), grad, **settings, fused_anchor=True)
    plain, _ = update.step(
        values, torch.zeros(update.total), grad, **_settings(lr_alpha_lambda=0.01)
    )
    assert torch.equal(eager[:300], torch.lerp(plain[:300], update.initial[:300], 0.003))
    assert torch.equal(eager[300:], graph[300:])  # α, λ: relax is the same two ops in both
    torch.testing.assert_close(eager, graph, rtol=0, atol=1e-6)
