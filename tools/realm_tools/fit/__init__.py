"""``realm fit``: what adaptation buys on the developer's own model and images.

:func:`fit_realm_artifacts` measures every method of the registry around its paper's settings
on shifted streams built from the app's images, chooses by :class:`FitRule`, proves the choice
on held-out images and exports it (docs/fit.md). Its parts: the app's images read and checked
against the model
(:func:`read_images`, :func:`app_images`), the options and the rule a fit chooses by
(:class:`FitOptions`, :class:`FitRule`), and the configurations it measures
(:func:`candidates`), the search's schedule (:func:`halving`) and the choice
(:func:`choose`). docs/fit.md says what the whole command will do and where it stands.

    >>> from realm_tools.fit import read_images
    >>> data = read_images("clean.npz", input_shape=(1, 1, 32, 32), num_classes=10)
"""

from ._budget import FitBudgetError
from ._candidates import NO_ADAPT_CANDIDATE, Candidate, candidates, default_config
from ._data import AppImages, FitInputError, app_images, read_images
from ._fit import FitResult, fit_realm_artifacts
from ._options import MIN_IMAGES, SEVERITIES, FitOptions, FitRule
from ._pool import Bench, Job, Journal, clean_accuracy, fork_runs_autograd, run_jobs
from ._report import report_png, rule_costs
from ._rule import Choice, Measured, Verdict, choose
from ._schedule import FINALISTS, MIN_LENGTH, Round, halving, schedule_cost, shortened
from ._search import Searched, Standing, run_rounds
from ._streams import StreamImages, StreamKey, build_stream, normalise

__all__ = [
    "FINALISTS",
    "MIN_IMAGES",
    "MIN_LENGTH",
    "NO_ADAPT_CANDIDATE",
    "SEVERITIES",
    "AppImages",
    "Bench",
    "Candidate",
    "Choice",
    "FitBudgetError",
    "FitInputError",
    "FitOptions",
    "FitResult",
    "FitRule",
    "Job",
    "Journal",
    "Measured",
    "Round",
    "Searched",
    "Standing",
    "StreamImages",
    "StreamKey",
    "Verdict",
    "app_images",
    "build_stream",
    "candidates",
    "choose",
    "clean_accuracy",
    "default_config",
    "fit_realm_artifacts",
    "fork_runs_autograd",
    "halving",
    "normalise",
    "read_images",
    "report_png",
    "rule_costs",
    "run_jobs",
    "run_rounds",
    "schedule_cost",
    "shortened",
]
