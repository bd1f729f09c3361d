"""DeYO (Lee et al., ICLR 2024) in the SDK against a reference written from the paper.

The reference follows the paper's Eq. (5)–(8) as its authors' code runs them: the entropy
filter H < 0.5·ln C, PLPD = p_ŷ(x) − p_ŷ(x̃) on a patch-shuffled x̃ with the filter
PLPD > τ, the weight exp(−(H − 0.4·ln C)) + exp(PLPD) (both detached), the mean of the
weighted entropies, one torch.optim.SGD step. Its shuffle is written patch by patch here, in
the order ``realm_runtime.methods.deyo.patch_order`` draws for each sample (numpy; the SDK
draws it in torch ops, which the step graph traces).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from realm_runtime.methods.deyo import patch_order
from realm_sdk import Guardrails, RealmAdapter, RealmConfig

CLASSES = 5
SIDE = 8


class SmallCnn(nn.Module):
    """(B, 3, 8, 8) → conv → GroupNorm → ReLU → pool → linear: where a patch's place matters."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 8, 3, padding=1, dtype=torch.float64)
        self.norm = nn.GroupNorm(2, 8, dtype=torch.float64)
        self.head = nn.Linear(8 * 4, CLASSES, dtype=torch.float64)
        with torch.no_grad():
            self.head.weight.mul_(10)  # confident enough that both cuts pass some samples

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm(self.conv(x)))
        y = nn.functional.adaptive_avg_pool2d(y, (2, 2))  # keeps where things are
        return self.head(y.flatten(1))


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def _shuffled(x: torch.Tensor, grid: int, perm: np.ndarray) -> torch.Tensor:
    ph, pw = x.shape[2] // grid, x.shape[3] // grid
    out = torch.empty_like(x)
    for k, source in enumerate(perm):
        r, c = divmod(k, grid)
        sr, sc = divmod(int(source), grid)
        out[:, :, r * ph : (r + 1) * ph, c * pw : (c + 1) * pw] = x[
            :, :, sr * ph : (sr + 1) * ph, sc * pw : (sc + 1) * pw
        ]
    return out


class _DeyoReference:
    def __init__(self, model: SmallCnn, cfg: RealmConfig) -> None:
        self.model, self.cfg = model, cfg
        self.params = [model.norm.weight, model.norm.bias]
        self.sgd = torch.optim.SGD(self.params, lr=cfg.lr, momentum=cfg.momentum)

    def step(self, x: torch.Tensor, sample: int) -> bool:
        cfg = self.cfg
        grid = cfg.settings.patch_grid
        (perm,) = patch_order(grid, cfg.settings.shuffle_seed, np.array([sample]))
        logits = self.model(x)
        h = _entropy(logits)
        first = h < 0.5 * math.log(CLASSES)
        if not first.any():
            return False
        with torch.no_grad():
            shuffled = self.model(_shuffled(x[first], grid, perm))
        p, q = logits[first].softmax(1), shuffled.softmax(1)
        top = p.argmax(1, keepdim=True)
        plpd = (p.gather(1, top) - q.gather(1, top)).reshape(-1)
        second = plpd > cfg.settings.plpd_threshold
        if not second.any():
            return False
        hk, plpd = h[first][second], plpd[second]
        coeff = torch.exp(-(hk.detach() - 0.4 * math.log(CLASSES))) + torch.exp(plpd.detach())
        self.sgd.zero_grad()
        (hk * coeff).mean().backward()
        self.sgd.step()
        return True


def _config(**kw) -> RealmConfig:
    base = RealmConfig(num_classes=CLASSES, method="deyo")
    return base.with_overrides(**{"lr": 0.02, "guardrails": Guardrails.off(), **kw})


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_deyo_follows_its_reference_step_after_step(momentum):
    cfg = _config(momentum=momentum, plpd_threshold=0.1)
    model = SmallCnn(seed=1)
    adapter = RealmAdapter(copy.deepcopy(model), cfg, input_shape=(3, SIDE, SIDE))
    reference = _DeyoReference(copy.deepcopy(model), cfg)
    rng = np.random.default_rng(0)
    decisions = []
    for i in range(40):
        x = torch.from_numpy(rng.standard_normal((1, 3, SIDE, SIDE)) * 2)
        updated = reference.step(x, i)
        result = adapter.adapt(x)
        assert result.updated == updated, f"step {i}: the decisions differ ({result.reason})"
        decisions.append(updated)
        got = adapter.trainable_parameters()
        torch.testing.assert_close(got["norm.weight"], reference.params[0].detach())
        torch.testing.assert_close(got["norm.bias"], reference.params[1].detach())
    assert 5 <= sum(decisions) <= 35, "the stream should both update and skip"
    state = adapter.state
    assert state.updates == sum(decisions) and state.skipped_entropy == 40 - sum(decisions)


