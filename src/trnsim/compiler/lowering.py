"""lower, schedule, allocate: from fused groups to a timed, memory-planned list of kernel steps.

``lower`` turns each fused group into a ``Step``: which kernel it is (``matmul``, ``fused_elementwise``,
``dma_copy`` ...), on which engines and for how long (``trnsim.compiler.costs``), what it reads and writes
in HBM, and the steps it waits for. ``while``/``case``/``if`` lower their regions into sub-plans, costed per
trip (the profile multiplies by the trips a run takes). ``schedule`` places steps on the engines and DMA in
order: a step starts when its inputs are ready and its engines are free, so independent steps on different
engines overlap. ``allocate`` gives every value that crosses steps an HBM range by liveness (first fit); when
the peak exceeds the HBM limit, the memory planner (``trnsim.compiler.memory``) recomputes cheap values and
spills others to host memory, adding ``recompute``/``spill``/``reload`` steps, and fails only when a single
step's own inputs and outputs do not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

from trnsim.compiler import convgen, costs, dmagen, dmaindex, dmascatter, intreduce, poolgen, selection, tilegen
from trnsim.compiler.fusion import fuse
from trnsim.compiler.pipeline import PassContext
from trnsim.errors import CompileError, UnsupportedError
from trnsim.ir.graph import Graph, Node, Value, free_values

ENGINES = ("tensor", "vector", "scalar", "gpsimd")
KERNEL_NAMES: dict[str, str] = {
    "fused": "fused_elementwise", "matmul": "matmul", "conv": "conv_matmul", "data": "dma_copy",
    "index": "dma_gather_scatter", "sort": "gpsimd_sort", "reduce": "vector_reduce", "random": "gpsimd_rng",
    "source": "gpsimd_fill", "elementwise": "vector_op", "control": "control",
}


@dataclass
class Step:
    index: int
    kernel: str
    ops: list[str]
    nodes: list[int]                       # positions in graph.nodes
    loc: str
    busy: dict[str, float]                 # engine → seconds
    dma_bytes: float
    dma_seconds: float
    seconds: float
    flops: float
    operand_dtype: str
    deps: list[int]
    sbuf_bytes: int = 0
    spilled: int = 0
    instructions: dict[str, int] = field(default_factory=dict[str, int])   # engine → instructions
    start: float = 0.0
    end: float = 0.0
    sub: list[Plan] = field(default_factory=list["Plan"])     # region plans of control steps, per trip


@dataclass
class Plan:
    target: str
    steps: list[Step]
    total_seconds: float = 0.0
    hbm_peak: int = 0
    hbm_capacity: int = 0
    sbuf_peak: int = 0
    remat_bytes: int = 0            # HBM bytes freed by recomputing values (kernel ``recompute`` steps)
    spill_bytes: int = 0            # bytes written to host memory and read back (``spill``/``reload`` steps)

    def memory_costs(self) -> dict[str, float]:
        """Seconds of recompute and of host spills/reloads the memory plan added (step times, not overlap)."""
        remat = sum(s.seconds for s in self.steps if s.kernel == "recompute")
        spill = sum(s.seconds for s in self.steps if s.kernel in ("spill", "reload"))
        return {"remat_bytes": self.remat_bytes, "remat_seconds": remat, "spill_bytes": self.spill_bytes,
                "spill_seconds": spill}

    def instruction_counts(self) -> dict[str, int]:
        """Instructions per engine: those of the step's kernels (library, generated) as traced, estimated
        tile instructions for analytic steps (DMA: one transfer per analytic step that moves data), control
        bodies once."""
        counts: dict[str, int] = dict.fromkeys((*ENGINES, "dma"), 0)
        for s in self.steps:
            for e, n in s.instructions.items():
                counts[e] = counts.get(e, 0) + n
            counts["dma"] += 1 if s.dma_bytes and "dma" not in s.instructions else 0
            for sub in s.sub:
                for e, n in sub.instruction_counts().items():
                    counts[e] = counts.get(e, 0) + n
        return counts

    def engine_busy(self) -> dict[str, float]:
        busy: dict[str, float] = dict.fromkeys((*ENGINES, "dma"), 0.0)
        for s in self.steps:
            for e, t in s.busy.items():
                busy[e] += t
            busy["dma"] += s.dma_seconds
        return busy

    def describe(self) -> str:
        lines = [f"// plan for {self.target}: {len(self.steps)} steps, {self.total_seconds * 1e6:.1f} us, "
                 f"HBM peak {self.hbm_peak / 2**20:.2f} MiB, SBUF peak {self.sbuf_peak / 2**10:.0f} KiB"]
        if self.remat_bytes or self.spill_bytes:
            c = self.memory_costs()
            lines.append(f"// memory plan: {self.remat_bytes / 2**20:.2f} MiB rematerialised "
                         f"({c['remat_seconds'] * 1e6:.1f} us of recompute), {self.spill_bytes / 2**20:.2f} MiB "
                         f"spilled to host ({c['spill_seconds'] * 1e6:.1f} us of spills and reloads) to fit "
                         f"{self.hbm_capacity / 2**20:.2f} MiB")
        for s in self.steps:
            engines = ", ".join(f"{e} {t * 1e6:.2f}" for e, t in s.busy.items())
            lines.append(f"//  step {s.index:4d} {s.kernel:20s} [{s.start * 1e6:9.2f} .. {s.end * 1e6:9.2f}] us  "
                         f"{'+'.join(dict.fromkeys(s.ops))[:60]}  engines: {engines or '-'}  dma "
                         f"{s.dma_bytes / 1024:.1f} KiB  deps {s.deps[:6]}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "total_seconds": self.total_seconds, "hbm_peak": self.hbm_peak,
                "hbm_capacity": self.hbm_capacity, "sbuf_peak": self.sbuf_peak, "remat_bytes": self.remat_bytes,
                "spill_bytes": self.spill_bytes, "steps": [_step_json(s) for s in self.steps]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Plan:
        steps = [_step_from(s) for s in data["steps"]]
        return Plan(data["target"], steps, data["total_seconds"], data["hbm_peak"], data["hbm_capacity"],
                    data["sbuf_peak"], data.get("remat_bytes", 0), data.get("spill_bytes", 0))


def _step_json(s: Step) -> dict[str, Any]:
    d = asdict(s)
    d["sub"] = [p.to_json() for p in s.sub]
    return d


def _step_from(d: dict[str, Any]) -> Step:
    d = dict(d)
    sub = [Plan.from_json(p) for p in d.pop("sub", [])]
    return Step(**d, sub=sub)


def _machine(ctx: PassContext) -> costs.Machine:
    if ctx.spec.core is None:
        raise UnsupportedError(f"{ctx.spec.name} has no NeuronCore: trnsim compiles for Trainium targets",
                               where="trnsim.compile", hint="use target='trn3' (or trn2, trn1)")
    return costs.Machine.of(ctx.spec)


def plan_graph(graph: Graph, ctx: PassContext, machine: costs.Machine) -> Plan:
    """Steps for ``graph``, whose nodes carry ``_group`` from the fuse pass."""
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    groups: dict[int, list[Node]] = {}
    for node in graph.nodes:
        g = node.attrs.get("_group", -1)
        if g >= 0:
            groups.setdefault(g, []).append(node)
    producer_step: dict[int, int] = {}
    consumers: dict[int, list[Node]] = {}       # value → the nodes that read it
    for node in graph.nodes:
        for v in reads(node):
            consumers.setdefault(v.id, []).append(node)
    uses = {v: {n.attrs.get("_group", -1) for n in nodes} for v, nodes in consumers.items()}   # value → groups
    results = {v.id for v in graph.results}
    consts = {n.out.id: n for n in graph.nodes if n.op == "constant"}
    indexed = {gid: chosen for gid, members in groups.items() if len(members) == 1 and
               members[0].attrs.get("_kind") == "index" and
               (chosen := _index_kernel(members[0], machine, ctx)) is not None}
    absorbed = _absorb_zero_fills(groups, uses, results, indexed) | _absorb_positions(groups, uses, results, consumers)
    steps: list[Step] = []
    for gid in _topological(groups, graph):
        members = groups[gid]
        head = members[-1] if gid in absorbed else members[0]     # the scatter after the fill it absorbed
        member_ids = {id(n) for n in members}
        produced = {v.id for n in members for v in n.outputs}
        external: dict[int, Value] = {}
        for n in members:
            for v in reads(n):
                if v.id not in produced and v.id not in external:
                    c = consts.get(v.id)
                    if c is not None and v.type.size <= 1:
                        continue                 # scalar constants are instruction immediates
                    external[v.id] = v
        outputs = [v for n in members for v in n.outputs
                   if v.id in results or any(g != gid for g in uses.get(v.id, ()))]
        cost = costs.StepCost()
        kernel_seconds: float | None = None  # a whole kernel's simulated time (its DMA latencies included)
        kind = head.attrs.get("_kind", "fused")
        kernel_name: str = KERNEL_NAMES.get(kind) or str(kind)
        sub: list[Plan] = []
        tensor_op = next((n for n in members if n.op in ("dot_general", "convolution")), None)
        if kind != "control" and all(v.type.size == 0 for n in members for v in n.outputs):
            kernel_name = "empty"       # every result has a zero-sized axis: nothing to compute or move
        elif len(members) == 1 and (conv := convgen.conv_for(head)) is not None and \
                (convolved := _kernel_or_none(partial(convgen.conv_time, machine.target, conv), ctx,
                                              "conv_fallbacks")) is not None:
            # a 2-D convolution the library's conv kernel computes, timed by the instruction-level model
            convgen.conv_cost(head, convolved, cost)
            kernel_seconds, kernel_name = convolved.seconds, "conv"
        elif tensor_op is not None:
            at = members.index(tensor_op)
            costs.matmul_cost(machine, tensor_op, members[:at], members[at + 1:], cost, list(external.values()),
                              outputs)
        elif kind == "fused" and all(n.op in costs.ALIASES or _size_preserving_broadcast(n) for n in members):
            kernel_name = "view"        # a reshape of a row-major tensor in HBM: a new name, no data moves
        elif kind == "fused" and (fill := dmagen.fill_for(members)) is not None and \
                (filled := _generated_layout(machine.target, fill, ctx)) is not None:
            # a constant materialised in HBM: DMAs from a constant SBUF tile
            cost.dma_bytes, cost.min_seconds = filled.dma_bytes, filled.seconds
            cost.dma_seconds = kernel_seconds = filled.seconds
            cost.instructions = dict(filled.by_engine)
            kernel_name = "generated_dma"
        elif len(members) == 1 and (form := intreduce.int_reduce_for(head)) is not None and \
                (reduced := _kernel_or_none(partial(intreduce.int_reduce_time, machine.target, form), ctx,
                                            "int_reduce_fallbacks")) is not None:
            # an integer product or 32-bit window reduction, wrapped as StableHLO's: exact halves and byte limbs
            reduced.charge(cost)
            kernel_seconds, kernel_name = reduced.seconds, "int_reduce"
        elif kind == "fused":
            costs.fused_cost(machine, members, cost, list(external.values()), outputs)
            recipe = tilegen.recipe_for(members, list(external.values()), outputs)
            timed = _generated(machine.target, recipe, ctx) if recipe is not None else None
            if timed is None:
                timed = _generated_by_space(machine.target, members, list(external.values()), outputs, ctx)
            if timed is not None:
                # generated tile code, timed by the instruction-level model, replaces the analytic estimate
                cost.busy = dict(timed.busy)
                cost.instructions = dict(timed.by_engine)
                cost.min_seconds = kernel_seconds = timed.seconds
                kernel_name = "generated_elementwise"
        elif (chosen := _selection_kernel(kind, head, consumers, results, machine.target, ctx)) is not None:
            # a sort or a reduce one of the library's selection kernels computes (SELECTION_KERNELS)
            kernel_name, timed = chosen
            cost.busy, cost.instructions = dict(timed.busy), dict(timed.by_engine)
            cost.min_seconds = kernel_seconds = timed.seconds
            cost.dma_bytes = timed.hbm_bytes
        elif len(members) == 1 and (window := poolgen.pool_for(head)) is not None and \
                (pooled := _kernel_or_none(partial(poolgen.pool_time, machine.target, window), ctx,
                                           "pool_fallbacks")) is not None:
            # a window reduction or max-pool gradient the library's pool kernels compute, timed by the model
            pooled.charge(cost)
            kernel_seconds, kernel_name = pooled.seconds, "pool"
        elif kind == "control":
            for region in members[0].regions:
                fuse(region, ctx)
                sub.append(plan_graph(region, ctx, machine))
        else:
            rule = costs.SINGLE_RULES.get(kind, costs.elementwise_cost)
            rule(machine, head, cost)
            layout = dmagen.layout_for(head) if kind == "data" else None
            if layout is None and head.op == "dynamic_update_slice":    # no ScatterPlan: the analytic cost
                ctx.stats["dma_fallbacks"] = ctx.stats.get("dma_fallbacks", 0) + 1
            moved = _generated_layout(machine.target, layout, ctx) if layout is not None else None
            if moved is not None:
                kernel_name = "generated_dma"
            chosen = indexed.get(gid)
            if chosen is not None and chosen.tile is not None:
                cost.busy, cost.instructions = dict(chosen.tile.busy), dict(chosen.tile.by_engine)
                cost.min_seconds = kernel_seconds = chosen.tile.seconds
                kernel_name = chosen.kernel
            elif chosen is not None:
                moved, kernel_name = chosen.moved, chosen.kernel
            if moved is not None:
                # a generated DMA kernel, timed by the instruction-level model, replaces the analytic cost
                cost.dma_bytes, cost.min_seconds = moved.dma_bytes, moved.seconds
                cost.dma_seconds = kernel_seconds = moved.seconds
                cost.instructions = dict(moved.by_engine)
        if kind != "data" and cost.dma_seconds == 0 and cost.dma_bytes:
            cost.dma_seconds = costs.dma_seconds(machine, cost.dma_bytes)
        deps = sorted({producer_step[v.id] for v in external.values() if v.id in producer_step})
        if kernel_seconds is None:  # an analytic step: the engines' and DMA's work after the DMA latency
            kernel_seconds = max(cost.min_seconds, step_seconds(cost.busy, cost.dma_seconds, machine.dma_latency))
        seconds = kernel_seconds + sum(p.total_seconds for p in sub)
        index = len(steps)
        steps.append(Step(index, kernel_name, [n.op for n in members],
                          [position[id(n)] for n in members if id(n) in member_ids], head.loc, cost.busy,
                          cost.dma_bytes, cost.dma_seconds, seconds, cost.flops, cost.operand_dtype, deps,
                          cost.sbuf_bytes, cost.spilled, cost.instructions, sub=sub))
        for v in produced:
            producer_step[v] = index
    plan = Plan(ctx.spec.name, steps)
    run_schedule(plan, [s.seconds for s in steps])
    plan.sbuf_peak = max((s.sbuf_bytes for s in steps), default=0)
    return plan


T = TypeVar("T")


# group kind → the library's selection kernels that may compute a group of it, tried in order: (the kernel's
# form of the group's op or None, its timing, the kernel's name; fallbacks are counted as "<name>_fallbacks")
SELECTION_KERNELS: dict[str, list[tuple[Callable[..., Any], Callable[..., Any], str]]] = {
    "sort": [(selection.topk_for, selection.topk_time, "topk"),     # chlo.top_k's sort, first k columns read
             (selection.sort_for, selection.sort_time, "sort")],    # any other sort of JAX's comparators
    "reduce": [(selection.argmax_for, selection.argmax_time, "argmax")],  # jnp.argmax / argmin, indices read
}


def _selection_kernel(kind: str, head: Node, consumers: dict[int, list[Node]], results: set[int], target: str,
                      ctx: PassContext) -> tuple[str, tilegen.TileTime] | None:
    """The first selection kernel (``SELECTION_KERNELS``) that takes ``head`` and traces, with its timing."""
    for form_of, time_of, name in SELECTION_KERNELS.get(kind, []):
        form = form_of(head, consumers, results)
        timed = _kernel_or_none(partial(time_of, target, form), ctx, f"{name}_fallbacks") \
            if form is not None else None
        if timed is not None:
            return name, timed
    return None


def _size_preserving_broadcast(node: Node) -> bool:
    """A broadcast that only inserts size-1 dimensions: a reshape in HBM."""
    return node.op == "broadcast_in_dim" and node.inputs[0].type.size == node.out.type.size


def _kernel_or_none(timing: Callable[[], T], ctx: PassContext, stat: str) -> T | None:
    """A generated or library kernel's timing, or None when the kernel cannot be traced for this step (a
    working set that does not fit SBUF even with intermediates freed at their last use, a shape it cannot
    tile): the step then keeps the analytic cost, which models spills. ``stat`` counts the fallbacks."""
    from trnsim.dsl.errors import KernelError

    try:
        return timing()
    except KernelError:
        ctx.stats[stat] = ctx.stats.get(stat, 0) + 1
        return None


def _generated(target: str, recipe: tilegen.Recipe, ctx: PassContext) -> tilegen.TileTime | None:
    return _kernel_or_none(lambda: tilegen.fused_time(target, recipe), ctx, "sbuf_fallbacks")


def _generated_by_space(target: str, members: list[Node], external: list[Value], outputs: list[Value],
                        ctx: PassContext) -> tilegen.TileTime | None:
    """A fused group whose outputs have several sizes, which one generated kernel does not take (independent
    elementwise chains fused through shared scalar work: an optimizer's updates of parameters of different
    shapes), as one generated kernel per output size, run one after another: each computes the outputs of
    its size from every member they depend on (the shared scalar work in each). None when the outputs have
    one size or a part has no generated form."""
    sizes = sorted({v.type.size for v in outputs})
    if len(sizes) < 2:
        return None
    producer = {v.id: n for n in members for v in n.outputs}
    parts: list[tilegen.TileTime] = []
    for size in sizes:
        outs = [v for v in outputs if v.type.size == size]
        cone: set[int] = set()
        stack = [producer[v.id] for v in outs]
        while stack:
            n = stack.pop()
            if id(n) not in cone:
                cone.add(id(n))
                stack.extend(producer[u.id] for u in reads(n) if u.id in producer)
        nodes = [n for n in members if id(n) in cone]
        read = {u.id for n in nodes for u in reads(n)}
        recipe = tilegen.recipe_for(nodes, [v for v in external if v.id in read], outs)
        timed = _generated(target, recipe, ctx) if recipe is not None else None
        if timed is None:
            return None
        parts.append(timed)
    return tilegen.TileTime(sum(t.seconds for t in parts), _summed([t.busy for t in parts]),
                            sum(t.instructions for t in parts), _summed([t.by_engine for t in parts]),
                            sum(t.hbm_bytes for t in parts))


N = TypeVar("N", int, float)


def _summed(counts: list[dict[str, N]]) -> dict[str, N]:
    total: dict[str, N] = {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


def _generated_layout(target: str, layout: dmagen.Layout, ctx: PassContext) -> dmaindex.LayoutTime | None:
    return _kernel_or_none(lambda: dmagen.layout_time(target, layout), ctx, "dma_fallbacks")


def _generated_pick(target: str, pick: dmaindex.Pick, ctx: PassContext) -> dmaindex.LayoutTime | None:
    return _kernel_or_none(lambda: dmaindex.pick_time(target, pick), ctx, "dma_fallbacks")


@dataclass(frozen=True)
class IndexKernel:
    """How a gather or scatter step lowers: its kernel's name and timing (a DMA kernel's or a tile kernel's),
    and whether the kernel fills its own output with zeros (a scatter-add into a zero table)."""

    kernel: str
    moved: dmaindex.LayoutTime | None = None
    tile: tilegen.TileTime | None = None
    zero_fill: bool = False

    @property
    def seconds(self) -> float:
        """The step time the plan charges for this kernel: its simulated time, DMA latencies included."""
        if self.tile is not None:
            return self.tile.seconds
        assert self.moved is not None
        return self.moved.seconds


def _index_kernel(node: Node, machine: costs.Machine, ctx: PassContext) -> IndexKernel | None:
    """The kernel of a gather or scatter: the library's embedding kernels for row lookups of a [V, D] table
    and their gradient; for one element per row, the faster of the one-hot select in tile code (rows of up
    to 4096) and the indirect-DMA pick (``dmaindex.Pick``); any other scatter computed exactly, the general
    scatter kernel (``dmascatter.WindowScatter``); None when no kernel takes the form or can be traced (the step
    keeps the analytic cost, counted in ``dma_fallbacks``/``sbuf_fallbacks``)."""
    lookup = dmaindex.lookup_for(node)
    if lookup is not None and (moved := _library_lookup(machine.target, lookup, ctx)) is not None:
        return IndexKernel("embedding_lookup" if lookup.op == "gather" else "embedding_scatter_add", moved,
                           zero_fill=lookup.op == "scatter_add")
    one_hot = tilegen.index_recipe(node)
    timed = _generated(machine.target, one_hot, ctx) if one_hot is not None else None
    pick = dmaindex.pick_for(node)
    picked = _generated_pick(machine.target, pick, ctx) if pick is not None else None
    options = [IndexKernel("generated_elementwise", tile=timed)] if timed is not None else []
    if pick is not None and picked is not None:
        # NOTE: a pick into zeros also absorbs the fill step it adds into (_absorb_zero_fills); the one-hot
        # form reads the filled tensor: comparing the kernels alone favours the one-hot
        options.append(IndexKernel("generated_dma", picked, zero_fill=pick.zero))
    if not options and (plan := dmascatter.window_scatter_for(node)) is not None and \
            (moved := _kernel_or_none(partial(dmascatter.window_scatter_time, machine.target, plan), ctx,
                                      "dma_fallbacks")) is not None:
        # any other scatter the chip computes exactly: per-element indirect DMA (dmascatter.WindowScatter)
        options.append(IndexKernel("generated_scatter", moved))
    return min(options, key=lambda k: k.seconds, default=None)


def _absorb_zero_fills(groups: dict[int, list[Node]], uses: dict[int, set[int]], results: set[int],
                       indexed: dict[int, IndexKernel]) -> set[int]:
    """Move into a scatter-add's group the zero broadcast it adds into, when that broadcast is a group of its
    own read by nothing else and the scatter's kernel zero-fills its output anyway (``IndexKernel.zero_fill``):
    otherwise the fill is written to HBM by one step and never read by the next. Returns the scatter groups
    that absorbed a fill (their fill node comes first)."""
    absorbed: set[int] = set()
    for gid, members in list(groups.items()):
        chosen = indexed.get(gid)
        if chosen is None or not chosen.zero_fill or members[0].op != "scatter":
            continue
        operand = members[0].inputs[0]
        fill = operand.producer
        fill_gid = fill.attrs.get("_group", -1) if fill is not None else -1
        if fill is None or fill_gid == gid or operand.id in results or uses.get(operand.id) != {gid} or \
                [id(n) for n in groups.get(fill_gid, [])] != [id(fill)] or not dmaindex.is_zero_fill(operand):
            continue
        groups[gid] = [fill, members[0]]
        del groups[fill_gid]
        absorbed.add(gid)
    return absorbed


def _absorb_positions(groups: dict[int, list[Node]], uses: dict[int, set[int]], results: set[int],
                      consumers: dict[int, list[Node]]) -> set[int]:
    """Move into an argmax reduce's or a top-k sort's group (``selection.argmax_for`` / ``topk_for``) the
    iota of positions it pairs with the values, when that iota is a group of its own read by nothing else:
    the kernels make the positions themselves (find_index8), so the iota is never written to HBM. Returns
    the groups that absorbed one (their iota comes first)."""
    absorbed: set[int] = set()
    for gid, members in list(groups.items()):
        node = members[0]
        if len(members) != 1 or (selection.argmax_for(node, consumers, results) is None and
                                  selection.topk_for(node, consumers, results) is None):
            continue
        index = node.inputs[1]
        iota = index.producer
        iota_gid = iota.attrs.get("_group", -1) if iota is not None else -1
        if iota is None or index.id in results or uses.get(index.id) != {gid} or \
                [id(n) for n in groups.get(iota_gid, [])] != [id(iota)]:
            continue
        groups[gid] = [iota, node]
        del groups[iota_gid]
        absorbed.add(gid)
    return absorbed


def _library_lookup(target: str, lookup: dmaindex.Lookup, ctx: PassContext) -> dmaindex.LayoutTime | None:
    return _kernel_or_none(lambda: dmaindex.lookup_time(target, lookup), ctx, "dma_fallbacks")


def _topological(groups: dict[int, list[Node]], graph: Graph) -> list[int]:
    """Group ids in an order where every group comes after the groups it reads (ties: creation order)."""
    import heapq

    owner: dict[int, int] = {}
    for gid, members in groups.items():
        for n in members:
            for v in n.outputs:
                owner[v.id] = gid
    needs: dict[int, set[int]] = {gid: set() for gid in groups}
    for gid, members in groups.items():
        for n in members:
            for v in reads(n):
                o = owner.get(v.id)
                if o is not None and o != gid:
                    needs[gid].add(o)
    waiting = {gid: len(deps) for gid, deps in needs.items()}
    users: dict[int, list[int]] = {}
    for gid, deps in needs.items():
        for d in deps:
            users.setdefault(d, []).append(gid)
    ready = [gid for gid, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        gid = heapq.heappop(ready)
        order.append(gid)
        for u in users.get(gid, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(groups):
        raise CompileError("fusion made a cycle between kernel steps", where="lower",
                           hint="this is a bug in trnsim's fuse pass; please report it with the module")
    return order


def step_seconds(busy: dict[str, float], dma: float, latency: float) -> float:
    work = max([*busy.values(), dma], default=0.0)
    return (latency if dma > 0 else 0.0) + work


def reads(node: Node) -> list[Value]:
    reads = list(node.inputs)
    for region in node.regions:
        reads.extend(free_values(region))
    return reads


def run_schedule(plan: Plan, durations: list[float]) -> float:
    """List-schedule the steps in order: start when deps are done and the engines they use are free."""
    free: dict[str, float] = dict.fromkeys((*ENGINES, "dma"), 0.0)
    end_of: list[float] = []
    for step, duration in zip(plan.steps, durations, strict=True):
        start = max([end_of[d] for d in step.deps] + [free[e] for e in step.busy] +
                    ([free["dma"]] if step.dma_seconds else []) + [0.0])
        if step.sub:                                # control flow runs alone (its body uses every engine)
            start = max([start, *free.values()])
        step.start, step.end = start, start + duration
        for e, t in step.busy.items():
            free[e] = max(free[e], start + t)
        if step.dma_seconds:
            free["dma"] = max(free["dma"], start + step.dma_seconds)
        if step.sub:
            for e in free:
                free[e] = max(free[e], step.end)
        end_of.append(step.end)
    plan.total_seconds = max(end_of, default=0.0)
    return plan.total_seconds


# ---- passes ---------------------------------------------------------------------------------------------

def lower(graph: Graph, ctx: PassContext) -> Graph:
    machine = _machine(ctx)
    ctx.plan = plan_graph(graph, ctx, machine)
    kernels: dict[str, int] = {}
    for s in ctx.plan.steps:
        kernels[s.kernel] = kernels.get(s.kernel, 0) + 1
    ctx.stats.update(steps=len(ctx.plan.steps), kernels=kernels)
    return graph


def schedule(graph: Graph, ctx: PassContext) -> Graph:
    plan: Plan = ctx.plan
    total = run_schedule(plan, [s.seconds for s in plan.steps])
    busy = plan.engine_busy()
    ctx.stats.update(total_us=round(total * 1e6, 3),
                     utilisation={e: round(t / total, 3) if total else 0.0 for e, t in busy.items()})
    return graph


HBM_ALIGN = 64   # bytes: every HBM buffer starts on a 64-byte boundary


def first_fit_peak(blocks: Iterable[tuple[float, float, int]]) -> int:
    """The peak HBM of first-fit placement of ``(start, end, bytes)`` buffers, each live over [start, end),
    placed in order of start (larger first): each takes the lowest aligned offset free for its lifetime."""
    live: list[tuple[int, int, float]] = []     # (offset, size, end)
    peak = 0
    for start, stop, nbytes in sorted(blocks, key=lambda b: (b[0], -b[2])):
        live = [(o, n, e) for o, n, e in live if e > start]
        need = -(-nbytes // HBM_ALIGN) * HBM_ALIGN
        offset = 0
        for o, n, _ in sorted(live):
            if offset + need <= o:
                break
            offset = max(offset, o + n)
        live.append((offset, need, stop))
        peak = max(peak, offset + need)
    return peak


def allocate(graph: Graph, ctx: PassContext) -> Graph:
    """HBM offsets for values crossing steps (parameters and results live for the whole program)."""
    plan: Plan = ctx.plan
    step_of: dict[int, int] = {}
    for s in plan.steps:
        for pos in s.nodes:
            for v in graph.nodes[pos].outputs:
                step_of[v.id] = s.index
    birth: dict[int, float] = {}
    death: dict[int, float] = {}
    size: dict[int, int] = {}
    for p in graph.params:
        birth[p.id], size[p.id] = 0.0, p.type.nbytes
    for s in plan.steps:
        for pos in s.nodes:
            node = graph.nodes[pos]
            for v in reads(node):
                if (v.id in step_of and step_of[v.id] != s.index) or (v.id in birth and v.id not in step_of):
                    death[v.id] = max(death.get(v.id, 0.0), s.end)
            for v in node.outputs:
                if v.id not in birth:
                    birth[v.id], size[v.id] = s.start, v.type.nbytes
    crossing = [vid for vid in birth if vid in death or vid in {r.id for r in graph.results}
                or vid in {p.id for p in graph.params}]
    end = plan.total_seconds
    for r in graph.results:
        death[r.id] = end + 1.0
    for p in graph.params:
        death[p.id] = end + 1.0
    peak = first_fit_peak((birth[vid], death.get(vid, end), size[vid]) for vid in crossing)
    limit = ctx.options.hbm_limit_bytes or ctx.spec.hbm_bytes
    plan.hbm_peak = peak
    plan.hbm_capacity = limit
    if peak > limit and ctx.options.hbm_overflow != "error":
        _fit(graph, plan, limit, ctx)
    elif peak > limit:
        biggest = sorted(((size[v], v) for v in crossing), reverse=True)[:3]
        raise CompileError(
            f"the program needs {_bytes(peak)} of HBM at its peak; the limit on {ctx.spec.name} is "
            f"{_bytes(limit)} (largest tensors: {', '.join(_bytes(n) for n, _ in biggest)})",
            where="allocate", hint="reduce the batch or sequence length, use auto_cast to narrow tensors, let the "
                                   "compiler recompute and spill (hbm_overflow='remat+spill'), or recompute "
                                   "activations (jax.checkpoint)")
    ctx.stats.update(hbm_peak_mib=round(plan.hbm_peak / 2**20, 3), sbuf_peak_kib=round(plan.sbuf_peak / 2**10, 1),
                     spilled=sum(s.spilled for s in plan.steps))
    if plan.remat_bytes or plan.spill_bytes:
        ctx.stats.update({k: round(v / 2**20, 3) if k.endswith("bytes") else round(v * 1e6, 3)
                          for k, v in plan.memory_costs().items()})
    return graph


def _bytes(n: float) -> str:
    from trnsim.hw import format_quantity

    return format_quantity(n, "bytes", digits=3)


def _fit(graph: Graph, plan: Plan, limit: int, ctx: PassContext) -> None:
    """Recompute and spill until the plan's peak fits ``limit`` (``trnsim.compiler.memory``)."""
    from trnsim.compiler.memory import plan_memory

    core = ctx.spec.core
    assert core is not None
    host = ctx.spec.host
    outcome = plan_memory(graph, plan, limit, spill_bandwidth=host.bandwidth if host is not None else None,
                          latency=core.dma.latency, allow_spill=ctx.options.hbm_overflow == "remat+spill",
                          target=ctx.spec.name)
    plan.hbm_peak, plan.remat_bytes, plan.spill_bytes = outcome.peak, outcome.remat_bytes, outcome.spill_bytes


__all__ = ["Plan", "Step", "allocate", "lower", "plan_graph", "reads", "run_schedule", "schedule"]
