"""What an attacker can do through the adaptation (``realm-lab bench attack``).

The worst case inside the drift bound (:func:`worst_case`): the lowest clean accuracy any
set of norm parameters within ``max_drift`` of the source reaches, searched directly on the
parameters. Whatever frames reach the device, the guardrails keep θ in that ball, so this is
the most the adaptation can be made to cost.

An attacker who sends frames (:class:`FrameAttacker`, :func:`attack_stream`): white-box,
each frame crafted through the method's own step, mixed into a natural shifted stream.

    >>> from realm_lab.attack import NormBall, load_subject, worst_case
    >>> s = load_subject("digits")
    >>> worst_case(NormBall(s.model, s.names), s.images, s.labels, 0.02).worst_accuracy
"""

from realm_export.bound import LOSSES, SHAPES, NormBall, SearchSettings, WorstCase, worst_case

from ._frame_report import format_frame_attacks, frame_attacks_to_json, plot_frame_attacks
from ._frame_stream import FRAME_METHODS, FrameRow, attack_rows, attack_stream
from ._frames import FrameAttacker, FrameSettings
from ._report import ALLOWED_DROP, format_worst_case, plot_worst_case, worst_case_to_json
from ._subjects import SUBJECTS, Subject, load_subject
from ._twice import NotTwiceDifferentiable, TwiceDifferentiable

__all__ = [
    "ALLOWED_DROP",
    "FRAME_METHODS",
    "LOSSES",
    "SHAPES",
    "SUBJECTS",
    "FrameAttacker",
    "FrameRow",
    "FrameSettings",
    "NormBall",
    "NotTwiceDifferentiable",
    "SearchSettings",
    "Subject",
    "TwiceDifferentiable",
    "WorstCase",
    "attack_rows",
    "attack_stream",
    "format_frame_attacks",
    "format_worst_case",
    "frame_attacks_to_json",
    "load_subject",
    "plot_frame_attacks",
    "plot_worst_case",
    "worst_case",
    "worst_case_to_json",
]
