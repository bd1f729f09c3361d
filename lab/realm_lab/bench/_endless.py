"""The endless setting: a million samples of changing corruptions through ``RealmRuntime``.

Rows (RDumb's comparison, Press et al., NeurIPS 2023): no adaptation; REALM with its default
guardrails; ETA as EATA's paper runs it (no Fisher); RDumb, that ETA reset to the source every 1000
samples. The source model is exported once per method; each row runs in its own torch-free
process (``realm_lab.workers.endless``), which rebuilds the same stream from its seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn
from tqdm import tqdm

from realm_export import ExportOptions, export_realm_artifacts
from realm_lab.data import CCCSettings
from realm_runtime import Guardrails, RealmConfig, RealmRuntime
from realm_tools.data import ShiftDataset
from realm_tools.models import weights_digest

from ..rows import ENDLESS_DEFAULT, RDUMB, REALM_GUARDED, ROWS, Row
from ..workers import ENDLESS
from ..workers.endless import ADAPT, PREDICT, RESET, checkpoint_done
from ._clean_state import clean_state_images

# Every row runs through RealmRuntime here, torch-free: the rows of the registry but the one
# that names the runtime (each of the others is that already).
ENDLESS_METHODS = tuple(r.key for r in ROWS.values() if not r.runtime)


def _exported(row: Row) -> str:
    """The artifacts a row runs, named by the row whose configuration they hold."""
    if not row.adapts:  # no-adapt predicts with REALM's export: the same source model
        return REALM_GUARDED.key
    return row.key if row.reset_every is None else row.method  # type: ignore[return-value]


def _mode(row: Row) -> str:
    """The worker's mode for a row: predict only, adapt, or adapt and reset by period."""
    if not row.adapts:
        return PREDICT
    return RESET if row.reset_every is not None else ADAPT


NEAR = 10.0  # points: a corruption whose every severity is further from the target is left out


@dataclass
class Calibration:
    """The severity of each corruption that holds the stream's difficulty."""

    target: float  # the no-adapt accuracy (%) the stream is held at
    accuracy: dict[str, dict[int, float]]  # no-adapt accuracy per corruption and severity
    chosen: dict[str, int]  # corruption → severity nearest the target
    left_out: list[str] = field(default_factory=list)  # no severity within NEAR points


@dataclass
class EndlessRow:
    """One method through the whole stream."""

    method: str
    samples: int
    accuracy: float  # over every sample, %
    windows: list[float]  # accuracy of each window, %
    updates: int
    resets: int
    drift_clips: int
    seconds: float  # the row's own run, whichever command ran it
    kept: bool = False  # taken back from an earlier run's kept rows, not run by this one


