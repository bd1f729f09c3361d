"""The paper's protocol at its length, as a page: Table 1, Fig. 3, Fig. 4 and Table 4.

Read from the run logs ``make fmnist-full`` keeps (one per model, and one of the rows that
draw AugMix views), beside the 1,000-sample table's and the paper's own CIFAR-10-C row. A
row that ran shorter or on fewer seeds says so beside it; a run not yet made is counted, not
guessed: the page shows how much of the plan it holds.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realm_runtime.methods import BY_NAME, REALM

from ..rows import NO_ADAPT, REALM_GUARDED, ROWS, VIEWS_MODELS, in_table_order

PAPER_TABLE = Path(__file__).with_name("data") / "realm_paper_table1.csv"
FIGURE_CORRUPTIONS = ("gaussian_noise", "snow")  # the paper's Fig. 3 and 4
BASELINE = REALM.name  # the row the headline compares every other with
PLAN_SAMPLES, PLAN_SEEDS = 10_000, 3  # the protocol's stream length and seed count
SHORT = "†"  # marks a row that ran shorter or on fewer seeds than the protocol
UNPLANNED = "–"  # a row the plan does not run on this model (an AugMix row elsewhere)
# Table 1's rows: the source, every method of the registry, REALM with its guardrails.
TABLE1_ROWS = tuple(in_table_order([NO_ADAPT.key, *BY_NAME, REALM_GUARDED.key]))


@dataclass
class Cells:
    """One model's runs, by row, corruption and seed."""

    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = field(default_factory=dict)

    def add(self, label: str, run: dict[str, Any]) -> None:
        """Take one run log line (``episodic/<corruption>/s<seed>/<row>``)."""
        parts = label.split("/")
        if len(parts) != 4 or parts[0] != "episodic":
            return
        _, corruption, seed, row = parts
        self.runs.setdefault(row, {}).setdefault(corruption, {})[int(seed[1:])] = run

    def rows(self) -> list[str]:
        """The rows present, in table order."""
        return in_table_order(list(self.runs))

    def accuracy(self, row: str, corruption: str) -> list[float]:
        """The row's accuracy on one corruption, one value per seed run."""
        got = self.runs.get(row, {}).get(corruption, {})
        return [r["accuracy"] for _, r in sorted(got.items()) if r.get("accuracy") is not None]

    def shape(self, row: str) -> tuple[set[int], set[int], set[str]]:
        """Stream lengths, seeds and backends the row's runs have."""
        runs = [r for seeds in self.runs.get(row, {}).values() for r in seeds.values()]
        seeds = {s for per in self.runs.get(row, {}).values() for s in per}
        return {r["samples"] for r in runs}, seeds, {r.get("backend", "sdk") for r in runs}


def read_cells(*paths: Path) -> Cells:
    """Every episodic run of the run logs at ``paths`` (missing files: none)."""
    cells = Cells()
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            data = json.loads(line)
            if "label" in data and "run" in data:
                cells.add(data["label"], data["run"])
    return cells


def paper_rows() -> dict[str, dict[str, float]]:
    """The paper's CIFAR-10-C Table 1, by row key and corruption (and ``average``)."""
    lines = [x for x in PAPER_TABLE.read_text().splitlines() if not x.startswith("#")]
    return {
        r["row"]: {k: float(v) for k, v in r.items() if k != "row"} for r in csv.DictReader(lines)
    }


def _label(row: str) -> str:
    return ROWS[row].label if row in ROWS else row


def _mean_std(values: Sequence[float]) -> str:
    if not values:
        return "…"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}"


def _seed_averages(cells: Cells, row: str, corruptions: Sequence[str]) -> dict[int, float]:
    """Each seed's mean over the corruptions, for the seeds every corruption has."""
    per_seed: dict[int, list[float]] = {}
    for c in corruptions:
        for seed, run in cells.runs.get(row, {}).get(c, {}).items():
            per_seed.setdefault(seed, []).append(run["accuracy"])
    return {s: float(np.mean(v)) for s, v in sorted(per_seed.items()) if len(v) == len(corruptions)}


def _row_average(cells: Cells, row: str, corruptions: Sequence[str]) -> list[float] | None:
    """Per seed, the mean over the corruptions; None until every corruption has that seed."""
    return list(_seed_averages(cells, row, corruptions).values()) or None


