"""``realm fit``: what adaptation buys on the developer's own model and images (in progress).

The parts built so far: the app's images read and checked against the model
(:func:`read_images`, :func:`app_images`), the options and the rule a fit chooses by
(:class:`FitOptions`, :class:`FitRule`), and the configurations it measures
(:func:`candidates`), the search's schedule (:func:`halving`) and the choice
(:func:`choose`). docs/fit.md says what the whole command will do and where it stands.

    >>> from realm_tools.fit import read_images
    >>> data = read_images("clean.npz", input_shape=(1, 1, 32, 32), num_classes=10)
"""

from ._candidates import NO_ADAPT_CANDIDATE, Candidate, candidates, default_config
from ._data import AppImages, FitInputError, app_images, read_images
from ._options import MIN_IMAGES, SEVERITIES, FitOptions, FitRule
from ._rule import Choice, Measured, Verdict, choose
from ._schedule import Round, halving, schedule_cost

__all__ = [
    "MIN_IMAGES",
    "NO_ADAPT_CANDIDATE",
    "SEVERITIES",
    "AppImages",
    "Candidate",
    "Choice",
    "FitInputError",
    "FitOptions",
    "FitRule",
    "Measured",
    "Round",
    "Verdict",
    "app_images",
    "candidates",
    "choose",
    "default_config",
    "halving",
    "read_images",
    "schedule_cost",
]
