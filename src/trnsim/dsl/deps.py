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

A buffer's live accesses are indexed (``Accesses``) so that a new access meets only the earlier ones that may
overlap it, not all of them: a kernel that fills a tile row by row, or streams a long HBM tensor in small
boxes, is traced in time linear in its instructions.

    >>> t, h = DependencyTracker(), Hazards()
    >>> box = ((0, 128), (0, 512))
    >>> t.record("dma0", [], [(h, box, True)])
    0
    >>> t.waits("tensor", [(h, ((0, 128), (0, 64)))], [])
    (('dma0', 1),)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product

Box = tuple[tuple[int, int], ...]
Wait = tuple[str, int]
Cell = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Access:
    box: Box
    domain: str
    index: int


def overlaps(a: Box, b: Box) -> bool:
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def contains(outer: Box, inner: Box) -> bool:
    return all(olo <= ilo and ihi <= ohi for (olo, ohi), (ilo, ihi) in zip(outer, inner, strict=True))


def _empty(box: Box) -> bool:
    return any(lo >= hi for lo, hi in box)


class Accesses:
    """Live accesses in the order they were made, indexed by where they are.

    An access of a non-empty box belongs to a *class*, per axis the power of two 2^s that its extent fits
    (``s = bit_length(extent - 1)``), and within its class to the *cell* of its low corner, per axis
    ``lo >> s``: along each axis it lies within that cell and the next (within its cell if s = 0).
    ``candidates(box)`` probes, in each class, the cells whose accesses can reach ``box`` (all the class's
    cells when there are fewer of them than probes), so it returns every access that overlaps ``box`` and
    few that do not; callers check those exactly (``overlaps``, ``contains``). Empty boxes, which
    ``overlaps`` may still call overlapping, are always candidates (and a query with one gets them all)."""

    __slots__ = ("_classes", "_empty", "_live", "_serial")

    def __init__(self) -> None:
        self._live: dict[int, tuple[Access, Cell, Cell]] = {}  # serial → access, its class, its cell
        self._classes: dict[Cell, dict[Cell, dict[int, Access]]] = {}  # class → cell → serial → access
        self._empty: dict[int, Access] = {}
        self._serial = 0

    def __iter__(self) -> Iterator[Access]:
        return (a for a, _, _ in self._live.values())

    def __len__(self) -> int:
        return len(self._live)

    def add(self, access: Access) -> None:
        serial = self._serial
        self._serial += 1
        if _empty(access.box):
            self._live[serial] = (access, (), ())
            self._empty[serial] = access
            return
        shape = tuple((hi - lo - 1).bit_length() for lo, hi in access.box)
        cell = tuple(lo >> s for (lo, _), s in zip(access.box, shape, strict=True))
        self._live[serial] = (access, shape, cell)
        self._classes.setdefault(shape, {}).setdefault(cell, {})[serial] = access

    def candidates(self, box: Box) -> list[tuple[int, Access]]:
        """(serial, access) of every live access that may overlap ``box`` (a superset of those that do)."""
        if _empty(box):
            return [(serial, a) for serial, (a, _, _) in self._live.items()]
        found = list(self._empty.items())
        for shape, cells in self._classes.items():
            if len(cells) > 1:
                spans: list[range] = []
                probes = 1
                for (lo, hi), s in zip(box, shape, strict=True):
                    cover = range((lo >> s) - (s > 0), ((hi - 1) >> s) + 1)
                    spans.append(cover)
                    probes *= len(cover)
                if probes <= len(cells):
                    for cell in product(*spans):
                        members = cells.get(cell)
                        if members is not None:
                            found.extend(members.items())
                    continue
            for members in cells.values():
                found.extend(members.items())
        return found

    def remove(self, serials: Sequence[int]) -> None:
        for serial in serials:
            _, shape, cell = self._live.pop(serial)
            if not shape and serial in self._empty:
                del self._empty[serial]
                continue
            cells = self._classes[shape]
            members = cells[cell]
            del members[serial]
            if not members:
                del cells[cell]
                if not cells:
                    del self._classes[shape]


class Hazards:
    """The live accesses of one buffer: writes (which later reads and writes wait for) and reads (which
    only later writes wait for)."""

    __slots__ = ("read_index", "write_index")

    def __init__(self) -> None:
        self.write_index = Accesses()
        self.read_index = Accesses()

    @property
    def writes(self) -> list[Access]:
        return list(self.write_index)

    @property
    def reads(self) -> list[Access]:
        return list(self.read_index)

    def fence(self) -> dict[str, int]:
        """The last access index per domain: what a new owner of this memory must wait for."""
        last: dict[str, int] = {}
        for a in (*self.write_index, *self.read_index):
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

        def depend(accesses: Accesses, box: Box) -> None:
            for _, a in accesses.candidates(box):
                if a.domain != domain and need.get(a.domain, 0) <= a.index and overlaps(a.box, box):
                    need[a.domain] = a.index + 1

        for hazards, box in reads:
            depend(hazards.write_index, box)  # RAW
        for hazards, box, _ in writes:
            depend(hazards.write_index, box)  # WAW
            depend(hazards.read_index, box)  # WAR
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
            hazards.read_index.add(Access(box, domain, index))
        for hazards, box, dense in writes:
            if dense:
                for accesses in (hazards.write_index, hazards.read_index):
                    accesses.remove([s for s, a in accesses.candidates(box) if contains(box, a.box)])
            hazards.write_index.add(Access(box, domain, index))
        return index

    def inherit(self, hazards: Hazards, box: Box, fence: dict[str, int]) -> None:
        """Memory reused from freed tiles: its new owner waits for their last accesses, as if they wrote it."""
        for d, i in sorted(fence.items()):
            hazards.write_index.add(Access(box, d, i))
