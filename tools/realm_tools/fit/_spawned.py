"""Workers started fresh: the bench sent pickled, with the files its model's classes live in.

The fit forks its workers where it can; where a forked child could not run a backward it
spawns them, and each rebuilds the bench from a :class:`Parcel`. A class loaded from a file
(``realm fit --model path/to/file.py:build``) is loaded again from that file under its name.
"""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
from dataclasses import dataclass
from typing import Any

import torch


class CannotSend(RuntimeError):
    """The bench cannot reach a fresh process; the message says why."""


@dataclass(frozen=True)
class Parcel:
    """What a spawned worker needs to rebuild the bench."""

    bench: bytes  # the pickled Bench
    modules: tuple[tuple[str, str], ...]  # (name, file) of each module a class of the model is in

    @classmethod
    def of(cls, bench: Any) -> Parcel:
        """Pack ``bench`` (its ``model`` an ``nn.Module``), or raise :class:`CannotSend`."""
        modules = {}
        for part in bench.model.modules():
            name = type(part).__module__
            file = getattr(sys.modules.get(name), "__file__", None)
            if name != "__main__" and file:  # __main__ is run again by spawn itself
                modules[name] = str(file)
        try:
            data = pickle.dumps(bench, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise CannotSend(f"it does not pickle: {exc}") from None
        return cls(data, tuple(sorted(modules.items())))


_RECEIVED: Any = None  # the bench, once a spawned worker has rebuilt it
_ERROR: str | None = None  # why it could not


def receive(parcel: Parcel) -> None:
    """A spawned worker's start: one torch thread, then the bench rebuilt (or why not kept)."""
    global _RECEIVED, _ERROR
    torch.set_num_threads(1)  # one process per core, as DataLoader's workers
    try:
        for name, file in parcel.modules:
            if name not in sys.modules:
                _load(name, file)
        _RECEIVED = pickle.loads(parcel.bench)
    except Exception as exc:  # raised to the parent by the first job, as CannotSend
        _ERROR = f"{type(exc).__name__}: {exc}"


def received() -> Any:
    """The bench this spawned worker rebuilt; :class:`CannotSend` where it could not."""
    if _RECEIVED is None:
        raise CannotSend(_ERROR or "the worker was given no bench")
    return _RECEIVED


def _load(name: str, file: str) -> None:
    try:
        importlib.import_module(name)
        return
    except ImportError:  # a module loaded from a file by path: load it again from there
        pass
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
