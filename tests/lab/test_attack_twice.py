"""The frame attack on models with ops torch cannot differentiate twice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from realm_lab.attack import FrameAttacker, FrameSettings, NotTwiceDifferentiable
from realm_lab.attack import TwiceDifferentiable as Twice
from realm_sdk import Guardrails, RealmAdapter, RealmConfig


class GatedAttention(nn.Module):
    """MobileNetV3's hard-sigmoid gate and a ViT's fused attention, in one small model."""

    def __init__(self, gate: nn.Module | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.squeeze = nn.Conv2d(8, 8, 1)
        self.gate = gate or nn.Hardsigmoid()
        self.ln = nn.LayerNorm(8)
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        x = x * self.gate(self.squeeze(x.mean((2, 3), keepdim=True)))
        t = self.ln(x.flatten(2).transpose(1, 2))
        b, n, _ = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, 2, 4).permute(2, 0, 3, 1, 4)
        t = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, 8)
        return self.head(t.mean(1))


class RawHardsigmoid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._C._nn.hardsigmoid(x)  # the kernel itself, past the functional API


def _attacker(model: nn.Module, seed: int = 0) -> tuple[FrameAttacker, RealmAdapter]:
    gen = np.random.default_rng(seed)
    own = gen.random((32, 1, 8, 8), dtype=np.float32)
    labels = gen.integers(0, 10, 32)
    config = RealmConfig.preset("cifar", num_classes=10, guardrails=Guardrails.off())
    adapter = RealmAdapter(model, config)
    settings = FrameSettings(iterations=3, batch=16)
    return FrameAttacker(adapter, own, labels, 0.0, 1.0, settings), adapter


def test_the_forms_agree_with_torch_in_value_and_slope_kinks_included():
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(200, generator=gen) * 4, torch.tensor([-3.0, 3.0, 0.0])])
    x = x.double().requires_grad_(True)
    plain = F.hardsigmoid(x)
    (slope,) = torch.autograd.grad(plain.sum(), x)
    with Twice():
        formed = F.hardsigmoid(x)
        (formed_slope,) = torch.autograd.grad(formed.sum(), x)
    assert torch.equal(plain, formed)
    assert torch.equal(slope == 0, formed_slope == 0)  # the same side at ±3
    torch.testing.assert_close(formed_slope, slope, rtol=1e-7, atol=0)  # torch's 1/6 is float32

    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    bool_mask = torch.rand(5, 5, generator=gen) > 0.3
    bool_mask |= torch.eye(5, dtype=torch.bool)  # every query keeps a key
    cases = [
        {},
        {"is_causal": True},
        {"attn_mask": bool_mask},
        {"attn_mask": torch.randn(5, 5, generator=gen, dtype=torch.float64)},
        {"scale": 0.3},
    ]
    for kwargs in cases:
        want = F.scaled_dot_product_attention(q, k, v, **kwargs)
        with Twice():
            got = F.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=str(kwargs))
    grouped_k, grouped_v = k[:, :1], v[:, :1]
    want = F.scaled_dot_product_attention(q, grouped_k, grouped_v, enable_gqa=True)
    with Twice():
        got = F.scaled_dot_product_attention(q, grouped_k, grouped_v, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_second_derivative_matches_finite_differences_of_torchs_first():
    """d/dq of <∂L/∂k, d>, against central differences of the fused op's own first slope."""
    gen = torch.Generator().manual_seed(1)
    q, k, v, c, d = (torch.randn(1, 2, 4, 3, generator=gen, dtype=torch.float64) for _ in range(5))

    def inner(q_: torch.Tensor) -> torch.Tensor:  # first-order only: torch's own kernels
        kk = k.clone().requires_grad_(True)
        (gk,) = torch.autograd.grad((c * F.scaled_dot_product_attention(q_, kk, v)).sum(), kk)
        return (gk * d).sum()

    qq = q.clone().requires_grad_(True)
    kk = k.clone().requires_grad_(True)
    with Twice():
        out = F.scaled_dot_product_attention(qq, kk, v)
        (gk,) = torch.autograd.grad((c * out).sum(), kk, create_graph=True)
        (second,) = torch.autograd.grad((gk * d).sum(), qq)
    eps = 1e-6
    numeric = torch.zeros_like(q)
    for i in range(q.numel()):
        step = torch.zeros(q.numel(), dtype=torch.float64)
        step[i] = eps
        step = step.view_as(q)
        numeric.view(-1)[i] = (inner(q + step) - inner(q - step)) / (2 * eps)
    torch.testing.assert_close(second, numeric, rtol=1e-6, atol=1e-8)


def test_a_frame_is_crafted_through_a_hardsigmoid_gate_and_fused_attention():
    torch.manual_seed(0)
    attacker, adapter = _attacker(GatedAttention())
    before = {n: p.clone() for n, p in adapter.trainable_parameters().items()}
    start = np.full((1, 1, 8, 8), 0.5, dtype=np.float32)
    frame = attacker.craft(start)
    assert frame.shape == start.shape and frame.min() >= 0.0 and frame.max() <= 1.0
    assert not np.array_equal(frame, start)
    after = adapter.trainable_parameters()
    assert all(torch.equal(before[n], after[n]) for n in before)  # crafting reads only
    # Outside the mode the model runs its own kernels again.
    with pytest.raises(RuntimeError, match="hardsigmoid_backward"):
        x = torch.from_numpy(start).requires_grad_(True)
        params = [p for p in adapter.model.parameters() if p.requires_grad]
        (g,) = torch.autograd.grad(adapter.model(x).sum(), params[:1], create_graph=True)
        torch.autograd.grad((g**2).sum(), x)


def test_an_op_without_a_second_derivative_is_named_before_the_stream():
    torch.manual_seed(0)
    with pytest.raises(NotTwiceDifferentiable, match="aten::hardsigmoid_backward") as caught:
        _attacker(GatedAttention(RawHardsigmoid()))
    message = str(caught.value)
    assert "GatedAttention" in message and "leave this model out of --frames" in message
    assert "\n" not in message
