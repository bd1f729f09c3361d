"""``max_drift`` fitted to the worst case inside it (``ExportOptions.drift_check``).

The bounds are climbed on the app's labelled images (:func:`realm_export.bound.climb_bounds`);
the largest allowed is written into the config's guardrails, every figure into the manifest.
"""

from __future__ import annotations

import copy
import dataclasses
import math

from torch import nn

from realm_sdk import select_trainable

from ._errors import DriftBoundError
from ._plan import Plan
from .bound import NormBall, climb_bounds


def fit_drift(model: nn.Module, plan: Plan) -> Plan:
    """The plan with ``max_drift`` set to the largest bound whose worst case is allowed.

    Args:
        model: the user's model (copied for the search, never modified).
        plan: the settled plan; ``plan.options.drift_check`` is set.

    Returns:
        The plan to export, the figures in its ``drift_check``.

    Raises:
        ValueError: images of another shape than the export's input, or labels beyond the
            classes, or no candidate bound at or below the config's ``max_drift``.
        DriftBoundError: even the smallest bound tried loses more than allowed.
    """
    check = plan.options.drift_check
    assert check is not None  # called only when asked for
    config = plan.config
    shape = tuple(plan.shape[1:])
    if tuple(check.images.shape[1:]) != shape:
        raise ValueError(
            f"DriftCheck.images are {tuple(check.images.shape[1:])} per image, the export's "
            f"input is {shape}: pass images as the model takes them"
        )
    if int(check.labels.max()) >= config.num_classes:
        raise ValueError(
            f"DriftCheck.labels go up to {int(check.labels.max())}, the model has "
            f"{config.num_classes} classes"
        )
    guard = config.guard
    most = math.inf if guard.max_drift is None else guard.max_drift
    ladder = [b for b in check.bounds if b <= most]
    if not ladder:
        raise ValueError(
            f"every DriftCheck bound {check.bounds} is above the config's max_drift {most:g}: "
            "pass smaller bounds, or a larger max_drift in the config's guardrails"
        )
    names = select_trainable(
        model,
        config.frozen,
        freeze_last_block=config.freeze_last_block,
        adapt_stages=config.adapt_stages,
    )
    ball = NormBall(copy.deepcopy(model).cpu().float(), names)
    ladder_found = climb_bounds(
        ball,
        check.images,
        check.labels,
        ladder,
        allowed_drop=check.allowed_drop,
        search=check.search,
        seed=check.seed,
        notify=plan.notify,
    )
    chosen, tried = ladder_found.chosen, ladder_found.tried
    labels = check.labels
    if chosen is None:
        first = tried[0]
        raise DriftBoundError(
            f"even max_drift {ladder[0]:g} lets a θ inside it lose {first['drop']:.1f} points "
            f"of clean accuracy on the {len(labels)} images given (allowed "
            f"{check.allowed_drop:g}): pass a smaller bound in DriftCheck.bounds, a larger "
            "allowed_drop, or adapt fewer layers (RealmConfig.adapt_stages or frozen)"
        )
    config = dataclasses.replace(config, guardrails=dataclasses.replace(guard, max_drift=chosen))
    section = {
        "max_drift": chosen,
        "allowed_drop": check.allowed_drop,
        "images": len(labels),
        "search": dataclasses.asdict(check.search),
        "seed": check.seed,
        "tried": tried,
    }
    options = dataclasses.replace(plan.options, config=config)
    return dataclasses.replace(plan, options=options, drift_check=section)
