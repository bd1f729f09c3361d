"""CIFAR-10-C corruptions for 32×32 grayscale images (Fashion-MNIST padded to 32 px).

Hendrycks & Dietterich's 15 benchmark corruptions and three extras with CIFAR-10-C's severity
tables, from hendrycks/robustness ``ImageNet-C/create_c/make_cifar_c.py``; numpy, scipy and
Pillow stand in for the reference's OpenCV, scikit-image and ImageMagick (Wand) calls.

RGB operations act on the gray value: brightness's HSV value channel is the gray level,
snow's ``cvtColor(x, RGB2GRAY)`` is the image itself, and spatter's water and mud colours
become their ITU-R 601 luma. ``saturate`` has no gray meaning and is left out. Where the
reference's behaviour differs from its apparent intent, its behaviour is kept:

- glass_blur: ``x[h, w], x[h', w'] = x[h', w'], x[h, w]`` on an RGB array swaps views, so it
  copies the neighbour into ``(h, w)`` and leaves the neighbour alone; ``randint(-1, 1)``
  draws offsets in {-1, 0}. Every read therefore sees the pass's input: one gather per pass.
- motion_blur, snow: ImageMagick 6's ``MotionBlurImage`` (Q16): a one-sided line of
  ``2 * radius + 1`` half-Gaussian taps along the angle, edge pixels repeated, the result
  rounded to 16 bits and truncated to the 8 bits of the PNG it is written to.
- frost: ``randint(5)`` draws frost1–frost5 only; frost6 is never used.
- spatter: ``(liquid * 255).astype(np.uint8)`` wraps liquid values above 1 (about a quarter
  of the images at severity 3) to dark holes; the wrap is reproduced.
- elastic_transform: ``cv2.warpAffine``'s 1/32-pixel coordinate grid is reproduced.

Fed the same random draws, the reference gives the same bytes up to float32 rounding (one
gray level on a few pixels of snow, elastic, zoom and defocus); frost and spatter, blended per
colour channel there, agree with its luma except where a channel clips (docs/fmnist.md has the
comparison). The random streams differ: one numpy ``Generator`` per call instead of the global
state.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from PIL import Image

CIFAR_C_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
    "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
    "elastic_transform", "pixelate", "jpeg_compression",
)  # fmt: skip
"""The 15 benchmark corruptions, in the papers' order."""

CIFAR_C_EXTRAS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter")
"""The held-out extras that make sense in gray (``saturate`` does not)."""

SIZE = 32
_LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R 601, as Pillow's "L"
_FROST: dict[int, np.ndarray] = {}

Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]

# CIFAR-10-C's severity tables (make_cifar_c.py), one row per severity 1–5; the any-size
# corruptions read the same rows.
_GAUSSIAN_BLUR = (0.4, 0.6, 0.7, 0.8, 1.0)
_GLASS_BLUR = ((0.05, 1), (0.25, 1), (0.4, 1), (0.25, 2), (0.4, 2))
_DEFOCUS_BLUR = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1))
_MOTION_BLUR = ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))
_FROST_BLEND = ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))
_FOG = ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))
_BRIGHTNESS = (0.05, 0.1, 0.15, 0.2, 0.3)
_CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)
_PIXELATE = (0.95, 0.9, 0.85, 0.75, 0.65)
_JPEG = (80, 65, 58, 50, 40)
_SNOW = (
    (0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
    (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
    (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
)  # fmt: skip
_SPATTER = (
    (0.62, 0.1, 0.7, 0.7, 0.5, False), (0.65, 0.1, 0.8, 0.7, 0.5, False),
    (0.65, 0.3, 1.0, 0.69, 0.5, False), (0.65, 0.1, 0.7, 0.69, 0.6, True),
    (0.65, 0.1, 0.5, 0.68, 0.6, True),
)  # fmt: skip
_ELASTIC = ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05),
    (0.1, 0.03, 0.03))  # fmt: skip


def _ndimage() -> Any:
    """scipy.ndimage, imported when a corruption first runs: not by ``realm --help``."""
    from scipy import ndimage

    return ndimage


def _unit(x: np.ndarray) -> np.ndarray:
    """Clip a [0, 1] image and scale it to [0, 255], as every reference corruption ends."""
    return np.clip(x, 0, 1) * 255


def _gauss(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """``skimage.filters.gaussian`` of each image of a ``(N, H, W)`` stack."""
    return _ndimage().gaussian_filter(x, (0, sigma, sigma), mode=mode, truncate=truncate)


def _box3(x: np.ndarray) -> np.ndarray:
    """``cv2.blur(x, (3, 3))`` of each image: 3×3 mean, reflect-101 border, row sums first."""
    p = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)), mode="reflect")
    rows = p[:, :, :-2] + p[:, :, 1:-1] + p[:, :, 2:]
    return (rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]) * (1.0 / 9)


