"""Kinks of the step: activations whose gradient jumps at a point, and the gates beside them.

ReLU's gradient jumps at 0, Hardtanh's (ReLU6's) and a clamp's at its bounds,
Hardswish's and Hardsigmoid's at ±3, whether a module (``nn.ReLU``) or a call in a
``forward`` (``F.relu``, ``x.relu_()``, ``x.clamp(min=0)``) applies them. An activation
input that lies within float32 rounding of such a point is a gate two implementations may
set either way from the very same state: their reductions round it to opposite sides, and
one step then parts their parameters by far more than the rounding. This module finds those
gates in one forward of the SDK and takes the SDK's step again with one of them flipped: the
output keeps its value (within rounding of the kink), only the slope the backward sees
changes to the other side's.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME, read_state
from realm_sdk import RealmAdapter, RealmConfig

# Inputs within this share of their layer's largest |value| of a kink are the gates float32
# reductions may set either way (their relative error is ~1e-7 per sum).
KINK_SHARE = 1e-5
# Gates tried per parting step, nearest to a kink first: the step is taken once per gate.
KINK_CANDIDATES = 16
# With a float64 twin: an input is a gate where its float64 value lies within this many
# times its float32 error of the kink; another kernel's error may be a few times torch's,
# on either side.
FRAGILE = 10.0
# The float32 error an input may carry in another kernel, whatever torch's own was: a
# rounding of its layer's largest value (a sum's terms are that large; a blocked kernel
# sums them in another order).
ROUNDING = float(torch.finfo(torch.float32).eps)


# The modules that are one of those activations: a gate in one is named by the module alone.
_ACTIVATION_MODULES = (nn.ReLU, nn.LeakyReLU, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid)


# The functions that apply those activations, as a forward calls them (modules call them too).
_AT_ZERO = (F.relu, torch.relu, torch.relu_, torch.Tensor.relu, torch.Tensor.relu_)
_LEAKY = (F.leaky_relu, F.leaky_relu_)
_HARDTANH = (F.hardtanh, F.hardtanh_)
_AT_THREE = (F.hardswish, F.hardsigmoid)
_CLAMPS = {  # name → the positions of its (min, max) arguments after the input
    **{n: (0, 1) for n in ("clamp", "clamp_", "clip", "clip_")},
    **{n: (0, None) for n in ("clamp_min", "clamp_min_")},
    **{n: (None, 0) for n in ("clamp_max", "clamp_max_")},
}
_CLAMP_FUNCS = {
    getattr(owner, name): at for name, at in _CLAMPS.items() for owner in (torch, torch.Tensor)
}


def call_kinks(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[float, ...]:
    """Where the activation ``func(*args, **kwargs)`` has its kinks (empty: not one)."""
    if any(func is f for f in _AT_ZERO + _LEAKY):
        return (0.0,)
    if func is F.relu6:
        return (0.0, 6.0)
    if any(func is f for f in _HARDTANH):
        low = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
        high = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
        return (float(low), float(high))
    if any(func is f for f in _AT_THREE):
        return (-3.0, 3.0)
    if func in _CLAMP_FUNCS:
        return _clamp_kinks(_CLAMP_FUNCS[func], args[1:], kwargs)
    return ()


def _clamp_kinks(
    at: tuple[int | None, int | None], rest: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[float, ...]:
    """A clamp's bounds that are numbers (a bound per element has no one kink: none)."""
    kinks = []
    for position, key in zip(at, ("min", "max"), strict=True):
        if position is None:
            continue
        bound = kwargs.get(key, rest[position] if len(rest) > position else None)
        if isinstance(bound, torch.Tensor):
            if bound.numel() != 1:
                return ()
            bound = bound.item()
        if bound is not None:
            kinks.append(float(bound))
    return tuple(kinks)


@dataclass(frozen=True)
class Gate:
    """One activation input beside a kink: where it is, its value and the kink's."""

    layer: str  # the module's name in the model
    call: int  # which call of the module within one forward
    position: int  # the input's flat index
    value: float  # the input, in the SDK's float32 forward
    kink: float  # the point it lies beside
    op: str = ""  # the function, where a forward calls it (empty: the layer is the activation)
    # The slopes another kernel may give it: the other side's, or on the kink each side's
    # that torch's own is not (a bound given as a tensor takes half of each there).
    slopes: tuple[float, ...] = field(default=(), compare=False, repr=False)
    # The slope torch's own backward gives it (what a flip to one of ``slopes`` replaces).
    own: float = field(default=1.0, compare=False, repr=False)

    def __str__(self) -> str:
        layer = self.layer or "model"
        call = f"call {self.call}" + (f" ({self.op})" if self.op else "")
        where = f"{layer} {call} position {self.position}: input {self.value:.1e}"
        return where if self.kink == 0 else f"{where} (kink at {self.kink:g})"


