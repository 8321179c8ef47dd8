"""The event-driven timing scheduler: engines run their in-order streams concurrently, semaphores delay
starts, DMA transfers run on their queues; the result is a ``Timeline`` with every instruction's times.

Rules (ARCHITECTURE.md "Engines", "Timing"):

* An engine starts its next instruction when it is free and the instruction's waits hold; the start is the
  later of the two. Waits are counts of signals, so the time ``sem >= n`` first held is the time of the
  n-th signal of ``sem``.
* A compute instruction holds its engine for its cost (``costs.py``); its signals fire when its results
  are visible (the end, plus TensorE's drain).
* TensorE LoadStationary runs in the background: it starts when both the instruction's waits hold and the
  previous matmul has started, and the matmul itself starts when the engine is free and the load is done.
* A DMA instruction is *issued* by its engine in no engine time; the transfer then waits its turn on its
  queue (``dma.py``) and signals when it finishes. ``Nop`` takes no time.

Events are processed in the total order ``(time, priority, seq)`` of a heap, as SimPy does (STYLE rule 8),
so a program always gives the same timeline. For every instruction the scheduler also records what fixed
its start (the engine's or queue's previous instruction, or the instruction whose signal satisfied its
wait): following those links back from the last instruction gives the critical path.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from trnsim.errors import SimError
from trnsim.hw import ChipSpec
from trnsim.hw.core import CoreSpec
from trnsim.isa.base import ENGINES, Engine, Instruction, Nop
from trnsim.isa.program import Program, where
from trnsim.sim.timing.costs import (
    DMA_SIDES,
    STATIONARY,
    TENSOR_KEY,
    TENSOR_SHAPES,
    DmaCost,
    EngineCost,
    TensorWork,
    core_of,
    dma_cost,
    engine_cost,
    signature,
    tensor_cost,
)
from trnsim.sim.timing.dma import DMA_DONE, DmaSystem

EFFECT, ENGINE_FREE = 0, 9  # event kinds besides dma.DMA_*; the kind is also the priority at equal times
# Why an instruction started when it did (``Timeline.via``).
VIA_NONE, VIA_ENGINE, VIA_WAIT, VIA_QUEUE = range(4)
VIA_NAMES = ("program start", "engine order", "semaphore wait", "DMA queue order")
NEVER = float("-inf")
QUEUE_TRACK = len(ENGINES)  # track ids: 0..4 engines (ENGINES order), QUEUE_TRACK + q for DMA queue q


@dataclass
class Timeline:
    """Per instruction (``gid``: position in ``Program.instructions()`` order): where and when it ran.

    ``issue`` is when its engine reached it (waits held), ``start``/``end`` when it held its engine or
    queue, ``effect`` when its results and signals became visible. ``pred``/``via``: what fixed its start.
    """

    program: Program
    spec: ChipSpec
    engine: list[Engine]
    index: list[int]
    instruction: list[Instruction]
    track: list[int]
    issue: list[float]
    start: list[float]
    end: list[float]
    effect: list[float]
    pred: list[int]
    via: list[int]
    seq: list[int]
    tensor: dict[int, TensorWork] = field(default_factory=dict[int, TensorWork])
    dma: dict[int, DmaCost] = field(default_factory=dict[int, DmaCost])
    exposed_load: dict[int, float] = field(default_factory=dict[int, float])

    def __len__(self) -> int:
        return len(self.instruction)

    @property
    def total_seconds(self) -> float:
        return max(self.effect, default=0.0)

    def order(self) -> list[int]:
        """Instructions in the order their results land (time, then scheduling order): every semaphore
        dependency and every engine's order is respected, so semantics may run in it."""
        return sorted(range(len(self.effect)), key=lambda g: (self.effect[g], self.seq[g]))


KIND_ENGINE, KIND_TENSOR, KIND_DMA, KIND_NOP = range(4)


@dataclass
class _Costs:
    """Every instruction's cost, in gid order, as parallel lists (the scheduler's inner loop reads these)."""

    kind: list[int] = field(default_factory=list[int])
    busy: list[float] = field(default_factory=list[float])
    load: list[float] = field(default_factory=list[float])
    latency: list[float] = field(default_factory=list[float])
    dma: dict[int, DmaCost] = field(default_factory=dict[int, DmaCost])
    tensor: dict[int, TensorWork] = field(default_factory=dict[int, TensorWork])


