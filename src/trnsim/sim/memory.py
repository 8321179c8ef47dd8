"""Byte-addressed memories of the functional simulator, and access patterns as strided numpy views.

* ``DenseMemory``: SBUF or PSUM of one core, ``partitions × bytes_per_partition`` bytes, allocated on first
  use; byte ``b`` of partition ``p`` is flat address ``p * row_bytes + b``.
* ``SparseMemory``: a chip's HBM as *segments*: contiguous byte ranges created when a program declares a
  tensor (``reserve``) or when an access reaches bytes no segment covers. Segments are ``np.zeros`` arrays,
  whose pages the OS provides on first touch, so a 192 GB HBM costs only what programs actually touch.

An access pattern is an affine map from its index space to bytes (``isa.ap``), so every access is a
*strided view* of one contiguous buffer: ``np.ndarray(shape, dtype, buffer, offset, strides)``. Reads copy
the view, writes assign into it: no per-element address arrays. Both memories can remember which bytes were
written (a strict device marks them), so a strict device can fault on reads of uninitialised memory.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern

RAW: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_CODES = {size: np.dtype(t).newbyteorder("<") for size, t in RAW.items()}  # little-endian codes, per itemsize
SEGMENT_ALIGN = 1 << 12
REGIONS_KEPT = 1 << 16  # checked on-chip patterns a memory remembers (then it starts over)


class Fault(Exception):
    """An illegal access; the executor adds the instruction and turns it into ``SimError``."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Region:
    """Where an access lands: a contiguous buffer, the byte of element [0, 0, …] in it, byte strides."""

    data: NDArray[np.uint8]
    written: NDArray[np.bool_] | None  # None: the memory keeps no flags (``flags=False``)
    start: int
    strides: tuple[int, ...]  # bytes, one per AP dimension (partition first)
    base: int = 0  # the memory address of data[0] (an HBM segment's base)

    def address(self, index: tuple[int, ...]) -> int:
        """Memory address of the element at ``index``."""
        return self.base + self.start + sum(i * s for i, s in zip(index, self.strides, strict=True))

    def view(self, ap: AccessPattern) -> NDArray[Any]:
        """The AP's elements as raw little-endian codes (a view: writes go to memory)."""
        return np.ndarray(ap.shape, dtype=_CODES[ap.itemsize], buffer=self.data, offset=self.start,
                          strides=self.strides)

    def written_view(self, ap: AccessPattern) -> NDArray[np.bool_]:
        """One flag per byte of every element, shape ``(*ap.shape, itemsize)``."""
        assert self.written is not None, "only a memory created with flags=True has written flags"
        return np.ndarray((*ap.shape, ap.itemsize), dtype=np.bool_, buffer=self.written, offset=self.start,
                          strides=(*self.strides, 1))

    def mark_written(self, ap: AccessPattern) -> None:
        """Flag every byte of the AP's elements written (those of adjacent elements as one run)."""
        assert self.written is not None, "only a memory created with flags=True has written flags"
        shape, strides = (*ap.shape, ap.itemsize), (*self.strides, 1)
        if strides[-2] == ap.itemsize:
            shape, strides = (*shape[:-2], shape[-2] * shape[-1]), (*strides[:-2], 1)
        np.ndarray(shape, dtype=np.bool_, buffer=self.written, offset=self.start, strides=strides)[...] = True


