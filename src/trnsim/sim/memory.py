"""Byte-addressed memories of the functional simulator and the address arithmetic of access patterns.

* ``DenseMemory``: SBUF or PSUM of one core, ``partitions × bytes_per_partition`` bytes, allocated on first
  use; byte ``b`` of partition ``p`` is flat address ``p * bytes_per_partition + b``.
* ``SparseMemory``: a chip's HBM, in 64 KiB pages allocated on first write, so a 192 GB HBM costs only the
  pages a program touches. Unwritten bytes read as zero.

Both remember which bytes were written, so a strict device can fault on reads of uninitialised memory.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern

PAGE_BITS = 16
PAGE = 1 << PAGE_BITS


class Fault(Exception):
    """An illegal access; the executor adds the instruction and turns it into ``SimError``."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


class DenseMemory:
    """An on-chip SRAM of ``partitions`` rows of ``row_bytes``."""

    def __init__(self, name: str, partitions: int, row_bytes: int) -> None:
        self.name, self.partitions, self.row_bytes = name, partitions, row_bytes
        self._data: NDArray[np.uint8] | None = None
        self._written: NDArray[np.bool_] | None = None

    def _arrays(self) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
        if self._data is None or self._written is None:
            self._data = np.zeros(self.partitions * self.row_bytes, dtype=np.uint8)
            self._written = np.zeros(self.partitions * self.row_bytes, dtype=np.bool_)
        return self._data, self._written

    def read(self, addr: NDArray[np.int64]) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
        data, written = self._arrays()
        return data[addr], written[addr]

    def write(self, addr: NDArray[np.int64], values: NDArray[np.uint8]) -> None:
        data, written = self._arrays()
        data[addr] = values
        written[addr] = True


class SparseMemory:
    """A large byte space (HBM) stored as pages allocated on first write."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        self.pages: dict[int, tuple[NDArray[np.uint8], NDArray[np.bool_]]] = {}

    def read(self, addr: NDArray[np.int64]) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
        out = np.zeros(addr.shape, dtype=np.uint8)
        written = np.zeros(addr.shape, dtype=np.bool_)
        page_of = addr >> PAGE_BITS
        for page in np.unique(page_of).tolist():
            stored = self.pages.get(page)
            if stored is None:
                continue
            sel = page_of == page
            out[sel] = stored[0][addr[sel] & (PAGE - 1)]
            written[sel] = stored[1][addr[sel] & (PAGE - 1)]
        return out, written

    def write(self, addr: NDArray[np.int64], values: NDArray[np.uint8]) -> None:
        page_of = addr >> PAGE_BITS
        for page in np.unique(page_of).tolist():
            stored = self.pages.setdefault(page, (np.zeros(PAGE, np.uint8), np.zeros(PAGE, np.bool_)))
            sel = page_of == page
            stored[0][addr[sel] & (PAGE - 1)] = values[sel]
            stored[1][addr[sel] & (PAGE - 1)] = True

    @property
    def allocated_bytes(self) -> int:
        return len(self.pages) * PAGE


Memory = DenseMemory | SparseMemory


def element_offsets(ap: AccessPattern) -> NDArray[np.int64]:
    """Element offset of every element, shape ``ap.shape``: per partition on chip, from row 0 in HBM."""
    free = ap.free_offsets()
    rows = np.arange(ap.partitions, dtype=np.int64).reshape(-1, *([1] * free.ndim))
    if ap.on_chip:
        return np.broadcast_to(free, ap.shape) + 0 * rows
    return (ap.partition_start + rows) * ap.partition_stride + free


def byte_addresses(ap: AccessPattern, mem: Memory, base: int, extent: int) -> NDArray[np.int64]:
    """Flat byte address of every byte of every element, shape ``(*ap.shape, itemsize)``.

    ``base``/``extent`` bound an HBM access (the named tensor's bytes, or all of HBM); on-chip accesses are
    bounded by the partition geometry. Out-of-bounds and misaligned accesses raise ``Fault``."""
    size = ap.itemsize
    if ap.offset % size:
        raise Fault(f"misaligned {ap.dtype} access at byte offset {ap.offset} of {mem.name}",
                    f"align offsets to {size} bytes")
    elem = element_offsets(ap)
    local = ap.offset + elem * size
    lo, hi = int(local.min()), int(local.max()) + size
    if isinstance(mem, DenseMemory):
        p0, p1 = ap.partition_start, ap.partition_start + ap.partitions
        if p0 < 0 or p1 > mem.partitions or lo < 0 or hi > mem.row_bytes:
            raise Fault(f"out-of-bounds {mem.name} access: partitions {p0}..{p1 - 1}, bytes {lo}..{hi - 1} "
                        f"(memory has {mem.partitions} × {mem.row_bytes})", "shrink the tile or fix its offset")
        rows = np.arange(p0, p1, dtype=np.int64).reshape(-1, *([1] * (local.ndim - 1)))
        flat = rows * mem.row_bytes + local
    else:
        if lo < 0 or hi > extent:
            raise Fault(f"out-of-bounds {mem.name} access: bytes {base + lo:#x}..{base + hi - 1:#x} outside "
                        f"{base:#x}..{base + extent - 1:#x}", "check rows, offset and strides against the tensor")
        flat = base + local
    return flat[..., None] + np.arange(size, dtype=np.int64)
