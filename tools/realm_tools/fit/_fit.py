"""``fit_realm_artifacts``: measure, choose by the rule, prove on held-out images, export."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_export import (
    DriftCheck,
    ExportOptions,
    MemoryBudgetError,
    MemoryCheck,
    UnsupportedModelError,
    ValidationError,
    export_realm_artifacts,
)
from realm_export.bound import BoundLadder, NormBall, climb_bounds
from realm_runtime.measure import cpu_name
from realm_sdk import RealmAdapter, RealmConfig, batch_norm_names, select_trainable

from ._budget import (
    CALIBRATION_SAMPLES,
    SAFETY,
    SHARES,
    FitBudgetError,
    least_left,
    long_stream_length,
    price_sample,
    time_left,
    too_small,
)
from ._candidates import NO_ADAPT_CANDIDATE, Candidate, candidates, default_config
from ._data import FitInputError
from ._options import SEVERITIES, FitOptions
from ._pool import Bench, Job, Journal, clean_accuracy, default_workers, run_jobs
from ._proof import prove
from ._report import write_report
from ._rule import Measured, choose
from ._schedule import halving
from ._search import run_rounds
from ._streams import FIELD, StreamKey, build_stream, normalise, shifted_keys

CLEAN_IMAGES = 256  # the most clean images the drift search and the clean check read
CLEAN_IMAGES_LONG = 512  # with LONG_FIT minutes or more: the worst case found is less noisy
LONG_FIT = 10.0  # minutes of budget from which the drift search reads CLEAN_IMAGES_LONG
DRIFT_FINER = (0.5, 0.25, 0.125)  # of DriftCheck's smallest bound, tried where that one fails
DRIFT_SHARE = 0.2  # of the budget, the most the drift search may take before stopping

Progress = Callable[[str, int], Callable[[int], None]]


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit_realm_artifacts` chose and wrote."""

    directory: Path  # the exported artifacts, with fit.md, fit.json and fit.png
    chosen: Candidate  # NO_ADAPT_CANDIDATE where not adapting won
    report: dict[str, Any]  # fit.json's content
    seconds: float  # the whole fit's wall time


