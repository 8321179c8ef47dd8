"""DMA queues and the bandwidth they share, for the timing scheduler.

Each of the core's ``spec.core.dma.queues`` queues processes one transfer at a time, in the order the
transfers were issued (neuron.md §1.2: "each processes one transfer at a time"). A transfer holds its queue
for its fixed ``latency`` (semaphore-to-start + descriptor generation, preset ``dma.latency``), then moves
its payload. Alone, the payload moves at the queue's peak ``queue_bandwidth × efficiency`` (``costs.py``).

Overlapping transfers share bandwidth by processor sharing: while ``k`` transfers move data, each one's
rate is ``min(peak_i, chip_dma_bandwidth / k, hbm_bandwidth / k_hbm)`` where ``k_hbm`` counts those that
touch HBM (ARCHITECTURE.md "Timing": HBM bandwidth shared among concurrent transfers). Rates change only
when a transfer starts or finishes moving data, so each change re-plans the finish times of the active
transfers (stale finish events carry an old version and are ignored).

When even all queues at their peak cannot exceed the shared bandwidths (one trn3 core: 16 × 33 GB/s
= 528 GB/s against 4.9 TB/s of chip DMA and 5.2 TB/s of HBM), sharing never binds: each finish time is
fixed when the transfer starts, and that fast path skips the re-planning.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from trnsim.hw.core import CoreSpec
from trnsim.sim.timing.costs import DmaCost

# Event kinds the DMA system schedules (the scheduler routes them back to ``DmaSystem.handle``).
DMA_DONE = 1  # payload: gid; the transfer finished (fast path)
DMA_DATA = 2  # payload: gid; the fixed latency is over, the payload starts moving (shared path)
DMA_FINISH = 3  # payload: (gid, version); a planned finish of the shared path

Push = Callable[[float, int, object], None]


@dataclass(slots=True)
class _Active:
    gid: int
    remaining: float  # payload bytes still to move
    peak: float  # bytes/s when alone
    hbm: bool
    rate: float = 0.0
    since: float = 0.0
    version: int = 0


class DmaSystem:
    """The queues of one core; writes each transfer's start and end into ``start``/``end`` by gid."""

    def __init__(self, core: CoreSpec, hbm_bandwidth: float, push: Push, start: list[float],
                 end: list[float]) -> None:
        dma = core.dma
        self.queue_bandwidth, self.chip_bandwidth, self.hbm_bandwidth = (
            dma.queue_bandwidth, dma.chip_bandwidth, hbm_bandwidth)
        self.shared = dma.queues * dma.queue_bandwidth > min(dma.chip_bandwidth, hbm_bandwidth)
        self.push, self.start, self.end = push, start, end
        self.free_at = [0.0] * dma.queues  # fast path: when each queue finishes its last transfer
        self.last = [-1] * dma.queues  # the transfer last put on each queue (critical path)
        self.busy = [False] * dma.queues  # shared path
        self.pending: list[deque[tuple[int, DmaCost]]] = [deque() for _ in range(dma.queues)]
        self.active: dict[int, _Active] = {}
        self.costs: dict[int, DmaCost] = {}

    def submit(self, gid: int, cost: DmaCost, now: float) -> int:
        """Queue a transfer issued at ``now``; return the transfer it waits behind on its queue (-1: none)."""
        q = cost.queue
        behind = self.last[q] if (self.free_at[q] > now if not self.shared else self.busy[q]) else -1
        self.last[q] = gid
        if not self.shared:
            s = max(now, self.free_at[q])
            e = s + cost.latency + cost.work / self.queue_bandwidth
            self.start[gid], self.end[gid], self.free_at[q] = s, e, e
            self.push(e, DMA_DONE, gid)
        elif self.busy[q]:
            self.pending[q].append((gid, cost))
        else:
            self._begin(gid, cost, now)
        return behind

    def handle(self, kind: int, payload: object, now: float) -> int:
        """Process one DMA event; return the gid of a finished transfer, or -1."""
        if kind == DMA_DONE:
            assert isinstance(payload, int)
            return payload
        if kind == DMA_DATA:
            assert isinstance(payload, int)
            cost = self.costs[payload]
            peak = self.queue_bandwidth * cost.efficiency
            self.active[payload] = _Active(payload, float(cost.nbytes), peak, cost.hbm_bytes > 0, since=now)
            self._replan(now)
            return -1
        assert isinstance(payload, tuple)
        gid, version = cast(tuple[int, int], payload)
        act = self.active.get(gid)
        if act is None or act.version != version:
            return -1  # superseded by a later plan
        self._advance(now)
        del self.active[gid]
        self._replan(now)
        self.end[gid] = now
        q = self.costs.pop(gid).queue
        self.busy[q] = False
        if self.pending[q]:
            self._begin(*self.pending[q].popleft(), now)
        return gid

    def idle(self) -> bool:
        return not self.active and not any(self.busy) and not any(self.pending)

    def _begin(self, gid: int, cost: DmaCost, now: float) -> None:
        self.busy[cost.queue] = True
        self.costs[gid] = cost
        self.start[gid] = now
        self.push(now + cost.latency, DMA_DATA, gid)

    def _advance(self, now: float) -> None:
        for a in self.active.values():
            a.remaining = max(0.0, a.remaining - a.rate * (now - a.since))
            a.since = now

    def _replan(self, now: float) -> None:
        """Processor sharing: new rates for every active transfer, and their finish events."""
        self._advance(now)
        k_all = len(self.active)
        k_hbm = sum(a.hbm for a in self.active.values())
        for a in self.active.values():
            rate = min(a.peak, self.chip_bandwidth / k_all)
            if a.hbm:
                rate = min(rate, self.hbm_bandwidth / k_hbm)
            a.rate = rate
            a.version += 1
            self.push(now + a.remaining / rate, DMA_FINISH, (a.gid, a.version))
