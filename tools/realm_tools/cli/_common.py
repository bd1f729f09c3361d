"""What the commands share: progress bars, and the heading of a report written to disk."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from .._machine import cpu_name


def progress_factory(unit: str = "sample") -> Callable[[str, int], Callable[[int], None]]:
    """``(label, total) -> update(done)``: a tqdm bar on stderr per call, counting ``unit``."""
    from tqdm import tqdm

    def factory(label: str, total: int) -> Callable[[int], None]:
        bar = tqdm(total=total, desc=label, leave=False, unit=unit, file=sys.stderr)

        def update(done: int) -> None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return update

    return factory


def run_header(title: str, argv: Sequence[str]) -> str:
    """Markdown heading with the command, the machine and the versions behind a table."""
    import os
    import platform

    import numpy as np
    import torch

    try:
        import onnxruntime

        ort = onnxruntime.__version__
    except ImportError:
        ort = "not installed"
    command = "realm " + " ".join(argv[1:])
    return (
        f"# {title}\n\nCommand: `{command}`\n\nMachine: {cpu_name()}, "
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {ort}, numpy "
        f"{np.__version__}.\n\n"
    )
