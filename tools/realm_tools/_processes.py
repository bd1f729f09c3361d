"""Child processes the tools start and watch: one command under a timeout, its last JSON line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any


def run_bounded(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a process group of its own, killed whole at the timeout.

    ``subprocess.run`` kills only the worker, then waits for its pipes: a grandchild the export
    started (a compile or session helper) would hold them open and hang the whole run.
    """
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            stdout, stderr = proc.communicate()
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
        except BaseException:  # Ctrl-C: the new session no longer hears the terminal's signal
            kill_group(proc)
            raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, ProcessLookupError):  # no process groups (Windows), or gone
        proc.kill()


def last_json(stdout: str | None) -> dict[str, Any] | None:
    for line in reversed((stdout or "").splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def tail_of(text: str | bytes | None, lines: int = 20) -> str | None:
    if not text:
        return None
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])
