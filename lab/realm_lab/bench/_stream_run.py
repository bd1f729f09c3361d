"""One method through one stream, sample by sample: its row of a stream benchmark."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime import Guardrails, RealmConfig
from realm_runtime.contract import INTERVENTIONS
from realm_runtime.methods import BY_NAME, Method, method_named, setting_owners
from realm_sdk import RealmAdapter
from realm_tools.bench import run_online
from realm_tools.data import NO_LABEL, Stream

from ..rows import ROWS, STREAMS_DEFAULT, row_named
from ._quality import _clean_accuracy, _torch_predict

# Every row a stream benchmark can run, in table order: the torch rows, never reset by period.
STREAM_METHODS: tuple[str, ...] = tuple(
    r.key for r in ROWS.values() if not r.runtime and r.reset_every is None
)
DEFAULT_STREAM_METHODS: tuple[str, ...] = STREAMS_DEFAULT
STREAM_LABELS = {key: ROWS[key].label for key in STREAM_METHODS}
TRACE_POINTS = 400  # samples of each trace: enough for a plot, small in the JSON
SCORE_BATCH = 250  # held-out samples per forward: a few MB of activations
EVENTS = INTERVENTIONS


@dataclass(frozen=True)
class HeldOut:
    """The REALM paper's Table 4 from a stream's run: adapt on the first N, score the rest.

    At each of ``at`` samples the model as it then is (no update) predicts the stream's last
    ``last`` samples, which it has not seen yet; the stream then goes on as before.
    """

    at: tuple[int, ...] = (1024, 2048, 4096, 8000)  # the paper's lengths, 8000 for its 10k
    last: int = 2000  # the held-out tail (the paper holds out ImageNet-C's last 10,000)

    def fits(self, length: int) -> bool:
        """Whether a stream this long has every checkpoint before its tail."""
        return max(self.at) <= length - self.last


@dataclass
class StreamRun:
    """One method on one stream."""

    setting: str
    method: str
    seed: int
    samples: int  # length of the stream
    accuracy: float | None  # % correct over the labelled samples (None: no labels)
    segments: list[tuple[str, float]]  # (segment or pass, % correct) in stream order
    clean_after: float | None  # % correct on the clean split after the stream
    updates: int  # optimizer steps
    events: dict[str, int]  # interventions by reason (EVENTS)
    reset_at: list[int] = field(default_factory=list)  # samples after which a reset happened
    trace_at: list[int] = field(default_factory=list)  # sample index of each trace point
    trace: dict[str, list[float]] = field(default_factory=dict)  # accuracy, alpha, lam, ...
    seconds: float = 0.0  # wall time of the stream and the clean check (0: not recorded)
    # HeldOut: "N" → % correct on the stream's tail after adapting on its first N samples.
    heldout: dict[str, float] = field(default_factory=dict)
    backend: str = "sdk"  # what adapted: the torch SDK, or RealmRuntime on an export


def method_config(
    method: str, preset: str, num_classes: int, overrides: dict[str, Any] | None = None
) -> RealmConfig:
    """The configuration of one row: its paper's, with its method's guardrails where guarded.

    ``overrides`` (fields of :class:`RealmConfig`) apply to every row alike: a variant of
    the preset, such as another reading of the paper's settings. A method's own setting
    (``sam_rho``, or ``{"sar": {...}}``) applies to that method's rows only.

    Raises:
        ValueError: a row that does not adapt (it has no configuration), or an unknown one.
    """
    row = row_named(method)
    if row.method is None:
        raise ValueError(f"the row {row.label!r} does not adapt: it has no configuration")
    rules = method_named(row.method)
    extra = {k: v for k, v in (overrides or {}).items() if _concerns(k, rules)}
    if not row.guarded:
        extra.setdefault("guardrails", Guardrails.off())
    return RealmConfig.preset(
        preset,  # type: ignore[arg-type]
        num_classes=num_classes,
        method=row.method,  # type: ignore[arg-type]
        **extra,
    )


def check_overrides(preset: str, num_classes: int, overrides: dict[str, Any] | None) -> None:
    """Raise ``ValueError`` where ``overrides`` do not fit a row of every adapting kind.

    Run before anything else, so that a bad field, or a bad setting of one method's rows
    only, fails before any run.
    """
    for row in ROWS.values():
        if row.adapts:
            method_config(row.key, preset, num_classes, overrides)


def _concerns(key: str, rules: Method) -> bool:
    """Whether an override named ``key`` reaches a row of ``rules``' method."""
    if key in BY_NAME:
        return key == rules.name
    owners = setting_owners(key)
    return not owners or rules in owners


