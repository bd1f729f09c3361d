"""Judging one step of the parity suite: tolerances, decisions, and ties of the step itself.

Where a step parts the runtime's parameters from the SDK's beyond tolerance, three things
can have happened: a disagreement (a bug), a difference of the sides' float32 inputs that a
kink of the step amplified (the runtime, given the SDK's state, then takes the same step),
or a kink decided by the kernels themselves from the same state: a ReLU input within
rounding of 0 whose gate the two sides' reductions put on different sides. The last is
told apart by taking the SDK's step again with that one gate the other way: if the
runtime's step is that one, the step is a tie, named with its layer and position.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME
from realm_sdk import RealmConfig

from ._aligned import aligned_gates
from ._kinks import Gate, flipped_step, state_arrays, step_branches, step_gates

# Tolerances, in one place; the measurements each rests on are in docs/parity.md. Every one
# is a max abs difference over the run; momentum's is relative to the run's largest buffer
# entry, λ's to max(1, λ) (λ grows under C = 1).
TOLERANCES: dict[str, float] = {
    "logits": 1e-5,  # the forwards differ in reduction order only
    "params": 1e-5,  # O(1), from gradients that agree to float32's few ULP
    "momentum": 1e-4,  # accumulated gradients: two float32 backwards' reduction orders
    "alpha": 1e-5,
    "lam": 1e-5,
    "ema": 1e-5,  # a probability vector
}
QUANTITIES = tuple(TOLERANCES)

# A decision this close to its threshold may flip with the CPU's float32 kernels (its
# measured basis: docs/parity.md); the tests bound how many steps the rule acts on.
TIE_MARGIN = 1e-4
# An input this large overflows float32 in the first layers (see "Overflow ties" above).
OVERFLOW_INPUT = 1e30
# Where no single gate explains a side, gates are added one at a time, the most fragile
# first, each kept where it brings the SDK's step nearer the side: this many are tried.
GREEDY_GATES = 24


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(abs_diff(a[n], b[n]) for n in b)


def max_abs(arrays: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(v).max()) for v in arrays.values())


def judge_step(runtime: Any, sdk: Any, margin: float, input_max: float) -> str:
    """Compare one step's decisions on both sides (module docstring: near-ties, overflow ties).

    Args:
        runtime: the runtime's ``AdaptResult`` (``reason``, ``selected``, ``updated``).
        sdk: the SDK's ``AdaptResult``, same fields.
        margin: the smallest distance of the step's decisions from their thresholds (SDK).
        input_max: the largest absolute input value of the step.

    Returns:
        ``"same"``; ``"near-tie"`` or ``"overflow"`` for a difference that either branch may
        take (the caller resyncs); ``"mismatch"`` for any other difference.
    """
    nonfinite = (runtime.reason == "nonfinite", sdk.reason == "nonfinite")
    # Both non-finite: neither updates, and selections made from NaN logits mean nothing.
    same = runtime.reason == sdk.reason and (
        all(nonfinite)
        or (runtime.selected.tolist() == sdk.selected.tolist() and runtime.updated == sdk.updated)
    )
    if same:
        return "same"
    if nonfinite[0] != nonfinite[1] and input_max >= OVERFLOW_INPUT:
        return "overflow"
    return "near-tie" if margin < TIE_MARGIN else "mismatch"


def abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def step_tie(
    side: Any,
    reference: Any,
    result: Any,
    x: np.ndarray,
    before: Path,
    notes: list[str] | None = None,
    source: nn.Module | None = None,
    momentum_scale: float = 0.0,
) -> bool:
    """Whether a step that parted two sides' parameters is a tie of the step itself (SPEC §5).

    ``side`` takes the step again from the reference's state before it; landing within
    tolerance of the reference there, with the same decisions, means both compute the step
    alike, and only a float32 rounding of their inputs (an activation's input at a kink)
    parted them. Still apart, the SDK takes the step again with one gate of a kink flipped,
    for each input within rounding of one (:func:`kink_split`): the two sides landing on
    different ones of those steps is a tie decided by the kernels, and ``side`` then goes on
    from the reference's state after the step (both branches are right). A step that
    matches no such pair is a disagreement, and ``side`` goes on from its own step.

    Args:
        side: the runtime (``adapt``, ``restore``, ``trainable_parameters``,
            ``momentum_buffers``), after the step.
        reference: the SDK, or another runtime, after the same step (``save``, ``config``,
            ``trainable_parameters``, ``momentum_buffers``).
        result: the reference's ``AdaptResult`` of the step.
        x: the step's input.
        before: the reference's state file from before the step.
        notes: where a kink's description is appended (its layer, position and input).
        source: the source model the reference adapts (None: no search for a kink).
        momentum_scale: the run's largest momentum entry so far, which the momentum's
            tolerance is relative to (:func:`tolerance_ratio`).

    Returns:
        False where the sides lie within tolerance, or the reference's step changed no
        parameter (a parting then came from an earlier step); else whether the step is a tie.
    """
    if within_tolerance(side, reference, momentum_scale) or not result.updated:
        return False
    side.restore(before)
    again = side.adapt(np.ascontiguousarray(x))
    if judge_step(again, result, 0.0, 0.0) != "same":
        return False
    if within_tolerance(side, reference, momentum_scale):
        return True
    if source is None:
        return False
    model = getattr(reference, "model", None)  # an SDK runs where its model lives
    device = next(model.parameters()).device if isinstance(model, nn.Module) else "cpu"
    fisher = getattr(reference, "fisher", None) or None  # EATA's F, as the SDK holds it
    kink = kink_split(
        source,
        reference.config,
        before,
        x,
        side,
        reference,
        device=device,
        fisher=fisher,
        momentum_scale=momentum_scale,
    )
    if kink is None:
        return False
    if notes is not None:
        notes.append(kink)
    after = Path(before).with_name("reference-after-kink.npz")
    reference.save(after)
    side.restore(after)
    return True


def kink_split(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    *sides: Any,
    device: str | torch.device = "cpu",
    fisher: Mapping[str, torch.Tensor] | None = None,
    momentum_scale: float = 0.0,
) -> str | None:
    """The kink gates that explain why sides parted from one state, or None.

    The SDK takes the step from ``before`` as it is and with each gate beside a kink flipped
    (:func:`~realm_tools.parity._kinks.step_branches`); each side is matched to the first of
    those steps it lies within tolerance of. A side no single gate explains is matched to a
    set of gates, grown one at a time (the most fragile first, each kept where it brings the
    step nearer the side; at most :data:`GREEDY_GATES` tried): kernels that block a layer
    differently may round several inputs of one forward to the other side. The gates are
    tried first in the order their flips move the step towards the side
    (:func:`~realm_tools.parity._aligned.aligned_gates`), then nearest a kink first. The sides
    landing on different steps is a tie decided by the kernels' rounding.

    Args:
        source: the model the SDK adapts, as exported.
        config: the configuration of the step (the runtime's ``config`` is one).
        before: the state file every side started the step from.
        x: the step's input.
        *sides: the sides after the step: twins (:func:`state_arrays`) or a state file's
            arrays (``realm.params``, and ``realm.velocity`` where the side has it).
        device: where the SDK runs.
        fisher: EATA's λ_F·F as the SDK side holds it (None: a method without it).
        momentum_scale: the run's largest momentum entry so far (:func:`tolerance_ratio`).

    Returns:
        The gates that set the sides apart (``"<layer> call <k> position <i>: input <v>"``,
        joined by "; "), or None where some side matches no step, or all match the same.
    """
    states = [state_arrays(s) for s in sides]  # once: a runtime copies its tensors
    landed: list[tuple[Gate, ...] | None] = [None] * len(states)
    plain: dict[str, np.ndarray] | None = None
    for gate, branch in step_branches(source, config, before, x, device, fisher=fisher):
        plain = branch if gate is None else plain
        for i, state in enumerate(states):
            if landed[i] is None and within_tolerance(state, branch, momentum_scale):
                landed[i] = () if gate is None else (gate,)
        if None not in landed:
            break
    if None in landed and plain is not None:
        ranked = step_gates(source, config, before, x, device, fisher=fisher)
        for i, state in enumerate(states):
            if landed[i] is None:
                aligned = aligned_gates(
                    source, config, before, x, ranked, state, plain, device, fisher=fisher
                )
                landed[i] = _greedy(
                    source,
                    config,
                    before,
                    x,
                    state,
                    plain,
                    aligned[:GREEDY_GATES],
                    device,
                    fisher=fisher,
                    momentum_scale=momentum_scale,
                )
            if landed[i] is None:
                nearest = ranked[:GREEDY_GATES]
                landed[i] = _greedy(
                    source,
                    config,
                    before,
                    x,
                    state,
                    plain,
                    nearest,
                    device,
                    fisher=fisher,
                    momentum_scale=momentum_scale,
                )
    if None in landed or len(set(landed)) == 1:
        return None
    named = dict.fromkeys(g for found in landed if found for g in found)
    return "; ".join(str(g) for g in named)


def _greedy(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    side: dict[str, np.ndarray],
    plain: dict[str, np.ndarray],
    gates: list[Gate],
    device: str | torch.device,
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
    momentum_scale: float = 0.0,
) -> tuple[Gate, ...] | None:
    """The gates whose flips together take the SDK's step to ``side``, or None.

    A gate is kept where it brings the step nearer the side over every entry (the sum of
    squares, in tolerances): the largest entry's gap alone may belong to another gate.
    """
    chosen: list[tuple[Gate, float]] = []
    distance = _spread(side, plain, momentum_scale)
    for gate in gates:
        for slope in gate.slopes:
            branch = flipped_step(source, config, before, x, (*chosen, (gate, slope)), device)
            nearer = _spread(side, branch, momentum_scale)
            if nearer < distance:
                chosen.append((gate, slope))
                distance = nearer
                if within_tolerance(side, branch, momentum_scale):
                    return tuple(g for g, _ in chosen)
                break
    return None


def _spread(
    side: dict[str, np.ndarray], reference: dict[str, np.ndarray], momentum_scale: float = 0.0
) -> float:
    """The root sum of squares of a side's gaps from the reference, each in tolerances."""
    n = min(side[PARAMS_NAME].size, reference[PARAMS_NAME].size)
    gaps = [(side[PARAMS_NAME][:n] - reference[PARAMS_NAME][:n]) / TOLERANCES["params"]]
    if VELOCITY_NAME in side and VELOCITY_NAME in reference:
        theirs = reference[VELOCITY_NAME][:n]
        scale = _momentum_scale(theirs, momentum_scale)
        gaps.append((side[VELOCITY_NAME][:n] - theirs) / (TOLERANCES["momentum"] * scale))
    return float(np.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in gaps)))