@dataclass(frozen=True)
class Gap:
    """REALM's average minus a row's, over the streams both ran."""

    points: float  # REALM's mean minus the row's, over the common seeds
    seeds: tuple[int, ...]  # the seeds both rows ran whole
    samples: int | None  # the stream length when it is not the full-length runs' (else None)

    def note(self) -> str:
        """Where the figure comes from, when it is not the whole protocol."""
        out = f" over the same {self.samples:,}-sample streams" if self.samples else ""
        if len(self.seeds) < PLAN_SEEDS:
            out += f" (seed{'s' if len(self.seeds) > 1 else ''} {','.join(map(str, self.seeds))})"
        return out


def realm_gap(
    cells: Cells, row: str, corruptions: Sequence[str], short: Cells | None = None
) -> Gap | None:
    """REALM against ``row`` on the same streams: the same length, the seeds both ran whole.

    A row that ran shorter than REALM's full-length runs is compared with REALM's runs of its
    length in ``short`` (the 1,000-sample table's). None: no such streams in common.
    """
    theirs = _seed_averages(cells, row, corruptions)
    lengths = cells.shape(row)[0]
    samples = None
    pool = cells
    if lengths != cells.shape(BASELINE)[0]:
        if short is None or len(lengths) != 1 or lengths != short.shape(BASELINE)[0]:
            return None
        pool, samples = short, next(iter(lengths))
    mine = _seed_averages(pool, BASELINE, corruptions)
    common = tuple(s for s in mine if s in theirs)
    if not common:
        return None
    points = float(np.mean([mine[s] for s in common]) - np.mean([theirs[s] for s in common]))
    return Gap(points, common, samples)


def _shape_note(cells: Cells, row: str) -> str:
    lengths, seeds, backends = cells.shape(row)
    length = "/".join(f"{n:,}" for n in sorted(lengths))
    return f"{length} × seeds {','.join(map(str, sorted(seeds)))}, {'/'.join(sorted(backends))}"


def unplanned_rows(model: str, views_models: Sequence[str]) -> frozenset[str]:
    """The rows of Table 1 the plan does not run on ``model``: the AugMix rows elsewhere."""
    if model in views_models:
        return frozenset()
    return frozenset(r for r in TABLE1_ROWS if r in BY_NAME and BY_NAME[r].augments)


def _unplanned_note(views_models: Sequence[str]) -> str:
    where = ", ".join(views_models) or "no model"
    return f"not on this model: 64 AugMix views a sample, run on {where} only"


def table1(
    cells: Cells,
    corruptions: Sequence[str],
    short: Cells | None,
    paper: dict[str, Any],
    unplanned: frozenset[str] = frozenset(),
    views_models: Sequence[str] = VIEWS_MODELS,
) -> list[str]:
    """Table 1 at full length: a row per method, the 1,000-sample average and the paper's.

    A row in ``unplanned`` that has no runs says so instead of "not yet".
    """
    head = ["method", *[c.replace("_", " ") for c in corruptions], "average"]
    lines = [
        "| " + " | ".join([*head, "at 1,000", "paper (CIFAR-10-C)", "ran"]) + " |",
        "|" + "---|" * (len(head) + 3),
    ]
    for row in in_table_order(list({*TABLE1_ROWS, *cells.rows()})):
        if row not in cells.runs:
            if row in unplanned:
                cols = f"{UNPLANNED} | " * (len(head) + 1)
                lines.append(f"| {_label(row)} | {cols}{_unplanned_note(views_models)} |")
            else:
                lines.append(f"| {_label(row)} | " + "… | " * (len(head) + 1) + "not yet |")
            continue
        avg = _row_average(cells, row, corruptions)
        at_1000 = _row_average(short, row, corruptions) if short is not None else None
        theirs = paper.get(row, {}).get("average")
        cols = [_mean_std(cells.accuracy(row, c)) for c in corruptions]
        lines.append(
            "| "
            + " | ".join(
                [
                    _label(row),
                    *cols,
                    _mean_std(avg or []),
                    _mean_std(at_1000 or []),
                    f"{theirs:.1f}" if theirs is not None else "",
                    _shape_note(cells, row),
                ]
            )
            + " |"
        )
    return lines


def _model_table1(
    model: str,
    cells: Cells,
    short: Cells,
    corruptions: Sequence[str],
    paper: dict[str, Any],
    views_models: Sequence[str],
) -> list[str]:
    """One model's Table 1: its 1,000-sample runs where it has any, its plan's gaps named."""
    unplanned = unplanned_rows(model, views_models)
    return table1(cells, corruptions, short if short.runs else None, paper, unplanned, views_models)


