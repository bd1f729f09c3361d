"""``realm fit``: what adaptation buys on the developer's own model and images (in progress).

The parts built so far: the app's images read and checked against the model
(:func:`read_images`, :func:`app_images`), the options and the rule a fit chooses by
(:class:`FitOptions`, :class:`FitRule`), and the configurations it measures
(:func:`candidates`). docs/fit.md says what the whole command will do and where it stands.

    >>> from realm_tools.fit import read_images
    >>> data = read_images("clean.npz", input_shape=(1, 1, 32, 32), num_classes=10)
"""

from ._candidates import NO_ADAPT_CANDIDATE, Candidate, candidates, default_config
from ._data import AppImages, FitInputError, app_images, read_images
from ._options import MIN_IMAGES, SEVERITIES, FitOptions, FitRule

__all__ = [
    "MIN_IMAGES",
    "NO_ADAPT_CANDIDATE",
    "SEVERITIES",
    "AppImages",
    "Candidate",
    "FitInputError",
    "FitOptions",
    "FitRule",
    "app_images",
    "candidates",
    "default_config",
    "read_images",
]
