"""The portable graphs' shared weights file, read once for both sessions.

``realm export`` stores the step and forward graphs' large initializers once, in
:data:`~realm_runtime._portable_io.SHARED_WEIGHTS`, as ONNX external data; the manifest's
``portable.weights`` section lists, per graph, each tensor's name, offset and shape. Loaded
by path, each ONNX Runtime session would read (or map) that file for itself and keep its own
copy. Here it is read once into one buffer, and every session gets the same tensors through
``SessionOptions.add_initializer``, which uses the caller's memory instead of copying it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ._manifest import ArtifactError

_F32 = np.dtype("<f4")


class SharedWeights:
    """The tensors of ``portable.weights``, as ``OrtValue``s over one buffer.

    The buffer and the values must outlive every session they were given to: ONNX Runtime
    reads them in place.
    """

    def __init__(self, directory: Path, section: Any, ort: Any) -> None:
        """Read the weights file that ``section`` (the manifest's ``portable.weights``) names.

        Raises:
            ArtifactError: the section is malformed, or the file is missing or too short.
        """
        where = f"{directory}: portable.weights"
        if not isinstance(section, dict) or not isinstance(section.get("graphs"), dict):
            raise ArtifactError(f"{where} must be an object with a 'graphs' table")
        name = section.get("file")
        if not isinstance(name, str) or Path(name).name != name:
            raise ArtifactError(f"{where}.file must be a file name, got {name!r}")
        path = directory / name
        try:
            self._buffer = np.fromfile(path, dtype=np.uint8)
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot read the shared weights: {exc}") from exc
        share = section.get("gemm_share", 0.0)
        self.gemm_share = float(share) if isinstance(share, (int, float)) else 0.0
        values: dict[tuple[str, int], Any] = {}  # one OrtValue per stored tensor
        self._graphs: dict[str, list[tuple[str, Any]]] = {}
        for role, table in section["graphs"].items():
            entries = []
            for entry in table if isinstance(table, list) else [None]:
                tensor, offset, shape = self._entry(entry, f"{where}.graphs.{role}", path)
                key = (tensor, offset)
                if key not in values:
                    count = int(np.prod(shape, dtype=np.int64))
                    array = np.frombuffer(self._buffer, _F32, count, offset).reshape(shape)
                    values[key] = ort.OrtValue.ortvalue_from_numpy(array)
                entries.append((tensor, values[key]))
            self._graphs[role] = entries

    def _entry(self, entry: Any, where: str, path: Path) -> tuple[str, int, list[int]]:
        ok = (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and isinstance(entry[1], int)
            and isinstance(entry[2], list)
            and all(isinstance(d, int) and d >= 0 for d in entry[2])
        )
        if not ok:
            raise ArtifactError(f"{where}: expected [name, offset, shape] entries, got {entry!r}")
        name, offset, shape = entry
        end = offset + 4 * int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset % 4 or end > self._buffer.size:
            raise ArtifactError(
                f"{path}: tensor {name!r} at bytes {offset}..{end} lies outside the file's "
                f"{self._buffer.size} bytes (or is misaligned): truncated or foreign weights"
            )
        return name, offset, shape

    def add_to(self, options: Any, role: str) -> None:
        """Give the session made with ``options`` the tensors its graph ``role`` reads."""
        for name, value in self._graphs.get(role, []):
            options.add_initializer(name, value)
