"""CIFAR-10-C corruptions for images of any size from 8 to 512 px, grey or colour.

:func:`corrupt_images` extends :func:`~realm_tools.data.corrupt_gray32` to ``(N, C, H, W)``
``uint8`` stacks with ``C`` in (1, 3). A 32×32 grey stack goes straight to ``corrupt_gray32``
and gives its exact bytes. Elsewhere CIFAR-10-C's severity tables are kept and every
parameter measured in pixels is scaled by ``s = min(H, W) / 32``: blur sigmas, glass blur's
sigma and displacement, the defocus disk and its anti-aliasing, the motion-blur line (also
snow's), spatter's blurs. Elastic's parameters are already fractions of the size (here of
``min(H, W)``); pixelate shrinks each side by the table's factor; zoom blur and snow's flake
zoom use one order-1 zoom matrix per axis, ``B_h @ x @ B_w.T``; fog's plasma is drawn at the
next power of two at least ``max(H, W)`` and cropped; frost crops ``H×W`` from the gray
textures, enlarged with Pillow's bilinear filter first where one is too small. Noise,
brightness, contrast and JPEG parameters are unchanged.

Colour: each corruption runs on every channel with the same per-image spatial draws (angles,
crops, plasma, displacement fields, snow flakes, spatter's liquid), drawn once per image and
shared by its channels, so a grey image copied to three channels stays grey under the purely
spatial corruptions. Per-pixel noise is drawn independently per channel. Brightness adds to
the HSV value (hue and saturation kept), contrast keeps each channel's mean, snow brightens
towards the ``cv2`` luma, frost adds its gray texture to every channel, spatter uses the
reference's RGB water and mud colours, and JPEG compresses an RGB image with Pillow. The
random streams are those of :func:`~realm_tools.data.corrupt_gray32`'s seeding but not its
draws, so a grey image of another size is not a resampled ``corrupt_gray32`` result.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import cache

import numpy as np
from PIL import Image

from . import _cifar_c as g

_MIN_SIDE, _MAX_SIDE = 8, 512
_WATER, _MUD = np.array([175.0, 238, 238]), np.array([63.0, 42, 20])


def _planes(x: np.ndarray) -> np.ndarray:
    """``(N, C, H, W)`` -> ``(N * C, H, W)``: one plane per channel of each image."""
    return x.reshape(-1, *x.shape[2:])


def _per_channel(values: np.ndarray, channels: int) -> np.ndarray:
    """Repeat a per-image draw for each of the image's channels (``_planes`` order)."""
    return np.repeat(values, channels, axis=0)


def _colour(x: np.ndarray, rgb: np.ndarray) -> np.ndarray | float:
    """An RGB colour for ``x``'s channels, 0–1: itself in colour, its ITU-R 601 luma in grey."""
    return rgb[None, :, None, None] / 255 if x.shape[1] == 3 else float(g._LUMA @ rgb) / 255


def _radius(value: float, s: float) -> int:
    return max(1, round(value * s))


def _bilinear(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, fold: str) -> np.ndarray:
    """Sample every channel of ``x`` (N, C, H, W) at its image's ``(rows, cols)`` (N, H, W)."""
    h, w = x.shape[2:]
    n, ch = np.arange(len(x))[:, None, None, None], np.arange(x.shape[1])[None, :, None, None]
    r0, c0 = np.floor(rows).astype(np.int64)[:, None], np.floor(cols).astype(np.int64)[:, None]
    fr, fc = rows[:, None] - r0, cols[:, None] - c0

    def wrap(i: np.ndarray, size: int) -> np.ndarray:
        if fold == "reflect101":  # cv2.BORDER_REFLECT_101
            i = np.abs(i) % (2 * size - 2)
            return np.where(i > size - 1, 2 * size - 2 - i, i)
        i = np.mod(i, 2 * size)  # scipy's "reflect": the edge pixel repeated
        return np.where(i >= size, 2 * size - 1 - i, i)

    r1, c1, r0, c0 = wrap(r0 + 1, h), wrap(c0 + 1, w), wrap(r0, h), wrap(c0, w)
    top = (1 - fc) * x[n, ch, r0, c0] + fc * x[n, ch, r0, c1]
    bottom = (1 - fc) * x[n, ch, r1, c0] + fc * x[n, ch, r1, c1]
    return (1 - fr) * top + fr * bottom


