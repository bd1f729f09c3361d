"""JSON objects from untrusted bytes: one way to read them, one kind of error out."""

from __future__ import annotations

import json
from typing import Any


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
