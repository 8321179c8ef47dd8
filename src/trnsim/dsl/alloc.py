"""On-chip memory allocation for tiles: byte ranges of SBUF or PSUM that remember who used them last.

Design: a tile of shape ``[P, *free]`` occupies partitions ``0..P-1`` and one byte range ``[lo, hi)`` of
every partition (the same range on each, as NKI lays tiles out), aligned (SBUF: 64 bytes; PSUM: whole
2 KiB banks, so a matmul output never straddles a bank). A tile is freed when the kernel drops its last
reference (CPython frees deterministically) or when ``dsl.release`` frees it. Freed ranges keep a *fence*:
the last access per sync domain of the tile that held them (``deps.Hazards.fence``); the next tile placed
there starts with those accesses as its hazards, so reusing memory waits for the engines still reading or
writing the old tile (write-after-read).

Which free range a tile gets: the one freed longest ago (never-used memory first), lowest address on ties.
Reusing the most recently freed memory would make every new tile wait for the instructions that just
finished with the old one; the oldest memory is the one most likely to be idle already, so a loop that
rebinds ``t = load(...)`` keeps loads ahead of compute (with PSUM's 8 banks: accumulators rotate through
them, and the 9th waits only for the first bank's readers).

    >>> a = Allocator("sbuf", 128, 1024, 64)
    >>> a.allocate(100), a.allocate(64)
    ((0, {}), (128, {}))
    >>> a.release(0, 100, {"vector": 3}); a.allocate(64)
    (192, {})
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def merge_fences(*fences: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in fences:
        for d, i in f.items():
            out[d] = max(out.get(d, -1), i)
    return out


@dataclass
class Free:
    """A free byte range, the fence of its previous owners and when it was freed (0: never used)."""

    lo: int
    hi: int
    fence: dict[str, int]
    age: int = 0


class Allocator:
    """Byte ranges ``[0, row_bytes)`` of one on-chip memory, ``align``-aligned."""

    def __init__(self, memory: str, partitions: int, row_bytes: int, align: int) -> None:
        self.memory, self.partitions, self.row_bytes, self.align = memory, partitions, row_bytes, align
        self.free: list[Free] = [Free(0, row_bytes, {})]  # sorted by lo, disjoint
        self.released = 0  # ranges freed so far: the age of the next one

    def rounded(self, nbytes: int) -> int:
        return max(self.align, -(-nbytes // self.align) * self.align)

    def allocate(self, nbytes: int) -> tuple[int, dict[str, int]] | None:
        """(byte offset, fence) of a new range of ``nbytes`` (rounded up to ``align``), or None if none fits."""
        size = self.rounded(nbytes)
        for i, f in enumerate(self.free):  # never-used memory first (the common case: a fast path)
            if f.age == 0 and f.hi - f.lo >= size:
                return f.lo, self._take(i, f.lo + size)
        best: tuple[int, int, int] | None = None  # (age of the newest range used, offset, first index)
        for i, f in enumerate(self.free):
            if best is not None and f.age > best[0]:
                continue  # a window starting here is at least this new
            j, age, end = i, f.age, f.lo + size
            while self.free[j].hi < end and j + 1 < len(self.free) and self.free[j + 1].lo == self.free[j].hi:
                j += 1
                age = max(age, self.free[j].age)
            if self.free[j].hi >= end and (best is None or (age, f.lo) < best[:2]):
                best = (age, f.lo, i)
        if best is None:
            return None
        _, lo, i = best
        return lo, self._take(i, lo + size)

    def _take(self, i: int, end: int) -> dict[str, int]:
        j = i
        while self.free[j].hi < end:
            j += 1
        used = self.free[i : j + 1]
        fence = merge_fences(*(f.fence for f in used))
        last = used[-1]
        self.free[i : j + 1] = [Free(end, last.hi, last.fence, last.age)] if last.hi > end else []
        return fence

    def release(self, lo: int, nbytes: int, fence: dict[str, int]) -> None:
        self.released += 1
        hi = lo + self.rounded(nbytes)
        k = bisect.bisect_left(self.free, lo, key=lambda f: f.lo)
        self.free.insert(k, Free(lo, hi, fence, self.released))
        # NOTE: neighbours merge only when their fences agree; merging others would make a later tile in one
        # part wait for accesses to the other part
        for a in (k, k - 1):
            if 0 <= a < len(self.free) - 1:
                left, right = self.free[a], self.free[a + 1]
                if left.hi == right.lo and left.fence == right.fence:
                    self.free[a : a + 2] = [Free(left.lo, right.hi, left.fence, max(left.age, right.age))]

    @property
    def free_bytes(self) -> int:
        return sum(f.hi - f.lo for f in self.free)

    @property
    def largest_free(self) -> int:
        best, run, end = 0, 0, -1
        for f in self.free:
            run = run + f.hi - f.lo if f.lo == end else f.hi - f.lo
            end = f.hi
            best = max(best, run)
        return best
