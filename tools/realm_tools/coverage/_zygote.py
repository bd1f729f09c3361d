"""Fresh workers without fresh imports: a process that imports once and forks one child a model.

A coverage worker spends more time importing (torch, timm and torchvision's dynamo, the
exporter) than many exports take. The zygote imports them once and runs no computation
(no thread pool, no session), then forks a child per model: the child starts with the
modules loaded and nothing else shared, runs the worker's ``main`` as a fresh process would,
and is killed with its process group at the timeout. A crash or a leak stays in the child.
Where ``fork`` is missing (Windows), the caller starts workers the plain way.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

# Imported once in the zygote: what every worker imports, and nothing that starts threads.
PRELOAD = (
    "torch",
    "timm",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "torch.onnx",
    "realm_runtime",
    "realm_sdk",
    "realm_export",
)
_SLACK = 120.0  # seconds past a child's timeout before the zygote itself counts as hung


def serve(main: Callable[[Sequence[str]], int], preload: Sequence[str] = PRELOAD) -> int:
    """The zygote's loop: one JSON request a line on stdin, one JSON reply a line on stdout.

    A request is ``{"argv": [...], "timeout": seconds}``; the reply holds the child's
    ``returncode``, its ``stdout`` (the worker's row) and ``stderr``, and ``timed_out``.

    Args:
        main: the worker's entry point, run in each child with the request's ``argv``.
        preload: modules imported once, before the first request.
    """
    import importlib

    for name in preload:
        importlib.import_module(name)
    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        reply = _fork_one(main, request["argv"], float(request["timeout"]))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


def _fork_one(main: Callable[[Sequence[str]], int], argv: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="realm-zygote-") as scratch:
        out_path, err_path = os.path.join(scratch, "out"), os.path.join(scratch, "err")
        pid = os.fork()
        if pid == 0:  # the child: a worker process with its imports done
            code = 1
            try:
                os.setsid()  # its own group: the timeout kills what it starts too
                out = os.open(out_path, os.O_WRONLY | os.O_CREAT, 0o600)
                err = os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o600)
                os.dup2(out, 1)
                os.dup2(err, 2)
                sys.stdin.close()
                code = main(argv)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status, timed_out = _wait(pid, timeout)
        with open(out_path, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err_path, encoding="utf-8", errors="replace") as f:
            stderr = f.read()[-65536:]
    return {
        "returncode": os.waitstatus_to_exitcode(status) if status is not None else -9,
        "stdout": stdout,
        "stderr": stderr,
        "timed_out": timed_out,
    }


def _wait(pid: int, timeout: float) -> tuple[int | None, bool]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return status, True


class Zygote:
    """The parent's handle on one zygote process (``python -m <module> --serve``)."""

    def __init__(self, module: str) -> None:
        self._command = [sys.executable, "-m", module, "--serve"]
        self._proc: subprocess.Popen[str] | None = None

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """The worker's ``main(argv)`` in a forked child, as ``run_bounded`` would return it.

        Raises:
            subprocess.TimeoutExpired: the child ran past ``timeout`` and was killed.
        """
        proc = self._started()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"argv": argv, "timeout": timeout}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout + _SLACK)
        line = proc.stdout.readline() if ready else ""
        if not line:  # the zygote died or hung: a fresh one for the next model
            self.close()
            raise subprocess.TimeoutExpired(argv, timeout, "", "the zygote gave no reply")
        reply = json.loads(line)
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, reply["stdout"], reply["stderr"])
        return subprocess.CompletedProcess(
            argv, reply["returncode"], reply["stdout"], reply["stderr"]
        )

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        return self._proc

    def close(self) -> None:
        """Stop the zygote (its children are gone by then)."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None


def can_fork() -> bool:
    """Whether this platform forks (the zygote's way); else workers start the plain way."""
    return hasattr(os, "fork") and hasattr(os, "setsid")
