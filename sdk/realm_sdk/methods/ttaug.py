"""TTAug in torch: the mean softmax over a sample's AugMix views is its prediction."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from realm_runtime import RealmConfig
from realm_runtime.methods import AugMixSettings

from .._augmix import augmix_views, check_views_input, log_mean_softmax
from ._form import StepInputs, StepLoss, TorchForm


def predict(
    x: Tensor, model: Callable[[Tensor], Tensor], config: RealmConfig, sample: int
) -> Tensor:
    """``log mean_k softmax(model(view_k))`` of each sample: its softmax is that mean."""
    views = augmix_views(x, AugMixSettings.of(config), sample)
    batch, count = views.shape[:2]
    return log_mean_softmax(model(views.flatten(0, 1)).view(batch, count, -1))


def step_loss(s: StepInputs) -> StepLoss:
    """TTAug never steps (``Method.updates`` is False): reaching here is a caller's mistake."""
    raise RuntimeError("TTAug has no step: it only predicts")


FORM = TorchForm(step_loss, check_input=check_views_input, predict=predict)
