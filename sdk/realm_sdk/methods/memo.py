"""MEMO's loss in torch: the entropy of the mean softmax over a sample's AugMix views.

Zhang et al., NeurIPS 2022, Eq. (1)–(2), written as their code writes it (log-sum-exp of
the log-probabilities). SFT steps on the same loss (``sft.py``); the methods differ in what
they adapt and whether they reset (``realm_runtime.methods``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from realm_runtime.methods import AugMixSettings

from .._augmix import augmix_views, check_views_input, log_mean_softmax
from ._form import StepInputs, StepLoss, TorchForm


def marginal_entropy(logits: Tensor) -> Tensor:
    """``H(mean_k softmax(logits_k))`` of ``(..., views, C)`` logits: ``(...)``."""
    avg = log_mean_softmax(logits)
    avg = avg.clamp(min=torch.finfo(avg.dtype).min)  # as MEMO: 0·log 0 stays 0, not NaN
    return -(avg * avg.exp()).sum(-1)


def step_loss(s: StepInputs) -> StepLoss:
    """The weighted mean over the batch of each sample's marginal entropy over its views."""
    views = augmix_views(s.x, AugMixSettings.of(s.config), int(s.sample))
    batch, count = views.shape[:2]
    logits = s.logits_at(views.flatten(0, 1), s.theta)
    per_sample = marginal_entropy(logits.view(batch, count, -1))
    return StepLoss((per_sample * s.weight).sum())


FORM = TorchForm(step_loss, check_input=check_views_input)
