"""The machine a figure was measured on, as every table of the tools writes it."""

from __future__ import annotations

from realm_runtime import cpu_name

__all__ = ["cpu_name"]