def comparable_config(config: Any, batch_norm: bool = True) -> Any:
    """A kept run's configuration as it is compared: its method's settings among the fields.

    Reads both the current layout (settings under the method's name) and the flat one of
    runs kept before it, which named every method's settings.

    Args:
        config: a run's configuration as kept (JSON-ready), or None.
        batch_norm: whether the model has BatchNorm layers; without them ``lr_batch_norm``
            steps nothing, and runs at any value of it are the same run.
    """
    if not isinstance(config, dict) or config.get("method") not in BY_NAME:
        return config
    rules = method_named(config["method"])
    out = {
        k: v
        for k, v in config.items()
        if k not in BY_NAME and (not setting_owners(k) or rules in setting_owners(k))
    }
    if not batch_norm:
        out.pop("lr_batch_norm", None)
    own = config.get(rules.name)
    return {**out, **own} if isinstance(own, dict) else out


def config_defaults() -> dict[str, Any]:
    """Every field's default, shared and each method's settings', for :meth:`RunLog.holds`."""
    out: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(RealmConfig)}
    for rules in BY_NAME.values():
        out.update(rules.settings().to_dict())
    return out


def run_stream(
    method: str,
    source: nn.Module,
    stream: Stream,
    *,
    preset: str,
    num_classes: int,
    clean: tuple[Any, np.ndarray] | None,
    progress: Callable[[int, int], None] | None = None,
    overrides: dict[str, Any] | None = None,
    clean_images: np.ndarray | None = None,
    artifacts: str | None = None,
    heldout: HeldOut | None = None,
) -> StreamRun:
    """One method through one stream, sample by sample, on a private copy of ``source``.

    ``progress(done, total)`` is called every 64 samples and at the end. ``artifacts``: an
    export of the row's configuration, run by ``RealmRuntime`` (one thread) instead of the
    SDK. ``heldout``: Table 4's checkpoints, where the stream is long enough.
    """
    started = time.perf_counter()
    model = copy.deepcopy(source).eval()
    adapter: Any = None
    if row_named(method).adapts and artifacts is not None:
        from realm_runtime import RealmRuntime

        adapter = RealmRuntime(artifacts, threads=1)
    elif row_named(method).adapts:
        config = method_config(method, preset, num_classes, overrides)
        adapter = RealmAdapter(model, config, clean_images=clean_images)
    predict = _predictor(adapter, model)
    n = len(stream)
    every = max(1, n // TRACE_POINTS)
    names = ("alpha", "lam", "drift", "update_rate", "updates")
    trace: dict[str, list[float]] = {k: [] for k in names}
    trace_at: list[int] = []
    reset_at: list[int] = []
    resets = 0
    checkpoints = heldout.at if heldout is not None and heldout.fits(n) else ()
    tail = np.arange(n - heldout.last, n) if checkpoints and heldout is not None else None
    scored: dict[str, float] = {}

    def on_step(done: int) -> None:
        nonlocal resets
        i = done - 1
        if adapter is not None and (done % every == 0 or done == n):
            st = adapter.state  # a snapshot costs a pass over θ: taken at trace points only
            trace_at.append(i)
            trace["alpha"].append(float(st.alpha or 0.0))
            trace["lam"].append(float(st.lam or 0.0))
            trace["drift"].append(st.drift)
            trace["update_rate"].append(float(st.update_rate or 0.0))
            trace["updates"].append(float(st.updates))
            if st.resets_recovery + st.resets_collapse != resets:
                reset_at.append(i)  # at trace resolution
                resets = st.resets_recovery + st.resets_collapse
        if done in checkpoints and tail is not None:
            scored[str(done)] = _score(predict, stream, tail)
        if progress is not None and (done % 64 == 0 or done == n):
            progress(done, n)

    subject = adapter if adapter is not None else model
    result = run_online(
        subject, _Samples(stream), stream.labels, on_step=on_step, alpha_lambda=False
    )
    correct = result.predictions == stream.labels
    labelled = stream.labels != NO_LABEL
    at = trace_at if adapter is not None else sorted({*range(every - 1, n, every), n - 1})
    window = _windowed(correct, labelled, at)
    online = _cumulative(correct, labelled, at)
    segment = stream.segment_of()
    segments = []
    for k, (_, name) in enumerate(stream.segments):
        mask = (segment == k) & labelled
        if mask.any():
            segments.append((name, float(correct[mask].mean() * 100)))
    state = adapter.state if adapter is not None else None
    return StreamRun(
        setting=stream.setting,
        method=method,
        seed=-1,
        samples=n,
        accuracy=float(correct[labelled].mean() * 100) if labelled.any() else None,
        segments=segments,
        clean_after=_clean_accuracy(predict, clean),
        updates=state.updates if state is not None else 0,
        events={k: getattr(state, k) if state is not None else 0 for k in EVENTS},
        reset_at=reset_at,
        trace_at=at,
        trace={**(trace if adapter is not None else {}), "accuracy": window, "online": online},
        seconds=time.perf_counter() - started,
        heldout=scored,
        backend="runtime" if artifacts is not None and adapter is not None else "sdk",
    )


def _predictor(adapter: Any, model: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    """Classes of a numpy batch by the model as it is now, with no update (either twin)."""
    if adapter is None:
        return _torch_predict(model)
    if isinstance(adapter, RealmAdapter):
        return lambda x: adapter.predict(torch.from_numpy(x.copy())).argmax(1).numpy()
    return lambda x: np.asarray(adapter.predict(np.ascontiguousarray(x))).argmax(1)


def _score(predict: Callable[[np.ndarray], np.ndarray], stream: Stream, rows: np.ndarray) -> float:
    """% correct on the stream's samples ``rows``, in batches, the model left as it is."""
    hits = 0
    for start in range(0, len(rows), SCORE_BATCH):
        batch = rows[start : start + SCORE_BATCH]
        x = np.concatenate([stream.sample(int(i)) for i in batch])
        hits += int((predict(x) == stream.labels[batch]).sum())
    return hits / len(rows) * 100


def _cumulative(correct: np.ndarray, labelled: np.ndarray, at: Sequence[int]) -> list[float]:
    """% correct over every labelled sample so far, at each trace point (online accuracy)."""
    hits, seen = np.cumsum(correct & labelled), np.cumsum(labelled)
    return [float(hits[i] / seen[i] * 100) if seen[i] else float("nan") for i in at]


class _Samples:
    """A stream as the online loop reads it: its samples, sliced into batches."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def __len__(self) -> int:
        return len(self._stream)

    def __getitem__(self, part: slice) -> np.ndarray:
        return np.concatenate([self._stream.sample(i) for i in range(*part.indices(len(self)))])


def _windowed(correct: np.ndarray, labelled: np.ndarray, at: Sequence[int]) -> list[float]:
    """% correct over the last 500 labelled samples, at each trace point."""
    hits = np.cumsum(correct & labelled)
    seen = np.cumsum(labelled)
    out = []
    for i in at:
        j = max(0, np.searchsorted(seen, seen[i] - 500, side="right"))
        count = seen[i] - (seen[j - 1] if j > 0 else 0)
        got = hits[i] - (hits[j - 1] if j > 0 else 0)
        out.append(float(got / count * 100) if count else float("nan"))
    return out