def _bilinear(
    x: np.ndarray, rows: np.ndarray, cols: np.ndarray, fold: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Sample each image of ``x`` at ``(rows, cols)``, folding outside indices with ``fold``."""
    n = np.arange(len(x))[:, None, None]
    r0, c0 = np.floor(rows).astype(np.int64), np.floor(cols).astype(np.int64)
    fr, fc = rows - r0, cols - c0
    r1, c1 = fold(r0 + 1), fold(c0 + 1)
    r0, c0 = fold(r0), fold(c0)
    top = (1 - fc) * x[n, r0, c0] + fc * x[n, r0, c1]
    bottom = (1 - fc) * x[n, r1, c0] + fc * x[n, r1, c1]
    return (1 - fr) * top + fr * bottom


def _reflect101(i: np.ndarray) -> np.ndarray:
    i = np.abs(i) % (2 * SIZE - 2)
    return np.where(i > SIZE - 1, 2 * SIZE - 2 - i, i)


def _reflect(i: np.ndarray) -> np.ndarray:
    i = np.mod(i, 2 * SIZE)
    return np.where(i >= SIZE, 2 * SIZE - 1 - i, i)


def _line_blur(x: np.ndarray, radius: int, sigma: float, angle: np.ndarray) -> np.ndarray:
    """ImageMagick's ``MotionBlurImage`` of each 0–255 image at its own angle (degrees)."""
    width = 2 * radius + 1  # GetOptimalKernelWidth1D for radius > 0
    taps = np.arange(width)
    kernel = np.exp(-(taps.astype(np.float64) ** 2) / (2 * sigma * sigma))
    kernel /= kernel.sum()
    px, py = width * np.sin(np.deg2rad(angle)), width * np.cos(np.deg2rad(angle))
    hyp = np.hypot(px, py)
    off_c = np.ceil(taps[:, None] * py / hyp - 0.5).astype(np.int64)  # (width, N)
    off_r = np.ceil(taps[:, None] * px / hyp - 0.5).astype(np.int64)
    n, (h, w) = np.arange(len(x))[:, None, None], x.shape[1:]
    out = np.zeros(x.shape)
    for k in range(width):
        rows = np.clip(np.arange(h) + off_r[k][:, None], 0, h - 1)[:, :, None]
        cols = np.clip(np.arange(w) + off_c[k][:, None], 0, w - 1)[:, None, :]
        out += kernel[k] * x[n, rows, cols]
    return np.floor(out * 257 + 0.5) // 257  # Q16 result, written as an 8-bit PNG


@cache
def _zoom_matrix(zoom: float, size: int = SIZE) -> np.ndarray:
    """The matrix ``B`` with ``clipped_zoom(x, zoom) == B @ x @ B.T`` (order-1 zoom)."""
    ch = int(np.ceil(size / zoom))
    top = (size - ch) // 2
    grown = _ndimage().zoom(np.eye(ch), (zoom, 1), order=1)  # column j: the zoomed unit vector
    trim = (grown.shape[0] - size) // 2
    matrix = np.zeros((size, size))
    matrix[:, top : top + ch] = grown[trim : trim + size]
    return matrix


@cache
def _zoom_blur_operator(severity: int) -> np.ndarray:
    """``vec(x) -> vec(x + sum_z clipped_zoom(x, z))`` as one 1024×1024 matrix (transposed)."""
    zooms = (
        np.arange(1, 1.06, 0.01), np.arange(1, 1.11, 0.01), np.arange(1, 1.16, 0.01),
        np.arange(1, 1.21, 0.01), np.arange(1, 1.26, 0.01),
    )[severity - 1]  # fmt: skip
    op = np.eye(SIZE * SIZE) + sum(np.kron(*(_zoom_matrix(float(z)),) * 2) for z in zooms)
    return op.T / (len(zooms) + 1)


def _plasma(n: int, rng: np.random.Generator, decay: float, size: int = SIZE) -> np.ndarray:
    """Diamond-square height maps in [0, 1], one per image, ``(n, size, size)``."""
    maps, step, wibble = np.zeros((n, size, size)), size, 100.0

    def wibbled(total: np.ndarray) -> np.ndarray:
        return total / 4 + wibble * rng.uniform(-wibble, wibble, total.shape)

    while step >= 2:
        half = step // 2
        corners = maps[:, ::step, ::step]
        square = corners + np.roll(corners, -1, axis=1)
        square += np.roll(square, -1, axis=2)
        maps[:, half::step, half::step] = wibbled(square)
        centres, corners = maps[:, half::step, half::step], maps[:, ::step, ::step]
        left = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        maps[:, ::step, half::step] = wibbled(left)
        top = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        maps[:, half::step, ::step] = wibbled(top)
        step, wibble = half, wibble / decay
    maps -= maps.min(axis=(1, 2), keepdims=True)
    return maps / maps.max(axis=(1, 2), keepdims=True)


def _frost_texture(k: int) -> np.ndarray:
    """Gray frost texture ``k`` (1–6), shrunk by 0.2 as make_cifar_c shrinks it; cached."""
    if k not in _FROST:
        path = resources.files(__package__).joinpath("frost", f"frost{k}.png")
        with path.open("rb") as f, Image.open(f) as image:
            _FROST[k] = np.asarray(image.convert("L"), dtype=np.float64)
    return _FROST[k]


def _canny(img: np.ndarray, low: int, high: int) -> np.ndarray:
    """``cv2.Canny(img, low, high)`` of each uint8 image: L1 Sobel magnitude, cv2's NMS."""
    p = np.pad(img.astype(np.int64), ((0, 0), (1, 1), (1, 1)), mode="edge")
    gx = p[:, :-2, 2:] + 2 * p[:, 1:-1, 2:] + p[:, 2:, 2:]
    gx -= p[:, :-2, :-2] + 2 * p[:, 1:-1, :-2] + p[:, 2:, :-2]
    gy = p[:, 2:, :-2] + 2 * p[:, 2:, 1:-1] + p[:, 2:, 2:]
    gy -= p[:, :-2, :-2] + 2 * p[:, :-2, 1:-1] + p[:, :-2, 2:]
    ax, ay = np.abs(gx), np.abs(gy)
    mag = np.pad(ax + ay, ((0, 0), (1, 1), (1, 1)))  # zero border, as cv2's buffer
    h, w = img.shape[1:]

    def at(dr: int, dc: int) -> np.ndarray:
        return mag[:, 1 + dr : h + 1 + dr, 1 + dc : w + 1 + dc]

    m = at(0, 0)
    tg22x = ax * int(0.4142135623730950488 * (1 << 15) + 0.5)
    horizontal = (ay << 15) < tg22x
    vertical = ~horizontal & ((ay << 15) > tg22x + (ax << 16))
    anti = (gx ^ gy) < 0  # diagonal from lower left to upper right
    diagonal = np.where(anti, (m > at(-1, 1)) & (m > at(1, -1)), (m > at(-1, -1)) & (m > at(1, 1)))
    peak = np.where(horizontal, (m > at(0, -1)) & (m >= at(0, 1)), diagonal)
    peak = np.where(vertical, (m > at(-1, 0)) & (m >= at(1, 0)), peak)
    weak = peak & (m > low)
    eight = np.zeros((3, 3, 3), bool)
    eight[1] = True  # 8-connected within each image, never across images
    labels, _ = _ndimage().label(weak, structure=eight)
    return np.isin(labels, labels[weak & (m > high)])


def _chamfer5(edges: np.ndarray, cap: float) -> np.ndarray:
    """``min(cap, cv2.distanceTransform(~edges, DIST_L2, 5))``: float32 5×5 chamfer distance."""
    weight = {1: 1.0, 2: 1.4, 5: 2.1969}  # orthogonal, diagonal and knight's-move steps
    steps = [(dr, dc) for dr in range(-2, 3) for dc in range(-2, 3) if dr * dr + dc * dc in weight]
    dist = np.where(edges, 0, cap).astype(np.float32)
    h, w = edges.shape[1:]
    while True:  # relax until stable: within cap steps, since every step is >= 1
        p = np.pad(dist, ((0, 0), (2, 2), (2, 2)), constant_values=np.inf)
        new = dist.copy()
        for dr, dc in steps:
            shifted = p[:, 2 + dr : h + 2 + dr, 2 + dc : w + 2 + dc]
            np.minimum(new, shifted + np.float32(weight[dr * dr + dc * dc]), out=new)
        if np.array_equal(new, dist):
            return dist
        dist = new


def _equalize(img: np.ndarray) -> np.ndarray:
    """``cv2.equalizeHist`` of each uint8 image."""
    n = np.arange(len(img))
    hist = np.bincount((img + 256 * n[:, None, None]).ravel(), minlength=256 * len(img))
    hist = hist.reshape(len(img), 256)
    first = np.argmax(hist > 0, axis=1)
    cum = np.cumsum(hist, axis=1)
    rest = img[0].size - hist[n, first]
    scale = np.float32(255) / np.maximum(rest, 1).astype(np.float32)
    lut = np.rint((cum - cum[n, first][:, None]).astype(np.float32) * scale[:, None])
    lut = np.where(rest[:, None] == 0, first[:, None], np.clip(lut, 0, 255))
    return lut[n[:, None, None], img].astype(np.uint8)


# /////////////// corruptions: (N, 32, 32) floats in 0..255 -> floats in 0..255 ///////////////


def _gaussian_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.04, 0.06, 0.08, 0.09, 0.10)[s - 1]
    return _unit(x / 255 + rng.normal(size=x.shape, scale=c))