def within_tolerance(side: Any, reference: Any, momentum_scale: float = 0.0) -> bool:
    """A side's parameters and momentum lie within tolerance of the reference's.

    Either is a twin or a state file's arrays (:func:`state_arrays`); the trainable tensors
    are compared (α and λ, which close a file's vectors, are left out: no kink touches them).
    Parameters absolutely; momentum relative to :func:`tolerance_ratio`'s scale.
    """
    return tolerance_ratio(side, reference, momentum_scale) <= 1.0


def tolerance_ratio(side: Any, reference: Any, momentum_scale: float = 0.0) -> float:
    """How far a side lies from the reference, in tolerances (1: at the edge).

    The larger of the parameters' distance over their tolerance and the momentum's, over
    its tolerance times its scale: the reference's largest entry, or ``momentum_scale``
    where larger. A run passes the run's largest entry so far, as its report's figure is
    relative to the run's largest (:data:`TOLERANCES`): a young buffer's largest entry
    alone would judge a step stricter than the run is.
    """
    state, branch = state_arrays(side), state_arrays(reference)
    n = min(state[PARAMS_NAME].size, branch[PARAMS_NAME].size)
    ratio = abs_diff(state[PARAMS_NAME][:n], branch[PARAMS_NAME][:n]) / TOLERANCES["params"]
    if VELOCITY_NAME not in state or VELOCITY_NAME not in branch:
        return ratio
    mine, theirs = state[VELOCITY_NAME][:n], branch[VELOCITY_NAME][:n]
    scale = _momentum_scale(theirs, momentum_scale)
    return max(ratio, abs_diff(mine, theirs) / (TOLERANCES["momentum"] * scale))


def _momentum_scale(reference: np.ndarray, momentum_scale: float) -> float:
    """What the momentum's tolerance is relative to (:func:`tolerance_ratio`)."""
    return max(float(np.abs(reference).max(initial=0.0)), momentum_scale, 1e-12)
