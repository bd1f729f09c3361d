"""Untrusted bytes in: bounded reads, JSON objects, and the error an artifact file raises.

Below the manifest and the signature check, which both read untrusted files this way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class ArtifactError(ValueError):
    """An artifact directory is missing, tampered with, truncated or incompatible."""


def read_bounded(
    path: str | os.PathLike[str], limit: int, error: type[Exception] = ValueError
) -> bytes:
    """A file's bytes, refusing (with ``error``) one larger than ``limit`` before reading it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limit:
            raise error(f"{path}: {size} bytes, more than the {limit} this file can hold")
        with path.open("rb") as handle:
            return handle.read(limit)  # a file that grew since the stat is cut, never read whole
    except OSError as exc:
        raise error(f"{path}: cannot be read: {exc}") from exc


def json_object(raw: bytes, what: str, error: type[Exception]) -> dict[str, Any]:
    """Decode UTF-8 JSON bytes that must hold an object.

    Args:
        raw: the bytes.
        what: the thing being read, for messages (e.g. a path).
        error: the exception class to raise.

    Raises:
        error: not UTF-8, not JSON (or nested deeper than Python's recursion limit), or not
            an object.
    """
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise error(f"{what} is not valid JSON (truncated or edited?): {exc}") from None
    if not isinstance(data, dict):
        raise error(f"{what} does not hold a JSON object")
    return data
