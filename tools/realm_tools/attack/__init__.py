"""What an attacker can do through the adaptation (``realm bench attack``).

The worst case inside the drift bound (:func:`worst_case`): the lowest clean accuracy any
set of norm parameters within ``max_drift`` of the source reaches, searched directly on the
parameters. Whatever frames reach the device, the guardrails keep θ in that ball, so this is
the most the adaptation can be made to cost.

    >>> from realm_tools.attack import NormBall, load_subject, worst_case
    >>> s = load_subject("digits")
    >>> worst_case(NormBall(s.model, s.names), s.images, s.labels, 0.02).worst_accuracy
"""

from ._report import ALLOWED_DROP, format_worst_case, plot_worst_case, worst_case_to_json
from ._subjects import SUBJECTS, Subject, load_subject
from ._worst_case import LOSSES, NormBall, SearchSettings, WorstCase, worst_case

__all__ = [
    "ALLOWED_DROP",
    "LOSSES",
    "SUBJECTS",
    "NormBall",
    "SearchSettings",
    "Subject",
    "WorstCase",
    "format_worst_case",
    "load_subject",
    "plot_worst_case",
    "worst_case",
    "worst_case_to_json",
]
