"""The peak memory of this process, as the RSS workers report it."""

from __future__ import annotations


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB.

    VmHWM belongs to this process's memory map; ``ru_maxrss`` would survive fork + exec from
    a torch-sized parent on Linux.
    """
    with open("/proc/self/status", encoding="utf-8") as status:
        hwm = next(line for line in status if line.startswith("VmHWM:"))
    return int(hwm.split()[1]) / 1024
