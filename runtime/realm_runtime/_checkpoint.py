"""Adaptation-state files: one ``.npz`` of named arrays plus a JSON header, written atomically.

No pickle anywhere: arrays are plain numeric ``.npy`` members, read with
``allow_pickle=False``; the header (format, version, method, counters, names) is UTF-8 JSON
stored as a ``uint8`` member. numpy alone reads it, so a torch-free process can too.

Reading never trusts the file: its size, the number of members and their declared sizes are
bounded before anything is decompressed (a zip bomb is refused by its directory), only stored
and deflated members are read, and whatever else goes wrong in zipfile, zlib or numpy's
``.npy`` parser comes out as a ``ValueError`` that names the file and the problem.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig
from ._json import json_object
from ._manifest import read_bounded

STATE_FORMAT = "realm-tta/adaptation-state"
STATE_VERSION = 2  # 2: SAR's loss EMA, the watch figures and the guardrail counters
READABLE_VERSIONS = (1, 2)  # a version-1 file restores with those at none and zero
_HEADER_KEY = "__header__"
# Bounds of a readable state file. The largest state of the models in docs/ (vit_base: norm
# parameters and momentum) is under 1 MiB; 256 MiB leaves room for any model that adapts only
# its norm layers while keeping a damaged or hostile file from costing unbounded memory.
MAX_STATE_BYTES = 256 * 2**20
MAX_MEMBERS = 100_000
MAX_HEADER_BYTES = 16 * 2**20


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


def read_state(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_STATE_BYTES
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`write_state`.

    Args:
        path: the state file.
        max_bytes: refuse a file, or members that declare, more than this many bytes.

    Returns:
        ``(arrays, header)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a readable state file, or of another format or version; the message
            names the file and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"adaptation state file not found: {path}")
    raw = read_bounded(path, max_bytes)
    try:
        arrays = _read_members(raw, max_bytes)
        header = _header(arrays.pop(_HEADER_KEY, None))
    except _Damaged as exc:
        raise ValueError(f"{path}: {exc}") from None
    except Exception as exc:
        # zipfile, zlib, struct and numpy's .npy parser each have their own exceptions for a
        # damaged file (BadZipFile, zlib.error, NotImplementedError for zip features numpy
        # never writes, ...): to a caller they all mean the same.
        raise ValueError(
            f"{path} is not a readable adaptation state file ({type(exc).__name__}: {exc})"
        ) from exc
    if header.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: format {header.get('format')!r}, expected {STATE_FORMAT!r}")
    if header.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{path}: state format version {header.get('version')!r} is not supported "
            f"(this library reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return arrays, header


class _Damaged(Exception):
    """A state file's structure is wrong in a way this module names itself."""


def _read_members(raw: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise _Damaged(f"{len(members)} members, more than a state file holds")
        declared = sum(m.file_size for m in members)
        if declared > max_bytes:
            raise _Damaged(
                f"its members declare {declared} bytes uncompressed, more than a state file "
                f"holds ({max_bytes}): a damaged directory or a zip bomb"
            )
        arrays: dict[str, np.ndarray] = {}
        for member in members:
            if not member.filename.endswith(".npy") or member.is_dir():
                raise _Damaged(f"member {member.filename!r} is not a .npy array")
            if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise _Damaged(f"member {member.filename!r}: compression {member.compress_type}")
            name = member.filename[: -len(".npy")]
            if name in arrays:
                raise _Damaged(f"member {member.filename!r} appears twice")
            # zipfile stops at the declared size and checks the CRC at the end.
            data = archive.read(member)
            arrays[name] = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    return arrays


def _header(raw: np.ndarray | None) -> dict[str, Any]:
    if raw is None:
        raise _Damaged(f"no {_HEADER_KEY} member: not a realm-tta state file")
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_HEADER_BYTES:
        raise _Damaged(f"its {_HEADER_KEY} member is not a 1-D uint8 array of JSON bytes")
    return json_object(raw.tobytes(), "its header", _Damaged)


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
    "resets_recovery",
    "resets_collapse",
    "drift_clips",
)
# Counters a version-1 state file does not have: they start at zero when it is restored.
_COUNTERS_SINCE_2 = ("resets_recovery", "resets_collapse", "drift_clips")


