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
import math
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._config import RealmConfig
from ._graph_state import WATCH_STATE, WatchArrays, read_watch_tensors, watch_tensors
from ._names import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    ALPHA_NAME,
    COUNTERS,
    COUNTERS_NAME,
    EMA_NAME,
    KNOWN_NAME,
    LAMBDA_NAME,
    MARGINAL_NAME,
    PARAMS_NAME,
    SEEN_NAME,
    SETTINGS_NAME,
    STATE_FORMAT,
    STATE_HEADER_MEMBER,
    STATE_VERSION,
    VELOCITY_NAME,
    WATCH_NAME,
)
from ._portable_io import adapt_settings
from ._untrusted import json_object, read_bounded
from .methods.realm import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN

# Bounds of a readable state file: far above any model that adapts only its norm layers (the
# largest state of the models in docs/ is a few hundredths of it), while keeping a damaged or
# hostile file from costing unbounded memory.
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
    if STATE_HEADER_MEMBER in members:
        raise ValueError(f"array name {STATE_HEADER_MEMBER!r} is reserved")
    header_bytes = json.dumps(full_header).encode("utf-8")
    members[STATE_HEADER_MEMBER] = np.frombuffer(header_bytes, dtype=np.uint8)
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
        header = _header(arrays.pop(STATE_HEADER_MEMBER, None))
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
    if header.get("version") != STATE_VERSION:
        raise ValueError(
            f"{path}: state format version {header.get('version')!r} is not this library's "
            f"({STATE_VERSION}): save the state with this realm-tta, or start from the export"
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
        raise _Damaged(f"no {STATE_HEADER_MEMBER} member: not a realm-tta state file")
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_HEADER_BYTES:
        raise _Damaged(f"its {STATE_HEADER_MEMBER} member is not a 1-D uint8 array of JSON bytes")
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


def state_header(
    config: RealmConfig,
    shapes: dict[str, tuple[int, ...]],
    artifacts: str | None = None,
) -> dict[str, Any]:
    """The header an adaptation state is saved with (and :func:`check_state_header` reads).

    Args:
        config: the saving side's configuration.
        shapes: its adapted norm tensors, name -> shape, in trainable order.
        artifacts: the ``manifest_sha256`` of the artifacts the state belongs to (None for a
            state of the PyTorch reference, which belongs to a model, not to artifacts).

    ``layout`` says where each tensor lies in ``realm.params`` (the manifest's portable
    layout), so that a reader without the manifest can split it.
    """
    return {
        "method": config.method,
        "num_classes": config.num_classes,
        "trainable": list(shapes),
        "layout": [{"name": n, "shape": list(s)} for n, s in _layout(config, shapes)],
        "config": config.to_dict(),
        "artifacts": artifacts,
    }


def _layout(
    config: RealmConfig, shapes: dict[str, tuple[int, ...]]
) -> list[tuple[str, tuple[int, ...]]]:
    """The tensors of ``realm.params`` in order: the norm tensors, then α and λ (REALM)."""
    tail = [(ALPHA_NAME, ()), (LAMBDA_NAME, ())] if config.rules.learns_alpha_lambda else []
    return [*shapes.items(), *tail]


def check_state_header(
    header: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    method: str,
    num_classes: int,
    trainable: list[str],
    artifacts: str | None = None,
) -> None:
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

    Raises:
        ValueError: another method, class count, trainable names or artifacts.
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
class StateArrays:
    """One adaptation state as numpy arrays, by tensor name: what a state file holds.

    The SDK (torch tensors) and the runtime (ONNX Runtime buffers) convert to and from this.
    The file itself holds the adapt graph's state tensors (SPEC §11: ``realm.params`` and
    ``realm.velocity`` flat in the manifest's ``portable.layout`` order with α and λ last,
    ``realm.ema``, ``realm.marginal``, ``realm.watch``, ``realm.known``, ``realm.seen``,
    ``realm.counters``, ``realm.settings``) beside a JSON ``__header__`` member;
    :func:`graph_tensors` and :func:`load_state` convert between the two, here only.
    """

    params: dict[str, np.ndarray]  # adapted norm tensor name -> value, in trainable order
    momentum: dict[str, np.ndarray]  # the same names -> SGD momentum buffer
    alpha: np.ndarray  # 0-d; 0 where the method does not learn it
    lam: np.ndarray  # 0-d; 0 likewise
    alpha_momentum: np.ndarray  # 0-d
    lam_momentum: np.ndarray  # 0-d
    ema: np.ndarray | None  # (num_classes,) EMA of past predictions; None before an update
    counters: dict[str, int]  # COUNTERS -> count
    watch: WatchArrays | None = None  # the shared watch figures (None: none yet)


def save_state(
    path: str | os.PathLike[str],
    state: StateArrays,
    config: RealmConfig,
    artifacts: str | None = None,
) -> None:
    """Write ``state`` as a state file of the current version, atomically (:func:`write_state`).

    Its arrays are exactly the adapt graph's state tensors, under the graph's input names
    (SPEC §11): a client of the graph saves by writing its state, and resumes by reading it.
    """
    shapes = {n: tuple(v.shape) for n, v in state.params.items()}
    write_state(path, graph_tensors(state, config), state_header(config, shapes, artifacts))


def graph_tensors(state: StateArrays, config: RealmConfig) -> dict[str, np.ndarray]:
    """The adapt graph's state tensors of ``state``, by input name (SPEC §11).

    The parameter vectors keep the twin's dtype (the SDK may adapt a float64 model).
    """
    c = config.num_classes
    realm = config.rules.learns_alpha_lambda
    dtype = next(iter(state.params.values())).dtype if state.params else np.dtype(np.float32)

    def flat(tensors: dict[str, np.ndarray], alpha: np.ndarray, lam: np.ndarray) -> np.ndarray:
        parts = [np.asarray(v, dtype).reshape(-1) for v in tensors.values()]
        if realm:
            parts += [np.asarray(alpha, dtype).reshape(1), np.asarray(lam, dtype).reshape(1)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    watch = state.watch or WatchArrays(0, None, None, None, None)
    return {
        PARAMS_NAME: flat(state.params, state.alpha, state.lam),
        VELOCITY_NAME: flat(state.momentum, state.alpha_momentum, state.lam_momentum),
        **watch_tensors(state.ema, watch, state.counters, c),
        SETTINGS_NAME: adapt_settings(config),  # what ran; a restoring side keeps its own
    }


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
    check_state_header(
        header,
        path,
        method=config.method,
        num_classes=config.num_classes,
        trainable=list(shapes),
        artifacts=artifacts,
    )
    return _from_graph_tensors(arrays, config, shapes, path, dtype)


def _from_graph_tensors(
    arrays: dict[str, np.ndarray],
    config: RealmConfig,
    shapes: dict[str, tuple[int, ...]],
    path: str | os.PathLike[str],
    dtype: type[np.floating] | None,
) -> StateArrays:
    """A state file's tensors (the adapt graph's), checked, as ``StateArrays``."""
    c = config.num_classes
    layout = _layout(config, shapes)
    size = sum(math.prod(s) for _, s in layout)
    extra = sorted(set(arrays) - set(_GRAPH_STATE))
    if extra:
        raise ValueError(f"{path}: arrays {extra} are not adapt-graph state tensors")

    def floats(key: str, shape: tuple[int, ...]) -> np.ndarray:
        a = state_array(arrays, key, shape, path)
        return a if dtype is None else a.astype(dtype)

    def ints(key: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
        a = arrays.get(key)
        if a is None:
            raise ValueError(f"{path}: missing array {key!r}")
        if a.shape != shape or a.dtype.kind != kind[0]:
            raise ValueError(f"{path}: array {key!r} is not {kind} of shape {shape}")
        if kind == "integer counts" and (a < 0).any():
            raise ValueError(f"{path}: array {key!r} holds negative counts")
        return a

    def split(flat: np.ndarray) -> dict[str, np.ndarray]:
        out, start = {}, 0
        for name, shape in layout:
            n = math.prod(shape)
            out[name] = flat[start : start + n].reshape(shape).copy()
            start += n
        return out

    params, momentum = split(floats(PARAMS_NAME, (size,))), split(floats(VELOCITY_NAME, (size,)))
    ints(KNOWN_NAME, (len(ADAPT_KNOWN),), "bool")
    ints(COUNTERS_NAME, (len(COUNTERS),), "integer counts")
    ints(SEEN_NAME, (), "integer counts")
    state_array(arrays, WATCH_NAME, (len(ADAPT_WATCH),), path)
    state_array(arrays, MARGINAL_NAME, (c,), path)
    ema, watch, counters = read_watch_tensors({**arrays, EMA_NAME: floats(EMA_NAME, (c,))})
    f32 = np.float32
    zero = np.zeros((), dtype or f32)  # α, λ of a method that does not learn them: never read
    alpha, lam = params.pop(ALPHA_NAME, zero), params.pop(LAMBDA_NAME, zero.copy())
    alpha_momentum = momentum.pop(ALPHA_NAME, zero.copy())
    lam_momentum = momentum.pop(LAMBDA_NAME, zero.copy())
    if config.rules.learns_alpha_lambda:
        check_alpha_lambda(float(alpha), float(lam), path)
    return StateArrays(
        params=params,
        momentum=momentum,
        alpha=alpha,
        lam=lam,
        alpha_momentum=alpha_momentum,
        lam_momentum=lam_momentum,
        ema=ema,
        counters=counters,
        watch=watch,
    )


# Not restored: each side runs its own configuration (may be absent).
_GRAPH_STATE = (PARAMS_NAME, VELOCITY_NAME, *WATCH_STATE, SETTINGS_NAME)
