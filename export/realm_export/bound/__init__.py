"""The worst case inside the drift bound: the lowest clean accuracy any θ in the ball reaches.

Whatever frames reach the device, the guardrails keep the adapted norm parameters within
``max_drift`` of the source (SPEC §10). :func:`worst_case` searches that set directly for
the θ of lowest clean accuracy on labelled images; ``ExportOptions(drift_check=...)`` fits
``max_drift`` to it at export, and ``realm-lab bench attack`` draws the curve.

    >>> from realm_export.bound import NormBall, worst_case
    >>> ball = NormBall(model, adapter.trainable_names)
    >>> worst_case(ball, images, labels, 0.02).worst_accuracy
"""

from ._ladder import BoundLadder, climb_bounds
from ._search import (
    LOSSES,
    SHAPES,
    NormBall,
    SearchSettings,
    WorstCase,
    top1_accuracy,
    worst_case,
)

__all__ = [
    "LOSSES",
    "SHAPES",
    "BoundLadder",
    "NormBall",
    "SearchSettings",
    "WorstCase",
    "climb_bounds",
    "top1_accuracy",
    "worst_case",
]
