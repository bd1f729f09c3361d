"""EATA (Niu et al. 2022) in the SDK against a reference written as EATA's own code runs it.

The reference computes the Fisher as the authors' ``main.py`` does (each batch's mean
cross-entropy against the model's own argmax, its gradient squared, summed over the batches,
divided by their number at the last), then steps torch's SGD on the mean weighted entropy of
the samples its cuts keep plus ``fisher_alpha · Σ F (θ − θ0)²``, and takes no step where
none is kept. Float64 on both sides: they must agree to rounding, step after step.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import Tiny, tiny_config, tiny_sample

from realm_sdk import RealmAdapter


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


class _EataReference:
    """EATA as its authors' code writes it, with torch.optim.SGD doing the update."""

    def __init__(self, model: Tiny, clean: torch.Tensor, batch: int, alpha: float, cfg) -> None:
        self.model, self.cfg, self.alpha = model, cfg, alpha
        self.params = [model.norm.weight, model.norm.bias]
        fishers: list[torch.Tensor] = []
        batches = list(torch.split(clean, batch))
        for it, images in enumerate(batches, start=1):
            outputs = model(images)
            loss = F.cross_entropy(outputs, outputs.max(1)[1])
            grads = torch.autograd.grad(loss, self.params)
            fishers = [g**2 + (fishers[i] if it > 1 else 0) for i, g in enumerate(grads)]
            if it == len(batches):
                fishers = [f / it for f in fishers]
        self.fisher = [f.detach() for f in fishers]
        self.origin = [p.detach().clone() for p in self.params]
        self.sgd = torch.optim.SGD(self.params, lr=cfg.lr, momentum=cfg.momentum)
        self.ema: torch.Tensor | None = None

    def step(self, x: torch.Tensor) -> bool:
        cfg = self.cfg
        outputs = self.model(x)
        h = _entropy(outputs)
        keep = h < cfg.e0
        probs = outputs.softmax(1)
        if self.ema is not None:
            cos = F.cosine_similarity(self.ema.unsqueeze(0), probs[keep], dim=1)
            keep[keep.clone()] = cos.abs() < cfg.diversity_margin
        if not bool(keep.any()):
            return False
        coeff = 1 / torch.exp(h[keep].detach() - cfg.e0)
        loss = (h[keep] * coeff).mean(0)
        loss = loss + sum(
            self.alpha * (f * (p - p0) ** 2).sum()
            for f, p, p0 in zip(self.fisher, self.params, self.origin, strict=True)
        )
        self.sgd.zero_grad()
        loss.backward()
        self.sgd.step()
        mean = probs[keep].detach().mean(0)
        self.ema = mean if self.ema is None else 0.9 * self.ema + 0.1 * mean
        return True


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_eata_steps_as_its_authors_code_does(momentum):
    """Fisher from 10 clean samples in batches of 4 (the last one short, as theirs is), λ_F
    large enough that the regulariser pulls: the same updates, θ within 1e-12, for 40 steps;
    and ETA, the same step without it, ends elsewhere."""
    clean = torch.cat([tiny_sample(100 + k) for k in range(10)])
    cfg = tiny_config(
        method="eata",
        momentum=momentum,
        entropy_margin=math.log(4),
        diversity_margin=0.999,
        fisher_alpha=50.0,
        fisher_batch=4,
    )
    model = Tiny()
    reference = _EataReference(copy.deepcopy(model), clean, 4, 50.0, cfg)
    adapter = RealmAdapter(copy.deepcopy(model), cfg, clean_images=clean)
    eta = RealmAdapter(copy.deepcopy(model), cfg.with_overrides(method="eta"))
    theirs = torch.cat(reference.fisher)
    mine = torch.cat(list(adapter.fisher.values())) / 50.0
    torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=0.0)
    updates = 0
    for k in range(40):
        x = tiny_sample(k)
        updated = reference.step(x)
        result = adapter.adapt(x)
        eta.adapt(x)
        assert result.updated == updated, k
        updates += updated
        ours = torch.cat([p.reshape(-1) for p in adapter.trainable_parameters().values()])
        want = torch.cat([p.detach().reshape(-1) for p in reference.params])
        torch.testing.assert_close(ours, want, rtol=0.0, atol=1e-12)
    assert updates >= 20
    apart = torch.cat([p.reshape(-1) for p in eta.trainable_parameters().values()]) - ours
    assert float(apart.abs().max()) > 1e-3  # the regulariser moved θ


def test_eata_without_clean_images_says_what_to_pass():
    with pytest.raises(ValueError, match=r"EATA needs the Fisher information.*clean_images=x"):
        RealmAdapter(Tiny(), tiny_config(method="eata"))
    bad = np.full((3, 6), np.nan)
    with pytest.raises(ValueError, match=r"NaN|finite"):
        RealmAdapter(Tiny(), tiny_config(method="eata"), clean_images=bad)
    with pytest.raises(ValueError, match="floats"):
        RealmAdapter(Tiny(), tiny_config(method="eata"), clean_images=np.zeros((3, 6), np.uint8))