def state_arrays(twin: Any) -> dict[str, np.ndarray]:
    """A twin's parameters and momentum as a state file holds them: flat, in name order.

    ``twin`` is anything with ``trainable_parameters()`` and ``momentum_buffers()`` (an SDK
    or a runtime), a state file, or a mapping of a state file's arrays (whose vectors go on
    with α and λ after the trainable tensors, for REALM).
    """
    if isinstance(twin, Mapping):
        return dict(twin)
    if isinstance(twin, (str, os.PathLike)):
        return read_state(twin)[0]
    return {
        PARAMS_NAME: _flat(twin.trainable_parameters()),
        VELOCITY_NAME: _flat(twin.momentum_buffers()),
    }


def near_gates(model: nn.Module, x: torch.Tensor, wide: nn.Module | None = None) -> list[Gate]:
    """The gates of one forward of ``model`` on ``x``, the most fragile first.

    Without ``wide``: the inputs within :data:`KINK_SHARE` of their layer's largest value of
    a kink, nearest first. With ``wide``, the same model in float64: the inputs whose float64
    value lies within :data:`FRAGILE` times their float32 error of the kink, by that ratio,
    those float32 puts on the other side of the kink first (ratio below 1). The error is
    torch's own, or one rounding of the layer's largest value where torch's was smaller:
    torch may compute an input to its last bit that a blocked kernel, summing in another
    order, rounds across the kink (ONNX Runtime's NCHWc convolutions on AVX-512). Near-zero
    inputs that every kernel computes alike (a zero-initialised norm's, say: thousands,
    each exact to its last bit) then no longer crowd out the few a kernel's rounding flips.
    Inputs exactly on a kink in both come last: most are exact zeros that every
    implementation computes alike (sums of zeros).
    """
    seen = _inputs(model, x)
    truth = _inputs(wide, x.to(torch.float64)) if wide is not None else {}
    found = []
    for key, (call, v) in seen.items():
        name, index = key
        scale = max(float(v.abs().max()), 1e-30) if v.numel() else 1e-30
        v64 = truth[key][1] if key in truth and truth[key][1].numel() == v.numel() else None
        for kink in call.kinks:
            if v64 is None:
                share = (v - kink).abs() / scale
                near = torch.nonzero(share <= KINK_SHARE).flatten()
                rank = share.double()
            else:
                error = torch.maximum((v.double() - v64).abs(), torch.tensor(ROUNDING * scale))
                rank = (v64 - kink).abs() / error.clamp_min(1e-300)
                exact = (v == kink) & (v64 == kink)
                near = torch.nonzero((rank <= FRAGILE) | exact).flatten()
            if not near.numel():
                continue
            left, right, at = _slopes(call, kink)  # a backward: only where a gate is
            for i in near.tolist():
                value = float(v[i])
                order = (value == kink, float(rank[i]))
                if value != kink:
                    own = right if value > kink else left
                    slopes = (left if value > kink else right,)
                else:
                    own, slopes = at, tuple(side for side in (left, right) if side != at)
                gate = Gate(name, index, i, value, kink, call.op, slopes, own)
                found.append((order, gate))
    found.sort(key=lambda item: item[0])
    return [gate for _, gate in found]


def _inputs(model: nn.Module, x: torch.Tensor) -> dict[tuple[str, int], tuple[_Call, torch.Tensor]]:
    """Every kinked activation's input in one forward of ``model``, flat, by call."""
    seen: dict[tuple[str, int], tuple[_Call, torch.Tensor]] = {}

    def record(key: tuple[str, int], call: _Call, v: torch.Tensor) -> None:
        seen.setdefault(key, (call, v.detach().flatten().clone()))

    with _Watch(model, record), torch.no_grad():
        model(x)
    return seen


