"""DeYO's step in torch: PLPD under a patch shuffle decides and weighs (Lee et al., ICLR 2024).

PLPD = p_ŷ(x) − p_ŷ(x̃), ŷ the prediction on x and x̃ the image with its patches shuffled
(``realm_runtime.methods.deyo``: one fixed order). A sample kept by the entropy cut updates
when PLPD > ``plpd_threshold``; its entropy is weighed by exp(−(H − 0.8·e0)) + exp(PLPD),
both constants of the step. Two forms of one step: the SDK's on its model, and a functional
one for the traced step graph and the export's reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from realm_runtime import RealmConfig
from realm_runtime.methods.deyo import WEIGHT_MARGIN_SHARE, patch_permutation

from ._form import CutStep


def per_sample_loss(
    h: Tensor, learned: Sequence[Tensor], e0: Tensor | float, config: RealmConfig
) -> Tensor:
    """H: DeYO's weight reads the shuffled copy, so its step supplies it (:func:`plpd_loss`)."""
    return h


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


def plpd_loss(
    logits_of: Callable[[Tensor], Tensor],
    x: Tensor,
    logits: Tensor,
    h: Tensor,
    weight: Tensor,
    e0: Tensor | float,
    threshold: Tensor | float,
    grid: int,
    seed: int,
) -> tuple[Tensor, Tensor]:
    """DeYO's loss over the samples it keeps, functional (the step graph's and the SDK's).

    Args:
        logits_of: ``x̃ → logits`` at the step's θ, with no gradient to θ.
        x: the batch.
        logits: its logits at θ (their values only are read).
        h: its entropies at θ, with their autograd graph.
        weight: (B,) sample weights (0: refused by the entropy cut).
        e0: the entropy cut's margin; the weight's is 0.8·e0.
        threshold: ``plpd_threshold``.
        grid: patches per side.
        seed: the shuffle's seed.

    Returns:
        ``Σ w̃_i · c_i · H_i`` with ``w̃`` 1/n over the n samples kept (weight > 0 and PLPD >
        threshold) and ``c = exp(−(H − 0.8·e0)) + exp(PLPD)``, and n.
    """
    shuffled = logits_of(patch_shuffle(x, grid, seed)).detach()
    drop = plpd(logits.detach(), shuffled)
    kept = ((weight > 0) & (drop > threshold)).to(h.dtype)
    count = kept.sum()
    coeff = torch.exp(-(h.detach() - WEIGHT_MARGIN_SHARE * e0)) + torch.exp(drop)
    return (h * coeff * kept / torch.clamp(count, min=1.0)).sum(), count


def plpd_step(
    model: nn.Module,
    params: list[nn.Parameter],
    x: Tensor,
    logits: Tensor,
    h: Tensor,
    keep: Tensor,
    config: RealmConfig,
) -> CutStep:
    """DeYO's step on ``model``: the shuffled forward, the PLPD cut, the weighted loss's grads.

    Args:
        model: the adapted model.
        params: its adapted parameters θ.
        x: the batch.
        logits: its logits at θ.
        h: its entropies at θ, with their autograd graph.
        keep: (B,) bool, the samples the entropy cut kept.
        config: ``e0``, ``plpd_threshold``, ``patch_grid``, ``shuffle_seed``.
    """
    check_image(x, config.patch_grid)

    def logits_of(shuffled: Tensor) -> Tensor:
        with torch.no_grad():
            return model(shuffled)

    weight = keep.to(h.dtype)
    with torch.enable_grad():
        loss, count = plpd_loss(
            logits_of,
            x,
            logits,
            h,
            weight,
            config.e0,
            config.plpd_threshold,
            config.patch_grid,
            config.shuffle_seed,
        )
        kept = int(count)
        if kept == 0:
            return CutStep(float(loss.detach()), True, (), 0)
        grads = torch.autograd.grad(loss, params)
    value = float(loss.detach())
    finite = np.isfinite(value) and all(bool(g.isfinite().all()) for g in grads)
    return CutStep(value, finite, tuple(grads), kept)
