"""Regenerate the gray frost textures used by the CIFAR-10-C ``frost`` corruption.

Reads ImageNet-C's six frost photographs (``frost1-3.png``, ``frost4-6.jpg``), converts each
to 8-bit gray (ITU-R 601 luma, Pillow's ``"L"``; the PNGs' alpha is dropped, as
``cv2.imread`` drops it) and shrinks it by make_cifar_c's factor 0.2. ``cv2.resize(fx=0.2)``
with its default bilinear filter samples source pixel ``5 * i + 2`` exactly (no averaging),
to ``round(size * 0.2)`` pixels; a nearest-neighbour affine transform with Pillow reproduces
that bit for bit. Writes ``frost1.png`` … ``frost6.png`` next to this script.

    python tools/realm_tools/data/frost/make_frost.py /path/to/frost/images
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from PIL import Image

SCALE = 0.2  # make_cifar_c.py: cv2.resize(frost, (0, 0), fx=0.2, fy=0.2)
SOURCES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")


def shrink_gray(path: Path) -> Image.Image:
    """Return the frost photograph at ``path`` in gray, shrunk as make_cifar_c shrinks it.

    Args:
        path: One of ImageNet-C's frost photographs.

    Returns:
        An ``"L"`` image of ``round(width * 0.2)`` × ``round(height * 0.2)`` pixels.
    """
    with Image.open(path) as image:
        gray = image.convert("RGB").convert("L")
    size = (round(gray.width * SCALE), round(gray.height * SCALE))
    step = 1.0 / SCALE
    return gray.transform(
        size, Image.Transform.AFFINE, (step, 0, 0, 0, step, 0), Image.Resampling.NEAREST
    )


def main(argv: list[str] | None = None) -> None:
    """Write the six gray frost PNGs and print their sizes and sha256."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder holding frost1.png ... frost6.jpg")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    for k, name in enumerate(SOURCES, start=1):
        target = args.out / f"frost{k}.png"
        shrink_gray(args.source / name).save(target, optimize=True)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        print(f"{target.name} {Image.open(target).size} sha256 {digest}")


if __name__ == "__main__":
    main()
