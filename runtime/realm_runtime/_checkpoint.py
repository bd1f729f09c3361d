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

from ._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig
from ._names import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    ALPHA_NAME,
    COUNTERS,
    COUNTERS_NAME,
    EMA_NAME,
    FIGURE_ENTROPY_EMA,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    INTERVENTIONS,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_NAME,
    KNOWN_UPDATE_RATE,
    KNOWN_WATCH,
    LAMBDA_NAME,
    LEGACY_ALPHA,
    LEGACY_ALPHA_MOMENTUM,
    LEGACY_COUNTERS_KEY,
    LEGACY_EMA,
    LEGACY_LAMBDA,
    LEGACY_LAMBDA_MOMENTUM,
    LEGACY_MARGINAL,
    LEGACY_MOMENTUM_PREFIX,
    LEGACY_PARAM_PREFIX,
    LEGACY_SEEN_KEY,
    LEGACY_WATCH_ARRAYS,
    LEGACY_WATCH_PREFIX,
    MARGINAL_NAME,
    PARAMS_NAME,
    READABLE_STATE_VERSIONS,
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
    if header.get("version") not in READABLE_STATE_VERSIONS:
        raise ValueError(
            f"{path}: state format version {header.get('version')!r} is not supported "
            f"(this library reads versions {', '.join(map(str, READABLE_STATE_VERSIONS))})"
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
    tail = [(ALPHA_NAME, ()), (LAMBDA_NAME, ())] if config.learns_alpha_lambda else []
    return [*shapes.items(), *tail]


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
        The counters of a version-1 or -2 file, as integers (a later file holds them as an
        array: empty then).

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
    if header.get("version", 0) >= 3:
        return {}  # the counters are an array of the file (realm.counters)
    counters = header.get(LEGACY_COUNTERS_KEY, {})
    if header.get("version") == 1 and isinstance(counters, dict):
        counters = {**dict.fromkeys(INTERVENTIONS, 0), **counters}
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
    alpha: np.ndarray  # 0-d; α0 where the method does not learn it
    lam: np.ndarray  # 0-d; λ0 likewise
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
    realm = config.learns_alpha_lambda
    dtype = next(iter(state.params.values())).dtype if state.params else np.dtype(np.float32)

    def flat(tensors: dict[str, np.ndarray], alpha: np.ndarray, lam: np.ndarray) -> np.ndarray:
        parts = [np.asarray(v, dtype).reshape(-1) for v in tensors.values()]
        if realm:
            parts += [np.asarray(alpha, dtype).reshape(1), np.asarray(lam, dtype).reshape(1)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    watch = state.watch or WatchArrays(0, None, None, None, None)
    figures = {
        FIGURE_UPDATE_RATE: watch.update_rate,
        FIGURE_ENTROPY_EMA: watch.entropy_ema,
        FIGURE_LOSS_EMA: watch.loss_ema,
    }
    known = {
        KNOWN_EMA: state.ema is not None,
        KNOWN_UPDATE_RATE: watch.update_rate is not None,
        KNOWN_WATCH: watch.entropy_ema is not None,
        KNOWN_LOSS_EMA: watch.loss_ema is not None,
    }
    zeros = np.zeros(c, np.float32)
    return {
        PARAMS_NAME: flat(state.params, state.alpha, state.lam),
        VELOCITY_NAME: flat(state.momentum, state.alpha_momentum, state.lam_momentum),
        EMA_NAME: zeros if state.ema is None else np.asarray(state.ema),
        MARGINAL_NAME: zeros if watch.marginal is None else watch.marginal.astype(np.float32),
        WATCH_NAME: np.array(
            [0.0 if figures[k] is None else float(figures[k]) for k in ADAPT_WATCH], np.float32
        ),
        KNOWN_NAME: np.array([known[k] for k in ADAPT_KNOWN], np.bool_),
        SEEN_NAME: np.array(watch.seen, np.int64),
        COUNTERS_NAME: np.array([state.counters[k] for k in COUNTERS], np.int64),
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
    counters = check_state_header(
        header,
        path,
        method=config.method,
        num_classes=config.num_classes,
        trainable=list(shapes),
        artifacts=artifacts,
    )
    if header["version"] >= 3:
        return _from_graph_tensors(arrays, config, shapes, path, dtype)

    def take(key: str, shape: tuple[int, ...]) -> np.ndarray:
        a = state_array(arrays, key, shape, path)
        return a if dtype is None else a.astype(dtype)

    alpha, lam = take(LEGACY_ALPHA, ()), take(LEGACY_LAMBDA, ())
    check_alpha_lambda(float(alpha), float(lam), path)
    return StateArrays(
        params={n: take(LEGACY_PARAM_PREFIX + n, s) for n, s in shapes.items()},
        momentum={n: take(LEGACY_MOMENTUM_PREFIX + n, s) for n, s in shapes.items()},
        alpha=alpha,
        lam=lam,
        alpha_momentum=take(LEGACY_ALPHA_MOMENTUM, ()),
        lam_momentum=take(LEGACY_LAMBDA_MOMENTUM, ()),
        ema=take(LEGACY_EMA, (config.num_classes,)) if LEGACY_EMA in arrays else None,
        counters=counters,
        watch=_watch(arrays, header, config.num_classes, path),
    )


def _from_graph_tensors(
    arrays: dict[str, np.ndarray],
    config: RealmConfig,
    shapes: dict[str, tuple[int, ...]],
    path: str | os.PathLike[str],
    dtype: type[np.floating] | None,
) -> StateArrays:
    """A version-3 file's state tensors (the adapt graph's), checked, as ``StateArrays``."""
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
    flags = ints(KNOWN_NAME, (len(ADAPT_KNOWN),), "bool").tolist()
    known = dict(zip(ADAPT_KNOWN, flags, strict=True))
    figures = state_array(arrays, WATCH_NAME, (len(ADAPT_WATCH),), path)
    figure = dict(zip(ADAPT_WATCH, figures.astype(np.float32), strict=True))
    marginal = state_array(arrays, MARGINAL_NAME, (c,), path)
    ema = floats(EMA_NAME, (c,))
    counts = ints(COUNTERS_NAME, (len(COUNTERS),), "integer counts").tolist()
    seen = int(ints(SEEN_NAME, (), "integer counts"))
    f32 = np.float32
    alpha = params.pop(ALPHA_NAME, np.array(config.alpha0, dtype or f32))
    lam = params.pop(LAMBDA_NAME, np.array(config.lambda0, dtype or f32))
    alpha_momentum = momentum.pop(ALPHA_NAME, np.zeros((), dtype or f32))
    lam_momentum = momentum.pop(LAMBDA_NAME, np.zeros((), dtype or f32))
    check_alpha_lambda(float(alpha), float(lam), path)

    def scalar(key: str, flag: str) -> np.ndarray | None:
        return np.array(figure[key], np.float32) if known[flag] else None

    return StateArrays(
        params=params,
        momentum=momentum,
        alpha=alpha,
        lam=lam,
        alpha_momentum=alpha_momentum,
        lam_momentum=lam_momentum,
        ema=ema if known[KNOWN_EMA] else None,
        counters=dict(zip(COUNTERS, counts, strict=True)),
        watch=WatchArrays(
            seen=seen,
            update_rate=scalar(FIGURE_UPDATE_RATE, KNOWN_UPDATE_RATE),
            entropy_ema=scalar(FIGURE_ENTROPY_EMA, KNOWN_WATCH),
            marginal=marginal.astype(np.float32) if known[KNOWN_WATCH] else None,
            loss_ema=scalar(FIGURE_LOSS_EMA, KNOWN_LOSS_EMA),
        ),
    )


_GRAPH_STATE = (
    PARAMS_NAME,
    VELOCITY_NAME,
    EMA_NAME,
    MARGINAL_NAME,
    WATCH_NAME,
    KNOWN_NAME,
    SEEN_NAME,
    COUNTERS_NAME,
    SETTINGS_NAME,  # not restored: each side runs its own configuration (may be absent)
)


def _watch(
    arrays: dict[str, np.ndarray],
    header: dict[str, Any],
    num_classes: int,
    path: str | os.PathLike[str],
) -> WatchArrays | None:
    # Host figures, float64 in both twins: read as saved (float32), never cast on the way.
    seen = header.get(LEGACY_SEEN_KEY)
    if seen is None:  # a version-1 file, or one saved before any sample
        return None
    if type(seen) is not int or seen < 0:
        raise ValueError(f"{path}: header field {LEGACY_SEEN_KEY!r} is not a count")
    shapes = {LEGACY_MARGINAL: (num_classes,)}
    found = {
        key: state_array(arrays, LEGACY_WATCH_PREFIX + key, shapes.get(key, ()), path)
        if LEGACY_WATCH_PREFIX + key in arrays
        else None
        for key in LEGACY_WATCH_ARRAYS
    }
    return WatchArrays(
        seen=seen,
        update_rate=found[FIGURE_UPDATE_RATE],
        entropy_ema=found[FIGURE_ENTROPY_EMA],
        marginal=found[LEGACY_MARGINAL],
        loss_ema=found[FIGURE_LOSS_EMA],
    )