def test_each_sample_gets_a_patch_order_of_its_own_drawn_alike_in_numpy_and_torch():
    from realm_sdk.methods.deyo import patch_order as torch_order
    from realm_sdk.methods.deyo import patch_shuffle

    samples = np.arange(0, 40_000, dtype=np.int64)
    orders = patch_order(4, 0, samples)
    assert (np.sort(orders, axis=1) == np.arange(16)).all()  # each row a permutation
    assert len({row.tobytes() for row in orders}) == len(samples)  # 16! orders: no repeat here
    for seed, grid, some in [(0, 4, samples[:2000]), (7, 2, samples[:64]), (2**40, 8, samples)]:
        got = torch_order(grid, seed, torch.from_numpy(some)).numpy()
        assert (got == patch_order(grid, seed, some)).all(), (seed, grid)
    huge = np.array([2**31 - 1, 2**31, 2**45 + 3], np.int64)  # indices past 31 bits
    assert (torch_order(4, 0, torch.from_numpy(huge)).numpy() == patch_order(4, 0, huge)).all()
    assert not (patch_order(4, 1, samples[:100]) == orders[:100]).all(axis=1).any()
    # Every patch as likely at each place: the first place's counts within 5 standard errors.
    counts = np.bincount(orders[:, 0], minlength=16)
    expected, spread = len(samples) / 16, np.sqrt(len(samples) * (1 / 16) * (15 / 16))
    assert np.abs(counts - expected).max() < 5 * spread, counts
    x = torch.arange(2 * 3 * 8 * 12, dtype=torch.float64).reshape(2, 3, 8, 12)
    pair = patch_order(4, 0, np.array([5, 6]))
    got = patch_shuffle(x, 4, torch.from_numpy(pair))
    for b in range(2):
        torch.testing.assert_close(got[b : b + 1], _shuffled(x[b : b + 1], 4, pair[b]))


def test_samples_apart_only_in_their_high_bits_draw_unrelated_orders():
    samples = np.arange(4000, dtype=np.int64)
    base = patch_order(4, 0, samples)
    for k in (12, 16, 24, 31, 32, 40):
        other = patch_order(4, 0, samples + (1 << k))
        same = (base == other).mean()  # 1/16 of the places for independent orders
        spread = np.sqrt((1 / 16) * (15 / 16) / base.size)
        assert abs(same - 1 / 16) < 5 * spread, (k, same)


def test_a_reset_draws_the_orders_again_from_the_first_sample():
    cfg = _config(plpd_threshold=0.1)
    rng = np.random.default_rng(3)
    xs = [torch.from_numpy(rng.standard_normal((1, 3, SIDE, SIDE)) * 2) for _ in range(12)]
    fresh = RealmAdapter(SmallCnn(seed=1), cfg, input_shape=(3, SIDE, SIDE))
    again = RealmAdapter(SmallCnn(seed=1), cfg, input_shape=(3, SIDE, SIDE))
    for x in xs[:5]:
        again.adapt(x)
    again.reset()
    for x in xs:
        a, b = fresh.adapt(x), again.adapt(x)
        assert a.updated == b.updated
    torch.testing.assert_close(fresh.trainable_parameters(), again.trainable_parameters())


def test_the_plpd_cut_refuses_a_sample_the_shuffle_does_not_change():
    # A uniform image looks the same shuffled: PLPD = 0, never above a positive threshold.
    cfg = _config(plpd_threshold=0.05)
    adapter = RealmAdapter(SmallCnn(seed=1), cfg, input_shape=(3, SIDE, SIDE))
    result = adapter.adapt(torch.full((1, 3, SIDE, SIDE), 0.3, dtype=torch.float64))
    assert not result.updated and result.reason == "entropy"


def test_deyo_refuses_an_input_it_cannot_cut_into_patches():
    adapter = RealmAdapter(SmallCnn(seed=1), _config(patch_grid=3), input_shape=(3, SIDE, SIDE))
    with pytest.raises(ValueError, match=r"3×3 patches, and 8×8 does not divide"):
        adapter.adapt(torch.zeros(1, 3, SIDE, SIDE, dtype=torch.float64))
    assert adapter.state.samples == 0  # refused before anything moved


def test_deyo_settings_are_checked():
    with pytest.raises(ValueError, match="plpd_threshold"):
        _config(plpd_threshold=1.5)
    with pytest.raises(ValueError, match="patch_grid"):
        _config(patch_grid=1)
    with pytest.raises(ValueError, match="shuffle_seed"):
        _config(shuffle_seed=-1)
    assert _config().e0 == pytest.approx(0.5 * math.log(CLASSES))
