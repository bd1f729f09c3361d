"""What the commands share: progress bars, and the heading of a report written to disk."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from realm_runtime import onnxruntime_module
from realm_runtime.measure import cpu_name

# What the export extra installs, beside the exporter itself.
_EXPORT_MODULES = ("realm_export", "torch", "onnx", "onnxscript", "onnxruntime")


def export_extra_missing(command: str) -> str | None:
    """The sentence ``realm <command>`` prints where the export extra is not installed.

    Looked up, not imported: importing the exporter loads torch, which neither
    ``realm --help`` nor a command's ``--help`` should wait for.
    """
    absent = [m for m in _EXPORT_MODULES if not _installed(m)]
    if not absent:
        return None
    return (
        f"realm {command} needs the export extra (missing: {', '.join(absent)}): "
        "pip install 'realm-tta[export]'"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it (as on a device: no torch)
        return False


def progress_factory(unit: str = "sample") -> Callable[[str, int], Callable[[int], None]]:
    """``(label, total) -> update(done)``: a tqdm bar on stderr per call, counting ``unit``."""
    from tqdm import tqdm

    def factory(label: str, total: int) -> Callable[[int], None]:
        bar: Any = None

        def update(done: int) -> None:
            nonlocal bar
            if bar is None:  # made at the first sample: work before it (an export) is not timed
                bar = tqdm(total=total, desc=label, leave=False, unit=unit, file=sys.stderr)
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return update

    return factory


def run_header(title: str, argv: Sequence[str], program: str = "realm") -> str:
    """Markdown heading with the command, the machine and the versions behind a table."""
    import os
    import platform

    import numpy as np
    import torch

    try:
        ort = onnxruntime_module().__version__  # without ORTModule: no CUDA_HOME warning
    except ImportError:
        ort = "not installed"
    command = f"{program} " + " ".join(argv[1:])
    return (
        f"# {title}\n\nCommand: `{command}`\n\nMachine: {cpu_name()}, "
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {ort}, numpy "
        f"{np.__version__}.\n\n"
    )


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a stopped run leaves the old file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A command's argument parser with the flags every command takes (``-v``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    return parser


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` (None: the process's), set up logging, run the chosen sub-command."""
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line, for reports
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))