def _shot_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (500, 250, 100, 75, 50)[s - 1]
    return _unit(rng.poisson(x / 255 * c) / c)


def _impulse_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.01, 0.02, 0.03, 0.05, 0.07)[s - 1]
    out = x / 255
    flipped = rng.random(x.shape) < c  # skimage random_noise(mode="s&p", amount=c)
    salted = rng.random(x.shape) < 0.5
    out[flipped & salted] = 1.0
    out[flipped & ~salted] = 0.0
    return _unit(out)


def _speckle_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = (0.06, 0.1, 0.12, 0.16, 0.2)[s - 1]
    x = x / 255
    return _unit(x + x * rng.normal(size=x.shape, scale=c))


def _gaussian_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = _GAUSSIAN_BLUR[s - 1]
    return _unit(_gauss(x / 255, c))


def _glass_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    sigma, passes = _GLASS_BLUR[s - 1]  # max_delta 1
    y = (_gauss(x / 255, sigma) * 255).astype(np.uint8)
    n, pos = np.arange(len(x))[:, None, None], np.arange(2, SIZE)  # range(31, 1, -1)
    for _ in range(passes):
        d = rng.integers(-1, 1, size=(2, len(x), len(pos), len(pos)))  # randint(-1, 1): -1 or 0
        y[:, 2:, 2:] = y[n, pos[:, None] + d[1], pos[None, :] + d[0]]
    return _unit(_gauss(y / 255, sigma))


