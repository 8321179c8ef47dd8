"""Automatic cross-engine synchronisation: which earlier instructions a new one must wait for.

Every instruction belongs to a *sync domain*: its compute engine (``tensor``, ``vector``, ``scalar``,
``gpsimd``) or, for a DMA, its queue (``dma0`` … ``dma15``). Each domain completes its instructions in order
and each instruction signals its domain's semaphore once, so that semaphore's count is the number of
completed instructions of the domain, and "instruction k of domain D has completed" is the wait
``(D, k + 1)``. Instructions of one domain need no waits among themselves.

Each buffer (an HBM tensor or an on-chip allocation) keeps ``Hazards``: the accesses since its last full
overwrite, each a *box* (a half-open index range per buffer axis) with its domain and index. A new access
waits for every overlapping earlier access of another domain that conflicts with it: read after write,
write after read, write after write. Only the strongest wait per domain is kept. A write that covers an
earlier access's box completely (a *dense* write: every element of its box) retires that access: whoever
later waits for the write also waits, transitively, for what the write waited for. Waits already implied
are dropped: each domain keeps a vector clock (what it knows to have completed, through its own earlier
waits and, transitively, theirs), so an engine waits for a DMA once, not at every use of its tile.

    >>> t, h = DependencyTracker(), Hazards()
    >>> box = ((0, 128), (0, 512))
    >>> t.record("dma0", [], [(h, box, True)])
    0
    >>> t.waits("tensor", [(h, ((0, 128), (0, 64)))], [])
    (('dma0', 1),)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Box = tuple[tuple[int, int], ...]
Wait = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Access:
    box: Box
    domain: str
    index: int


def overlaps(a: Box, b: Box) -> bool:
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def contains(outer: Box, inner: Box) -> bool:
    return all(olo <= ilo and ihi <= ohi for (olo, ohi), (ilo, ihi) in zip(outer, inner, strict=True))


class Hazards:
    """The live accesses of one buffer: writes (which later reads and writes wait for) and reads (which
    only later writes wait for)."""

    __slots__ = ("reads", "writes")

    def __init__(self) -> None:
        self.writes: list[Access] = []
        self.reads: list[Access] = []

    def fence(self) -> dict[str, int]:
        """The last access index per domain: what a new owner of this memory must wait for."""
        last: dict[str, int] = {}
        for a in (*self.writes, *self.reads):
            last[a.domain] = max(last.get(a.domain, -1), a.index)
        return last


ReadAccess = tuple[Hazards, Box]
WriteAccess = tuple[Hazards, Box, bool]  # (hazards, box, dense)


class DependencyTracker:
    """Numbers instructions per domain and computes their waits."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.known: dict[str, dict[str, int]] = {}  # domain → completed instructions per domain it knows of
        self.clocks: dict[str, list[dict[str, int]]] = {}  # per instruction: its domain's knowledge after it

    def waits(self, domain: str, reads: Sequence[ReadAccess], writes: Sequence[WriteAccess]) -> tuple[Wait, ...]:
        """The waits of a new instruction of ``domain`` reading and writing these boxes."""
        need: dict[str, int] = {}

        def depend(accesses: list[Access], box: Box) -> None:
            for a in accesses:
                if a.domain != domain and need.get(a.domain, 0) <= a.index and overlaps(a.box, box):
                    need[a.domain] = a.index + 1

        for hazards, box in reads:
            depend(hazards.writes, box)  # RAW
        for hazards, box, _ in writes:
            depend(hazards.writes, box)  # WAW
            depend(hazards.reads, box)  # WAR
        known = self.known.get(domain, {})
        return tuple(sorted((d, n) for d, n in need.items() if n > known.get(d, 0)))

    def record(
        self, domain: str, reads: Sequence[ReadAccess], writes: Sequence[WriteAccess], wait: Sequence[Wait] = ()
    ) -> int:
        """Log the instruction (after ``waits``, with the waits it got); returns its index in its domain."""
        index = self.counts.get(domain, 0)
        self.counts[domain] = index + 1
        known = dict(self.known.get(domain, {}))
        for d, n in wait:
            for e, m in self.clocks[d][n - 1].items():
                if m > known.get(e, 0):
                    known[e] = m
        known[domain] = index + 1
        self.known[domain] = known
        self.clocks.setdefault(domain, []).append(known)
        for hazards, box in reads:
            hazards.reads.append(Access(box, domain, index))
        for hazards, box, dense in writes:
            if dense:
                hazards.writes = [a for a in hazards.writes if not contains(box, a.box)]
                hazards.reads = [a for a in hazards.reads if not contains(box, a.box)]
            hazards.writes.append(Access(box, domain, index))
        return index

    def inherit(self, hazards: Hazards, box: Box, fence: dict[str, int]) -> None:
        """Memory reused from freed tiles: its new owner waits for their last accesses, as if they wrote it."""
        hazards.writes.extend(Access(box, d, i) for d, i in sorted(fence.items()))
