"""AugMix views of each sample, drawn by torchvision and seeded by the sample's stream index.

MEMO, SFT and TTAug read these views (``realm_runtime.methods.AugMixSettings``). The model's
inputs are normalised pixels; AugMix works on 8-bit images, so each sample is taken back to
its pixels, given MEMO's crop and flip and torchvision's ``AugMix`` (the operations of the
AugMix paper without those that overlap the corruptions: ``all_ops=False``), and normalised
again. Each sample's draw is seeded by ``(seed, index in the stream)``, in a forked RNG that
leaves torch's global one as it was: the same sample at the same place sees the same views.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchvision import transforms
from torchvision.transforms import InterpolationMode

from realm_runtime import RealmConfig
from realm_runtime.methods import AugMixSettings

# AugMix's own constants, as MEMO's code and torchvision's defaults have them.
MIXTURE_WIDTH = 3  # chains mixed per view
CHAIN_DEPTH = -1  # each chain 1 to 3 operations, drawn
MIX_ALPHA = 1.0  # Dirichlet and Beta concentration
GRAY_CHANNELS = (1, 3)  # the image modes torchvision's AugMix takes
# A pixel may leave [0, 255] by this much before the normalisation is called wrong: float32
# inputs normalised from 8-bit images come back within a thousandth of a level.
PIXEL_SLACK = 1.0


def check_views_input(x: Tensor, config: RealmConfig) -> None:
    """Raise ``ValueError`` in one sentence where AugMix cannot draw views of ``x``."""
    rules = config.rules
    if x.dim() != 4 or x.shape[1] not in GRAY_CHANNELS:
        raise ValueError(
            f"{rules.label} draws AugMix views of images: inputs must be (B, 1 or 3, H, W), "
            f"got shape {tuple(x.shape)}"
        )
    settings = AugMixSettings.of(config)
    for name in ("pixel_mean", "pixel_std"):
        values = getattr(settings, name)
        if len(values) not in (1, x.shape[1]):
            raise ValueError(
                f"{rules.name}'s {name} has {len(values)} values for inputs of {x.shape[1]} "
                f"channels: give one value, or one per channel"
            )
    pixels = _pixels(x, settings)
    low, high = float(pixels.min()), float(pixels.max())
    if low < -PIXEL_SLACK or high > 255 + PIXEL_SLACK:
        raise ValueError(
            f"{rules.label} draws AugMix views of 8-bit pixels, but the inputs undone with "
            f"pixel_mean {list(settings.pixel_mean)} and pixel_std {list(settings.pixel_std)} "
            f"span [{low:.1f}, {high:.1f}] gray levels, not [0, 255]: set {rules.name}'s "
            "pixel_mean and pixel_std to the normalisation your inputs went through"
        )


def augmix_views(x: Tensor, settings: AugMixSettings, first_index: int) -> Tensor:
    """``settings.augmentations`` AugMix views of each sample of ``x``, normalised as ``x``.

    Args:
        x: ``(B, C, H, W)`` normalised inputs, C 1 or 3 (checked by :func:`check_views_input`).
        settings: the method's view settings.
        first_index: the stream index of ``x[0]``; sample ``b`` draws with ``first_index + b``.

    Returns:
        ``(B, augmentations, C, H, W)``, of ``x``'s dtype and device.
    """
    mean, std = _affine(x, settings)
    pixels = _pixels(x, settings).round().clamp(0, 255).to(torch.uint8).cpu()
    draw = _transform(settings, tuple(x.shape[-2:]), x.shape[1])
    out = []
    for b, image in enumerate(pixels):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(view_seed(settings.seed, first_index + b))
            out.append(torch.stack([draw(image) for _ in range(settings.augmentations)]))
    views = torch.stack(out).to(device=x.device, dtype=x.dtype) / 255
    return (views - mean) / std


# torch's CPU generator keeps 32 bits of a seed: the seed moves the index by a multiple of
# this odd constant (the golden ratio's, Knuth's hash), a bijection of the indices mod 2³².
SEED_STRIDE = 0x9E3779B1


def view_seed(seed: int, index: int) -> int:
    """The torch seed of sample ``index``'s views: for one ``seed``, distinct below 2³² samples."""
    return (index + seed * SEED_STRIDE) % 2**32


def _affine(x: Tensor, settings: AugMixSettings) -> tuple[Tensor, Tensor]:
    like = {"dtype": x.dtype, "device": x.device}
    mean = torch.tensor(settings.pixel_mean, **like).view(-1, 1, 1)
    std = torch.tensor(settings.pixel_std, **like).view(-1, 1, 1)
    return mean, std


def _pixels(x: Tensor, settings: AugMixSettings) -> Tensor:
    """The inputs as gray levels (float64, unrounded): what the normalisation was applied to."""
    mean, std = _affine(x.double(), settings)
    return (x.double() * std + mean) * 255


def _transform(
    settings: AugMixSettings, size: tuple[int, int], channels: int
) -> transforms.Compose:
    """One view of a ``(C, H, W)`` uint8 image: MEMO's crop and flip, then AugMix."""
    steps: list[torch.nn.Module] = []
    if settings.crop_flip:
        pad = max(1, round(min(size) / 8))  # MEMO's CIFAR crop: 4 pixels of 32
        steps += [transforms.RandomCrop(size, padding=pad), transforms.RandomHorizontalFlip()]
    steps.append(
        transforms.AugMix(
            severity=settings.severity,
            mixture_width=MIXTURE_WIDTH,
            chain_depth=CHAIN_DEPTH,
            alpha=MIX_ALPHA,
            all_ops=False,
            interpolation=InterpolationMode.BILINEAR,  # MEMO's PIL operations resample so
            fill=[float(settings.fill)] * channels,
        )
    )
    return transforms.Compose(steps)


def log_mean_softmax(logits: Tensor) -> Tensor:
    """``log mean_k softmax(logits[..., k, :])`` over the views axis (−2), stably."""
    n = logits.shape[-2]
    return logits.log_softmax(-1).logsumexp(-2) - math.log(n)