def fit_realm_artifacts(
    model: nn.Module,
    out_dir: str | Path,
    options: FitOptions,
    *,
    progress: Progress | None = None,
    notify: Callable[[str], None] | None = None,
) -> FitResult:
    """Measure what adapting buys on the app's images, choose by the rule, prove and export.

    Args:
        model: the app's classifier (never modified; copies adapt).
        out_dir: the artifact directory to create (with fit.md / fit.json / fit.png).
        options: the images, the model's input, the budget and the rule.
        progress: ``(label, total) -> update(done)`` for each long phase.
        notify: told each stage as it starts.

    Raises:
        FitInputError: bad input, or a budget too small (``FitBudgetError``), before
            anything is written.
    """
    began = time.perf_counter()
    budget = options.minutes * 60
    say = notify or (lambda _: None)
    # The pool's fallback, said the first time it happens (a warning where nobody listens).
    once = _once(notify or _warn)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not options.overwrite:
        raise FitInputError(f"{out} exists and is not empty: pass --overwrite to replace it")
    model = copy.deepcopy(model).cpu().float().eval()
    config0 = default_config(options.preset, options.num_classes, None)
    _check_model(model, options, config0)
    workers = options.workers or default_workers()
    work = out.with_name(f".{out.name}.fit-work")

    say("splitting the images and building the shifted streams")
    data = options.data
    assert data.labels is not None
    order = np.random.default_rng([options.seed, 1]).permutation(len(data.images))
    held = len(order) // 3
    proof_idx, search_idx = order[:held], order[held:]
    search_x, search_y = data.images[search_idx], data.labels[search_idx]
    proof_x, proof_y = data.images[proof_idx], data.labels[proof_idx]
    most = CLEAN_IMAGES_LONG if options.minutes >= LONG_FIT else CLEAN_IMAGES
    clean_n = min(most, len(search_idx))
    clean = normalise(search_x[:clean_n], options.mean, options.std)
    clean_y = search_y[:clean_n]
    keys = shifted_keys("search", SEVERITIES, options.seed)
    streams = {k.name: build_stream(k, search_x, search_y, len(search_x)) for k in keys}
    if options.field_data is not None:
        key = StreamKey("field", FIELD, 0, options.seed)
        images = options.field_data.images
        streams[key.name] = build_stream(key, images, None, len(images))
    bench = Bench(model, streams, options.mean, options.std, clean, clean_y)

    say("pricing one sample of each method")
    per_sample = price_sample(bench, keys[-1].name, options)
    if budget < 3 * per_sample * CALIBRATION_SAMPLES * len(keys):
        raise too_small(
            time.perf_counter() - began, per_sample, len(keys), len(search_x), workers, 0.0
        )

    say("exporting the defaults once (how long an export takes, whether the model exports)")
    export_began = time.perf_counter()
    try:
        preflight = _export(model, work / "preflight", options, config0, fit=None)
    except FitInputError:
        if not (work / "journal.jsonl").exists():  # nothing measured yet: nothing to keep
            shutil.rmtree(work, ignore_errors=True)
        raise
    export_s = time.perf_counter() - export_began
    severity5 = [k.name for k in keys if k.severity == max(SEVERITIES)]
    floor_s = least_left(per_sample, len(severity5), len(search_x), workers)

    def short_of_time() -> FitBudgetError:  # tier 1 on the severity-5 streams cannot run
        spent = time.perf_counter() - began
        return too_small(spent, per_sample, len(severity5), len(search_x), workers, export_s)

    if time_left(budget, began, export_s) < floor_s:  # said now, not after the drift search
        shutil.rmtree(work, ignore_errors=True)
        raise short_of_time()
    stages = preflight.manifest.config.get("adapt_stages")
    config0 = dataclasses.replace(config0, adapt_stages=stages)

    say("finding the drift bound: the worst case inside each max_drift")
    drift_began = time.perf_counter()
    names = select_trainable(
        model, config0.frozen, freeze_last_block=config0.freeze_last_block, adapt_stages=stages
    )
    check = DriftCheck(images=clean, labels=clean_y, allowed_drop=options.rule.worst_drop)
    ball = NormBall(copy.deepcopy(model), names)

    # The drift search ends at its share, or where the search's cheapest schedule begins.
    drift_ends = min(drift_began + budget * DRIFT_SHARE, began + budget - export_s - floor_s)

    def out_of_time() -> bool:
        return time.perf_counter() >= drift_ends

    def climb(bounds: Sequence[float]) -> BoundLadder:
        return climb_bounds(
            ball,
            clean,
            clean_y,
            bounds,
            allowed_drop=check.allowed_drop,
            search=check.search,
            seed=options.seed,
            notify=say,
            deadline=drift_ends,
        )

    ladder = climb(check.bounds)
    bounds_tried = list(ladder.tried)
    for share in DRIFT_FINER:  # the smallest bound loses too much: a tighter one may not
        if ladder.chosen is not None or out_of_time():
            break
        ladder = climb([check.bounds[0] * share])
        bounds_tried += ladder.tried
    ladder = BoundLadder(chosen=ladder.chosen, tried=bounds_tried)
    # The defaults' own bound, searched alike where time allows: what the rule weighs them by.
    own = config0.guard.max_drift
    if own is not None and own not in {t["bound"] for t in bounds_tried} and not out_of_time():
        bounds_tried += climb_bounds(
            ball,
            clean,
            clean_y,
            [own],
            allowed_drop=100.0,  # searched to be reported, not to stop a climb
            search=check.search,
            seed=options.seed,
            notify=say,
            deadline=drift_ends,
        ).tried
    source_clean = clean_accuracy(bench)
    worst = {t["bound"]: t["worst_accuracy"] for t in ladder.tried}
    own_worst = next((t["worst_accuracy"] for t in bounds_tried if t["bound"] == own), None)
    default = Candidate("defaults (REALM, preset)", config0, 0)

    left = time_left(budget, began, export_s)
    fingerprint = _fingerprint(model, options, stages, ladder.chosen)
    journal = Journal(work / "journal.jsonl", fingerprint)
    rounds, finalists, long_runs, plan, long_length = [], [], {}, [], 0
    long_streams: list[str] = []
    search_streams = [k.name for k in keys]
    if ladder.chosen is not None:
        batch_norm = bool(batch_norm_names(model, names))
        for tiers, tried in [
            (3, search_streams),
            (2, search_streams),
            (1, search_streams),
            (1, severity5),
        ]:
            pool = candidates(
                options.preset,
                options.num_classes,
                bound=ladder.chosen,
                batch_norm=batch_norm,
                adapt_stages=stages,
                tiers=tiers,
            )
            plan = halving(
                len(pool),
                streams=len(tried),
                max_length=len(search_x),
                seconds_per_sample=per_sample * SAFETY,
                workers=workers,
                budget_s=left * SHARES["search"],
                carried=1,
            )
            if plan is not None:
                search_streams = tried
                break
        if plan is None:
            raise short_of_time()
        say(f"searching {len(pool)} configurations in {len(plan)} rounds on {workers} workers")
        searched = run_rounds(
            bench,
            search_streams,
            pool,
            plan,
            journal,
            workers=workers,
            progress=progress,
            notify=once,
            carried=(default,),
            deadline=time.perf_counter() + left * SHARES["search"],
        )
        rounds = searched.rounds
        # What the search paid, where dearer than priced, sizes the long stream and the proof.
        per_sample = max(per_sample, searched.per_sample / SAFETY)
        finalists = [s for s in rounds[-1] if s.candidate.config is not None]
        long_streams = [k for k in streams if k.startswith("field/")] + search_streams
        long_length = long_stream_length(
            budget, began, export_s, per_sample, finalists, long_streams, len(search_x), workers
        )
        say("the long stream: every shifted stream in turn, then the clean accuracy")
        jobs = [Job(tuple(long_streams), long_length, (s.candidate,), long=True) for s in finalists]
        for results in run_jobs(bench, jobs, journal, workers=workers, notify=once):
            long_runs.update(results)
    no_adapt = (
        next((s.mean for s in rounds[-1] if s.candidate.config is None), 0.0) if rounds else 0.0
    )
    measured = [
        Measured(
            s.candidate,
            s.mean,
            long_runs[f"long|{long_length}|{s.candidate.key}"]["clean_after"],
            own_worst if s.candidate.key == default.key else worst[ladder.chosen],
            s.per_stream,
        )
        for s in finalists
    ]
    choice = choose(measured, no_adapt=no_adapt, source_clean=source_clean, rule=options.rule)

    say("proving the choice on the held-out images")
    left = time_left(budget, began, export_s)
    proof = prove(
        model,
        options,
        proof_x,
        proof_y,
        [choice.candidate, default, NO_ADAPT_CANDIDATE],
        seconds=max(left * 0.95, 0.0),
        per_sample=per_sample * SAFETY,
        workers=workers,
        journal_path=work / "proof.jsonl",
        fingerprint=fingerprint,
        progress=progress,
        notify=once,
    )
    report = {
        "model": dict(options.model_info or {}),
        "data": {
            "sha256": data.digest(),
            "images": len(data.images),
            "search": len(search_x),
            "held_out": len(proof_x),
            "field": 0 if options.field_data is None else len(options.field_data.images),
            "source": data.source,
        },
        "input": {
            "shape": list(options.input_shape),
            "mean": list(options.mean),
            "std": list(options.std),
        },
        "preset": options.preset,
        "rule": {"text": options.rule.text(), **dataclasses.asdict(options.rule)},
        "budget": {
            "minutes": options.minutes,
            "export_s": export_s,
            "workers": workers,
            "memory_budget_mb": options.memory_budget_mb,
            "adapt_stages": stages,
        },
        "machine": cpu_name(),
        "source_clean": source_clean,
        "drift": {"max_drift": ladder.chosen, "tried": ladder.tried},
        "defaults": {
            "label": default.label,
            "max_drift": own,
            "worst": own_worst,
        },
        "search": {
            "streams": len(search_streams),
            "stream_names": search_streams,
            "rounds": [
                {
                    "length": r[0].length,
                    "standings": [
                        {"label": s.candidate.label, "key": s.candidate.key, "mean": s.mean}
                        for s in r
                    ],
                }
                for r in rounds
            ],
            "no_adapt": no_adapt,
        },
        "long_stream": {"streams": long_streams, "length": long_length},
        "finalists": [
            {
                **v.measured.candidate.describe(),
                "mean": v.measured.mean,
                "clean_after": v.measured.clean_after,
                "worst": v.measured.worst,
                "why_not": v.why_not,
            }
            for v in choice.verdicts
        ],
        "choice": {
            **choice.candidate.describe(),
            "adapts": choice.adapts,
            "reason": choice.reason,
        },
        "proof": proof,
    }
    config = choice.candidate.config or config0
    say("exporting the choice")
    report["seconds"] = time.perf_counter() - began
    _export(model, out, options, config, fit=report)
    report["seconds"] = time.perf_counter() - began
    write_report(out, report)
    shutil.rmtree(work, ignore_errors=True)
    return FitResult(out, choice.candidate, report, report["seconds"])


