"""DeYO's step in torch: PLPD under a patch shuffle decides and weighs (Lee et al., ICLR 2024).

PLPD = p_ŷ(x) − p_ŷ(x̃), ŷ the prediction on x and x̃ the image with its patches shuffled
in an order of its own, drawn from the seed and the sample's index in the stream
(:func:`patch_order`, the twin of ``realm_runtime.methods.deyo.patch_order``, in torch ops
the step graph traces). A sample kept by the entropy cut updates when PLPD >
``plpd_threshold``; its entropy is weighed by exp(−(H − 0.8·e0)) + exp(PLPD), both
constants of the step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from realm_runtime import RealmConfig
from realm_runtime.methods import deyo as twin
from realm_runtime.methods.deyo import WEIGHT_MARGIN_SHARE, DeyoSettings

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


def _mul32(x: Tensor, m: int) -> Tensor:
    """``x · m mod 2^32`` in int64, from products below 2^49 (the twin's ``mul32``)."""
    lo = x * (m & twin.HALF)
    hi = torch.bitwise_and(x * (m >> 16), twin.HALF) * (twin.HALF + 1)
    return torch.bitwise_and(lo + hi, twin.WORD)


def _mix32(x: Tensor) -> Tensor:
    """lowbias32 on 32-bit words in int64 (the twin's ``mix32``)."""
    x = torch.bitwise_xor(x, torch.bitwise_right_shift(x, twin.SHIFTS[0]))
    x = _mul32(x, twin.MIX[0])
    x = torch.bitwise_xor(x, torch.bitwise_right_shift(x, twin.SHIFTS[1]))
    x = _mul32(x, twin.MIX[1])
    return torch.bitwise_xor(x, torch.bitwise_right_shift(x, twin.SHIFTS[2]))


def patch_order(grid: int, seed: int, samples: Tensor) -> Tensor:
    """Each sample's patch order (``(B, grid²)`` int64), as the runtime's twin draws it.

    ``realm_runtime.methods.deyo.patch_keys`` in torch ops the step graph traces to Mul,
    Add, BitwiseXor, BitwiseAnd, BitShift and TopK, all exact in int64.

    Args:
        grid: patches per side.
        seed: ``DeyoSettings.shuffle_seed``.
        samples: ``(B,)`` int64, each sample's index in the stream.
    """
    n = grid * grid
    low = torch.bitwise_xor(torch.bitwise_and(samples, twin.WORD), twin.seed_word(seed))
    high = torch.bitwise_and(torch.bitwise_right_shift(samples, 32), twin.WORD)
    h = _mix32(torch.bitwise_xor(_mix32(low), high))
    patches = torch.arange(n, dtype=torch.int64, device=samples.device)
    spread = _mul32(patches, twin.GOLDEN)
    keys = _mix32(torch.bitwise_xor(h.unsqueeze(1), spread)) * twin.MAX_PATCHES + patches
    return torch.topk(keys, n, dim=1, largest=False, sorted=True).indices  # keys distinct


def patch_shuffle(x: Tensor, grid: int, order: Tensor) -> Tensor:
    """``x`` (B, C, H, W) with each sample's ``grid × grid`` patches in its ``order`` (B, grid²)."""
    b, c, h, w = x.shape
    ph, pw = h // grid, w // grid
    patches = x.reshape(b, c, grid, ph, grid, pw).permute(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(b, grid * grid, c, ph, pw)
    index = order.reshape(b, grid * grid, 1, 1, 1).expand(b, grid * grid, c, ph, pw)
    shuffled = torch.gather(patches, 1, index)
    back = shuffled.reshape(b, grid, grid, c, ph, pw).permute(0, 3, 1, 4, 2, 5)
    return back.reshape(b, c, h, w)


def _shuffled(x: Tensor, own: DeyoSettings, first: Tensor | int) -> Tensor:
    """``x`` shuffled in the orders drawn for its samples, the first at index ``first``."""
    start = torch.as_tensor(first, dtype=torch.int64, device=x.device).reshape(())
    samples = start + torch.arange(x.shape[0], dtype=torch.int64, device=x.device)
    return patch_shuffle(x, own.patch_grid, patch_order(own.patch_grid, own.shuffle_seed, samples))


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
    shuffled = s.logits_at(_shuffled(s.x, DeyoSettings.of(s.config), s.sample), frozen).detach()
    drop = plpd(s.logits.detach(), shuffled)
    h = s.entropy
    kept = ((s.weight > 0) & (drop > s.knob)).to(h.dtype)
    count = kept.sum()
    coeff = torch.exp(-(h.detach() - WEIGHT_MARGIN_SHARE * s.e0)) + torch.exp(drop)
    return StepLoss((h * coeff * kept / torch.clamp(count, min=1.0)).sum(), count)


def plpd_margin(
    x: Tensor,
    logits: np.ndarray,
    predict: Callable[[Tensor], np.ndarray],
    config: RealmConfig,
    sample: int,
) -> float:
    """The smallest distance of a sample's PLPD from ``plpd_threshold``, in float64."""
    own = DeyoSettings.of(config)
    shuffled = predict(_shuffled(x, own, sample))
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
