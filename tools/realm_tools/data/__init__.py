"""The data the tools adapt on: the digits task, its corruptions, real shift sets, streams.

numpy only (Pillow for JPEG files, scikit-learn for the digits, both imported where used):
nothing here imports torch.

- the built-in digits task (:func:`load_digits`, :class:`DigitsShift`) and the
  ImageNet-C-style :data:`CORRUPTIONS` that shift it;
- Fashion-MNIST from its IDX files (:func:`load_fashion_mnist`) and Fashion-MNIST-C built
  from it with CIFAR-10-C's corruption tables (:func:`load_fmnistc`), and those corruptions
  for grey or colour images of any size from 8 to 512 px (:func:`corrupt_images`);
- CIFAR-10-C and ImageNet-C from disk (:func:`load_cifar10c`, :func:`load_imagenetc`), read
  as online streams through the :class:`ShiftDataset` interface the benchmarks run on;
- long-running test streams (:func:`build_stream`, :data:`SETTINGS`): continual, mixed,
  gradual, correlated, long and junk;
- a stream as the edge apps read it, one file per sample (:func:`write_stream_folder`).

    >>> from realm_tools.data import load_digits
    >>> images, labels = load_digits().stream("fog", 5, seed=0)
"""

from ._any_size import corrupt_images
from ._cifar_c import CIFAR_C_CORRUPTIONS, CIFAR_C_EXTRAS, corrupt_gray32
from ._corruptions import CORRUPTIONS, corrupt, resize_bilinear
from ._digits import (
    IMAGE_SIZE,
    NUM_CLASSES,
    DigitsData,
    DigitsShift,
    digits_preprocessing,
    load_digits,
)
from ._fashion import FashionMNIST, find_fashion_mnist, load_fashion_mnist
from ._fashion import normalise as fashion_normalise
from ._fashion import preprocessing as fashion_preprocessing
from ._fashion_c import FashionMNISTC, load_fmnistc
from ._imagenet_c import IMAGENET_MEAN, IMAGENET_STD, ImageNetC, load_imagenetc
from ._realdata import CIFAR10_MEAN, CIFAR10_STD, Cifar10C, LazyImages, ShiftDataset, load_cifar10c
from ._stream_folder import write_stream_folder
from ._streams import JUNK, NO_LABEL, SETTINGS, Stream, StreamSettings, build_stream

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR_C_CORRUPTIONS",
    "CIFAR_C_EXTRAS",
    "CORRUPTIONS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_SIZE",
    "JUNK",
    "NO_LABEL",
    "NUM_CLASSES",
    "SETTINGS",
    "Cifar10C",
    "DigitsData",
    "DigitsShift",
    "FashionMNIST",
    "FashionMNISTC",
    "ImageNetC",
    "LazyImages",
    "ShiftDataset",
    "Stream",
    "StreamSettings",
    "build_stream",
    "corrupt",
    "corrupt_gray32",
    "corrupt_images",
    "digits_preprocessing",
    "fashion_normalise",
    "fashion_preprocessing",
    "find_fashion_mnist",
    "load_cifar10c",
    "load_digits",
    "load_fashion_mnist",
    "load_fmnistc",
    "load_imagenetc",
    "resize_bilinear",
    "write_stream_folder",
]