def state_header(
    config: RealmConfig,
    trainable: list[str],
    counters: dict[str, int],
    artifacts: str | None = None,
) -> dict[str, Any]:
    """The header an adaptation state is saved with (and :func:`check_state_header` reads).

    ``artifacts``: the ``manifest_sha256`` of the artifacts the state belongs to (None for a
    state of the PyTorch reference, which belongs to a model, not to artifacts).
    """
    return {
        "method": config.method,
        "num_classes": config.num_classes,
        "trainable": list(trainable),
        "counters": dict(counters),
        "config": config.to_dict(),
        "artifacts": artifacts,
    }


def check_state_header(
    header: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    method: str,
    num_classes: int,
    trainable: list[str],
    artifacts: str | None = None,
) -> dict[str, int]:
    """Check that a state file's header fits the adapter or runtime that wants to restore it.

    Args:
        header: the header :func:`read_state` returned.
        path: the file, for messages.
        method: the restoring side's method.
        num_classes: its class count.
        trainable: its trainable tensor names, in order.
        artifacts: its artifacts' ``manifest_sha256`` (None: the reference, bound to none). A
            state that names other artifacts is refused; one that names none (the
            reference's) fits any artifacts of the same model and configuration.

    Returns:
        The counters, as integers.

    Raises:
        ValueError: another method, class count, trainable names, artifacts or counter set.
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
    saved_for = header.get("artifacts")
    if saved_for is not None and not isinstance(saved_for, str):
        raise ValueError(f"{path}: header field 'artifacts' is not a digest string")
    if artifacts is not None and saved_for is not None and saved_for != artifacts:
        raise ValueError(
            f"{path}: saved with other artifacts (manifest {saved_for[:16]}…), these are "
            f"{artifacts[:16]}…: a state belongs to the export it adapted"
        )
    counters = header.get("counters", {})
    if header.get("version") == 1 and isinstance(counters, dict):
        counters = {**dict.fromkeys(_COUNTERS_SINCE_2, 0), **counters}
    if not isinstance(counters, dict) or set(counters) != set(COUNTERS):
        got = sorted(map(str, counters)) if isinstance(counters, dict) else type(counters).__name__
        raise ValueError(f"{path}: counters {got} != {sorted(COUNTERS)}")
    bad = [k for k in COUNTERS if type(counters[k]) is not int or counters[k] < 0]
    if bad:
        raise ValueError(f"{path}: counters {bad} are not non-negative integers")
    return {k: counters[k] for k in COUNTERS}


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


def check_alpha_lambda(alpha: float, lam: float, path: str | os.PathLike[str]) -> None:
    """α and λ of a state file lie where an update can put them (SPEC §3's projection).

    Raises:
        ValueError: α outside [ALPHA_MIN, ALPHA_MAX] or λ below LAMBDA_MIN.
    """
    if not ALPHA_MIN <= alpha <= ALPHA_MAX:
        raise ValueError(f"{path}: alpha {alpha} lies outside [{ALPHA_MIN}, {ALPHA_MAX}]")
    if not lam >= LAMBDA_MIN:
        raise ValueError(f"{path}: lam {lam} lies below {LAMBDA_MIN}")


@dataclass(frozen=True)
class WatchArrays:
    """The figures both twins keep alike, as a state file holds them (members ``watch/…``)."""

    seen: int  # finite samples since the last reset
    update_rate: np.ndarray | None  # 0-d EMA of updates per call
    entropy_ema: np.ndarray | None  # 0-d EMA of the prediction entropy
    marginal: np.ndarray | None  # (num_classes,) EMA of the predictions
    loss_ema: np.ndarray | None  # 0-d SAR's loss EMA


_WATCH_ARRAYS = ("update_rate", "entropy_ema", "marginal", "loss_ema")


@dataclass(frozen=True)
class StateArrays:
    """One adaptation state as numpy arrays: a state file's content, for either twin.

    The SDK (torch tensors) and the runtime (ONNX Runtime buffers) convert to and from this;
    the file's layout (``param/<name>``, ``momentum/<name>``, ``alpha``, ``lam``,
    ``alpha_momentum``, ``lam_momentum``, ``ema``) is written and read here only.
    """

    params: dict[str, np.ndarray]  # adapted norm tensor name -> value, in trainable order
    momentum: dict[str, np.ndarray]  # the same names -> SGD momentum buffer
    alpha: np.ndarray  # 0-d; α0 where the method does not learn it
    lam: np.ndarray  # 0-d; λ0 likewise
    alpha_momentum: np.ndarray  # 0-d
    lam_momentum: np.ndarray  # 0-d
    ema: np.ndarray | None  # (num_classes,) EMA of past predictions; None before an update
    counters: dict[str, int]  # COUNTERS -> count
    watch: WatchArrays | None = None  # the shared watch figures (None: none yet)


_SCALARS = ("alpha", "lam", "alpha_momentum", "lam_momentum")


def save_state(
    path: str | os.PathLike[str],
    state: StateArrays,
    config: RealmConfig,
    artifacts: str | None = None,
) -> None:
    """Write ``state`` as a state file, atomically (see :func:`write_state`)."""
    arrays: dict[str, np.ndarray] = {}
    for name, value in state.params.items():
        arrays[f"param/{name}"] = value
        arrays[f"momentum/{name}"] = state.momentum[name]
    for key in _SCALARS:
        arrays[key] = getattr(state, key)
    if state.ema is not None:
        arrays["ema"] = state.ema
    header = state_header(config, list(state.params), state.counters, artifacts)
    if state.watch is not None:
        header["watch_seen"] = state.watch.seen
        for key in _WATCH_ARRAYS:
            value = getattr(state.watch, key)
            if value is not None:
                arrays[f"watch/{key}"] = value
    write_state(path, arrays, header)


def load_state(
    path: str | os.PathLike[str],
    config: RealmConfig,
    shapes: dict[str, tuple[int, ...]],
    artifacts: str | None = None,
    dtype: type[np.floating] | None = None,
) -> StateArrays:
    """Read and check a state file for an adapter or runtime of ``config``.

    Everything is checked before it is returned (header, names, shapes, finite floating
    point, α and λ within their bounds), so a caller that assigns only what this returns never
    half-restores.

    Args:
        path: the state file.
        config: the restoring side's configuration (method, classes).
        shapes: its adapted norm tensors, name -> shape, in trainable order.
        artifacts: its artifacts' ``manifest_sha256`` (None for the reference).
        dtype: cast every array to this (the runtime's float32); None keeps the file's
            (the SDK saves its model's dtype, float64 included).

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming the file and what does not fit.
    """
    arrays, header = read_state(path)
    counters = check_state_header(
        header,
        path,
        method=config.method,
        num_classes=config.num_classes,
        trainable=list(shapes),
        artifacts=artifacts,
    )

    def take(key: str, shape: tuple[int, ...]) -> np.ndarray:
        a = state_array(arrays, key, shape, path)
        return a if dtype is None else a.astype(dtype)

    scalars = {key: take(key, ()) for key in _SCALARS}
    check_alpha_lambda(float(scalars["alpha"]), float(scalars["lam"]), path)
    return StateArrays(
        params={n: take(f"param/{n}", s) for n, s in shapes.items()},
        momentum={n: take(f"momentum/{n}", s) for n, s in shapes.items()},
        ema=take("ema", (config.num_classes,)) if "ema" in arrays else None,
        counters=counters,
        watch=_watch(arrays, header, config.num_classes, path),
        **scalars,
    )


def _watch(
    arrays: dict[str, np.ndarray],
    header: dict[str, Any],
    num_classes: int,
    path: str | os.PathLike[str],
) -> WatchArrays | None:
    # Host figures, float64 in both twins: read as saved (float32), never cast on the way.
    seen = header.get("watch_seen")
    if seen is None:  # a version-1 file, or one saved before any sample
        return None
    if type(seen) is not int or seen < 0:
        raise ValueError(f"{path}: header field 'watch_seen' is not a count")
    shapes = {"marginal": (num_classes,)}
    found = {
        key: state_array(arrays, f"watch/{key}", shapes.get(key, ()), path)
        if f"watch/{key}" in arrays
        else None
        for key in _WATCH_ARRAYS
    }
    return WatchArrays(seen=seen, **found)
