"""ImageNet-C-style corruptions for small grayscale images, in numpy only, deterministic.

Each corruption takes images in [0, 1], shape ``(N, C, H, W)``, a severity 1–5 and a seed,
and returns corrupted images in [0, 1]. Severity tables follow Hendrycks & Dietterich's
ImageNet-C parameters for the pixel-level ones (noise, contrast): the digits are 8×8 images
upsampled to 32×32, so, like a high-resolution photo, they average out per-pixel noise that
CIFAR-10-C's smaller amounts leave harmless. Geometric ones (blur radii, pixelation) use the
CIFAR-10-C (32-pixel) tables. Operations defined on RGB are applied to the gray channel.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np

Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]


def _gaussian_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.08, 0.12, 0.18, 0.26, 0.38)[s - 1]
    return x + rng.normal(size=x.shape, scale=c)


def _shot_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (60, 25, 12, 5, 3)[s - 1]
    return rng.poisson(x * c) / c


def _impulse_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    amount = (0.03, 0.06, 0.09, 0.17, 0.27)[s - 1]
    out = x.copy()
    u = rng.random(size=x.shape)
    out[u < amount / 2] = 0.0  # pepper
    out[(u >= amount / 2) & (u < amount)] = 1.0  # salt
    return out


def _speckle_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.15, 0.2, 0.35, 0.45, 0.6)[s - 1]
    return x + x * rng.normal(size=x.shape, scale=c)


def _conv2d_same(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Per-channel 2-D correlation with reflect padding; ``x`` is ``(N, C, H, W)``."""
    kh, kw = kernel.shape
    ph, pw = kh // 2, kw // 2
    padded = np.pad(x, ((0, 0), (0, 0), (ph, kh - 1 - ph), (pw, kw - 1 - pw)), mode="reflect")
    out = np.zeros_like(x)
    h, w = x.shape[-2:]
    for i in range(kh):
        for j in range(kw):
            if kernel[i, j] != 0:
                out += kernel[i, j] * padded[..., i : i + h, j : j + w]
    return out


def _disk(radius: float, alias_blur: float) -> np.ndarray:
    r = int(np.ceil(radius))
    size = 2 * max(r, 1) + 1
    ax = np.arange(size) - size // 2
    xx, yy = np.meshgrid(ax, ax)
    kernel = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    kernel /= kernel.sum()
    if alias_blur > 0:  # ImageNet-C smooths the disk's edge with a small Gaussian
        kernel = _conv2d_same(kernel[None, None], _gaussian_kernel(alias_blur))[0, 0]
        kernel /= kernel.sum()
    return kernel


def _gaussian_kernel(sigma: float) -> np.ndarray:
    r = max(1, int(np.ceil(3 * sigma)))
    ax = np.arange(-r, r + 1)
    g = np.exp(-(ax**2) / (2 * sigma**2))
    k = np.outer(g, g)
    return k / k.sum()


def _defocus_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    radius, alias = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1))[s - 1]
    return _conv2d_same(x, _disk(radius, alias))


def _gaussian_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    sigma = (0.4, 0.6, 0.7, 0.8, 1.0)[s - 1]
    return _conv2d_same(x, _gaussian_kernel(sigma))


def _motion_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    # A line kernel of random orientation per image (ImageNet-C draws the angle per image).
    radius = (2, 3, 4, 5, 6)[s - 1]
    out = np.empty_like(x)
    for n in range(x.shape[0]):
        angle = rng.uniform(-45, 45) * np.pi / 180
        size = 2 * radius + 1
        kernel = np.zeros((size, size))
        for t in np.linspace(-radius, radius, 4 * size):
            i = round(radius + t * np.sin(angle))
            j = round(radius + t * np.cos(angle))
            kernel[i, j] = 1.0
        kernel /= kernel.sum()
        out[n : n + 1] = _conv2d_same(x[n : n + 1], kernel)
    return out


def _contrast(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.4, 0.3, 0.2, 0.1, 0.05)[s - 1]
    means = x.mean(axis=(1, 2, 3), keepdims=True)
    return (x - means) * c + means


