"""A benchmark's finished runs, kept on disk as they finish, so that a stopped one goes on.

The long-running streams take hours; a machine that goes away, a closed terminal or one
failing run must not cost the runs already done. Each finished run is appended as one JSON
line (a run cut off mid-line is dropped and run again) with the configuration it ran, so a
changed row runs again and the others are kept; the first line is the benchmark's
fingerprint (data, stream shapes, source weights), and a file written by another benchmark
is refused, never mixed in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from realm_runtime.measure import cpu_name


class RunLog:
    """Finished runs of one benchmark, by label, in a JSON-lines file.

    Args:
        path: the file; created with the fingerprint line when missing.
        fingerprint: what makes runs comparable (JSON-ready); a file holding another
            fingerprint raises ``ValueError`` naming what differs.
    """

    def __init__(self, path: str | os.PathLike[str], fingerprint: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back
        self.done: dict[str, dict[str, Any]] = {}
        self.cpus: dict[str, str] = {}  # the CPU each run ran on, by label
        self.configs: dict[str, Any] = {}  # the configuration each run ran, by label
        self._cpu = cpu_name()  # this process's, written beside each run it adds
        self.dropped = 0  # lines cut off by an interruption
        if self.path.is_file():
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"fingerprint": self.fingerprint})

    def _read(self) -> None:
        text = self.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        try:
            head = json.loads(lines[0])["fingerprint"] if lines else None
        except (json.JSONDecodeError, KeyError, TypeError):
            head = None
        if head is None:
            raise ValueError(
                f"{self.path} is not a benchmark's run log: delete it, or give another --out"
            )
        if head != self.fingerprint:
            differ = sorted(
                k for k in {*head, *self.fingerprint} if head.get(k) != self.fingerprint.get(k)
            )
            raise ValueError(
                f"{self.path} holds runs of another benchmark (its {', '.join(differ)} "
                "differ from this one's): delete it (or pass --fresh) to start over, or give "
                "another --out"
            )
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                self.done[entry["label"]] = entry["run"]
                self.cpus[entry["label"]] = entry.get("cpu", "unknown")
                self.configs[entry["label"]] = entry.get("config")
            except (json.JSONDecodeError, KeyError, TypeError):
                self.dropped += 1
        if not text.endswith("\n"):  # cut off mid-line: the next run starts a line of its own
            with self.path.open("a", encoding="utf-8") as f:
                f.write("\n")

    def _append(self, entry: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, label: str, run: Mapping[str, Any], config: Any = None) -> None:
        """Keep one finished run and the configuration it ran (JSON-ready; None: none).

        Written through to the disk before this returns; a later run of the same label
        replaces an earlier one.
        """
        config = json.loads(json.dumps(config))  # as it reads back
        self._append({"label": label, "cpu": self._cpu, "config": config, "run": run})
        self.done[label] = dict(run)
        self.cpus[label] = self._cpu
        self.configs[label] = config

    def holds(
        self,
        label: str,
        config: Any = None,
        defaults: Mapping[str, Any] | None = None,
        normal: Callable[[Any], Any] | None = None,
    ) -> bool:
        """Whether a run of ``label`` with this configuration (JSON-ready) is kept.

        ``defaults``: field → default of the configuration's type. A field the stored run
        does not name (it was added since) matches when it holds its default: the run ran
        as the default does. ``normal``: what both configurations are compared as (a
        layout that changed since reads as the new one).
        """
        if label not in self.done:
            return False
        stored, now = self.configs.get(label), json.loads(json.dumps(config))
        if normal is not None:
            stored, now = normal(stored), normal(now)
        if stored == now:
            return True
        if not (isinstance(stored, dict) and isinstance(now, dict) and defaults is not None):
            return False
        added = set(now) - set(stored)
        normal = json.loads(json.dumps({k: defaults.get(k) for k in added}))
        return (
            set(stored) <= set(now)
            and all(stored[k] == now[k] for k in stored)
            and all(k in defaults and now[k] == normal[k] for k in added)
        )
