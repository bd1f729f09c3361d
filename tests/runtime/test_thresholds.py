"""Every threshold of the step with a sample on each side of it, decided alike on every side.

A decision of the step compares a float32 figure with a threshold: EATA's and SAR's entropy
cut, SAR's cut again at θ + ε, S_div, the drift bound (plain and scaled by the update rate),
the collapse guard and SAR's recovery. For each, a probe run (the numpy twin) measures the
figure at the deciding step in float64; then the threshold is set just above and just below
it, ``(1 ± EPS)·figure``, and the SDK, the numpy twin (``onnx-steps``), the adapt graph
(``RealmRuntime(backend="onnx")``) and the JavaScript client (the Node app: the adapt graph on
the current onnxruntime-node, the setting written into ``realm.settings`` with ``--set``) must
each take the decision the exact figure implies, and alike in every reason and counter.
EPS is about 80 float32 ulps: the sides compute each figure from float32 values that differ
by rounding (up to about 1e-6 relative, docs/parity.md); a threshold closer than that is a
near-tie, which no float32 implementation settles identically (SPEC §5)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import export_digits, node_app_missing, run_node_app

from realm_runtime import COUNTERS, RealmRuntime
from realm_runtime.contract import ADAPT_SETTINGS, COUNTERS_NAME, adapt_settings, read_state
from realm_sdk import RealmAdapter, RealmConfig
from realm_tools.data import write_stream_folder

EPS = 1e-5  # relative distance of each threshold from the figure (≈ 84 float32 ulps)


@dataclass(frozen=True)
class Outcome:
    """What a side did on a stream: each step's reason, and the counters at the end."""

    reasons: list[str]
    selected: list[bool]  # passed the filters on the pre-update logits (SAR may refuse later)
    counters: dict[str, int]


@dataclass(frozen=True)
class Probe:
    """The stream that reaches a decision, and the figure (float64) it compares there."""

    samples: list[int]  # indices into the shifted digits stream
    figure: float


@dataclass(frozen=True)
class Threshold:
    """One decision: where its figure comes from and how a config places its threshold."""

    export: dict  # export_digits overrides of the artifacts it runs on
    probe: Callable[[Probing, np.ndarray], Probe | None]  # None: no sample reaches it
    place: Callable[[RealmConfig, float], dict]  # config overrides setting the threshold
    fires_above: bool  # the decision fires with the threshold above the figure (else below)
    fired: Callable[[Outcome], bool]  # whether the decision fired, from what a side did


@dataclass
class Probing:
    """The numpy twin on the probe's configuration, and others with a setting changed."""

    directory: Path
    exported: RealmConfig
    config: RealmConfig

    def runtime(self, **fields) -> RealmRuntime:
        """A fresh twin on the probe's configuration with ``fields`` changed."""
        config = self.config.with_overrides(**fields)
        overrides = _changed(self.exported, config)
        return RealmRuntime(self.directory, threads=1, backend="onnx-steps", overrides=overrides)


def _entropy(logits: np.ndarray) -> float:
    z = logits.astype(np.float64).reshape(-1)
    z = z - z.max()
    log_p = z - math.log(np.exp(z).sum())
    return float(-(np.exp(log_p) * log_p).sum())


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64).reshape(-1)
    e = np.exp(z - z.max())
    return e / e.sum()


def _run(rt: RealmRuntime, xs: np.ndarray, samples: list[int]) -> list:
    return [rt.adapt(xs[i][None]) for i in samples]


# ---------------------------------------------------------------------------- the probes


def _entropy_probe(probing: Probing, xs: np.ndarray) -> Probe:
    """EATA's and SAR's cut on the first sample: refused where H ≥ e0."""
    (r,) = _run(probing.runtime(), xs, [0])
    return Probe([0], _entropy(r.logits))


def _second_cut_probe(probing: Probing, xs: np.ndarray) -> Probe | None:
    """SAR's cut again at θ + ε, after its first pass: refused where H(θ + ε) ≥ e0.

    H(θ + ε) is no output of any side, so the probe finds it by bisection on e0 with the
    twin, to float32 resolution, on a sample whose first pass lies below it.
    """

    def refused_again(j: int, e0: float) -> bool:
        (r,) = _run(probing.runtime(entropy_margin=e0), xs, [j])
        return bool(r.selected[0]) and r.reason == "entropy"

    for j in range(40):
        (r,) = _run(probing.runtime(), xs, [j])
        low, high = _entropy(r.logits) * (1 + 10 * EPS), 2 * math.log(probing.config.num_classes)
        if not refused_again(j, low) or refused_again(j, high):
            continue
        while high / low - 1 > 1e-7:
            middle = (low + high) / 2
            low, high = (middle, high) if refused_again(j, middle) else (low, middle)
        return Probe([j], (low + high) / 2)
    return None