def table4(cells: Cells) -> list[str]:
    """Table 4: the model after N samples scored on the stream's held-out tail."""
    out: list[str] = []
    for corruption in FIGURE_CORRUPTIONS:
        points = sorted(
            {
                int(n)
                for row in cells.rows()
                for run in cells.runs[row].get(corruption, {}).values()
                for n in run.get("heldout", {})
            }
        )
        if not points:
            continue
        out += [
            f"**{corruption.replace('_', ' ')}**, % correct on the held-out tail:",
            "",
            "| method | " + " | ".join(f"{n:,}" for n in points) + " |",
            "|" + "---|" * (len(points) + 1),
        ]
        for row in cells.rows():
            runs = cells.runs[row].get(corruption, {}).values()
            cols = [
                _mean_std([r["heldout"][str(n)] for r in runs if str(n) in r.get("heldout", {})])
                for n in points
            ]
            if any(c != "…" for c in cols):
                out.append(f"| {_label(row)} | " + " | ".join(cols) + " |")
        out.append("")
    return out


def headline(cells: Cells, corruptions: Sequence[str], short: Cells | None = None) -> list[str]:
    """REALM's average against every other complete row's on the same streams, and where it loses.

    A row that ran shorter is set against REALM's runs of its length and seeds (``short``).
    """
    if _row_average(cells, BASELINE, corruptions) is None:
        return ["REALM's row is not complete yet: no headline."]
    out = []
    for row in cells.rows():
        if row == BASELINE or _row_average(cells, row, corruptions) is None:
            continue
        gap = realm_gap(cells, row, corruptions, short)
        if gap is None:
            out.append(f"- {_label(row)}: no REALM runs on its streams ({_shape_note(cells, row)})")
            continue
        verb = "beats" if gap.points > 0 else "loses to"
        out.append(
            f"- REALM {verb} {_label(row)} by {abs(gap.points):.1f} points on average{gap.note()}"
        )
    return out


def plot_figures(cells: Cells, model: str, out_dir: Path) -> list[Path]:
    """Fig. 3 (online accuracy over samples) and Fig. 4 (updates over samples), seed-means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, name, ylabel in (
        ("online", "fig3", "online accuracy (%)"),
        ("updates", "fig4", "updates so far"),
    ):
        fig, axes = plt.subplots(1, len(FIGURE_CORRUPTIONS), figsize=(11, 3.8))
        drawn = False
        for ax, corruption in zip(axes, FIGURE_CORRUPTIONS, strict=True):
            for row in cells.rows():
                runs = list(cells.runs[row].get(corruption, {}).values())
                traces = [r for r in runs if key in r.get("trace", {})]
                if not traces:
                    continue
                at = traces[0]["trace_at"]
                same = [r["trace"][key] for r in traces if r["trace_at"] == at]
                ax.plot(np.asarray(at) + 1, np.mean(same, axis=0), label=_label(row))
                drawn = True
            ax.set_title(f"{model}: {corruption.replace('_', ' ')}, severity 5")
            ax.set_xlabel("samples")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        if drawn:
            for ax in axes:
                if ax.lines:
                    ax.legend(fontsize=7)
            path = out_dir / f"{name}-{model}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            written.append(path)
        plt.close(fig)
    return written


def model_cells(model: str, runs_home: Path) -> Cells:
    """A model's full-length runs and its AugMix rows' (the ``-views`` log)."""
    return read_cells(runs_home / model / "runs.jsonl", runs_home / f"{model}-views" / "runs.jsonl")


def _count(cells: Cells) -> int:
    return sum(len(c) for s in cells.runs.values() for c in s.values())


def _short_of_plan(cells: Cells, row: str) -> bool:
    lengths, seeds, _ = cells.shape(row)
    return lengths != {PLAN_SAMPLES} or len(seeds) < PLAN_SEEDS


def doc_tables(
    models: Sequence[str],
    runs_home: Path,
    short_home: Path,
    corruptions: Sequence[str],
    views_models: Sequence[str] = VIEWS_MODELS,
) -> str:
    """Table 1 at full length for each model, for docs/fmnist.md's generated block."""
    paper = paper_rows()
    lines: list[str] = []
    for model in models:
        cells = model_cells(model, runs_home)
        if not cells.runs:
            lines += [f"**{model}**: no runs yet.", ""]
            continue
        short = read_cells(short_home / model / "runs.jsonl")
        lines += [
            f"**{model}** ({_count(cells)} runs kept):",
            "",
            *_model_table1(model, cells, short, corruptions, paper, views_models),
            "",
        ]
    return "\n".join(lines)


