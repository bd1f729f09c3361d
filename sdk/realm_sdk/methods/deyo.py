"""DeYO's step in torch: PLPD under a patch shuffle decides and weighs (Lee et al., ICLR 2024).

PLPD = p_ŷ(x) − p_ŷ(x̃), ŷ the prediction on x and x̃ the image with its patches shuffled
(``realm_runtime.methods.deyo``: one fixed order). A sample kept by the entropy cut updates
when PLPD > ``plpd_threshold``; its entropy is weighed by exp(−(H − 0.8·e0)) + exp(PLPD),
both constants of the step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from realm_runtime import RealmConfig
from realm_runtime.methods.deyo import WEIGHT_MARGIN_SHARE, DeyoSettings, patch_permutation

from ._form import StepInputs, StepLoss, TorchForm

OPEN_PLPD = -1.0  # PLPD = p_ŷ − q_ŷ > −1 always (ŷ is p's argmax): the cut passes every sample


def check_image(x: Tensor, grid: int) -> None:
    """Refuse an input the patch shuffle cannot cut into ``grid × grid`` equal patches.

    Raises:
        ValueError: not (B, C, H, W), or H or W not a multiple of ``grid``.
    """
    if x.dim() != 4:
        raise ValueError(
            f"DeYO shuffles image patches: the input must be (batch, channels, height, width), "
            f"got shape {tuple(x.shape)}; choose another method for this model"
        )
    h, w = x.shape[-2:]
    if h % grid or w % grid:
        raise ValueError(
            f"DeYO cuts the image into {grid}×{grid} patches, and {h}×{w} does not divide: "
            f"set patch_grid to a divisor of both sides"
        )


def patch_shuffle(x: Tensor, grid: int, seed: int) -> Tensor:
    """``x`` (B, C, H, W) with its ``grid × grid`` patches in the method's one fixed order."""
    b, c, h, w = x.shape
    ph, pw = h // grid, w // grid
    perm = torch.from_numpy(patch_permutation(grid, seed)).to(x.device)
    patches = x.reshape(b, c, grid, ph, grid, pw).permute(0, 1, 2, 4, 3, 5)
    shuffled = patches.reshape(b, c, grid * grid, ph, pw).index_select(2, perm)
    back = shuffled.reshape(b, c, grid, grid, ph, pw).permute(0, 1, 2, 4, 3, 5)
    return back.reshape(b, c, h, w)


def plpd(logits: Tensor, shuffled_logits: Tensor) -> Tensor:
    """``(B,)`` the drop of the predicted class's probability when the patches are shuffled."""
    p, q = logits.softmax(dim=1), shuffled_logits.softmax(dim=1)
    top = p.argmax(dim=1, keepdim=True)
    return (p.gather(1, top) - q.gather(1, top)).reshape(-1)


def plpd_loss(s: StepInputs) -> StepLoss:
    """DeYO's loss over the samples it keeps.

    ``Σ w̃_i · c_i · H_i`` with ``w̃`` 1/n over the n samples kept (weight > 0 and PLPD >
    τ, the step's knob) and ``c = exp(−(H − 0.8·e0)) + exp(PLPD)``, a constant of the step.
    The shuffled copy's forward is at θ with no gradient to it.
    """
    frozen = [p.detach() for p in s.theta]
    own = DeyoSettings.of(s.config)
    grid, seed = own.patch_grid, own.shuffle_seed
    shuffled = s.logits_at(patch_shuffle(s.x, grid, seed), frozen).detach()
    drop = plpd(s.logits.detach(), shuffled)
    h = s.entropy
    kept = ((s.weight > 0) & (drop > s.knob)).to(h.dtype)
    count = kept.sum()
    coeff = torch.exp(-(h.detach() - WEIGHT_MARGIN_SHARE * s.e0)) + torch.exp(drop)
    return StepLoss((h * coeff * kept / torch.clamp(count, min=1.0)).sum(), count)


def plpd_margin(
    x: Tensor, logits: np.ndarray, predict: Callable[[Tensor], np.ndarray], config: RealmConfig
) -> float:
    """The smallest distance of a sample's PLPD from ``plpd_threshold``, in float64."""
    own = DeyoSettings.of(config)
    shuffled = predict(patch_shuffle(x, own.patch_grid, own.shuffle_seed))
    drop = plpd(torch.from_numpy(logits).double(), torch.from_numpy(shuffled).double())
    return float((drop - own.plpd_threshold).abs().min())


def _check(x: Tensor, config: RealmConfig) -> None:
    check_image(x, DeyoSettings.of(config).patch_grid)


FORM = TorchForm(
    plpd_loss,
    check_input=_check,
    cut_margin=plpd_margin,
    open_cut=lambda config: config.with_overrides(plpd_threshold=OPEN_PLPD),
)
