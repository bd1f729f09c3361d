"""Both twins (``RealmAdapter``, ``RealmRuntime``) and other sides, step by step (SPEC §5)."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from realm_runtime import COUNTERS

# The runtime's executions of the step that the shared tests run on: the adapt graph and the
# legacy twin (the "onnx-steps" twin is the reference of the graph's tests, and runs the
# step-for-step agreement with the SDK in runtime/test_runtime.py).
BACKENDS = ("onnx", "ort-training")


def assert_same_state(a, b, tol: Mapping[str, float]) -> None:
    """Two RealmRuntimes hold the same adaptation state, within ``tol`` (parity's keys).

    Parameters, α and EMA absolutely; λ relative to its scale (it grows under C = 1);
    momentum buffers relative to the largest entry of any buffer (sums of raw gradients: a
    buffer of a zero-initialised norm is far below the others, and float32 rounds it at the
    step's scale, not its own, as the parity suite judges it); the counters exactly.
    """
    for name, value in a.trainable_parameters().items():
        np.testing.assert_allclose(
            b.trainable_parameters()[name], value, rtol=0, atol=tol["params"], err_msg=name
        )
    buffers = a.momentum_buffers()
    scale = max([float(np.abs(v).max()) for v in buffers.values()] + [1e-12])
    for name, value in buffers.items():
        got = np.abs(b.momentum_buffers()[name] - value).max() / scale
        assert got <= tol["momentum"], (name, got)
    sa, sb = a.state, b.state
    assert [getattr(sa, k) for k in COUNTERS] == [getattr(sb, k) for k in COUNTERS]
    if sa.alpha is None:  # Tent, EATA: no α, λ
        assert sb.alpha is None and sb.lam is None
    else:
        assert sa.alpha == pytest.approx(sb.alpha, abs=tol["alpha"])
        assert sa.lam == pytest.approx(sb.lam, abs=tol["lam"] * max(1.0, abs(sa.lam)))
    if sa.ema is None:  # no S_div EMA yet, or a reset just cleared it
        assert sb.ema is None
    else:
        np.testing.assert_allclose(sa.ema, sb.ema, rtol=0, atol=tol["ema"])


class NearTie(UserWarning):
    """A step whose outcome turned on a float32 rounding, told apart (SPEC §5).

    Either the sides' states differed by rounding and the side that parted lands within
    tolerance when it takes the step again from the other's state, or from the very same
    state their kernels put one activation input on either side of a kink, and the SDK's
    step with that gate flipped is the other side's (``realm_tools.parity.kink_split``).
    Tests warn with it (naming the step, and the gate or the distances) and go on.
    """


# Steps of a stream that may be ties before a comparison fails: a kink within rounding is rare.
def allowed_ties(steps: int) -> int:
    return max(1, steps // 50)


def kink_tie(where: str, source: nn.Module, config, before: Path, x: np.ndarray, *sides) -> str:
    """Sides that took one step from the same state and still part: the gate that explains it.

    Warns a :class:`NearTie` naming it; fails where no gate beside a kink explains the step.
    """
    from realm_tools.parity import kink_split

    named = kink_split(source, config, before, x, *sides)
    assert named is not None, (
        f"{where}: the sides part from the same state, and no gate beside a kink explains it"
    )
    warnings.warn(f"{where}: a tie on a kink, decided by the kernels: {named}", NearTie, 2)
    return named


def follow(other: Callable, twin, xs: np.ndarray, *, source: nn.Module, where: str) -> int:
    """Another implementation's run over ``xs`` against ``twin`` (a RealmRuntime) stepping here.

    ``other(first, last, state)`` runs the other side over ``xs[first:last]`` from a state
    file (None: the export's own state) and returns a row per step: ``(reason, updated,
    logits, arrays)``, ``arrays`` holding its state file's ``realm.params`` and
    ``realm.velocity`` after the step. Every step's decision and logits must agree. Where the
    parameters part beyond tolerance, the other side takes that step again from the twin's
    state before it: landing within tolerance there is a near-tie of the inputs' rounding,
    else a gate beside a kink must explain it (:func:`kink_tie`). Either way the other side
    goes on from the twin's state after the step.

    Returns:
        How many steps were ties (at most :func:`allowed_ties`).
    """
    from realm_tools.parity import TOLERANCES, state_arrays, within_tolerance

    rows, ties = dict(enumerate(other(0, len(xs), None))), []
    with tempfile.TemporaryDirectory() as scratch:
        before, after = Path(scratch) / "before.npz", Path(scratch) / "after.npz"
        for i, x in enumerate(xs):
            reason, updated, logits, arrays = rows[i]
            twin.save(before)
            ours = twin.adapt(np.ascontiguousarray(x[None]))
            assert (reason, updated) == (ours.reason, ours.updated), f"{where}: step {i}"
            if np.isfinite(ours.logits).all():
                np.testing.assert_allclose(
                    logits, ours.logits[0], rtol=0, atol=TOLERANCES["logits"], err_msg=f"step {i}"
                )
            mine = state_arrays(twin)  # once: a runtime copies its tensors
            _same_alpha_lambda(arrays, twin.state, mine, f"{where}: step {i}")
            if within_tolerance(arrays, mine):
                continue
            (again,) = other(i, i + 1, before)
            if within_tolerance(again[3], mine):
                message = f"{where}: step {i}: a near-tie, within tolerance from the twin's state"
                warnings.warn(message, NearTie, 2)
                ties.append(message)
            else:
                step = f"{where}: step {i}"
                ties.append(kink_tie(step, source, twin.config, before, x[None], again[3], twin))
            twin.save(after)  # both went on correctly: the other side goes on from here
            if i + 1 < len(xs):
                rows.update(enumerate(other(i + 1, len(xs), after), start=i + 1))
    assert len(ties) <= allowed_ties(len(xs)), ties
    return len(ties)


def snapshot(twin, *, counters: bool = True) -> tuple:
    """Everything adapt/restore may change in a RealmAdapter or a RealmRuntime, as bytes.

    Equal snapshots are bit-identical states: parameters, momentum buffers, α, λ and their
    momentum, the EMA, and (unless ``counters=False``) the counters.
    """

    def raw(arrays: dict) -> dict[str, bytes]:
        return {
            k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v).tobytes()
            for k, v in arrays.items()
        }

    s = twin.state
    return (
        raw(twin.trainable_parameters()),
        raw(twin.momentum_buffers()),
        (s.alpha, s.lam, s.alpha_momentum, s.lam_momentum),
        None if s.ema is None else s.ema.tobytes(),
        tuple(getattr(s, k) for k in COUNTERS) if counters else None,
    )


# Agreement bounds of the twins over a whole stream (float32, CPU): logits are O(10), so 1e-4
# absolute is ~1e-5 relative; parameters, α, λ and the EMA are O(1) and agree to a few float32
# ulps. Momentum buffers are accumulated gradients of any scale: as in the parity suite, their
# difference is taken relative to the run's largest buffer entry, within its tolerance.
LOGITS_ATOL = 1e-4
STATE_ATOL = 1e-5
MOMENTUM_RTOL = 1e-4


def _same_alpha_lambda(arrays: Mapping[str, np.ndarray], state, mine: Mapping, where: str) -> None:
    """REALM's α and λ, which close a state file's ``realm.params``, as the twin's ``state``
    (``mine``: the twin's trainable tensors, flat)."""
    from realm_runtime.contract import PARAMS_NAME
    from realm_tools.parity import TOLERANCES

    tail = np.asarray(arrays[PARAMS_NAME])[mine[PARAMS_NAME].size :]
    if state.alpha is None:
        assert tail.size == 0, where
        return
    alpha, lam = (float(v) for v in tail)
    assert alpha == pytest.approx(state.alpha, abs=TOLERANCES["alpha"]), where
    assert lam == pytest.approx(state.lam, abs=TOLERANCES["lam"] * max(1.0, abs(state.lam))), where


def compare_twins(rt, adapter, xs, *, source: nn.Module, batch: int = 1) -> dict[str, float]:
    """Feed the same stream to both, compare after every step; returns the max differences
    (momentum: relative to the largest buffer entry).

    A step that parts them is judged by the parity suite's rule (``step_tie``: a rounding of
    the inputs, or a gate beside a kink that the kernels set apart, named), warned as a
    :class:`NearTie`, and the runtime goes on from the SDK's state; at most
    :func:`allowed_ties` such steps. ``source`` is the model the adapter adapts, as exported.
    """
    from realm_tools.parity import step_tie

    worst = dict.fromkeys(("logits", "params", "momentum", "alpha", "lam", "ema"), 0.0)
    scale = 0.0  # the largest momentum buffer entry of the run (the SDK's)
    ties = []
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before.npz"
        for start in range(0, len(xs) - batch + 1, batch):
            x = np.ascontiguousarray(xs[start : start + batch])
            adapter.save(before)
            r = rt.adapt(x)
            s = adapter.adapt(torch.from_numpy(x))
            assert r.selected.tolist() == s.selected.tolist(), f"S_div differs at sample {start}"
            assert r.updated == s.updated and r.reason == s.reason
            kinks: list[str] = []
            if step_tie(rt, adapter, s, x, before, kinks, source):
                named = kinks[0] if kinks else "within tolerance from the SDK's state"
                message = f"sample {start}: a tie of the step: {named}"
                warnings.warn(message, NearTie, 2)
                ties.append(message)
            logits = float(np.abs(r.logits - s.logits.numpy()).max())
            worst["logits"] = max(worst["logits"], logits)
            pa, pb = rt.trainable_parameters(), adapter.trainable_parameters()
            assert list(pa) == list(pb)
            worst["params"] = max(
                worst["params"], max(float(np.abs(pa[n] - pb[n].numpy()).max()) for n in pa)
            )
            va, vb = rt.momentum_buffers(), adapter.momentum_buffers()
            worst["momentum"] = max(
                worst["momentum"], max(float(np.abs(va[n] - vb[n].numpy()).max()) for n in va)
            )
            scale = max(scale, max(float(np.abs(vb[n].numpy()).max()) for n in vb))
            sa, sb = rt.state, adapter.state
            if sa.alpha is not None:
                worst["alpha"] = max(worst["alpha"], abs(sa.alpha - sb.alpha))
                worst["lam"] = max(worst["lam"], abs(sa.lam - sb.lam))
            assert (sa.ema is None) == (sb.ema is None)
            if sa.ema is not None:
                worst["ema"] = max(worst["ema"], float(np.abs(sa.ema - sb.ema).max()))
            for counter in COUNTERS:
                assert getattr(sa, counter) == getattr(sb, counter), counter
    worst["momentum"] /= max(scale, 1e-12)
    assert len(ties) <= allowed_ties(len(xs) // batch), ties
    assert worst["logits"] <= LOGITS_ATOL, worst
    assert worst["momentum"] <= MOMENTUM_RTOL, worst
    assert max(v for k, v in worst.items() if k not in ("logits", "momentum")) <= STATE_ATOL, worst
    return worst