def _brightness(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    # On grayscale, HSV's value channel is the image itself.
    c = (0.05, 0.1, 0.15, 0.2, 0.3)[s - 1]
    return x + c


def _fog(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    # Low-frequency random field (a few octaves of bilinearly upsampled noise) added to the
    # image, then the range rescaled, the spirit of ImageNet-C's plasma fractal.
    strength, decay = ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))[s - 1]
    n, _, h, w = x.shape
    field = np.zeros((n, 1, h, w))
    amplitude = 1.0
    for cells in (2, 4, 8):
        coarse = rng.random((n, 1, cells, cells))
        field += amplitude * resize_bilinear(coarse, (h, w))
        amplitude /= decay
    field = field / field.max(axis=(1, 2, 3), keepdims=True)
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    return (x + strength * field) * peak / (peak + strength)


def _pixelate(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.95, 0.9, 0.85, 0.75, 0.65)[s - 1]
    h, w = x.shape[-2:]
    small = resize_box(x, (max(1, int(h * c)), max(1, int(w * c))))
    return resize_nearest(small, (h, w))


def _jpeg_compression(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image  # Pillow comes with the bench extra (matplotlib)

    quality = (80, 65, 58, 50, 40)[s - 1]
    out = np.empty_like(x)
    for n in range(x.shape[0]):
        for ch in range(x.shape[1]):
            img = Image.fromarray(np.uint8(np.clip(x[n, ch], 0, 1) * 255 + 0.5), mode="L")
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=quality)
            buf.seek(0)
            out[n, ch] = np.asarray(Image.open(buf), dtype=np.float64) / 255.0
    return out


CORRUPTIONS: dict[str, Corruption] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "speckle_noise": _speckle_noise,
    "defocus_blur": _defocus_blur,
    "gaussian_blur": _gaussian_blur,
    "motion_blur": _motion_blur,
    "fog": _fog,
    "brightness": _brightness,
    "contrast": _contrast,
    "pixelate": _pixelate,
    "jpeg_compression": _jpeg_compression,
}


def corrupt(images: np.ndarray, name: str, severity: int, *, seed: int = 0) -> np.ndarray:
    """Apply a named corruption.

    Args:
        images: ``(N, C, H, W)`` values in [0, 1].
        name: one of :data:`CORRUPTIONS`, or ``"clean"`` (a copy).
        severity: 1 (mild) to 5 (strongest, the paper's setting).
        seed: the noise seed; the same seed gives the same images.

    Returns:
        ``(N, C, H, W)`` float32 in [0, 1].
    """
    if images.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {images.shape}")
    if name == "clean":
        return images.astype(np.float32, copy=True)
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; known: {sorted(CORRUPTIONS)}")
    if severity not in (1, 2, 3, 4, 5):
        raise ValueError(f"severity must be 1..5, got {severity!r}")
    rng = np.random.default_rng(seed)
    out = CORRUPTIONS[name](images.astype(np.float64), severity, rng)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def resize_bilinear(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of ``(..., H, W)`` (half-pixel centres, like ``align_corners=False``)."""
    h, w = x.shape[-2:]
    oh, ow = size

    def axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        pos = np.clip(pos, 0, n_in - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, pos - lo

    y0, y1, fy = axis(h, oh)
    x0, x1, fx = axis(w, ow)
    top = x[..., y0, :] * (1 - fy)[:, None] + x[..., y1, :] * fy[:, None]
    return top[..., x0] * (1 - fx) + top[..., x1] * fx


def resize_box(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Area-average downsampling of ``(..., H, W)`` to ``size`` (PIL's BOX filter)."""
    h, w = x.shape[-2:]
    oh, ow = size
    ys = np.linspace(0, h, oh + 1)
    xs = np.linspace(0, w, ow + 1)
    out = np.empty((*x.shape[:-2], oh, ow), dtype=x.dtype)
    for i in range(oh):
        r0, r1 = int(np.floor(ys[i])), max(int(np.ceil(ys[i + 1])), int(np.floor(ys[i])) + 1)
        for j in range(ow):
            c0, c1 = int(np.floor(xs[j])), max(int(np.ceil(xs[j + 1])), int(np.floor(xs[j])) + 1)
            out[..., i, j] = x[..., r0:r1, c0:c1].mean(axis=(-2, -1))
    return out


def resize_nearest(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of ``(..., H, W)`` to ``size``."""
    h, w = x.shape[-2:]
    oh, ow = size
    rows = np.minimum((np.arange(oh) * h / oh).astype(int), h - 1)
    cols = np.minimum((np.arange(ow) * w / ow).astype(int), w - 1)
    return x[..., rows[:, None], cols[None, :]]
