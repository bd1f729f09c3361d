"""A generated block inside a hand-written page, between two marker lines."""

from __future__ import annotations

from pathlib import Path


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: written by realm-lab, edits here are lost -->", f"<!-- /{name} -->"


def replace_block(text: str, name: str, block: str, where: str = "the page") -> str:
    """``text`` with the lines between ``name``'s two markers replaced by ``block``.

    Raises:
        ValueError: the markers are missing, repeated or out of order, naming the fix.
    """
    start, end = _markers(name)
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a or text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(
            f"{where} needs one '{start}' line and one '{end}' line after it, where the "
            f"generated {name} belongs: add them, then run the command again"
        )
    return text[: a + len(start)] + "\n" + block.strip("\n") + "\n" + text[b:]


def marked(name: str, block: str) -> str:
    """``block`` between ``name``'s markers, to start a page with."""
    start, end = _markers(name)
    return f"{start}\n{block.strip()}\n{end}\n"


def write_block(path: Path, name: str, block: str) -> None:
    """Replace ``name``'s block in the file at ``path`` (whole file or nothing)."""
    from realm_tools.cli import write_atomic

    write_atomic(path, replace_block(path.read_text(), name, block, where=str(path)))