def _check_model(model: nn.Module, options: FitOptions, config: RealmConfig) -> None:
    """The model takes the input and gives the classes, and has norm layers to adapt."""
    x = torch.from_numpy(normalise(options.data.images[:1], options.mean, options.std))
    try:
        with torch.no_grad():
            logits = model(x)
    except Exception as exc:  # any error of the user's forward, named in one sentence
        raise FitInputError(
            f"the model does not run on one image of shape {tuple(x.shape)}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            "(check --input-shape and the images)"
        ) from None
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (1, options.num_classes):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise FitInputError(
            f"the model gives {shape} for one image, not (1, {options.num_classes}) logits: "
            "check --num-classes"
        )
    try:
        RealmAdapter(copy.deepcopy(model), config, clean_images=_clean(options, config))
    except ValueError as exc:
        raise FitInputError(f"the model cannot adapt: {exc}") from None


def _clean(options: FitOptions, config: RealmConfig) -> np.ndarray | None:
    """The user's images, normalised, for a method with clean state (EATA's Fisher)."""
    if config.rules.clean_state is None:
        return None
    size = getattr(config.settings, "fisher_size", len(options.data.images))
    return normalise(options.data.images[:size], options.mean, options.std)


def _warn(sentence: str) -> None:
    warnings.warn(sentence, RuntimeWarning, stacklevel=2)


