"""The one place that imports ONNX Runtime (and its training API, without needing torch).

``onnxruntime/training/__init__.py`` (1.19.2) imports its ``amp`` and ``optim`` parts, which
import torch, although torch is no dependency of the package and the on-device ``api`` part
(CheckpointState, Module, Optimizer) uses only ``onnxruntime.capi``. Where torch is not
installed, that ``__init__`` fails, so ``import onnxruntime.training.api`` fails too. This
module therefore registers an empty package object for ``onnxruntime.training`` (unless a
real one is already imported), with the real package directory as its search path, and
imports ``onnxruntime.training.api`` from there: the submodules load normally and the
package ``__init__`` never runs. ``import onnxruntime.training.artifacts`` still works after.

Where torch *is* installed, ``import onnxruntime`` of the training build runs an import-time
check (``capi/onnxruntime_validation.validate_build_package_info``) that imports
``onnxruntime.training.ortmodule`` (ORTModule, the torch front end this package never uses),
which imports ``torch.utils.cpp_extension``, which logs a warning about ``CUDA_HOME`` on a
machine with a CUDA toolkit and no CUDA runtime, in the middle of whatever the caller prints.
:func:`onnxruntime_module` therefore imports onnxruntime with ``ortmodule`` unavailable: the
check then finds no ORTModule, as on a build without it, and says nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_INSTALL_HINT = (
    "the ort-training backend needs onnxruntime-training 1.19.2 (Python 3.11): pip install "
    "'realm-tta[runtime-training]' (CPU) or 'realm-tta[runtime-training-cuda]' (CUDA 11.8), "
    "and not the plain 'onnxruntime' package beside it (both provide the onnxruntime module); "
    "the portable step graph (backend='onnx') runs on any onnxruntime ≥ 1.19"
)


def onnxruntime_module() -> ModuleType:
    """``import onnxruntime``, with an install hint when it is missing."""
    try:
        if "onnxruntime" not in sys.modules:
            _import_without_ortmodule()
        import onnxruntime
    except ImportError as exc:
        raise ImportError(
            "onnxruntime is not installed: pip install 'realm-tta[runtime]' (current "
            "onnxruntime, CPU), 'realm-tta[runtime-cuda]' (onnxruntime-gpu) or "
            "'realm-tta[runtime-training]' (onnxruntime-training 1.19.2, Python 3.11)"
        ) from exc
    return onnxruntime


_ORTMODULE = "onnxruntime.training.ortmodule"


def _import_without_ortmodule() -> None:
    """``import onnxruntime`` with ORTModule unavailable to its import-time check."""
    blocked = _ORTMODULE not in sys.modules
    if blocked:
        sys.modules[_ORTMODULE] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        _import_on_a_bare_stack("onnxruntime")
    finally:
        if blocked and sys.modules.get(_ORTMODULE, 0) is None:
            del sys.modules[_ORTMODULE]  # whoever wants ORTModule later imports it as usual


def _import_on_a_bare_stack(name: str) -> None:
    """Import ``name`` in a thread of its own, with no caller's frames above it.

    onnxruntime-training's import-time check imports ``training.ortmodule`` where torch is
    installed, and that keeps a wrapped exception for good, whose traceback holds every frame
    on the importing stack: the first ``RealmRuntime`` made in a process (the caller of the
    first import) was never freed, its sessions living on until interpreter shutdown.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"import {name}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def training_api() -> ModuleType:
    """``onnxruntime.training.api``, imported without running the package ``__init__``.

    Raises:
        ImportError: onnxruntime has no training API (plain onnxruntime, or another version).
    """
    ort = onnxruntime_module()
    if "onnxruntime.training" not in sys.modules:
        spec = importlib.util.find_spec("onnxruntime.training")
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"onnxruntime {ort.__version__} has no training API: {_INSTALL_HINT}")
        package = importlib.util.module_from_spec(spec)  # created, deliberately not executed
        sys.modules["onnxruntime.training"] = package
        ort.training = package  # type: ignore[attr-defined]
    try:
        return importlib.import_module("onnxruntime.training.api")
    except ImportError as exc:
        raise ImportError(
            f"cannot import onnxruntime.training.api ({exc}): {_INSTALL_HINT}"
        ) from exc


