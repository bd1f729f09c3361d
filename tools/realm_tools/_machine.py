"""The machine a figure was measured on, as every table of the tools writes it."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name, family/model and widest vector unit (Linux), else Python's name.

    A vendor's model name can cover several generations, and float sums (so trained weights
    and every figure after them) follow the vector unit: the header says which one ran.
    """
    try:
        info: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model", "flags") and key not in info:
                info[key] = value.strip()
            if len(info) == 4:
                break
    except OSError:
        info = {}
    if "model name" not in info:
        return platform.processor() or platform.machine()
    name = info["model name"]
    flags = set(info.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    details = []
    if "cpu family" in info and "model" in info:
        details.append(f"family {info['cpu family']} model {info['model']}")
    if vector:
        details.append(vector)
    return f"{name} ({', '.join(details)})" if details else name