def _once(say: Callable[[str], None]) -> Callable[[str], None]:
    said: set[str] = set()

    def tell(sentence: str) -> None:
        if sentence not in said:
            said.add(sentence)
            say(sentence)

    return tell


def _export(
    model: nn.Module,
    directory: Path,
    options: FitOptions,
    config: RealmConfig,
    fit: dict[str, Any] | None,
) -> Any:
    """Export ``config``; a model the exporter refuses is bad input, in its sentence."""
    memory = (
        None
        if options.memory_budget_mb is None
        else MemoryCheck(budget_mb=options.memory_budget_mb)
    )
    export_options = ExportOptions(
        config=config,
        input_shape=options.input_shape,
        preprocessing={
            "input_size": list(options.input_shape[1:]),
            "mean": list(options.mean),
            "std": list(options.std),
        },
        model_info=options.model_info,
        signing_key=options.signing_key if fit is not None else None,
        memory=memory,
        fit=fit,
        overwrite=True if fit is None else options.overwrite,
        clean_images=_clean(options, config),
    )
    try:
        return export_realm_artifacts(model, directory, export_options)
    except (UnsupportedModelError, ValidationError) as exc:
        raise FitInputError(f"the model cannot be exported: {str(exc).splitlines()[0]}") from None
    except MemoryBudgetError as exc:
        raise FitInputError(f"--memory-budget: {str(exc).splitlines()[0]}") from None


def _fingerprint(
    model: nn.Module, options: FitOptions, stages: int | None, bound: float | None
) -> str:
    """What the journal's results were measured on: the model, the data, the settings."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    h.update(options.data.digest().encode())
    if options.field_data is not None:
        h.update(options.field_data.digest().encode())
    settings = [options.mean, options.std, options.preset, options.seed, stages, bound]
    h.update(json.dumps(settings, default=str).encode())
    return h.hexdigest()