def _costs(program: Program, core: CoreSpec) -> _Costs:
    """Cost every instruction once; instructions of identical shapes share one computation."""
    out = _Costs()
    kinds, busy, load, latency = out.kind, out.busy, out.load, out.latency
    engines = {"vector": core.vector, "scalar": core.scalar, "gpsimd": core.gpsimd}
    works: dict[tuple[object, ...], tuple[TensorWork, EngineCost, EngineCost]] = {}
    dma_costs: dict[tuple[object, ...], DmaCost] = {}
    gid = 0
    for engine, stream in program.streams.items():
        previous = None
        for i, ins in enumerate(stream):
            kind = type(ins)
            shape = TENSOR_SHAPES.get(kind)
            if shape is not None:
                key = TENSOR_KEY[kind](ins)
                cached = works.get(key)
                if cached is None:
                    work = shape(ins, core)
                    cached = works[key] = (work, tensor_cost(work, core, False), tensor_cost(work, core, True))
                stationary = STATIONARY[kind](ins)
                cost = cached[2] if stationary != previous else cached[1]
                previous = stationary
                out.tensor[gid] = cached[0]
                kinds.append(KIND_TENSOR)
                busy.append(cost.busy)
                load.append(cost.load)
                latency.append(cost.latency)
            else:
                if kind in DMA_SIDES:
                    src, dst, moved, *_ = DMA_SIDES[kind](ins)
                    key = (kind, getattr(ins, "queue", 0), signature(src), signature(dst), signature(moved))
                    dcost = dma_costs.get(key)
                    if dcost is None:
                        dcost = dma_costs[key] = dma_cost(ins, core)
                    out.dma[gid] = dcost
                    kinds.append(KIND_DMA)
                    busy.append(0.0)
                elif kind is Nop:
                    kinds.append(KIND_NOP)
                    busy.append(0.0)
                elif engine in engines:
                    kinds.append(KIND_ENGINE)
                    busy.append(engine_cost(ins, engine, engines[engine]).busy)
                else:
                    raise SimError(f"no cost rule for {ins.mnemonic} on {engine}", where=where(engine, i, ins),
                                   hint="run it on an engine that has it (trnsim.isa.verify)")
                load.append(0.0)
                latency.append(0.0)
            gid += 1
    return out