def step_branches(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    device: str | torch.device = "cpu",
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> Iterator[tuple[Gate | None, dict[str, np.ndarray]]]:
    """The SDK's step from ``before`` on ``x``, as it is and with one gate flipped.

    First the plain step (gate None), then the same step with each gate of
    :func:`near_gates` (ranked against a float64 twin) flipped (at most
    :data:`KINK_CANDIDATES` gates, each to every slope of its ``slopes``), as state arrays.

    Args:
        source: the model the SDK adapts, as exported (it is copied, never changed).
        config: the SDK's configuration.
        before: a state file from before the step (the SDK's or a runtime's).
        x: the step's input.
        device: where the SDK runs.
        fisher: EATA's λ_F·F as the SDK side holds it (None: a method without it).
    """
    gates = step_gates(source, config, before, x, device, fisher=fisher)
    yield None, flipped_step(source, config, before, x, (), device, fisher=fisher)
    for gate in gates[:KINK_CANDIDATES]:
        for slope in gate.slopes:
            yield gate, flipped_step(source, config, before, x, ((gate, slope),), device)


def step_gates(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    device: str | torch.device = "cpu",
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> list[Gate]:
    """The gates of the SDK's forward from ``before`` on ``x``, ranked by a float64 twin."""
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    plain = _restored(source, config, before, device, fisher=fisher)
    wide = copy.deepcopy(plain.model).to(torch.float64)
    return near_gates(plain.model, xt, wide)


def flipped_step(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    flips: tuple[tuple[Gate, float], ...],
    device: str | torch.device = "cpu",
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, np.ndarray]:
    """The SDK's step from ``before`` on ``x`` with each ``(gate, slope)`` of ``flips`` set."""
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    twin = _restored(source, config, before, device, fisher=fisher)
    if flips:
        with _Watch(twin.model, _flipper(flips)):
            twin.adapt(xt)
    else:
        twin.adapt(xt)
    return state_arrays(twin)


def _flipper(flips: tuple[tuple[Gate, float], ...]) -> Callable[..., torch.Tensor | None]:
    """The watch function that gives each gate of ``flips`` its slope, and leaves all else."""
    by_call: dict[tuple[str, int], list[tuple[Gate, float]]] = {}
    for gate, slope in flips:
        by_call.setdefault((gate.layer, gate.call), []).append((gate, slope))

    def flip(key: tuple[str, int], call: _Call, v: torch.Tensor) -> torch.Tensor | None:
        mine = by_call.get(key)
        if not mine:
            return None
        out = call.apply(v).flatten().clone()  # apply copies: an in-place call writes its input
        flat = v.flatten()
        for gate, other in mine:
            base = float(call.apply(torch.tensor([gate.kink], dtype=torch.float64))[0])
            # The other side's linear piece through the kink: the same value within rounding
            # of the kink, the other slope for the backward.
            piece = base + other * (flat[gate.position : gate.position + 1] - gate.kink)
            out = torch.cat([out[: gate.position], piece.to(out.dtype), out[gate.position + 1 :]])
        return out.reshape(v.shape)

    return flip


def _slopes(call: _Call, kink: float) -> tuple[float, float, float]:
    """The activation's slope just left of ``kink``, just right of it, and torch's at it."""
    step = 1e-7 * max(1.0, abs(kink))
    points = torch.tensor([kink - step, kink + step, kink], dtype=torch.float64)
    points.requires_grad_(True)
    call.apply(points).sum().backward()
    grad = points.grad
    assert grad is not None
    return float(grad[0]), float(grad[1]), float(grad[2])


def _restored(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    device: str | torch.device,
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> RealmAdapter:
    twin = RealmAdapter(copy.deepcopy(source).to(device), config, fisher=fisher)
    twin.restore(before)
    return twin


def _flat(tensors: dict[str, Any]) -> np.ndarray:
    return np.concatenate([_numpy(v).reshape(-1) for v in tensors.values()])


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


@dataclass(frozen=True)
class _Call:
    """One call of an activation with a kink, as a forward made it."""

    apply: Callable[[torch.Tensor], torch.Tensor]  # the activation on another input (a copy)
    kinks: tuple[float, ...]  # where its gradient jumps
    op: str  # the function's name where a forward calls it, empty where a module applies it


class _Watch:
    """Every activation call with a kink in one model's forwards, module or functional.

    Each call's input goes to ``fn(key, call, input)``, with ``key`` = (the innermost module's
    name, the call's index among that module's activation calls within one forward); a
    tensor that ``fn`` returns replaces the call's output (in place where the call was).

    ``fn`` sees the input before the call runs (an in-place activation overwrites it) and
    copies what it keeps.
    """

    def __init__(self, model: nn.Module, fn: Callable[..., torch.Tensor | None]) -> None:
        self.model, self.fn = model, fn
        self.handles: list[Any] = []
        self.calls: dict[str, int] = {}
        self.stack: list[tuple[str, nn.Module]] = []
        self.mode = _Mode(self)

    def __enter__(self) -> _Watch:
        for name, module in self.model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._enter(name)))
            self.handles.append(module.register_forward_hook(self._leave, always_call=True))
        self.mode.__enter__()
        return self

    def _enter(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any) -> None:
            if not self.stack and module is self.model:
                self.calls.clear()  # call indices count within one forward
            self.stack.append((name, module))

        return hook

    def _leave(self, *_: Any) -> None:
        self.stack.pop()

    def called(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run ``func`` as the model called it, through ``fn`` where it is an activation."""
        kinks = call_kinks(func, args, kwargs) if self.stack else ()
        if not kinks or not args or not isinstance(args[0], torch.Tensor):
            return func(*args, **kwargs)
        name, module = self.stack[-1]
        index = self.calls.get(name, 0)
        self.calls[name] = index + 1
        rest = args[1:]
        op = "" if isinstance(module, _ACTIVATION_MODULES) else getattr(func, "__name__", "?")
        call = _Call(lambda t: func(t.clone(), *rest, **kwargs), kinks, op)
        replaced = self.fn((name, index), call, args[0])  # before the call: the input is intact
        if replaced is None:
            return func(*args, **kwargs)
        probe = args[0].detach().clone()
        if func(probe, *rest, **kwargs) is probe:  # an in-place call: its input holds the result
            return args[0].copy_(replaced)
        return replaced

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)
        for handle in self.handles:
            handle.remove()
        self.stack.clear()


class _Mode(TorchFunctionMode):
    """Hands every torch function a forward calls to its watch."""

    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.watch.called(func, args, kwargs or {})