def _gauss(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """``skimage.filters.gaussian`` of each channel of each image of ``(N, C, H, W)``."""
    return g._ndimage().gaussian_filter(x, (0, 0, sigma, sigma), mode=mode, truncate=truncate)


# ////////// corruptions: (N, C, H, W) floats in 0..255, severity, scale s, rng -> 0..255 //////////


def _gaussian_blur(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    return g._unit(_gauss(x / 255, g._GAUSSIAN_BLUR[sev - 1] * s))


def _glass_blur(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    sigma, passes = g._GLASS_BLUR[sev - 1]
    sigma, delta = sigma * s, _radius(1, s)  # CIFAR's max_delta is 1 px at 32 px
    y = (_gauss(x / 255, sigma) * 255).astype(np.uint8)
    (h, w), n = x.shape[2:], np.arange(len(x))[:, None, None, None]
    ch = np.arange(x.shape[1])[None, :, None, None]
    rows, cols = np.arange(delta + 1, h - delta + 1), np.arange(delta + 1, w - delta + 1)
    for _ in range(passes):  # one gather per pass, as corrupt_gray32 (see its docstring)
        d = rng.integers(-delta, delta, size=(2, len(x), 1, len(rows), len(cols)))
        y[:, :, rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1] = y[
            n, ch, rows[:, None] + d[1], cols[None, :] + d[0]
        ]
    return g._unit(_gauss(y / 255, sigma))


def _defocus_blur(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    radius, alias = g._DEFOCUS_BLUR[sev - 1]
    radius, alias = radius * s, alias * s
    half, ksize = (8, 3) if radius <= 8 else (int(np.ceil(radius)), 5)  # make_cifar_c's disk()
    grid = np.arange(-half, half + 1)
    disk = ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius**2).astype(np.float32)
    disk /= disk.sum()
    k = np.arange(-(ksize // 2), ksize // 2 + 1, dtype=np.float64)
    taps = np.exp(-(k**2) / (2 * alias * alias))  # cv2.GaussianBlur
    for axis in (0, 1):
        disk = g._ndimage().correlate1d(disk, taps / taps.sum(), axis=axis, mode="mirror")
    r = int(np.abs(grid[disk.any(axis=0)]).max())  # drop the all-zero margin: same result
    kernel = disk[half - r : half + r + 1, half - r : half + r + 1].astype(np.float64)
    out = g._ndimage().correlate(_planes(x / 255), kernel[None], mode="mirror")  # cv2.filter2D
    return g._unit(out.reshape(x.shape))


def _motion_blur(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    radius, sigma = g._MOTION_BLUR[sev - 1]
    angle = _per_channel(rng.uniform(-45, 45, size=len(x)), x.shape[1])
    return g._line_blur(_planes(x), _radius(radius, s), sigma * s, angle).reshape(x.shape)


def _zoom_blur(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    top = (1.06, 1.11, 1.16, 1.21, 1.26)[sev - 1]
    (h, w), x = x.shape[2:], x / 255
    out = x.copy()
    for z in np.arange(1, top, 0.01):
        out += g._zoom_matrix(float(z), h) @ x @ g._zoom_matrix(float(z), w).T
    return g._unit(out / (len(np.arange(1, top, 0.01)) + 1))


def _snow(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    loc, scale, zoom, cut, radius, sigma, keep = g._SNOW[sev - 1]
    (h, w), x = x.shape[2:], x.astype(np.float32) / 255
    noise = rng.normal(size=(len(x), h, w), loc=loc, scale=scale)
    flakes = g._zoom_matrix(float(zoom), h) @ noise @ g._zoom_matrix(float(zoom), w).T
    flakes[flakes < cut] = 0
    flakes = (np.clip(flakes, 0, 1) * 255).astype(np.uint8).astype(np.float64)
    angle = rng.uniform(-135, -45, size=len(x))
    flakes = (g._line_blur(flakes, _radius(radius, s), sigma * s, angle) / 255)[:, None]
    gray = x if x.shape[1] == 1 else np.tensordot(g._LUMA.astype(np.float32), x, ([0], [1]))
    x = keep * x + (1 - keep) * np.maximum(x, gray.reshape(len(x), 1, h, w) * 1.5 + 0.5)
    return g._unit(x + flakes + np.rot90(flakes, k=2, axes=(2, 3)))


@cache
def _frost_texture(k: int, h: int, w: int) -> np.ndarray:
    """Gray frost texture ``k`` at least ``h×w``: enlarged with Pillow's bilinear if smaller."""
    texture = g._frost_texture(k)
    grow = max(h / texture.shape[0], w / texture.shape[1])
    if grow <= 1:
        return texture
    size = (int(np.ceil(texture.shape[1] * grow)), int(np.ceil(texture.shape[0] * grow)))
    image = Image.fromarray(texture.astype(np.uint8)).resize(size, Image.Resampling.BILINEAR)
    return np.asarray(image, dtype=np.float64)


def _frost(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    keep, amount = g._FROST_BLEND[sev - 1]
    h, w = x.shape[2:]
    textures = [_frost_texture(k, h, w) for k in range(1, 6)]  # randint(5): never frost6
    pick = rng.integers(5, size=len(x))
    shapes = np.array([t.shape for t in textures])[pick]
    top = rng.integers(0, np.maximum(shapes[:, 0] - h, 1))
    left = rng.integers(0, np.maximum(shapes[:, 1] - w, 1))
    frost = np.stack(
        [textures[k][t : t + h, c : c + w] for k, t, c in zip(pick, top, left, strict=True)]
    )
    return np.clip(keep * x + amount * frost[:, None], 0, 255)


def _fog(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    amount, decay = g._FOG[sev - 1]
    (h, w), x = x.shape[2:], x / 255
    size = 1 << (max(h, w) - 1).bit_length()  # the next power of two >= max(h, w)
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    x = x + amount * g._plasma(len(x), rng, decay, size)[:, None, :h, :w]
    return g._unit(x * peak / (peak + amount))


def _brightness(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    c, x = g._BRIGHTNESS[sev - 1], x / 255
    if x.shape[1] == 1:  # the HSV value of a grey pixel is its grey level
        return g._unit(x + c)
    value = x.max(axis=1, keepdims=True)  # HSV value; hue and saturation are kept
    brighter = np.clip(value + c, 0, 1)
    ratio = np.divide(brighter, value, out=np.zeros_like(value), where=value > 0)
    return g._unit(np.where(value > 0, x * ratio, brighter))


def _contrast(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    c, x = g._CONTRAST[sev - 1], x / 255
    means = x.mean(axis=(2, 3), keepdims=True)
    return g._unit((x - means) * c + means)


def _elastic_transform(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    h, w = x.shape[2:]
    alpha, sigma, affine = (min(h, w) * v for v in g._ELASTIC[sev - 1])
    cx, cy, sq = w // 2, h // 2, min(h, w) // 3
    src = np.array([[cx + sq, cy + sq, 1], [cx + sq, cy - sq, 1], [cx - sq, cy - sq, 1.0]])
    jitter = rng.uniform(-affine, affine, size=(len(x), 3, 2)).astype(np.float32)
    dst = (src[:, :2].astype(np.float32) + jitter).astype(np.float64)
    full = np.zeros((len(x), 3, 3))
    full[:, :2] = np.linalg.solve(src[None], dst).transpose(0, 2, 1)  # getAffineTransform
    full[:, 2, 2] = 1
    m = np.linalg.inv(full)[:, :2, :, None, None]  # warpAffine maps output to source
    rows, cols = np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64)
    grid = np.rint(m[:, :, 0] * cols * 1024) + np.rint(
        (m[:, :, 1] * rows[:, None] + m[:, :, 2]) * 1024
    )
    grid = (grid.astype(np.int64) + 16 >> 5) / 32  # cv2's 1/32-pixel grid: source x, source y
    warped = _bilinear(x / 255, grid[:, 1], grid[:, 0], "reflect101").astype(np.float32)
    field = rng.uniform(-1, 1, size=(2, len(x), 1, h, w))
    dx, dy = (_gauss(f, sigma, "reflect", 3)[:, 0] * alpha for f in field)
    out = _bilinear(warped, rows[:, None] + dy, cols[None, :] + dx, "reflect")
    return g._unit(out.astype(np.float32))


def _pil(img: np.ndarray) -> Image.Image:
    """One ``(C, H, W)`` uint8 image as a Pillow "L" or "RGB" image."""
    return Image.fromarray(
        img[0] if len(img) == 1 else np.ascontiguousarray(img.transpose(1, 2, 0))
    )


def _array(image: Image.Image, channels: int) -> np.ndarray:
    a = np.asarray(image, dtype=np.float64)
    return a[None] if channels == 1 else a.transpose(2, 0, 1)


def _pixelate(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    c, (h, w) = g._PIXELATE[sev - 1], x.shape[2:]
    small, out = (max(1, int(w * c)), max(1, int(h * c))), np.empty(x.shape)
    for i, img in enumerate(x.astype(np.uint8)):
        image = _pil(img).resize(small, Image.Resampling.BOX)
        out[i] = _array(image.resize((w, h), Image.Resampling.BOX), x.shape[1])
    return out


def _jpeg_compression(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    quality, out = g._JPEG[sev - 1], np.empty(x.shape)
    for i, img in enumerate(x.astype(np.uint8)):
        buffer = io.BytesIO()
        _pil(img).save(buffer, "JPEG", quality=quality)
        out[i] = _array(Image.open(buffer), x.shape[1])
    return out


def _blur_gain(sigma: float, s: float) -> float:
    """How much less a Gaussian of ``sigma * s`` smooths white noise than one of ``sigma``.

    A wider blur shrinks the noise's spread (its deviation goes as the sum of the squared
    taps, per axis), so spatter's liquid would stop crossing its threshold at large sizes;
    scaling the blurred deviation by this gain keeps the 32-px statistics at every size.
    """

    def energy(sd: float) -> float:
        taps = np.exp(-0.5 * (np.arange(-int(4 * sd + 0.5), int(4 * sd + 0.5) + 1) / sd) ** 2)
        return float((taps**2).sum() / taps.sum() ** 2)

    return energy(sigma) / energy(sigma * s)


def _spatter(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
    loc, scale, sigma, cut, strength, mud = g._SPATTER[sev - 1]
    x = x / 255
    noise = rng.normal(size=(len(x), 1, *x.shape[2:]), loc=loc, scale=scale)
    liquid = loc + (_gauss(noise, sigma * s)[:, 0] - loc) * _blur_gain(sigma, s)
    liquid[liquid < cut] = 0
    if mud:  # the reference blurs the mud mask with sigma = strength
        m = _gauss((liquid > cut).astype(np.float32)[:, None], strength * s)
        m[m < 0.8] = 0
        return g._unit(x * (1 - m) + m * _colour(x, _MUD))
    liquid8 = ((liquid * 255).astype(np.int64) % 256).astype(np.uint8)  # wraps above 1, as ref
    dist = g._chamfer5(g._canny(liquid8, 50, 150), cap=20.0)  # THRESH_TRUNC at 20
    dist = g._equalize(g._box3(dist).astype(np.float32).astype(np.uint8))
    emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])
    dist = g._ndimage().correlate(dist.astype(np.int64), emboss[None], mode="mirror")
    m = liquid8 * np.rint(g._box3(np.clip(dist, 0, 255))).astype(np.float32)
    peak = m.max(axis=(1, 2), keepdims=True)
    m = np.divide(m, peak, out=np.zeros_like(m), where=peak > 0) * strength
    return g._unit(x + m[:, None] * _colour(x, _WATER))


def _noise(name: str) -> Callable[..., np.ndarray]:
    """A per-pixel noise of corrupt_gray32: size-free, so reused as it is."""

    def apply(x: np.ndarray, sev: int, s: float, rng: np.random.Generator) -> np.ndarray:
        return g._CORRUPTIONS[name](x, sev, rng)

    return apply


_ANY_SIZE = {
    "gaussian_noise": _noise("gaussian_noise"), "shot_noise": _noise("shot_noise"),
    "impulse_noise": _noise("impulse_noise"), "speckle_noise": _noise("speckle_noise"),
    "defocus_blur": _defocus_blur, "glass_blur": _glass_blur, "motion_blur": _motion_blur,
    "zoom_blur": _zoom_blur, "snow": _snow, "frost": _frost, "fog": _fog,
    "brightness": _brightness, "contrast": _contrast, "elastic_transform": _elastic_transform,
    "pixelate": _pixelate, "jpeg_compression": _jpeg_compression,
    "gaussian_blur": _gaussian_blur, "spatter": _spatter,
}  # fmt: skip


def corrupt_images(images: np.ndarray, name: str, severity: int, *, seed: int) -> np.ndarray:
    """Apply one CIFAR-10-C corruption to a stack of grey or colour images of any size.

    Args:
        images: ``uint8`` array of shape ``(N, C, H, W)``: ``C`` is 1 (grey) or 3 (RGB),
            ``H`` and ``W`` are each 8 to 512 pixels.
        name: One of :data:`CIFAR_C_CORRUPTIONS` or :data:`CIFAR_C_EXTRAS`.
        severity: 1 (mildest) to 5, indexing CIFAR-10-C's parameter tables; parameters in
            pixels are scaled by ``min(H, W) / 32``.
        seed: Non-negative integer; every random draw comes from
            ``np.random.default_rng([seed, index of name, severity])``.

    Returns:
        ``uint8`` array of the input's shape. Same arguments give bit-identical output; a
        ``(N, 1, 32, 32)`` stack gives exactly ``corrupt_gray32(images[:, 0], ...)[:, None]``.

    Raises:
        ValueError: If the images are not a non-empty ``uint8`` ``(N, C, H, W)`` array with
            ``C`` in (1, 3) and sides 8–512, the name is unknown, the severity is not an
            integer 1–5 or the seed is negative.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        kind = getattr(images, "dtype", type(images).__name__)
        raise ValueError(
            f"images must be a uint8 numpy array, got {kind}; convert with .astype(np.uint8)."
        )
    if images.ndim != 4:
        raise ValueError(
            f"images must have 4 dimensions (N, C, H, W), got shape {images.shape}; "
            "add a channel axis with images[:, None] for grey stacks."
        )
    n, c, h, w = images.shape
    if c not in (1, 3):
        raise ValueError(f"images must have 1 or 3 channels on axis 1, got {c}; pass (N, C, H, W).")
    if not (_MIN_SIDE <= h <= _MAX_SIDE and _MIN_SIDE <= w <= _MAX_SIDE):
        raise ValueError(
            f"image height and width must be 8 to 512 pixels, got {h}×{w}; resize the images first."
        )
    if n == 0:
        raise ValueError("images must hold at least one image, got N = 0; pass a non-empty stack.")
    if not isinstance(name, str) or name not in _ANY_SIZE:
        raise ValueError(f"unknown corruption {name!r}; use one of {', '.join(g._NAMES)}.")
    if not (g._is_int(severity) and 1 <= severity <= 5):
        raise ValueError(f"severity must be an integer from 1 to 5, got {severity!r}; pass 1 to 5.")
    if not (g._is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}; pass an int >= 0.")
    if c == 1 and h == w == g.SIZE:
        return g.corrupt_gray32(images[:, 0], name, severity, seed=seed)[:, None]
    rng = np.random.default_rng([int(seed), g._NAMES.index(name), int(severity)])
    out = _ANY_SIZE[name](images.astype(np.float64), int(severity), min(h, w) / g.SIZE, rng)
    return np.clip(out, 0, 255).astype(np.uint8)