def calibrate(
    predict: Callable[[np.ndarray], np.ndarray],
    dataset: ShiftDataset,
    corruptions: Sequence[str],
    *,
    target: float | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> Calibration:
    """No-adapt accuracy per corruption and severity; the severity nearest ``target`` of each.

    ``target`` defaults to the median over the corruptions of their severity-5 accuracy (the
    difficulty of the continual benchmark).
    """
    table: dict[str, dict[int, float]] = {}
    for name in corruptions:
        table[name] = {}
        for severity in range(1, 6):
            x, y = dataset.stream(name, severity, seed=seed, limit=limit)
            top1 = np.concatenate(
                [predict(np.asarray(x[k : k + 256])).argmax(1) for k in range(0, len(y), 256)]
            )
            table[name][severity] = float((top1 == y).mean() * 100)
    if target is None:
        target = float(np.median([table[c][5] for c in corruptions]))
    chosen, left_out = {}, []
    for name, row in table.items():
        severity = min(row, key=lambda s: (abs(row[s] - target), -s))
        if abs(row[severity] - target) <= NEAR:
            chosen[name] = severity
        else:
            left_out.append(name)
    return Calibration(target, table, chosen, left_out)


def _configs(
    exported: Sequence[str], num_classes: int, overrides: dict[str, Any]
) -> dict[str, RealmConfig]:
    """Each exported row's configuration: its paper's; the overrides vary the guarded rows."""
    configs = {}
    for key in exported:
        row = ROWS[key]
        extra = dict(overrides) if row.guarded else {"guardrails": Guardrails.off()}
        configs[key] = RealmConfig.preset(
            "cifar",
            num_classes=num_classes,
            method=row.method,  # type: ignore[arg-type]
            **extra,
        )
    return configs


def bench_endless(
    source: nn.Module,
    dataset: ShiftDataset,
    dataset_name: str,
    *,
    seed: int = 0,
    settings: CCCSettings | None = None,
    methods: Sequence[str] = ENDLESS_DEFAULT,
    window: int = 10_000,
    target: float | None = None,
    jobs: int = 1,
    data_dir: str | None = None,
    split: str = "test",
    work_dir: Path | None = None,
    keep: Path | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> tuple[Calibration, list[EndlessRow]]:
    """Every method of ``methods`` through the endless stream of ``seed``.

    Args:
        source: the source model (exported once per adapting method).
        dataset: the shift set the stream is built from.
        dataset_name: its name for the workers (``digits`` or ``fmnist-c``).
        seed: of the stream (domains, order, corruption draws).
        settings: the stream's length and speed.
        methods: rows, of :data:`ENDLESS_METHODS`.
        window: samples per accuracy window.
        target: the no-adapt accuracy (%) the stream is held at (see :func:`calibrate`).
        jobs: rows run at once, one process and one thread each.
        data_dir: Fashion-MNIST's folder, for the workers.
        split: Fashion-MNIST-C's split (``test`` or ``val``), for the workers.
        work_dir: where the artifacts and row files go (a temporary folder if None).
        keep: a folder that keeps each finished row, with what it ran (model, stream,
            method and its whole configuration); a later call with the same takes the row
            from there instead of running it again. An unfinished row keeps a checkpoint
            there at every window (``.partial/``), which the same call goes on from: a long
            run can be split over several calls, or stopped at any moment.
        overrides: RealmConfig fields of REALM's row, a variant of its defaults.
        progress: show a progress bar of the samples every row has done.
        log: receives a line per finished row.

    Raises:
        ValueError: an unknown method, overrides RealmConfig refuses, or fewer than two
            corruptions near the target.
    """
    bad = [m for m in methods if m not in ENDLESS_METHODS]
    if bad:
        raise ValueError(f"unknown endless methods {bad}; known: {list(ENDLESS_METHODS)}")
    s = settings or CCCSettings()
    with tempfile.TemporaryDirectory(prefix="realm-endless-") as scratch:
        work = Path(work_dir or scratch)
        chosen = [ROWS[m] for m in methods]
        # REALM's artifacts also calibrate the stream, whichever rows run.
        exported = sorted({REALM_GUARDED.key, *(_exported(r) for r in chosen)})
        try:
            configs = _configs(exported, dataset.num_classes, dict(overrides or {}))
        except (TypeError, ValueError) as exc:  # a field RealmConfig does not have, a bad value
            raise ValueError(f"the overrides {overrides} do not fit RealmConfig: {exc}") from exc
        shape = dataset.input_shape
        clean = clean_state_images(dataset, exported)  # EATA's Fisher images; None: none needs
        for name in exported:
            options = ExportOptions(
                config=configs[name], input_shape=shape, overwrite=True, clean_images=clean
            )
            export_realm_artifacts(source, work / name, options)
        probe = RealmRuntime(work / REALM_GUARDED.key, threads=1)
        corruptions = list(dataset.default_corruptions)
        cal = calibrate(probe.predict, dataset, corruptions, target=target, limit=s.limit)
        if len(cal.chosen) < 2:
            raise ValueError(
                f"only {sorted(cal.chosen)} come within {NEAR:g} points of the target "
                f"{cal.target:.1f} %: pass another --target"
            )
        log(f"target {cal.target:.1f} %: severities {cal.chosen}; left out {cal.left_out}")
        base = [
            "--dataset", dataset_name, "--severities", json.dumps(cal.chosen),
            "--seed", str(seed), "--length", str(s.length), "--transition", str(s.transition),
            "--pool-seeds", str(s.pool_seeds), "--window", str(window),
            "--reset-every", str(RDUMB.reset_every),
        ]  # fmt: skip
        if s.limit is not None:
            base += ["--limit", str(s.limit)]
        if data_dir is not None:
            base += ["--data-dir", data_dir]
        if dataset_name == "fmnist-c":
            base += ["--split", split]
        weights = weights_digest(source)
        keys = {
            r.key: _key([_exported(r), _mode(r), *base, weights, *_config_part(r, configs)])
            for r in chosen
        }
        rows: dict[str, EndlessRow] = {}
        for method in methods:
            kept = _kept(keep, method, keys[method])
            if kept is not None:
                rows[method] = _row(method, kept, kept=True)
                log(f"{method}: {rows[method].accuracy:.2f} % over {rows[method].samples} (kept)")
        pending = [m for m in methods if m not in rows]
        partial = {m: keep / ".partial" / f"{m}-{keys[m][:16]}" for m in pending} if keep else {}
        for method, folder in partial.items():
            done = checkpoint_done(folder)
            if done:
                log(f"{method}: going on from sample {done} of {s.length}")
        running: list[tuple[str, subprocess.Popen[bytes], Path, float]] = []
        bar = tqdm(
            total=s.length * len(methods), desc="endless", unit="sample", file=sys.stderr,
            disable=not progress,
        )  # fmt: skip
        while pending or running:
            while pending and len(running) < max(1, jobs):
                method = pending.pop(0)
                row = ROWS[method]
                mode = _mode(row)
                artifacts = work / _exported(row)
                out = work / f"{method}.json"
                command = [
                    sys.executable, "-m", ENDLESS,
                    str(artifacts), mode, str(out), *base,
                    "--progress", str(work / f"{method}.done"),
                ]  # fmt: skip
                if method in partial:
                    command += ["--checkpoint", str(partial[method])]
                running.append((method, subprocess.Popen(command), out, time.perf_counter()))
            time.sleep(0.5)
            bar.n = len(rows) * s.length + sum(_done(work / f"{m}.done") for m, *_ in running)
            bar.refresh()
            for item in list(running):
                method, process, out, _ = item
                if process.poll() is None:
                    continue
                running.remove(item)
                if process.returncode != 0:
                    for _, other, _, _ in running:
                        other.kill()
                    raise RuntimeError(
                        f"the endless worker of {method} failed (exit {process.returncode})"
                    )
                data = json.loads(out.read_text())
                if data["torch"]:
                    raise RuntimeError(f"the endless worker of {method} imported torch")
                rows[method] = _row(method, data)
                log(f"{method}: {rows[method].accuracy:.2f} % over {rows[method].samples}")
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    tmp = keep / f".{method}.json.tmp"  # whole or not at all
                    tmp.write_text(json.dumps({"key": keys[method], "row": data}))
                    os.replace(tmp, keep / f"{method}.json")
                    shutil.rmtree(partial[method], ignore_errors=True)
        bar.close()
    return cal, [rows[m] for m in methods]


def _config_part(row: Row, configs: dict[str, RealmConfig]) -> list[str]:
    """What a row's kept run depends on besides the stream: its whole configuration.

    A method whose settings change (an override, a new default, a name taken by another
    method) is then run again rather than taken back; no-adapt only predicts with the source.
    """
    if not row.adapts:
        return []
    return [json.dumps(configs[_exported(row)].to_dict(), sort_keys=True)]


def _key(parts: list[str]) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _kept(keep: Path | None, method: str, key: str) -> dict[str, Any] | None:
    """The row kept for ``method`` if its key is ``key`` (None: not kept, or another run's)."""
    if keep is None or not (keep / f"{method}.json").is_file():
        return None
    try:
        saved = json.loads((keep / f"{method}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return saved["row"] if saved.get("key") == key else None


def _done(path: Path) -> int:
    """Samples a worker has done, from its progress file (0 before the first window)."""
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):  # not written yet, or caught mid-write
        return 0


def _row(method: str, data: dict[str, Any], *, kept: bool = False) -> EndlessRow:
    return EndlessRow(
        method=method,
        samples=int(data["samples"]),
        accuracy=float(data["accuracy"]),
        windows=[float(w) for w in data["windows"]],
        updates=int(data["updates"]),
        resets=int(data["resets"]),
        drift_clips=int(data["drift_clips"]),
        seconds=float(data["seconds"]),
        kept=kept,
    )