def simulate(program: Program, spec: ChipSpec) -> Timeline:
    """Time ``program`` on one NeuronCore of ``spec`` (no data is touched)."""
    core = core_of(spec)
    streams = list(program.streams.items())
    engine_of: list[Engine] = [e for e, s in streams for _ in s]
    index = [i for _, s in streams for i in range(len(s))]
    instruction = [ins for _, s in streams for ins in s]
    n = len(instruction)
    c = _costs(program, core)
    kinds, busy, load, latency, dma_costs = c.kind, c.busy, c.load, c.latency, c.dma
    tl = Timeline(program, spec, engine_of, index, instruction, [ENGINES.index(e) for e in engine_of],
                  [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n, [-1] * n, [VIA_NONE] * n, [0] * n, c.tensor, dma_costs)
    issue, start, end, effect, pred, via, seqs, track = (tl.issue, tl.start, tl.end, tl.effect, tl.pred, tl.via,
                                                         tl.seq, tl.track)
    exposed = tl.exposed_load
    heap: list[tuple[float, int, int, object]] = []
    counter = itertools.count()
    heappush = heapq.heappush

    def push(t: float, kind: int, payload: object) -> None:
        heappush(heap, (t, kind, next(counter), payload))

    dma = DmaSystem(core, spec.hbm_bandwidth, push, start, end)
    bases = list(itertools.accumulate((len(s) for _, s in streams), initial=0))
    pc = [0] * len(streams)
    reach = [0.0] * len(streams)  # when the engine could look at its next instruction
    last_pred = [-1] * len(streams)  # what an engine-order start depends on, and why
    last_via = [VIA_NONE] * len(streams)
    prev_mm_start = NEVER
    sig_times: dict[str, list[float]] = {}
    sig_who: dict[str, list[int]] = {}
    waiting: dict[str, list[tuple[int, int]]] = {}

    def run_engine(es: int, now: float) -> None:
        """Start engine ``es``'s next instructions at ``now`` until one takes time or blocks."""
        nonlocal prev_mm_start
        stream, base = streams[es][1], bases[es]
        i, n_es = pc[es], len(stream)
        while i < n_es:
            ins = stream[i]
            gid = base + i
            ready = NEVER
            if ins.wait:
                wpred = -1
                for s, cnt in ins.wait:
                    times = sig_times.get(s)
                    if times is None or len(times) < cnt:
                        pc[es] = i
                        waiting.setdefault(s, []).append((cnt, es))
                        return
                    if times[cnt - 1] > ready:
                        ready, wpred = times[cnt - 1], sig_who[s][cnt - 1]
                if wpred >= 0 and (ready > reach[es] or last_pred[es] < 0):
                    pred[gid], via[gid] = wpred, VIA_WAIT
                else:
                    pred[gid], via[gid] = last_pred[es], last_via[es]
            else:
                pred[gid], via[gid] = last_pred[es], last_via[es]
            issue[gid] = now
            seqs[gid] = next(counter)
            kind = kinds[gid]
            i += 1
            if kind == KIND_DMA:  # issued in no engine time; the transfer waits for its queue
                cost = dma_costs[gid]
                track[gid] = QUEUE_TRACK + cost.queue
                last_pred[es], last_via[es], reach[es] = pred[gid], via[gid], now
                behind = dma.submit(gid, cost, now)
                if behind >= 0:
                    pred[gid], via[gid] = behind, VIA_QUEUE
                continue
            if kind == KIND_NOP:
                start[gid] = end[gid] = now
                last_pred[es], last_via[es], reach[es] = pred[gid], via[gid], now
                if ins.signal:
                    push(now, EFFECT, gid)
                else:
                    effect[gid] = now
                continue
            begin = now
            if kind == KIND_TENSOR:
                ls = load[gid]
                if ls:
                    load_start = max(ready, prev_mm_start)
                    begin = max(now, (now if load_start == NEVER else load_start) + ls)
                    if begin > now:
                        exposed[gid] = begin - now
                prev_mm_start = begin
            finish = begin + busy[gid]
            start[gid] = now
            end[gid] = reach[es] = finish
            last_pred[es], last_via[es] = gid, VIA_ENGINE
            if ins.signal:
                push(finish + latency[gid], EFFECT, gid)
            else:
                effect[gid] = finish + latency[gid]
            if i < n_es and kinds[base + i] <= KIND_TENSOR and not stream[i].wait:
                now = finish  # nothing else can delay it: start it now, without a heap round trip
                continue
            pc[es] = i
            push(finish, ENGINE_FREE, es)
            return
        pc[es] = i

    def signal(gid: int, now: float) -> None:
        effect[gid] = now
        for s in instruction[gid].signal:
            times = sig_times.setdefault(s, [])
            times.append(now)
            sig_who.setdefault(s, []).append(gid)
            blocked = waiting.get(s)
            if not blocked:
                continue
            ready = [w for w in blocked if w[0] <= len(times)]
            if ready:
                waiting[s] = [w for w in blocked if w[0] > len(times)]
                for _, es in ready:
                    run_engine(es, now)

    for es in range(len(streams)):
        run_engine(es, 0.0)
    heappop = heapq.heappop
    while heap:
        now, kind, _, payload = heappop(heap)
        if kind == ENGINE_FREE:
            assert isinstance(payload, int)
            run_engine(payload, now)
        elif kind == EFFECT:
            assert isinstance(payload, int)
            signal(payload, now)
        else:
            done = payload if kind == DMA_DONE else dma.handle(kind, payload, now)
            assert isinstance(done, int)
            if done >= 0:
                signal(done, now)
    _check_finished(streams, pc, sig_times)
    return tl


def _check_finished(streams: list[tuple[Engine, tuple[Instruction, ...]]], pc: list[int],
                    sig_times: Mapping[str, list[float]]) -> None:
    blocked = [(e, pc[k], s[pc[k]]) for k, (e, s) in enumerate(streams) if pc[k] < len(s)]
    if not blocked:
        return
    raise SimError("deadlock: " + "; ".join(
        f"{where(e, i, ins)} waits for " + ",".join(f"{s}>={n} (at {len(sig_times.get(s, ()))})"
                                                    for s, n in ins.wait if len(sig_times.get(s, ())) < n)
        for e, i, ins in blocked), where=where(*blocked[0]),
        hint="every wait needs enough signals issued before it can block (trnsim.isa.verify finds these)")
