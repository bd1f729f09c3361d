"""Kinks of the step: activations whose gradient jumps at a point, and the gates beside them.

ReLU's gradient jumps at 0, Hardtanh's (ReLU6's) at its bounds, Hardswish's and
Hardsigmoid's at ±3. An activation input that lies within float32 rounding of such a point
is a gate two implementations may set either way from the very same state: their reductions
round it to opposite sides, and one step then parts their parameters by far more than the
rounding. This module finds those gates in one forward of the SDK and takes the SDK's step
again with one of them flipped: the output keeps its value (within rounding of the kink),
only the slope the backward sees changes to the other side's.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME, read_state
from realm_sdk import RealmAdapter, RealmConfig

# Inputs within this share of their layer's largest |value| of a kink are the gates float32
# reductions may set either way (their relative error is ~1e-7 per sum).
KINK_SHARE = 1e-5
# Gates tried per parting step, nearest to a kink first: the step is taken once per gate.
KINK_CANDIDATES = 16


def kink_points(module: nn.Module) -> tuple[float, ...]:
    """Where ``module``'s gradient jumps (empty: a smooth or unknown module)."""
    if isinstance(module, nn.Hardtanh):  # ReLU6 is one
        return (float(module.min_val), float(module.max_val))
    if isinstance(module, (nn.ReLU, nn.LeakyReLU)):
        return (0.0,)
    if isinstance(module, (nn.Hardswish, nn.Hardsigmoid)):
        return (-3.0, 3.0)
    return ()


@dataclass(frozen=True)
class Gate:
    """One activation input beside a kink: where it is, its value and the kink's."""

    layer: str  # the module's name in the model
    call: int  # which call of the module within one forward
    position: int  # the input's flat index
    value: float  # the input, in the SDK's float32 forward
    kink: float  # the point it lies beside

    def __str__(self) -> str:
        where = f"{self.layer} call {self.call} position {self.position}: input {self.value:.1e}"
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


def near_gates(model: nn.Module, x: torch.Tensor) -> list[Gate]:
    """The gates of one forward of ``model`` on ``x``, nearest to their kink first.

    Inputs exactly on a kink come last: most are exact zeros that every implementation
    computes alike (sums of zeros), and there may be thousands of them.
    """
    seen: dict[tuple[str, int], tuple[nn.Module, torch.Tensor]] = {}

    def record(key: tuple[str, int], module: nn.Module, v: torch.Tensor) -> None:
        seen.setdefault(key, (module, v.detach().flatten().clone()))

    with _Hooks(model, record), torch.no_grad():
        model(x)
    found = []
    for (name, call), (module, v) in seen.items():
        scale = max(float(v.abs().max()), 1e-30)
        for kink in kink_points(module):
            share = (v - kink).abs() / scale
            for i in torch.nonzero(share <= KINK_SHARE).flatten().tolist():
                value = float(v[i])
                key = (value == kink, float(share[i]))
                found.append((key, Gate(name, call, i, value, kink)))
    found.sort(key=lambda item: item[0])
    return [gate for _, gate in found]


def step_branches(
    source: nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[Gate | None, dict[str, np.ndarray]]]:
    """The SDK's step from ``before`` on ``x``, as it is and with one gate flipped.

    First the plain step (gate None), then the same step with each gate of
    :func:`near_gates` flipped (at most :data:`KINK_CANDIDATES`), as state arrays.

    Args:
        source: the model the SDK adapts, as exported (it is copied, never changed).
        config: the SDK's configuration.
        before: a state file from before the step (the SDK's or a runtime's).
        x: the step's input.
        device: where the SDK runs.
    """
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    plain = _restored(source, config, before, device)
    gates = near_gates(plain.model, xt)
    plain.adapt(xt)
    yield None, state_arrays(plain)
    for gate in gates[:KINK_CANDIDATES]:
        flipped = _restored(source, config, before, device)
        with _Hooks(flipped.model, _flipper(gate), replace=True):
            flipped.adapt(xt)
        yield gate, state_arrays(flipped)


def _flipper(gate: Gate) -> Callable[..., torch.Tensor]:
    """The hook function that sets ``gate`` the other way and leaves every other input alone."""

    def flip(key: tuple[str, int], module: nn.Module, v: torch.Tensor) -> torch.Tensor:
        # forward itself (calling the module runs this hook again), on a copy (in-place ones)
        out = module.forward(v.clone())
        if key != (gate.layer, gate.call):
            return out
        left, right, at = _slopes(module, gate.kink)
        if gate.value != gate.kink:
            other = left if gate.value > gate.kink else right
        else:  # on the kink: the side this kernel's gradient does not take
            other = right if at == left else left
        base = float(module.forward(torch.tensor([gate.kink], dtype=torch.float64))[0])
        mask = torch.zeros(v.numel(), dtype=torch.bool, device=v.device)
        mask[gate.position] = True
        # The other side's linear piece through the kink: the same value within rounding of
        # the kink, the other slope for the backward.
        return torch.where(mask.reshape(v.shape), base + other * (v - gate.kink), out)

    return flip


def _slopes(module: nn.Module, kink: float) -> tuple[float, float, float]:
    """``module``'s slope just left of ``kink``, just right of it, and torch's at it."""
    step = 1e-7 * max(1.0, abs(kink))
    points = torch.tensor([kink - step, kink + step, kink], dtype=torch.float64)
    points.requires_grad_(True)
    module.forward(points.clone()).sum().backward()  # a copy: in-place ones
    grad = points.grad
    assert grad is not None
    return float(grad[0]), float(grad[1]), float(grad[2])


def _restored(
    source: nn.Module, config: RealmConfig, before: Path, device: str | torch.device
) -> RealmAdapter:
    twin = RealmAdapter(copy.deepcopy(source).to(device), config)
    twin.restore(before)
    return twin


def _flat(tensors: dict[str, Any]) -> np.ndarray:
    return np.concatenate([_numpy(v).reshape(-1) for v in tensors.values()])


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class _Hooks:
    """Hooks on every module of a model that has a kink.

    Each call's input goes to ``fn(key, module, input)``, with ``key`` = (module name, call
    index within one forward); with ``replace`` the module's output becomes ``fn``'s result.

    The input is copied before the module runs: an in-place activation overwrites it.
    """

    def __init__(self, model: nn.Module, fn: Callable[..., Any], replace: bool = False) -> None:
        self.model, self.fn, self.replace = model, fn, replace
        self.handles: list[Any] = []
        self.calls: dict[str, int] = {}
        self.inputs: dict[str, torch.Tensor] = {}

    def __enter__(self) -> _Hooks:
        self.handles.append(self.model.register_forward_pre_hook(lambda *_: self.calls.clear()))
        for name, module in self.model.named_modules():
            if kink_points(module):
                self.handles.append(module.register_forward_pre_hook(self._before(name)))
                self.handles.append(module.register_forward_hook(self._after(name)))
        return self

    def _before(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            self.inputs[name] = inputs[0].clone()

        return hook

    def _after(self, name: str) -> Callable[..., Any]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> Any:
            call = self.calls.get(name, 0)
            self.calls[name] = call + 1
            result = self.fn((name, call), module, self.inputs.pop(name))
            return result if self.replace else None

        return hook

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
