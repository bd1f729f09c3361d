"""Adaptation-state files: one ``.npz`` of named arrays plus a JSON header, written atomically.

No pickle anywhere: arrays are plain numeric ``.npy`` members, read with
``allow_pickle=False``; the header (format, version, method, counters, names) is UTF-8 JSON
stored as a ``uint8`` member. numpy alone reads it, so a torch-free process can too.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ._config import RealmConfig

STATE_FORMAT = "realm-tta/adaptation-state"
STATE_VERSION = 1
_HEADER_KEY = "__header__"


def write_state(path: str | os.PathLike[str], arrays: dict[str, np.ndarray], header: dict) -> None:
    """Write arrays and a JSON header to ``path`` atomically.

    The file is written beside its destination under a temporary name, flushed and fsynced,
    then renamed over ``path``: a crash at any point leaves either the old file or the new
    one, never a torn one.

    Args:
        path: destination file (conventionally ``*.npz``).
        arrays: name → numeric array.
        header: JSON-serialisable metadata; ``format`` and ``version`` are added.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    full_header = {"format": STATE_FORMAT, "version": STATE_VERSION, **header}
    members = {name: np.asarray(a, order="C") for name, a in arrays.items()}  # keeps 0-d
    if _HEADER_KEY in members:
        raise ValueError(f"array name {_HEADER_KEY!r} is reserved")
    members[_HEADER_KEY] = np.frombuffer(json.dumps(full_header).encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **members)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getbuffer())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def read_state(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`write_state`.

    Args:
        path: the state file.

    Returns:
        ``(arrays, header)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a readable state file, or of another format or version.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"adaptation state file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path} is not a readable adaptation state file: {exc}") from exc
    raw = arrays.pop(_HEADER_KEY, None)
    if raw is None:
        raise ValueError(f"{path} has no {_HEADER_KEY} member: not a realm-tta state file")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: its header is not valid JSON: {exc}") from exc
    if header.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: format {header.get('format')!r}, expected {STATE_FORMAT!r}")
    if header.get("version") != STATE_VERSION:
        raise ValueError(
            f"{path}: state format version {header.get('version')!r} is not supported "
            f"(this library reads version {STATE_VERSION})"
        )
    return arrays, header


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (e.g. Windows).
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# The counters every adaptation state carries (samples, except `updates`: optimizer steps).
COUNTERS: tuple[str, ...] = (
    "samples",
    "updates",
    "updated_samples",
    "skipped_diversity",
    "skipped_entropy",
    "skipped_nonfinite",
)


def state_header(
    config: RealmConfig, trainable: list[str], counters: dict[str, int]
) -> dict[str, Any]:
    """The header an adaptation state is saved with (and :func:`check_state_header` reads)."""
    return {
        "method": config.method,
        "num_classes": config.num_classes,
        "trainable": list(trainable),
        "counters": dict(counters),
        "config": config.to_dict(),
    }


def check_state_header(
    header: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    method: str,
    num_classes: int,
    trainable: list[str],
) -> dict[str, int]:
    """Check that a state file's header fits the adapter or runtime that wants to restore it.

    Returns:
        The counters, as integers.

    Raises:
        ValueError: another method, class count, trainable names, or counter set.
    """
    if header.get("method") != method:
        raise ValueError(
            f"{path}: saved by method {header.get('method')!r}, this one runs {method!r}"
        )
    if header.get("num_classes") != num_classes:
        raise ValueError(
            f"{path}: saved for {header.get('num_classes')} classes, this one has {num_classes}"
        )
    if header.get("trainable") != trainable:
        raise ValueError(
            f"{path}: its trainable parameter names differ from this one's "
            f"({len(header.get('trainable') or [])} vs {len(trainable)} names)"
        )
    counters = header.get("counters", {})
    if not isinstance(counters, dict) or set(counters) != set(COUNTERS):
        raise ValueError(f"{path}: counters {sorted(counters)} != {sorted(COUNTERS)}")
    return {k: int(counters[k]) for k in COUNTERS}


def state_array(
    arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...], path: str | os.PathLike[str]
) -> np.ndarray:
    """One array of a state file, checked: present, of ``shape``, finite floating point.

    Raises:
        ValueError: naming the array and what is wrong with it.
    """
    if key not in arrays:
        raise ValueError(f"{path}: missing array {key!r}")
    a = arrays[key]
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{path}: array {key!r} has shape {a.shape}, expected {tuple(shape)}")
    if a.dtype.kind != "f" or not np.isfinite(a).all():
        raise ValueError(f"{path}: array {key!r} is not finite floating point")
    return a