def readme_headline(
    models: Sequence[str],
    runs_home: Path,
    corruptions: Sequence[str],
    views_models: Sequence[str] = VIEWS_MODELS,
) -> str:
    """The README's answer from the full-length table: each row's average, then REALM's place.

    A row not complete yet prints ``…``, one the plan does not run on the model ``–``; one
    that ran shorter or on fewer seeds than the protocol carries ``†``. The sentences compare
    complete full-length rows, on the seeds both rows ran.
    """
    per_model = {m: model_cells(m, runs_home) for m in models}
    rows = in_table_order(list({*TABLE1_ROWS, *(r for c in per_model.values() for r in c.runs)}))
    lines = [
        "| model | " + " | ".join(_label(r) for r in rows) + " | runs |",
        "|" + "---|" * (len(rows) + 2),
    ]
    said: list[str] = []
    waiting: list[str] = []  # models whose REALM or no-adapt row is not complete
    for model, cells in per_model.items():
        averages = {r: _row_average(cells, r, corruptions) for r in rows}
        unplanned = unplanned_rows(model, views_models)
        cols = []
        for r in rows:
            avg = averages[r]
            mark = SHORT if r in cells.runs and _short_of_plan(cells, r) else ""
            empty = UNPLANNED if r in unplanned and r not in cells.runs else "…"
            cols.append(f"{np.mean(avg):.1f}{mark}" if avg else empty)
        lines.append(f"| {model} | " + " | ".join(cols) + f" | {_count(cells)} |")
        placed = _place(model, cells, corruptions)
        if placed is None:
            waiting.append(model)
        else:
            said.append(placed)
    return "\n".join(
        [
            *lines,
            "",
            f"{SHORT} ran shorter or on fewer seeds than 10,000 × 3 (the page's `ran` column); "
            f"… not complete yet; {UNPLANNED} {_unplanned_note(views_models)}.",
            "",
            *said,
            *([f"- Not complete yet: {', '.join(waiting)}."] if waiting else []),
        ]
    )


def _place(model: str, cells: Cells, corruptions: Sequence[str]) -> str | None:
    """REALM against not adapting and the best other full-length row, on the same streams.

    None: REALM's or no-adapt's row is not complete.
    """
    gain = realm_gap(cells, NO_ADAPT.key, corruptions)  # without ``short``: full-length rows
    if gain is None:
        return None
    text = f"- **{model}**: REALM {'gains' if gain.points >= 0 else 'loses'} "
    text += f"{abs(gain.points):.1f} points over not adapting"
    compared = [(NO_ADAPT.key, gain)]
    others = {}
    for row in cells.rows():
        if row in (BASELINE, NO_ADAPT.key):
            continue
        gap = realm_gap(cells, row, corruptions)  # None: not complete, or ran shorter
        if gap is not None:
            others[row] = gap
    if others:
        best = min(others, key=lambda r: others[r].points)
        compared.append((best, others[best]))
        gap = others[best].points
        if gap < 0:
            text += f"; {_label(best)} is ahead of it by {-gap:.1f}"
        else:
            text += f"; the best other row, {_label(best)}, is {gap:.1f} behind it"
    short = [f"{_label(r)} on {len(g.seeds)}" for r, g in compared if len(g.seeds) < PLAN_SEEDS]
    if short:
        text += f" (so far compared with {', '.join(short)} of {PLAN_SEEDS} seeds)"
    return text + "."


def full_length_page(
    models: Sequence[str],
    runs_home: Path,
    short_home: Path,
    out_dir: Path,
    corruptions: Sequence[str],
    views_models: Sequence[str] = VIEWS_MODELS,
) -> str:
    """The page: for each model, its tables and figures from the kept runs."""
    paper = paper_rows()
    out_dir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for model in models:
        cells = model_cells(model, runs_home)
        if not cells.runs:
            lines += [f"## {model}", "", "No runs yet.", ""]
            continue
        short = read_cells(short_home / model / "runs.jsonl")
        seconds = sum(
            r.get("seconds", 0.0)
            for s in cells.runs.values()
            for c in s.values()
            for r in c.values()
        )
        count = _count(cells)
        lines += [
            f"## {model}",
            "",
            f"{count} runs kept, {seconds / 3600:.1f} core-hours (one thread each).",
            "",
            *_model_table1(model, cells, short, corruptions, paper, views_models),
            "",
            *headline(cells, corruptions, short),
            "",
            "### Table 4: adapting on the first N samples, scored on the held-out rest",
            "",
            *table4(cells),
        ]
        for path in plot_figures(cells, model, out_dir):
            lines += [f"![{path.stem}]({path.name})", ""]
    return "\n".join(lines)
