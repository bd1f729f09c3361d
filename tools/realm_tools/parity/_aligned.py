"""Gates ranked by how far their flip moves the SDK's step towards where a side landed.

A flip leaves the forward's values as they were (within rounding of the kink) and changes
one slope of the backward, so its effect on the gradient is exact and linear: a gate at
activation input u_i, with upstream gradient g_i, moved from slope s to s', adds
(s' − s) · g_i · ∂u_i/∂θ to the gradient of θ. Its share of a side's departure D from the
SDK's step is that term's projection on D, (s' − s) · g_i · (∂u_i/∂θ · D): one backward
(every g_i) and one directional derivative (every ∂u_i/∂θ · D, by a float64 central
difference) score every gate at once. Closeness to a kink says which inputs a kernel may
round across; only this says which of those can have parted the sides, where thousands of
inputs lie within rounding of a kink and most of them no gradient ever reaches.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME
from realm_sdk import RealmConfig

from ._kinks import Gate, _Call, _inputs, _restored, _Watch

# The central difference's step: θ moves by this much at D's largest entry (float64 keeps
# ~1e-16 of the inputs' scale, so their derivatives keep ~1e-10 of theirs).
_STEP = 1e-6


def aligned_gates(
    source: torch.nn.Module,
    config: RealmConfig,
    before: Path,
    x: np.ndarray,
    gates: list[Gate],
    side: dict[str, np.ndarray],
    plain: dict[str, np.ndarray],
    device: str | torch.device = "cpu",
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> list[Gate]:
    """The flips among ``gates`` that move the SDK's step towards ``side``, the largest first.

    Args:
        source: the model the SDK adapts, as exported (copied, never changed).
        config: the SDK's configuration.
        before: the state file every side started the step from.
        x: the step's input.
        gates: the candidates (:func:`~realm_tools.parity._kinks.step_gates`).
        side: where the side landed, as state arrays.
        plain: where the SDK's own step landed, as state arrays.
        device: where the SDK runs.
        fisher: EATA's λ_F·F as the SDK side holds it (None: a method without it).

    Returns:
        One gate per useful flip, its ``slopes`` that one slope, by its share of the
        departure; flips that move the step away from the side, or not at all, are left out.
    """
    names, shapes = _trainable(source, config, before, device, fisher=fisher)
    departure = _departure(side, plain, sum(int(np.prod(s)) for s in shapes))
    if departure is None or not gates:
        return []
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    upstream = _upstream(source, config, before, xt, device, fisher=fisher)
    along = _along(source, config, before, xt, names, shapes, departure, device, fisher=fisher)
    scored: list[tuple[float, Gate]] = []
    for gate in gates:
        key = (gate.layer, gate.call)
        if key not in upstream or key not in along:
            continue
        g, du = upstream[key], along[key]
        if gate.position >= g.numel() or gate.position >= du.numel():
            continue
        push = float(g[gate.position]) * float(du[gate.position])
        for slope in gate.slopes:
            share = (slope - gate.own) * push
            if share > 0:
                scored.append((share, dataclasses.replace(gate, slopes=(slope,))))
    scored.sort(key=lambda item: -item[0])
    return [gate for _, gate in scored]


def _trainable(
    source: torch.nn.Module,
    config: RealmConfig,
    before: Path,
    device: str | torch.device,
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> tuple[list[str], list[tuple[int, ...]]]:
    """The adapted tensors' names and shapes, in the order a state file holds them."""
    tensors = _restored(source, config, before, device, fisher=fisher).trainable_parameters()
    return list(tensors), [tuple(t.shape) for t in tensors.values()]


def _departure(
    side: dict[str, np.ndarray], plain: dict[str, np.ndarray], n: int
) -> np.ndarray | None:
    """The side's gradient minus the SDK's, up to a positive factor (None: they agree).

    The momentum buffer takes the gradient as it is; without one, θ moves against it.
    """
    if VELOCITY_NAME in side and VELOCITY_NAME in plain:
        d = side[VELOCITY_NAME][:n].astype(np.float64) - plain[VELOCITY_NAME][:n]
    else:
        d = plain[PARAMS_NAME][:n].astype(np.float64) - side[PARAMS_NAME][:n]
    return d if np.abs(d).max(initial=0.0) > 0 else None


def _upstream(
    source: torch.nn.Module,
    config: RealmConfig,
    before: Path,
    x: torch.Tensor,
    device: str | torch.device,
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """Each activation call's output gradient in the SDK's step (summed where called again)."""
    seen: dict[tuple[str, int], torch.Tensor] = {}

    def keep(key: tuple[str, int], grad: torch.Tensor) -> None:
        flat = grad.detach().flatten().double()
        seen[key] = flat if key not in seen else seen[key] + flat

    def watch(key: tuple[str, int], call: _Call, v: torch.Tensor) -> torch.Tensor | None:
        out = call.apply(v)
        if not out.requires_grad:
            return None
        out.register_hook(lambda grad: keep(key, grad))
        return out

    twin = _restored(source, config, before, device, fisher=fisher)
    with _Watch(twin.model, watch):
        twin.adapt(x)
    return seen


def _along(
    source: torch.nn.Module,
    config: RealmConfig,
    before: Path,
    x: torch.Tensor,
    names: list[str],
    shapes: list[tuple[int, ...]],
    departure: np.ndarray,
    device: str | torch.device,
    *,
    fisher: Mapping[str, torch.Tensor] | None = None,
) -> dict[tuple[str, int], torch.Tensor]:
    """Each activation input's derivative along ``departure`` in θ (float64, central)."""
    model = _restored(source, config, before, device, fisher=fisher).model
    step = _STEP / float(np.abs(departure).max())

    def inputs_at(sign: float) -> dict[tuple[str, int], Any]:
        wide = copy.deepcopy(model).to(torch.float64)
        params = dict(wide.named_parameters())
        offset = 0
        with torch.no_grad():
            for name, shape in zip(names, shapes, strict=True):
                size = int(np.prod(shape))
                if name not in params:  # adapted outside the model (none yet): no input moves
                    offset += size
                    continue
                delta = torch.from_numpy(departure[offset : offset + size]).reshape(shape)
                params[name].add_(delta.to(params[name].device), alpha=sign * step)
                offset += size
        return _inputs(wide, x.to(torch.float64))

    up, down = inputs_at(1.0), inputs_at(-1.0)
    return {
        key: (up[key][1] - down[key][1]) / (2 * step)
        for key in up
        if key in down and up[key][1].numel() == down[key][1].numel()
    }
