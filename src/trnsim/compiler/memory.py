"""The HBM plan of a program whose peak does not fit: rematerialisation first, then spills to host memory.

``allocate`` runs this only when the first-fit peak over the schedule exceeds the HBM limit (the chip's HBM,
or ``CompileOptions.hbm_limit_bytes``), so programs that fit pay nothing for it. It does what XLA's
rematerialization pass and memory-space assignment do, over the steps in plan order (as XLA's heap
simulator runs over its sequential order):

1. **liveness** — a value that crosses steps is live from the step that makes it to its last use; a
   parameter (the caller's buffer) for the whole program; a result until the last step.
2. **rematerialisation** — at the step of highest pressure, a value live across it but not used by it, made
   by a cheap step (broadcasts, iotas, constants materialised in HBM, converts, elementwise groups) whose
   inputs are live anyway at its next use, is dropped after its previous use and recomputed just before
   the next one. The candidate that frees the most bytes per second of recompute goes first; liveness is
   re-run after each choice.
3. **spills** — when nothing there can be recomputed, the value with the longest gap between its uses is
   written to host memory after its previous use and read back before its next one: its bytes over the host
   link (``ChipSpec.host.bandwidth``) plus the DMA latency (``core.dma.latency``), each way.
4. when every value live across the step of highest pressure is one of its own inputs or outputs (or a
   parameter), nothing can be moved out of the way: ``CompileError``.

The recompute, spill and reload steps join the plan with their own time and dependencies (kernels
``recompute``, ``spill``, ``reload``; no graph nodes), so the schedule and the profile include them. A spill
finishes before the next step starts (that step uses the bytes it frees); a recompute or reload starts when
the step before its consumer is done (the bytes it fills are free only then). The
values the program computes do not change: the interpreter runs the graph, these steps are plan-level.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trnsim.compiler.lowering import Plan, Step, first_fit_peak, reads, run_schedule
from trnsim.errors import CompileError
from trnsim.ir.graph import Graph, Node
from trnsim.ir.rules import lookup

ALIGN = 64                    # bytes: allocations are rounded up to this, as in ``allocate``
RECOMPUTE_KINDS = frozenset({"elementwise", "source"})
RECOMPUTE_OPS = frozenset({"broadcast_in_dim", "reshape", "convert", "bitcast_convert", "iota", "constant"})
REFIT_ROUNDS = 16             # re-plans with a lower target when first-fit fragmentation overshoots the limit


@dataclass
class Live:
    """A value crossing steps: where it is made, where it is read, and which gaps between reads it spends
    outside HBM (``cut``: the step before the gap → (how, the step after it))."""

    vid: int
    size: int
    producer: int                         # step index; -1 for a parameter
    touches: list[int]                    # sorted steps where it must be in HBM (made, read, recomputed from)
    pinned: bool = False                  # parameters: the caller's buffers stay in HBM
    cut: dict[int, tuple[str, int]] = field(default_factory=dict[int, tuple[str, int]])

    def segments(self) -> list[tuple[int, int]]:
        """Inclusive step ranges during which the value occupies HBM."""
        out: list[tuple[int, int]] = []
        start = self.touches[0]
        for a, b in zip(self.touches, self.touches[1:], strict=False):
            if a in self.cut:
                out.append((start, a))
                start = b
        out.append((start, self.touches[-1]))
        return out

    def live_at(self, step: int) -> bool:
        return any(a <= step <= b for a, b in self.segments())

    def gap_around(self, step: int) -> tuple[int, int] | None:
        """The gap between two touches that strictly contains ``step`` and is still spent in HBM."""
        for a, b in zip(self.touches, self.touches[1:], strict=False):
            if a < step < b and a not in self.cut:
                return a, b
        return None


@dataclass
class Outcome:
    """What the planner did: bytes rematerialised and spilled, their seconds, the peak it reached."""

    remat_bytes: int = 0
    remat_seconds: float = 0.0
    spill_bytes: int = 0
    spill_seconds: float = 0.0
    peak: int = 0


def plan_memory(graph: Graph, plan: Plan, limit: int, *, spill_bandwidth: float | None, latency: float,
                allow_spill: bool, target: str) -> Outcome:
    """Fit ``plan`` into ``limit`` bytes of HBM (see the module docstring); rewrites ``plan.steps``."""
    values, inputs = _liveness(graph, plan)
    if not plan.steps:                   # it computes nothing: its parameters are its results, all held at once
        held = sum(v.size for v in values.values())
        if held > limit:
            raise CompileError(f"the program's parameters (also its results) need {_size(held)} of HBM; the limit "
                               f"is {_size(limit)}", where="allocate",
                               hint="pass smaller arrays, or shard them over more chips")
        return Outcome(peak=held)
    recomputable = [_recomputable(graph, s) for s in plan.steps]
    goal, peak = limit, 0
    for _ in range(REFIT_ROUNDS):
        while True:
            pressure = _pressure(values.values(), len(plan.steps))
            step = max(range(len(pressure)), key=pressure.__getitem__)
            if pressure[step] <= goal:
                break
            _relieve(values, inputs, recomputable, plan, step, pressure[step], limit, allow_spill=allow_spill,
                     spill_bandwidth=spill_bandwidth, target=target)
        peak = _first_fit(values.values())
        if peak <= limit:
            break
        goal -= peak - limit            # fragmentation: aim lower and cut more
    else:
        raise CompileError(f"the memory plan cannot place the program's values in {_size(limit)} of HBM without "
                           f"fragmentation (first fit reaches {_size(peak)})", where="allocate",
                           hint="raise hbm_limit_bytes a little, or reduce the batch or sequence length")
    return _rewrite(graph, plan, values, inputs, spill_bandwidth or 0.0, latency, peak)


# ---- liveness -------------------------------------------------------------------------------------------

def _liveness(graph: Graph, plan: Plan) -> tuple[dict[int, Live], list[list[int]]]:
    """Values crossing steps, and for each step the crossing values it reads."""
    step_of: dict[int, int] = {}
    for s in plan.steps:
        for pos in s.nodes:
            for v in graph.nodes[pos].outputs:
                step_of[v.id] = s.index
    last = len(plan.steps) - 1
    values: dict[int, Live] = {p.id: Live(p.id, _aligned(p.type.nbytes), -1, [0, last], pinned=True)
                               for p in graph.params}
    inputs: list[list[int]] = []
    for s in plan.steps:
        read: dict[int, None] = {}
        for pos in s.nodes:
            for v in reads(graph.nodes[pos]):
                made = step_of.get(v.id)
                if (made is not None and made != s.index) or (v.id in values and values[v.id].pinned):
                    read[v.id] = None
                    if v.id not in values:
                        values[v.id] = Live(v.id, _aligned(v.type.nbytes), made if made is not None else -1,
                                            [made] if made is not None else [])
                    values[v.id].touches.append(s.index)
        inputs.append(list(read))
    for r in graph.results:
        made = step_of.get(r.id)
        if made is None or (r.id in values and values[r.id].pinned):
            continue
        live = values.setdefault(r.id, Live(r.id, _aligned(r.type.nbytes), made, [made]))
        live.touches.append(last)
    for live in values.values():
        live.touches = sorted(set(live.touches))
    return values, inputs


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _pressure(values: Iterable[Live], steps: int) -> list[int]:
    """Bytes in HBM during each step: the sum over live values (fragmentation is checked by first fit). A
    program of no steps (its results are its parameters) still holds them for one moment."""
    steps = max(steps, 1)
    diff = [0] * (steps + 1)
    for live in values:
        for a, b in live.segments():
            diff[a] += live.size
            diff[b + 1] -= live.size
    out, total = [], 0
    for d in diff[:-1]:
        total += d
        out.append(total)
    return out


def _first_fit(values: Iterable[Live]) -> int:
    """The peak of first-fit offsets over the segments in step order (``allocate``'s rule)."""
    return first_fit_peak((a, b + 1, live.size) for live in values for a, b in live.segments())


# ---- choices --------------------------------------------------------------------------------------------

def _recomputable(graph: Graph, step: Step) -> bool:
    """A step cheap to run again: views, fills, converts and elementwise math, no regions or randomness."""
    if step.sub or not step.nodes:
        return False
    return all(_cheap(graph.nodes[pos]) for pos in step.nodes)


def _cheap(node: Node) -> bool:
    if node.regions:
        return False
    return node.op in RECOMPUTE_OPS or lookup(node.op, where=node.loc).kind in RECOMPUTE_KINDS


def _relieve(values: dict[int, Live], inputs: list[list[int]], recomputable: list[bool], plan: Plan, step: int,
             pressure: int, limit: int, *, allow_spill: bool, spill_bandwidth: float | None, target: str) -> None:
    """Move one value out of HBM across ``step``: the best recompute, else the longest-gap spill."""
    best: tuple[float, Live, tuple[int, int]] | None = None
    spill: tuple[tuple[int, int], Live, tuple[int, int]] | None = None
    for live in values.values():
        if live.pinned or (gap := live.gap_around(step)) is None:
            continue
        p = live.producer
        if p >= 0 and recomputable[p] and all(values[x].live_at(gap[1]) for x in inputs[p]):
            score = live.size / max(plan.steps[p].seconds, 1e-12)
            if best is None or score > best[0]:
                best = (score, live, gap)
        rank = (gap[1] - gap[0], live.size)
        if spill is None or rank > spill[0]:
            spill = (rank, live, gap)
    if best is not None:
        _, live, (a, b) = best
        live.cut[a] = ("remat", b)
        for x in inputs[live.producer]:           # the recompute reads its inputs at b: keep them there
            if b not in values[x].touches:
                values[x].touches = sorted([*values[x].touches, b])
        return
    if spill is not None and allow_spill and spill_bandwidth:
        _, live, (a, b) = spill
        live.cut[a] = ("spill", b)
        return
    raise _does_not_fit(values, plan, step, pressure, limit, target,
                        spill_blocked=spill is not None and not (allow_spill and spill_bandwidth),
                        no_link=spill is not None and allow_spill and not spill_bandwidth)


def _does_not_fit(values: dict[int, Live], plan: Plan, step: int, pressure: int,
                  limit: int, target: str, *, spill_blocked: bool, no_link: bool) -> CompileError:
    live = [v for v in values.values() if v.live_at(step)]
    pinned = sum(v.size for v in live if v.pinned)
    own = sum(v.size for v in live if not v.pinned and step in v.touches)
    rest = pressure - pinned - own
    if step < len(plan.steps):
        s = plan.steps[step]
        where = f"step {step} ({s.kernel}: {'+'.join(dict.fromkeys(s.ops))[:60]}, at {s.loc})"
    else:                                # no steps: the results are the parameters themselves
        where = "the program (it computes nothing; its parameters are its results)"
    what = (f"{where} needs {_size(pressure)} "
            f"of HBM: {_size(own)} for its own inputs and outputs, {_size(pinned)} of parameters" +
            (f", {_size(rest)} of values that cannot be recomputed" if rest else "") +
            f"; the limit is {_size(limit)}")
    if no_link:
        return CompileError(what + f", and {target} has no host link to spill the rest over", where="allocate",
                            hint="add a [host] section to the preset, raise hbm_limit_bytes, or reduce the batch")
    if spill_blocked:
        return CompileError(what + " (every cheap value is recomputed)", where="allocate",
                            hint="allow spills to host memory (hbm_overflow='remat+spill'), or reduce the batch")
    return CompileError(what + " (every other value is recomputed or spilled to host memory)", where="allocate",
                        hint="use a smaller batch or sequence length, shard the program over more chips (tensor or "
                             "sequence parallelism), or recompute activations in the model (jax.checkpoint)")


def _size(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


# ---- the new plan ---------------------------------------------------------------------------------------

def _rewrite(graph: Graph, plan: Plan, values: dict[int, Live], inputs: list[list[int]], bandwidth: float,
             latency: float, peak: int) -> Outcome:
    """Insert recompute and reload steps before the steps that need them, spill steps after the last use
    before each gap; renumber the steps and their deps; re-run the schedule."""
    out = Outcome(peak=peak)
    before: dict[int, list[tuple[int, str, Live]]] = {}      # step → (order, kind, value) to insert before it
    after: dict[int, list[Live]] = {}
    recomputes: set[tuple[int, int]] = set()
    for live in values.values():
        for a, (how, b) in live.cut.items():
            if how == "remat":
                out.remat_bytes += live.size
                if (live.producer, b) not in recomputes:
                    recomputes.add((live.producer, b))
                    before.setdefault(b, []).append((1 + live.producer, how, live))
            else:
                out.spill_bytes += live.size
                after.setdefault(a, []).append(live)
                before.setdefault(b, []).append((0, how, live))
    steps: list[Step] = []
    new_index: dict[int, int] = {}
    made: dict[int, list[tuple[int, int]]] = {}   # value → (original step, new step) where it is (re)made
    spilled_at: dict[int, int] = {}
    for live in values.values():
        if live.producer >= 0:
            made[live.vid] = []

    def latest(vid: int, at: int) -> int | None:
        found = [n for s, n in made.get(vid, ()) if s <= at]
        return found[-1] if found else None

    originals = plan.steps
    freeing: list[int] = []                       # spills the next step waits for
    for i, s in enumerate(originals):
        # NOTE: the bytes a recompute or reload fills are free only once the step before its consumer is done
        after_previous = [new_index[i - 1]] if i > 0 else []
        for _, how, live in sorted(before.get(i, []), key=lambda t: (t[0], t[2].vid)):
            if how == "remat":
                src = originals[live.producer]
                deps = sorted({*after_previous,
                               *(d for x in inputs[live.producer] if (d := latest(x, i)) is not None)})
                step = Step(len(steps), "recompute", list(src.ops), [], src.loc, dict(src.busy), src.dma_bytes,
                            src.dma_seconds, src.seconds, 0.0, src.operand_dtype, deps, src.sbuf_bytes,
                            instructions=dict(src.instructions))
                out.remat_seconds += src.seconds
                for vid in _outputs_of(live.producer, values):
                    made.setdefault(vid, []).append((i, step.index))
            else:
                step = _transfer("reload", live, originals, sorted({spilled_at[live.vid], *after_previous}), bandwidth,
                                 latency, len(steps))
                out.spill_seconds += step.seconds
                made.setdefault(live.vid, []).append((i, step.index))
            steps.append(step)
        new_index[i] = len(steps)
        deps = {new_index[d] for d in s.deps} | set(freeing)
        deps.update(d for x in inputs[i] if (d := latest(x, i)) is not None)
        freeing = []
        steps.append(Step(len(steps), s.kernel, s.ops, s.nodes, s.loc, s.busy, s.dma_bytes, s.dma_seconds, s.seconds,
                          s.flops, s.operand_dtype, sorted(deps), s.sbuf_bytes, s.spilled, s.instructions,
                          sub=s.sub))
        for live in values.values():
            if live.producer == i:
                made.setdefault(live.vid, []).append((i, new_index[i]))
        for live in sorted(after.get(i, []), key=lambda v: v.vid):
            source = latest(live.vid, i)
            step = _transfer("spill", live, originals, [source] if source is not None else [], bandwidth, latency,
                             len(steps))
            out.spill_seconds += step.seconds
            spilled_at[live.vid] = step.index
            freeing.append(step.index)            # the next step uses the bytes the spill frees
            steps.append(step)
    plan.steps = steps
    run_schedule(plan, [s.seconds for s in steps])
    return out


def _outputs_of(step: int, values: dict[int, Live]) -> list[int]:
    return [v.vid for v in values.values() if v.producer == step]


def _transfer(kind: str, live: Live, originals: list[Step], deps: list[int], bandwidth: float, latency: float,
              index: int) -> Step:
    """A DMA between HBM and host memory: the value's bytes over the host link, plus the DMA latency."""
    seconds = live.size / bandwidth
    loc = originals[live.producer].loc if live.producer >= 0 else ""
    return Step(index, kind, [kind], [], loc, {}, float(live.size), seconds, latency + seconds, 0.0, "", deps,
                instructions={"dma": 1})


__all__ = ["Outcome", "plan_memory"]