def _defocus_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    radius, alias = _DEFOCUS_BLUR[s - 1]
    grid = np.arange(-8, 9)  # disk(): 17×17 for radius <= 8
    disk = ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius**2).astype(np.float32)
    disk /= disk.sum()
    taps = np.exp(-(np.arange(-1.0, 2.0) ** 2) / (2 * alias * alias))  # cv2.GaussianBlur 3×3
    for axis in (0, 1):
        disk = _ndimage().correlate1d(disk, taps / taps.sum(), axis=axis, mode="mirror")
    r = int(np.abs(grid[disk.any(axis=0)]).max())  # drop the all-zero margin: same result
    kernel = disk[8 - r : 9 + r, 8 - r : 9 + r].astype(np.float64)
    return _unit(_ndimage().correlate(x / 255, kernel[None], mode="mirror"))  # cv2.filter2D


def _motion_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    radius, sigma = _MOTION_BLUR[s - 1]
    return _line_blur(x, radius, sigma, rng.uniform(-45, 45, size=len(x)))


def _zoom_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    flat = (x / 255).reshape(len(x), SIZE * SIZE)
    return _unit((flat @ _zoom_blur_operator(s)).reshape(x.shape))


def _snow(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    loc, scale, zoom, cut, radius, sigma, keep = _SNOW[s - 1]
    x = x.astype(np.float32) / 255  # float32, as the reference
    zm = _zoom_matrix(float(zoom))
    flakes = zm @ rng.normal(size=x.shape, loc=loc, scale=scale) @ zm.T
    flakes[flakes < cut] = 0
    flakes = (np.clip(flakes, 0, 1) * 255).astype(np.uint8).astype(np.float64)
    flakes = _line_blur(flakes, radius, sigma, rng.uniform(-135, -45, size=len(x))) / 255
    x = keep * x + (1 - keep) * np.maximum(x, x * 1.5 + 0.5)  # the gray image is x itself
    return _unit(x + flakes + np.rot90(flakes, k=2, axes=(1, 2)))


def _frost(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    keep, amount = _FROST_BLEND[s - 1]
    textures = [_frost_texture(k) for k in range(1, 6)]  # randint(5): frost6 is never drawn
    pick = rng.integers(5, size=len(x))
    shapes = np.array([t.shape for t in textures])[pick]
    top, left = rng.integers(0, shapes[:, 0] - SIZE), rng.integers(0, shapes[:, 1] - SIZE)
    pos, frost = np.arange(SIZE), np.empty(x.shape)
    for k, texture in enumerate(textures):
        sel = pick == k
        rows = top[sel, None, None] + pos[:, None]
        frost[sel] = texture[rows, left[sel, None, None] + pos[None, :]]
    return np.clip(keep * x + amount * frost, 0, 255)


def _fog(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    amount, decay = _FOG[s - 1]
    x = x / 255
    peak = x.max(axis=(1, 2), keepdims=True)
    x = x + amount * _plasma(len(x), rng, decay)
    return _unit(x * peak / (peak + amount))


def _brightness(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = _BRIGHTNESS[s - 1]
    return _unit(np.clip(x / 255 + c, 0, 1))  # HSV value of a gray pixel is the gray level


def _contrast(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    c = _CONTRAST[s - 1]
    x = x / 255
    means = x.mean(axis=(1, 2), keepdims=True)
    return _unit((x - means) * c + means)


def _elastic_transform(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    alpha, sigma, affine = (SIZE * v for v in _ELASTIC[s - 1])
    src = np.array([[26.0, 26.0, 1], [26, 6, 1], [6, 6, 1]])  # (x, y, 1): centre ± 32 // 3
    jitter = rng.uniform(-affine, affine, size=(len(x), 3, 2)).astype(np.float32)
    dst = (src[:, :2].astype(np.float32) + jitter).astype(np.float64)  # float32 points
    full = np.zeros((len(x), 3, 3))
    full[:, :2] = np.linalg.solve(src[None], dst).transpose(0, 2, 1)  # getAffineTransform
    full[:, 2, 2] = 1
    m = np.linalg.inv(full)[:, :2, :, None, None]  # warpAffine maps output to source
    pos = np.arange(SIZE, dtype=np.float64)
    # cv2.warpAffine: coordinates in 1/1024 steps, then rounded to its 1/32 interpolation grid
    cols = np.rint(m[:, :, 0] * pos * 1024)
    grid = cols + np.rint((m[:, :, 1] * pos[:, None] + m[:, :, 2]) * 1024)
    grid = (grid.astype(np.int64) + 16 >> 5) / 32  # (N, 2, 32, 32): source x, source y
    warped = _bilinear(x / 255, grid[:, 1], grid[:, 0], _reflect101).astype(np.float32)
    dx = _gauss(rng.uniform(-1, 1, size=x.shape), sigma, "reflect", 3) * alpha
    dy = _gauss(rng.uniform(-1, 1, size=x.shape), sigma, "reflect", 3) * alpha
    out = _bilinear(warped, pos[:, None] + dy, pos[None, :] + dx, _reflect)
    return _unit(out.astype(np.float32))


def _pixelate(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    side = int(SIZE * _PIXELATE[s - 1])
    out = np.empty(x.shape)
    for i, img in enumerate(x.astype(np.uint8)):
        small = Image.fromarray(img).resize((side, side), Image.Resampling.BOX)
        out[i] = np.asarray(small.resize((SIZE, SIZE), Image.Resampling.BOX))
    return out


def _jpeg_compression(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    quality = _JPEG[s - 1]
    out = np.empty(x.shape)
    for i, img in enumerate(x.astype(np.uint8)):
        buffer = io.BytesIO()
        Image.fromarray(img).save(buffer, "JPEG", quality=quality)
        out[i] = np.asarray(Image.open(buffer))
    return out


def _spatter(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    loc, scale, sigma, cut, strength, mud = _SPATTER[s - 1]
    x = x / 255
    liquid = _gauss(rng.normal(size=x.shape, loc=loc, scale=scale), sigma)
    liquid[liquid < cut] = 0
    if mud:
        m = _gauss((liquid > cut).astype(np.float32), strength)
        m[m < 0.8] = 0
        return _unit(x * (1 - m) + m * (_LUMA @ [63, 42, 20]) / 255)  # mud brown
    liquid8 = ((liquid * 255).astype(np.int64) % 256).astype(np.uint8)  # wraps above 1, as ref
    dist = _chamfer5(_canny(liquid8, 50, 150), cap=20.0)  # THRESH_TRUNC at 20
    dist = _equalize(_box3(dist).astype(np.float32).astype(np.uint8))
    emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])
    dist = np.clip(_ndimage().correlate(dist.astype(np.int64), emboss[None], mode="mirror"), 0, 255)
    m = liquid8 * np.rint(_box3(dist)).astype(np.float32)
    peak = m.max(axis=(1, 2), keepdims=True)
    m = np.divide(m, peak, out=np.zeros_like(m), where=peak > 0) * strength
    return _unit(x + m * (_LUMA @ [175, 238, 238]) / 255)  # pale turquoise water


_CORRUPTIONS: dict[str, Corruption] = {
    "gaussian_noise": _gaussian_noise, "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise, "defocus_blur": _defocus_blur, "glass_blur": _glass_blur,
    "motion_blur": _motion_blur, "zoom_blur": _zoom_blur, "snow": _snow, "frost": _frost,
    "fog": _fog, "brightness": _brightness, "contrast": _contrast,
    "elastic_transform": _elastic_transform, "pixelate": _pixelate,
    "jpeg_compression": _jpeg_compression, "speckle_noise": _speckle_noise,
    "gaussian_blur": _gaussian_blur, "spatter": _spatter,
}  # fmt: skip
_NAMES = CIFAR_C_CORRUPTIONS + CIFAR_C_EXTRAS


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def corrupt_gray32(images: np.ndarray, name: str, severity: int, *, seed: int) -> np.ndarray:
    """Apply one CIFAR-10-C corruption to a stack of 32×32 grayscale images.

    Args:
        images: ``uint8`` array of shape ``(N, 32, 32)``, gray levels 0–255.
        name: One of :data:`CIFAR_C_CORRUPTIONS` or :data:`CIFAR_C_EXTRAS`.
        severity: 1 (mildest) to 5, indexing CIFAR-10-C's parameter tables.
        seed: Non-negative integer; every random draw comes from
            ``np.random.default_rng([seed, index of name, severity])``, each image its own.

    Returns:
        ``uint8`` array of shape ``(N, 32, 32)``: the clipped float result truncated to
        ``uint8``, as make_cifar_c saves it. Same arguments give bit-identical output.

    Raises:
        ValueError: If the images are not a non-empty ``uint8`` ``(N, 32, 32)`` array, the
            name is unknown, the severity is not an integer 1–5 or the seed is negative.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        kind = getattr(images, "dtype", type(images).__name__)
        raise ValueError(f"images must be a uint8 numpy array, got {kind}.")
    if images.ndim != 3 or images.shape[1:] != (SIZE, SIZE) or len(images) == 0:
        raise ValueError(f"images must have shape (N, 32, 32) with N >= 1, got {images.shape}.")
    if not isinstance(name, str) or name not in _CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; known: {', '.join(_NAMES)}.")
    if not (_is_int(severity) and 1 <= severity <= 5):
        raise ValueError(f"severity must be an integer from 1 to 5, got {severity!r}.")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
    rng = np.random.default_rng([int(seed), _NAMES.index(name), int(severity)])
    out = _CORRUPTIONS[name](images.astype(np.float64), int(severity), rng)
    return np.clip(out, 0, 255).astype(np.uint8)