def _diversity_probe(probing: Probing, xs: np.ndarray) -> Probe | None:
    """S_div on the second sample, against the EMA of the first: refused where |cos| ≥ d."""
    rt = probing.runtime()
    (first,) = _run(rt, xs, [0])
    assert first.updated  # no EMA before it: the first sample always passes S_div
    ema = rt.state.ema.astype(np.float64)
    for j in range(1, 40):
        p = _softmax(rt.predict(xs[j][None]))  # the parameters the second step sees
        cos = abs(float(p @ ema) / (np.linalg.norm(p) * np.linalg.norm(ema)))
        if cos < 1 / (1 + 2 * EPS):  # a margin above it must still be ≤ 1
            return Probe([0, j], cos)
    return None


def _drift_probe(probing: Probing, xs: np.ndarray) -> Probe:
    """The bound on the first update (no update rate yet: the bound is max_drift)."""
    rt = probing.runtime()
    (r,) = _run(rt, xs, [0])
    assert r.updated
    return Probe([0], rt.state.drift)


def _scaled_drift_probe(probing: Probing, xs: np.ndarray) -> Probe | None:
    """The bound at update rate 0.99 (an update, then S_div refusing the same sample again):
    clipped where drift > max_drift·0.99 / full_rate (1 here); the first update unclipped."""
    for j in range(1, 40):
        rt = probing.runtime()
        results = _run(rt, xs, [0, 0])
        first_drift = rt.state.drift
        rate = rt.state.update_rate
        results += _run(rt, xs, [j])
        if [r.reason for r in results] != ["updated", "diversity", "updated"]:
            continue
        figure = rt.state.drift / rate
        if first_drift < figure * (1 - 10 * EPS):  # the first update stays inside either way
            return Probe([0, 0, j], figure)
    return None


def _collapse_probe(probing: Probing, xs: np.ndarray) -> Probe:
    """The collapse guard at the 100th sample, the first it may act on: reset where
    H(mean prediction) < collapse·ln C (and the model has moved)."""
    samples = list(range(100))
    rt = probing.runtime()
    _run(rt, xs, samples)
    st = rt.state
    assert st.drift > 0 and st.marginal is not None
    m = st.marginal.astype(np.float64)
    spread = float(-(m * np.log(np.maximum(m, 1e-12))).sum())
    return Probe(samples, spread / math.log(rt.config.num_classes))


def _recovery_probe(probing: Probing, xs: np.ndarray) -> Probe | None:
    """SAR's recovery on its loss EMA at the second update (0.9·first + 0.1·second): reset
    where the EMA < e_m; the first update's EMA (its own loss) stays above."""
    updating = []
    for j in range(40):
        (r,) = _run(probing.runtime(), xs, [j])
        if r.updated:
            updating.append((j, r.loss))
    for a, loss_a in updating:
        for b, _ in updating:
            rt = probing.runtime()
            results = _run(rt, xs, [a, b])
            if not all(r.updated for r in results):
                continue
            ema = rt.state.loss_ema
            if ema is not None and loss_a > ema * (1 + 10 * EPS):
                return Probe([a, b], ema)
    return None


def _guard(config: RealmConfig, **fields) -> dict:
    return {"guardrails": dataclasses.replace(config.guard, **fields)}


THRESHOLDS = {
    "eta-entropy-cut": Threshold(
        export={"method": "eta"},
        probe=_entropy_probe,
        place=lambda c, t: {"entropy_margin": t},
        fires_above=False,
        fired=lambda o: o.reasons[-1] == "entropy",
    ),
    "sar-entropy-cut": Threshold(
        export={"method": "sar", "recovery_loss": 0.8},
        probe=_entropy_probe,
        place=lambda c, t: {"entropy_margin": t},
        fires_above=False,
        fired=lambda o: not o.selected[-1],
    ),
    "sar-entropy-cut-again": Threshold(
        export={"method": "sar", "recovery_loss": 0.8},
        probe=_second_cut_probe,
        place=lambda c, t: {"entropy_margin": t},
        fires_above=False,
        fired=lambda o: o.selected[-1] and o.reasons[-1] == "entropy",
    ),
    "diversity": Threshold(
        export={},
        probe=_diversity_probe,
        place=lambda c, t: {"diversity_margin": t},
        fires_above=False,
        fired=lambda o: o.reasons[-1] == "diversity",
    ),
    "drift-bound": Threshold(
        export={},
        probe=_drift_probe,
        place=lambda c, t: _guard(c, max_drift=t),
        fires_above=False,
        fired=lambda o: o.counters["drift_clips"] == 1,
    ),
    "drift-bound-at-a-rate": Threshold(
        export={},
        probe=_scaled_drift_probe,
        place=lambda c, t: _guard(c, max_drift=t, full_rate=1.0),
        fires_above=False,
        fired=lambda o: o.counters["drift_clips"] == 1,
    ),
    "collapse": Threshold(
        export={},
        probe=_collapse_probe,
        place=lambda c, t: _guard(c, collapse=t),
        fires_above=True,
        fired=lambda o: o.counters["resets_collapse"] == 1,
    ),
    "sar-recovery": Threshold(
        export={"method": "sar", "recovery_loss": 0.8},
        probe=_recovery_probe,
        place=lambda c, t: {"recovery_loss": t},
        fires_above=True,
        fired=lambda o: o.counters["resets_recovery"] == 1,
    ),
}


