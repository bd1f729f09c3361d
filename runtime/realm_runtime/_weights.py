"""The portable graphs' shared weights file, read once for both sessions where that pays.

``realm export`` stores the step and forward graphs' large initializers once, in
:data:`~realm_runtime._names.SHARED_WEIGHTS`, as ONNX external data; the manifest's
``portable.weights`` section lists, per graph, each tensor's name, offset and shape. Loaded
by path, each ONNX Runtime session reads that file for itself: it keeps what it does not
transform, and frees what it pre-packs or re-lays out. Where the sessions do not pre-pack
(the lean sessions of :mod:`realm_runtime._backend_onnx`), the file is read once here instead,
and every session gets the same tensors through ``SessionOptions.add_initializer``, which
uses the caller's memory in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ._names import FILE_KEY
from ._untrusted import ArtifactError

_F32 = np.dtype("<f4")


class SharedWeights:
    """The tensors of ``portable.weights``: checked at once, read on first use.

    The buffer and the values handed out must outlive every session they were given to:
    ONNX Runtime reads them in place.
    """

    def __init__(self, directory: Path, section: Any) -> None:
        """Check ``section`` (the manifest's ``portable.weights``) against its file.

        Raises:
            ArtifactError: the section is malformed, or its file is missing or too short.
        """
        where = f"{directory}: portable.weights"
        if not isinstance(section, dict) or not isinstance(section.get("graphs"), dict):
            raise ArtifactError(f"{where} must be an object with a 'graphs' table")
        name = section.get(FILE_KEY)
        if not isinstance(name, str) or Path(name).name != name:
            raise ArtifactError(f"{where}.{FILE_KEY} must be a file name, got {name!r}")
        gemm = section.get("gemm_bytes", 0)
        if not isinstance(gemm, int) or isinstance(gemm, bool) or gemm < 0:
            raise ArtifactError(f"{where}.gemm_bytes must be a byte count, got {gemm!r}")
        self.gemm_bytes = gemm  # of the step graph's weights, feeding matrix products
        self._path = directory / name
        try:
            size = self._path.stat().st_size
        except OSError as exc:
            raise ArtifactError(f"{self._path}: cannot read the shared weights: {exc}") from exc
        self._tables: dict[str, list[tuple[str, int, list[int]]]] = {}
        for role, table in section["graphs"].items():
            if not isinstance(table, list):
                raise ArtifactError(f"{where}.graphs.{role} must be a list, got {table!r}")
            self._tables[role] = [self._entry(e, f"{where}.graphs.{role}", size) for e in table]
        # One OrtValue per tensor and shape: graphs may read one tensor's bytes as different
        # shapes (a 1×1 kernel as a matrix); each a view of the one buffer.
        self._values: dict[tuple[str, int, tuple[int, ...]], Any] | None = None

    def _entry(self, entry: Any, where: str, size: int) -> tuple[str, int, list[int]]:
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
        if offset < 0 or offset % 4 or end > size:
            raise ArtifactError(
                f"{self._path}: tensor {name!r} at bytes {offset}..{end} lies outside the "
                f"file's {size} bytes (or is misaligned): truncated or foreign weights"
            )
        return name, offset, shape

    def add_to(self, options: Any, role: str, ort: Any) -> None:
        """Give the session made with ``options`` the tensors its graph ``role`` reads."""
        if self._values is None:
            self._values = {}
            buffer = np.fromfile(self._path, dtype=np.uint8)  # one read, for every session
            for table in self._tables.values():
                for name, offset, shape in table:
                    if (name, offset, tuple(shape)) not in self._values:
                        count = int(np.prod(shape, dtype=np.int64))
                        array = np.frombuffer(buffer, _F32, count, offset).reshape(shape)
                        value = ort.OrtValue.ortvalue_from_numpy(array)
                        self._values[name, offset, tuple(shape)] = value
        for name, offset, shape in self._tables.get(role, []):
            options.add_initializer(name, self._values[name, offset, tuple(shape)])
