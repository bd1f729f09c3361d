"""Zero the GPU code of a shared library for every architecture but the ones kept.

onnxruntime-gpu's CUDA provider carries its kernels for sm_75, 80, 86, 89, 90 and 120 in the
``.nv_fatbin`` section. The CUDA driver loads the entry for the device's own architecture;
zeroing the others keeps every header and offset as it was and lets the file compress to a
fraction of the wheel, under what the lent GPU machine's transfers take (docs/device/).
Usage::

    python dev/prune_fatbin.py libonnxruntime_providers_cuda.so 90   # rewrites it in place
"""

from __future__ import annotations

import collections
import struct
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50


def _section(data: bytes, wanted: str) -> tuple[int, int]:
    """(offset, size) of an ELF64 little-endian section, by name."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name = struct.unpack_from("<I", data, base)[0]
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    strings = header(shstrndx)[1]
    for i in range(shnum):
        name, offset, size = header(i)
        end = data.index(b"\0", strings + name)
        if data[strings + name : end].decode() == wanted:
            return offset, size
    raise ValueError(f"no {wanted} section")


def prune(path: Path, keep: set[int]) -> collections.Counter:
    """Zero the payload of every fatbin entry whose architecture is not in ``keep``.

    Returns the bytes per (kind, architecture), kind 1 = PTX, 2 = ELF (cubin).
    """
    data = bytearray(path.read_bytes())
    start, size = _section(data, ".nv_fatbin")
    sizes: collections.Counter = collections.Counter()
    pos = start
    while pos < start + size:
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:  # alignment padding between containers
            pos += 8
            continue
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry < end:
            kind, _, entry_header, padded = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            sizes[(kind, arch)] += padded
            if arch not in keep:
                payload = entry + entry_header
                data[payload : payload + padded] = bytes(padded)
            entry += entry_header + padded
        pos = end
    path.write_bytes(data)
    return sizes


if __name__ == "__main__":
    target, kept = Path(sys.argv[1]), {int(a) for a in sys.argv[2:]}
    for (kind, arch), n in sorted(prune(target, kept).items()):
        state = "kept" if arch in kept else "zeroed"
        print(f"{'PTX' if kind == 1 else 'cubin'} sm_{arch}: {n / 2**20:.0f} MiB {state}")