# Session configuration entries set unless the caller's ``session_config`` names them.
#
# "session.force_spinning_stop": ONNX Runtime's intra-op workers go on spinning after a Run
# returns, waiting for more work. A runtime holds two sessions (forward and step graph, or
# ORT-training's train and eval sessions) that run one after the other, and it lives in an app
# that has other work for the cores: the spinning workers of one session then take the cores
# from the next, and two sessions run in turn each lose a third or more of their speed (one
# session alone is unchanged: docs/BENCHMARKS.md, "ONNX Runtime's workers spinning after a
# call").
# Workers still spin inside a Run, where the next parallel section follows within microseconds.
DEFAULT_SESSION_CONFIG: dict[str, str] = {"session.force_spinning_stop": "1"}


# The onnx backend's sessions allocate from one CPU arena registered in ONNX Runtime's process
# environment, not from an arena each: the forward and the step session (and several
# runtimes) reuse the same blocks, which lowers the peak at no cost in speed (docs/BENCHMARKS.md,
# "How much memory does the runtime need?"). The arena outlives the runtimes: its blocks are
# reused, not returned to the operating system, until the process ends.
SHARED_ARENA_ENTRY = "session.use_env_allocators"

# Two entries the runtime reads itself and ONNX Runtime never sees, for the SessionOptions
# switches ORT keeps outside its configuration entries ("1" on, "0" off):
# - the memory-pattern planner: one block per session holding every activation of a run;
MEMORY_PATTERN_ENTRY = "realm.memory_pattern"
# - the CPU arena: pooled blocks that are reused, never returned to the operating system.
CPU_ARENA_ENTRY = "realm.cpu_arena"
RUNTIME_ENTRIES = (MEMORY_PATTERN_ENTRY, CPU_ARENA_ENTRY)
_arena_lock = threading.Lock()
_arena_registered = False


def share_cpu_arena(ort: ModuleType) -> None:
    """Register one CPU arena in ONNX Runtime's environment, once per process.

    Sessions whose configuration sets :data:`SHARED_ARENA_ENTRY` to ``"1"`` allocate from it.
    Where the application registered an arena already (ORT 1.19 refuses a second one), the
    sessions share the application's.
    """
    global _arena_registered
    with _arena_lock:
        if _arena_registered:
            return
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        # No limit; chunks of the size asked for, not rounded up to powers of two (ORT's
        # default), which held tens of MB never used (docs/BENCHMARKS.md, "memory").
        try:
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
        except RuntimeError as exc:
            if "already been registered" not in str(exc):
                raise
        _arena_registered = True


def session_options(
    ort: ModuleType,
    threads: int | None,
    *,
    quiet: bool = False,
    config: dict[str, str] | None = None,
) -> Any:
    """``SessionOptions`` with ``threads`` intra-op threads (None: ORT's default, all cores).

    Args:
        ort: the onnxruntime module.
        threads: intra-op threads; inter-op stays at 1 (one sample, one graph at a time).
        quiet: log errors only (graph inputs with default values are meant, not a warning).
        config: session configuration entries (``add_session_config_entry``), on top of
            :data:`DEFAULT_SESSION_CONFIG` (an entry named in both takes ``config``'s value);
            :data:`RUNTIME_ENTRIES` set the SessionOptions switches of the same name.
    """
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if quiet:
        options.log_severity_level = 3
    entries = DEFAULT_SESSION_CONFIG | (config or {})
    if MEMORY_PATTERN_ENTRY in entries:
        options.enable_mem_pattern = entries[MEMORY_PATTERN_ENTRY] == "1"
    if CPU_ARENA_ENTRY in entries:
        options.enable_cpu_mem_arena = entries[CPU_ARENA_ENTRY] == "1"
    for key, value in entries.items():
        if key not in RUNTIME_ENTRIES:
            options.add_session_config_entry(key, value)
    return options
