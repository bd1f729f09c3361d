"""RealmRuntime in another interpreter, driven block by block from the bench's process.

``realm bench speed --runtime-python PY`` times the onnx backend on the onnxruntime that PY
has (the newest one, in a torch-free venv). So that its figures are taken the way the
in-process sides' are, interleaved with torch's (a noisy moment falls on every side alike,
and each side finds the caches the other left), the other process is a small server: it
holds runtimes and times the samples it is told to, while this process waits. Timings are
taken there, so the pipe's round trip is not in them.

The server is the worker ``python -m realm_tools.workers.runtime_server``; the protocol is
one JSON object a line each way, every request answered with ``{"ok": ...}`` or
``{"error": traceback}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..workers import RUNTIME_SERVER


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout's packages first on the path.

    For another interpreter (e.g. ``.venv-runtime``, whose own install may be older): the
    workers it starts are modules of this ``realm_tools``, and they import this
    ``realm_runtime``.
    """
    import realm_runtime

    # The folders holding realm_runtime and realm_tools (this file: realm_tools/bench/_external.py).
    roots = (Path(realm_runtime.__file__).resolve().parents[1], Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(map(str, roots)))}


class ExternalRuntime:
    """A server of ``RealmRuntime`` objects (onnx backend) in another interpreter.

    That interpreter imports this checkout's ``realm_runtime`` and ``realm_tools`` (whose
    worker it runs, torch-free). Use as a context manager;
    :meth:`side` opens a runtime there and gives it in the form the bench interleaves.
    """

    def __init__(self, python: str, xs: np.ndarray, threads: int) -> None:
        self._xs_file = tempfile.NamedTemporaryFile(suffix=".npy", delete=False)  # noqa: SIM115
        np.save(self._xs_file, xs)
        self._xs_file.close()
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self._python = python
        self._proc = subprocess.Popen(
            [python, "-m", RUNTIME_SERVER, self._xs_file.name, str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=checkout_env(),
        )
        self._keys = 0
        try:
            about = self.about()
            if about["torch"]:
                raise RuntimeError(f"{python} imported torch while timing the runtime")
        except BaseException:
            self.close()
            raise
        self.label = f"onnx@ORT {about['ort']} (py {about['python']})"

    def request(self, **request: Any) -> Any:
        """Sends one request (``op`` and its fields) and returns the server's answer."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self._stderr.seek(0)
            raise RuntimeError(
                f"{self._python} could not time the runtime:\n{self._stderr.read()[-2000:]}"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self._python} failed on {request['op']}:\n{reply['error']}")
        return reply["ok"]

    def about(self) -> dict[str, Any]:
        """The server's onnxruntime and Python versions, and whether torch got imported."""
        return self.request(op="about")  # type: ignore[no-any-return]

    def side(self, directory: Path, overrides: dict[str, Any], fn: str) -> ExternalSide:
        """A new runtime on ``directory`` (``fn``: ``"predict"`` or ``"adapt"``)."""
        self._keys += 1
        key = str(self._keys)
        self.request(op="open", key=key, dir=str(directory), overrides=overrides)
        return ExternalSide(self, key, fn)

    def close(self) -> None:
        """Stops the server and removes its input file."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # a server that died: nothing to tell it
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
        Path(self._xs_file.name).unlink(missing_ok=True)

    def __enter__(self) -> ExternalRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ExternalSide:
    """One runtime in the server: time it on samples, read its update rate, let it go."""

    def __init__(self, server: ExternalRuntime, key: str, fn: str) -> None:
        self._server, self._key, self._fn = server, key, fn

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        """Milliseconds of each call on ``xs[idx]``, timed in the server."""
        ask = self._server.request
        return np.array(ask(op="run", key=self._key, fn=self._fn, idx=[int(i) for i in idx]))

    def rate(self) -> float:
        """The runtime's update rate so far (updates / samples)."""
        return float(self._server.request(op="rate", key=self._key))

    def close(self) -> None:
        """Frees the runtime in the server (the server holds one runtime per measurement)."""
        self._server.request(op="close", key=self._key)

    def __enter__(self) -> ExternalSide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