class DenseMemory:
    """An on-chip SRAM of ``partitions`` rows of ``row_bytes``; ``flags``: keep per-byte written flags."""

    def __init__(self, name: str, partitions: int, row_bytes: int, *, flags: bool = True) -> None:
        self.name, self.partitions, self.row_bytes, self.flags = name, partitions, row_bytes, flags
        self._data: NDArray[np.uint8] | None = None
        self._written: NDArray[np.bool_] | None = None
        self._regions: dict[AccessPattern, Region] = {}  # checked patterns (a program reuses its few patterns)

    def _arrays(self) -> tuple[NDArray[np.uint8], NDArray[np.bool_] | None]:
        if self._data is None:
            self._data = np.zeros(self.partitions * self.row_bytes, dtype=np.uint8)
            if self.flags:
                self._written = np.zeros(self.partitions * self.row_bytes, dtype=np.bool_)
        return self._data, self._written

    def region(self, ap: AccessPattern) -> Region:
        hit = self._regions.get(ap)
        if hit is not None:
            return hit
        size = ap.itemsize
        lo, hi = ap.byte_span()
        p0, p1 = ap.partition_start, ap.partition_start + ap.partitions
        if p0 < 0 or p1 > self.partitions or lo < 0 or hi > self.row_bytes:
            raise Fault(f"out-of-bounds {self.name} access: partitions {p0}..{p1 - 1}, bytes {lo}..{hi - 1} "
                        f"(memory has {self.partitions} × {self.row_bytes})", "shrink the tile or fix its offset")
        data, written = self._arrays()
        strides = (self.row_bytes, *(s * size for s, _ in ap.free))
        if len(self._regions) >= REGIONS_KEPT:
            self._regions.clear()
        reg = self._regions[ap] = Region(data, written, p0 * self.row_bytes + ap.offset, strides)
        return reg

    def describe(self, addr: int) -> str:
        return f"partition {addr // self.row_bytes}, byte {addr % self.row_bytes}"


@dataclass
class Segment:
    base: int
    data: NDArray[np.uint8]
    written: NDArray[np.bool_] | None

    @property
    def end(self) -> int:
        return self.base + self.data.size


class SparseMemory:
    """A large byte space (HBM) stored as lazily committed segments; ``flags``: keep per-byte written flags."""

    def __init__(self, name: str, size: int, *, flags: bool = True) -> None:
        self.name, self.size, self.flags = name, size, flags
        self._segments: list[Segment] = []  # sorted by base, disjoint

    def reserve(self, lo: int, hi: int) -> Segment:
        """The segment covering bytes [lo, hi), creating or merging segments as needed."""
        i = bisect.bisect_right([s.base for s in self._segments], lo) - 1
        if i >= 0 and self._segments[i].base <= lo and hi <= self._segments[i].end:
            return self._segments[i]
        lo_a = lo // SEGMENT_ALIGN * SEGMENT_ALIGN
        hi_a = min(-(-hi // SEGMENT_ALIGN) * SEGMENT_ALIGN, self.size)
        overlapping = [s for s in self._segments if s.base < hi_a and s.end > lo_a]
        if overlapping:
            lo_a, hi_a = min(lo_a, overlapping[0].base), max(hi_a, overlapping[-1].end)
        merged = Segment(lo_a, np.zeros(hi_a - lo_a, np.uint8),
                         np.zeros(hi_a - lo_a, np.bool_) if self.flags else None)
        for s in overlapping:
            merged.data[s.base - lo_a : s.end - lo_a] = s.data
            if merged.written is not None and s.written is not None:
                merged.written[s.base - lo_a : s.end - lo_a] = s.written
        self._segments = sorted([s for s in self._segments if s not in overlapping] + [merged],
                                key=lambda s: s.base)
        return merged

    def region(self, ap: AccessPattern, base: int, extent: int) -> Region:
        """``base``/``extent`` bound the access (the named tensor's bytes, or all of HBM)."""
        size = ap.itemsize
        lo, hi = ap.byte_span()
        if lo < 0 or hi > extent:
            raise Fault(f"out-of-bounds {self.name} access: bytes {base + lo:#x}..{base + hi - 1:#x} outside "
                        f"{base:#x}..{base + extent - 1:#x}", "check rows, offset and strides against the tensor")
        seg = self.reserve(base + lo, base + hi)
        first = base + ap.offset + ap.partition_start * ap.partition_stride * size
        strides = (ap.partition_stride * size, *(s * size for s, _ in ap.free))
        return Region(seg.data, seg.written, first - seg.base, strides, seg.base)

    def describe(self, addr: int) -> str:
        return f"address {addr:#x}"

    @property
    def allocated_bytes(self) -> int:
        """Bytes of segments created so far (the OS commits only the pages that are touched)."""
        return sum(s.data.size for s in self._segments)


Memory = DenseMemory | SparseMemory
