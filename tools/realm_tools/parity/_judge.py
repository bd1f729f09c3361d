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

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_sdk import RealmAdapter

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
    rt: Any,
    adapter: RealmAdapter,
    sdk: Any,
    x: np.ndarray,
    before: Path,
    notes: list[str] | None = None,
    source: nn.Module | None = None,
) -> bool:
    """Whether a step that parted the sides' parameters is a tie of the step itself (SPEC §5).

    The runtime takes the step again from the SDK's state before it; landing within
    tolerance of the SDK there, with the same decisions, means both compute the step alike,
    and only a float32 rounding of their inputs (a ReLU's input at 0) parted them. Still
    apart, the SDK takes the step again with one ReLU gate of the step's forward flipped,
    for each input within rounding of 0 (:func:`relu_kink`): the runtime landing on one of
    those steps is a tie decided by the kernels, and the runtime then goes on from the SDK's
    state after the step (both branches are right). A step that matches neither is a
    disagreement, and the runtime goes on from its own step.

    Args:
        rt: the runtime, after the step.
        adapter: the SDK, after the same step.
        sdk: the SDK's ``AdaptResult`` of the step.
        x: the step's input.
        before: the SDK's state file from before the step.
        notes: where a kink's description is appended (its layer, position and input).
        source: the source model the SDK adapted (None: no search for a kink).

    Returns:
        False where the sides lie within tolerance; else whether the step is a tie.
    """
    if _within(rt, adapter):
        return False
    rt.restore(before)
    again = rt.adapt(np.ascontiguousarray(x))
    if judge_step(again, sdk, 0.0, 0.0) != "same":
        return False
    if _within(rt, adapter):
        return True
    kink = None if source is None else relu_kink(rt, adapter, source, x, before)
    if kink is None:
        return False
    if notes is not None:
        notes.append(kink)
    after = Path(before).with_name("sdk-after-kink.npz")
    adapter.save(after)
    rt.restore(after)
    return True


# Inputs within this share of their layer's largest |value| of a ReLU's kink are the gates
# float32 reductions may set either way (their relative error is ~1e-7 per sum).
KINK_SHARE = 1e-5
# Gates tried per parting step, nearest to the kink first: the step is taken once per gate.
KINK_CANDIDATES = 16


def relu_kink(
    rt: Any, adapter: RealmAdapter, source: nn.Module, x: np.ndarray, before: Path
) -> str | None:
    """The one ReLU gate whose flip turns the SDK's step into the runtime's, if any.

    A private SDK on a copy of ``source``, restored from ``before``, runs forward on ``x``;
    each input of a ``nn.ReLU`` within :data:`KINK_SHARE` of 0 is a candidate. For the nearest
    :data:`KINK_CANDIDATES`, the SDK takes the step again with that gate the other way (the
    output keeps its value, within rounding of 0; only the gradient changes) and is compared
    with the runtime's step.

    Returns:
        ``"<layer> call <k> position <i>: input <v>"`` for the gate that explains the step,
        or None.
    """
    device = next(adapter.model.parameters()).device
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    probe = _restored(adapter, source, before)
    seen: dict[tuple[str, int], torch.Tensor] = {}
    record = lambda key, v: seen.setdefault(key, v.detach().clone())  # noqa: E731
    with _gates(probe.model, record), torch.no_grad():
        probe.model(xt)
    found = []
    for key, v in seen.items():
        share = v.abs().flatten() / max(float(v.abs().max()), 1e-30)
        idx = torch.nonzero(share <= KINK_SHARE).flatten()
        found += [(float(share[i]), key, int(i), float(v.flatten()[i])) for i in idx]
    for _, (name, call), index, value in sorted(found)[:KINK_CANDIDATES]:
        flipped = _restored(adapter, source, before)

        def flip(key: tuple[str, int], v: torch.Tensor, at=(name, call), i=index) -> torch.Tensor:
            out = torch.relu(v)
            if key != at:
                return out
            mask = torch.zeros(v.numel(), dtype=torch.bool, device=v.device)
            mask[i] = True
            # Open → closed: 0, no gradient; closed → open: v itself (within rounding of 0).
            other = torch.zeros_like(v) if bool(v.flatten()[i] > 0) else v
            return torch.where(mask.reshape(v.shape), other, out)

        with _gates(flipped.model, flip, replace=True):
            flipped.adapt(xt)
        if _within(rt, flipped):
            return f"{name} call {call} position {index}: input {value:.1e}"
    return None


def _restored(adapter: RealmAdapter, source: nn.Module, before: Path) -> RealmAdapter:
    """A private SDK of ``adapter``'s configuration on ``source``, at the state of ``before``."""
    device = next(adapter.model.parameters()).device
    twin = RealmAdapter(copy.deepcopy(source).to(device), adapter.config)
    twin.restore(before)
    return twin


class _gates:
    """Hooks on every ``nn.ReLU`` of a model: each call's input goes to ``fn(key, input)``.

    ``key`` is ``(module name, call index within one forward)``; with ``replace`` the
    module's output becomes ``fn``'s result.
    """

    def __init__(self, model: nn.Module, fn: Any, replace: bool = False) -> None:
        self.model, self.fn, self.replace = model, fn, replace
        self.handles: list[Any] = []
        self.calls: dict[str, int] = {}

    def __enter__(self) -> _gates:
        self.handles.append(self.model.register_forward_pre_hook(lambda *_: self.calls.clear()))
        for name, module in self.model.named_modules():
            if isinstance(module, nn.ReLU):
                self.handles.append(module.register_forward_hook(self._hook(name)))
        return self

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> Any:
            call = self.calls.get(name, 0)
            self.calls[name] = call + 1
            result = self.fn((name, call), inputs[0])
            return result if self.replace else None

        return hook

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()


def _within(rt: Any, adapter: RealmAdapter) -> bool:
    """The runtime's parameters and momentum lie within tolerance of the SDK's (as compared)."""
    mine = {n: t.cpu().numpy() for n, t in adapter.trainable_parameters().items()}
    if max_diff(rt.trainable_parameters(), mine) > TOLERANCES["params"]:
        return False
    momentum = {n: t.cpu().numpy() for n, t in adapter.momentum_buffers().items()}
    scale = max(max_abs(momentum), 1e-12)
    return max_diff(rt.momentum_buffers(), momentum) <= TOLERANCES["momentum"] * scale