def _probe_config(name: str, config: RealmConfig) -> RealmConfig:
    """The probe's configuration: the probed decision and the resets out of the way."""
    off = {
        "sar-entropy-cut": {"recovery_loss": 0.0},
        "sar-entropy-cut-again": {"recovery_loss": 0.0},
        "drift-bound": _guard(config, max_drift=None),
        "drift-bound-at-a-rate": _guard(config, max_drift=None, full_rate=1.0),
        "collapse": _guard(config, collapse=None),
        "sar-recovery": {"recovery_loss": 0.0},
    }
    return config.with_overrides(**off.get(name, {}))


# ---------------------------------------------------------------------------- the sides


def _sdk(model, config: RealmConfig, xs: np.ndarray, samples: list[int]) -> Outcome:
    adapter = RealmAdapter(copy.deepcopy(model), config)
    results = [adapter.adapt(torch.from_numpy(xs[i][None].copy())) for i in samples]
    return _outcome(results, adapter.state)


def _runtime(
    directory: Path, backend: str, overrides: dict, xs: np.ndarray, samples: list[int]
) -> Outcome:
    rt = RealmRuntime(directory, threads=1, backend=backend, overrides=overrides)
    return _outcome(_run(rt, xs, samples), rt.state)


def _outcome(results: list, state) -> Outcome:
    reasons = [r.reason for r in results]
    selected = [bool(r.selected[0]) for r in results]
    return Outcome(reasons, selected, {c: getattr(state, c) for c in COUNTERS})


def _javascript(
    directory: Path,
    exported: RealmConfig,
    config: RealmConfig,
    xs: np.ndarray,
    samples: list[int],
    work: Path,
) -> Outcome:
    """The Node app on the same samples, the changed settings written with ``--set``."""
    sets = []
    for name, ours, theirs in zip(
        ADAPT_SETTINGS, adapt_settings(config), adapt_settings(exported), strict=True
    ):
        if ours != theirs:
            sets += ["--set", f"{name}={float(ours)!r}"]
    stream, state, log = work / "stream", work / "state.npz", work / "steps.jsonl"
    for stale in (state, log):
        stale.unlink(missing_ok=True)
    shutil.rmtree(stream, ignore_errors=True)
    write_stream_folder(stream, xs[samples], [0] * len(samples))
    done = run_node_app(
        directory, stream, "--state", str(state), "--log", str(log), "--quiet", *sets, timeout=120
    )
    assert done.returncode == 0, done.stderr + done.stdout
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    counters = dict(zip(COUNTERS, read_state(state)[0][COUNTERS_NAME].tolist(), strict=True))
    return Outcome([s["reason"] for s in steps], [s["selected"] for s in steps], counters)


@pytest.mark.parametrize("name", list(THRESHOLDS))
def test_each_side_of_each_threshold_is_decided_alike(name, digits_model, digits, tmp_path):
    threshold = THRESHOLDS[name]
    directory = tmp_path / "artifacts"
    config = export_digits(digits_model, directory, **threshold.export)
    xs = np.ascontiguousarray(digits.stream("gaussian_noise", 5, seed=0)[0], dtype=np.float32)
    probe_config = _probe_config(name, config)
    probe = threshold.probe(Probing(directory, config, probe_config), xs)
    assert probe is not None, f"{name}: no sample of the stream reaches this decision"
    node_missing = node_app_missing()
    for above in (True, False):
        value = probe.figure * (1 + EPS if above else 1 - EPS)
        placed = probe_config.with_overrides(**threshold.place(probe_config, value))
        overrides, samples = _changed(config, placed), probe.samples
        outcomes = {
            "sdk": _sdk(digits_model, placed, xs, samples),
            "numpy twin": _runtime(directory, "onnx-steps", overrides, xs, samples),
            "adapt graph": _runtime(directory, "onnx", overrides, xs, samples),
        }
        if node_missing is None:
            outcomes["javascript"] = _javascript(directory, config, placed, xs, samples, tmp_path)
        want = above == threshold.fires_above
        for side, outcome in outcomes.items():
            assert threshold.fired(outcome) == want, (
                f"{name}: the {side} {'did' if not want else 'did not'} act with the threshold "
                f"{value!r} {'above' if above else 'below'} the figure {probe.figure!r} "
                f"(relative {EPS}); reasons {outcome.reasons}, counters {outcome.counters}"
            )
        assert len({repr(o) for o in outcomes.values()}) == 1, outcomes  # alike in every respect
    if node_missing is not None:
        pytest.skip(f"the Python sides agree; the JavaScript side did not run: {node_missing}")


def _changed(exported: RealmConfig, config: RealmConfig) -> dict:
    """The fields of ``config`` that differ from the export's: a runtime's overrides."""
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(exported, f.name)
    }
