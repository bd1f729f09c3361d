"""``realm-lab replot``: the plots under docs/ drawn again from the runs kept under lab/runs/.

A bench writes its runs (JSON) under ``lab/runs/<path>`` and its plots under ``docs/<path>``;
this draws the plots again from those runs without running anything, so a plot follows a
change of how it is drawn or labelled (a method's name) without a rerun of its hours.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ._args import DOCS_HOME, RUNS_HOME

Drawer = Callable[[Path, Path], list[Path]]  # (kept runs, folder to draw into) -> the plots


def _streams(kept: Path, out: Path) -> list[Path]:
    from ..bench import plot_streams, streams_from_json

    return plot_streams(streams_from_json(kept.read_text(encoding="utf-8")), out)


def _quality(kept: Path, out: Path) -> list[Path]:
    from ..bench import plot_quality, runs_from_json

    return plot_quality(runs_from_json(kept.read_text(encoding="utf-8")), out)


def _endless(kept: Path, out: Path) -> list[Path]:
    from ..bench import EndlessRow, plot_endless

    data = json.loads(kept.read_text(encoding="utf-8"))
    meta = data["meta"]
    if "title" not in meta:
        raise ValueError("kept before its runs carried the plot's title")
    path = out / "ccc.png"
    plot_endless([EndlessRow(**r) for r in data["rows"]], int(meta["window"]), path, meta["title"])
    return [path]


def _frames(kept: Path, out: Path) -> list[Path]:
    from ..attack import FrameRow, plot_frame_attacks

    rows = [FrameRow(**r) for r in json.loads(kept.read_text(encoding="utf-8"))["rows"]]
    path = out / "frames.png"
    plot_frame_attacks(rows, path)
    return [path]


def _fit(kept: Path, out: Path) -> list[Path]:
    from realm_tools.fit import report_png

    png = report_png(json.loads(kept.read_text(encoding="utf-8")))
    if png is None:
        return []
    path = out / "fit.png"
    path.write_bytes(png)
    return [path]


# The kept file of each bench that draws plots, and what draws them again.
DRAWERS: dict[str, Drawer] = {
    "streams.json": _streams,
    "quality.json": _quality,
    "ccc.json": _endless,
    "frames.json": _frames,
    "fit.json": _fit,
}


def kept_runs(runs: Path, only: list[str]) -> Iterator[Path]:
    """The kept files of ``runs`` with a drawer, in path order, under ``only`` where given."""
    for name in DRAWERS:
        for kept in sorted(runs.rglob(name)):
            rel = kept.parent.relative_to(runs).as_posix()
            if not only or any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in only):
                yield kept


def add_replot_parser(sub: Any) -> None:
    """Register ``replot``."""
    p = sub.add_parser(
        "replot",
        help="draw docs/'s plots again from the runs kept under lab/runs/ (runs nothing)",
        description="Draw the plots of docs/<path> again from the kept runs of "
        "lab/runs/<path> (streams.json, quality.json, ccc.json, frames.json, fit.json), "
        "running nothing: tables and runs stay as they are, and runs kept with no "
        "folder of plots get none.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        help="folders under lab/runs/ (e.g. continual ccc/fmnist); none: every one",
    )
    p.add_argument("--runs", default=str(RUNS_HOME), help="where the runs are kept")
    p.add_argument("--out", default=str(DOCS_HOME), help="where their plots go, path for path")
    p.set_defaults(func=run_replot_command)


def run_replot_command(args: argparse.Namespace) -> int:
    """Run ``realm-lab replot`` with parsed arguments; returns the exit code."""
    runs, out = Path(args.runs), Path(args.out)
    if not runs.is_dir():
        print(f"realm-lab replot: no folder of kept runs at {runs}", file=sys.stderr)
        return 2
    found = list(kept_runs(runs, args.paths))
    if not found:
        where = f"{runs} {' '.join(args.paths)}".rstrip()
        print(f"realm-lab replot: no kept runs with plots under {where}", file=sys.stderr)
        return 2
    for kept in found:
        target = out / kept.parent.relative_to(runs)
        if not target.is_dir():  # plots go beside their tables; runs kept with no page stay so
            print(f"{kept.relative_to(runs)}: skipped, no folder {target} to draw into")
            continue
        try:
            written = DRAWERS[kept.name](kept, target)
        except (KeyError, TypeError, ValueError) as exc:
            print(
                f"realm-lab replot: {kept} is not a run this lab can draw ({exc!r}): "
                "rerun its bench to write it again",
                file=sys.stderr,
            )
            return 2
        except OSError as exc:
            print(f"realm-lab replot: cannot write the plots of {kept} ({exc})", file=sys.stderr)
            return 2
        print(f"{kept.relative_to(runs)}: " + ", ".join(str(p) for p in written))
    return 0
