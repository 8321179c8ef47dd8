"""fuse: group elementwise chains, and matmul epilogues, into steps whose intermediates stay in SBUF.

Nodes are visited in order. A fusible node (elementwise math, converts, broadcasts and reshapes, simple
reductions, quantize/prune) joins the group of one of its producers when every other input comes from a
parameter, a constant, that group, or a group created earlier — a later group may depend on this one, and
joining would then make a cycle. An elementwise consumer of a ``dot_general`` joins the matmul's group as
its epilogue (applied as PSUM is evacuated). Everything else is a group of its own. The group id is kept on
each node as ``_group``; its kind as ``_kind``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.compiler.pipeline import PassContext
from trnsim.compiler.tilegen.ranges import Ranges, exact
from trnsim.ir.graph import Graph, Node, Value, free_values
from trnsim.ir.rules import lookup
from trnsim.ir.semantics.reduce import simple_combiner

_VIEW = frozenset({"broadcast_in_dim", "reshape", "convert", "iota"})
MAX_GROUP = 64          # nodes per fused group: bounds the SBUF working set (see lowering's tile sizing)


@dataclass
class Group:
    gid: int
    kind: str                       # fused | matmul | reduce | data | index | control | ...
    nodes: list[Node] = field(default_factory=list[Node])


_TENSOR_OPS = ("dot_general", "convolution")
_PROLOGUE = frozenset({"qdq", "prune", "convert", "reshape", "broadcast_in_dim", "transpose"})


def _is_prologue(group: Group) -> bool:
    """A small fused group that only converts, quantizes or prunes one operand of a matmul."""
    return group.kind == "fused" and 0 < len(group.nodes) <= 4 and all(n.op in _PROLOGUE for n in group.nodes)


def _has_reduce(group: Group) -> bool:
    return any(n.op == "reduce" for n in group.nodes)


def _fusible(node: Node, ranges: Ranges) -> bool:
    if node.regions:
        op = simple_combiner(node.regions[0]) if node.op == "reduce" and len(node.inputs) == 2 else None
        return op is not None and not _exact_only_alone(node, op, ranges)
    if node.op in _VIEW:
        return True
    kind = lookup(node.op, where=node.loc).kind
    return kind == "elementwise"


def _exact_only_alone(node: Node, op: str, ranges: Ranges) -> bool:
    """An integer reduction the tile code cannot make exactly in fp32 (a product, or a 32-bit sum or extreme of
    values that may pass 2**24: ``tilegen.ranges``), which the ``int_reduce`` kernel computes as a group of its
    own; fused, the group would keep the analytic cost."""
    from trnsim.compiler import intreduce

    kernel_op, dtype = intreduce.COMBINERS.get(op), intreduce.DSL_DTYPE.get(node.inputs[0].type.dtype)
    if kernel_op is None or dtype not in intreduce.REDUCE_OPS[kernel_op]:
        return False                        # not a form of the kernel's
    return op == "multiply" or not exact(ranges.unwrapped(node) if op == "add" else ranges.of(node.inputs[0]))


def fuse(graph: Graph, ctx: PassContext) -> Graph:
    groups: list[Group] = []
    group_of: dict[int, Group] = {}          # value id → the group that produces it
    # NOTE: a view of constants or parameters only (a broadcast scalar, a bias row) waits for its first
    # consumer and joins that consumer's group; as a group of its own, created after its consumer's producers,
    # it would make the consumer start a new group and split the chain (or the matmul epilogue) it belongs to.
    pending: dict[int, Node] = {}
    uses: dict[int, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            uses[v.id] = uses.get(v.id, 0) + 1
    for v in graph.results:
        uses[v.id] = uses.get(v.id, 0) + 1

    readers: dict[int, set[int]] = {}      # group id → ids of the groups that read its values
    ranges = Ranges(graph.nodes)            # integer intervals (``_exact_only_alone``)

    def add(node: Node, group: Group) -> None:
        group.nodes.append(node)
        node.attrs["_group"] = group.gid
        for v in node.inputs:
            p = group_of.get(v.id)
            if p is not None and p is not group:
                readers.setdefault(p.gid, set()).add(group.gid)
        for v in node.outputs:
            group_of[v.id] = group

    def absorb(source: Group, target: Group) -> None:
        """Move every node of ``source`` (read by nobody but ``target``) into ``target``."""
        for member in source.nodes:
            add(member, target)
        source.nodes.clear()
        for r in readers.values():
            if source.gid in r:
                r.discard(source.gid)
                r.add(target.gid)
        readers.get(target.gid, set()).discard(target.gid)

    def new_group(kind: str) -> Group:
        groups.append(Group(len(groups), kind))
        return groups[-1]

    def place(vid: int, group: Group | None) -> None:
        node = pending.pop(vid, None)
        if node is None:
            return
        target = group or new_group("fused")
        for v in node.inputs:
            place(v.id, target)
        add(node, target)

    for node in graph.nodes:
        if node.op == "constant":
            node.attrs["_group"] = -1
            continue
        producers = [group_of[v.id] for v in node.inputs if v.id in group_of]
        if node.op in _VIEW and not producers and not node.regions and len(node.outputs) == 1:
            pending[node.out.id] = node
            continue
        fusible = _fusible(node, ranges)
        target: Group | None = None
        if fusible and producers:
            for g in sorted({g.gid: g for g in producers}.values(), key=lambda g: -g.gid):
                if len(g.nodes) >= MAX_GROUP:
                    continue
                if g.kind == "matmul" and (node.op == "reduce" or node.regions):
                    continue
                if g.kind not in ("fused", "matmul"):
                    continue
                if all(p is g or p.gid < g.gid for p in producers):
                    target = g
                    break
        if not fusible:
            for v in node.inputs:
                place(v.id, None)
        if target is None:
            target = new_group("fused" if fusible else lookup(node.op, where=node.loc).kind)
        if node.op in _TENSOR_OPS:
            for v in node.inputs:
                g = group_of.get(v.id)
                if g is not None and uses.get(v.id, 0) == 1 and _is_prologue(g) and not readers.get(g.gid):
                    # the operand is quantized/pruned/cast as its tiles load: no trip through HBM
                    absorb(g, target)
        elif fusible and target.kind == "fused":
            # NOTE: a sibling chain (another fused group this node reads) joins too when nothing else reads
            # it: it can then have no path through another step back into this one
            for g in {p.gid: p for p in producers}.values():
                if g is not target and g.kind == "fused" and g.nodes and readers.get(g.gid, set()) <= {target.gid} \
                        and len(g.nodes) + len(target.nodes) < MAX_GROUP and not _has_reduce(g):
                    absorb(g, target)
        if fusible:
            for v in node.inputs:
                place(v.id, target)
        add(node, target)
    for vid in list(pending):
        place(vid, None)
    rebroadcast = _rebroadcast(graph, {g.gid: g.kind for g in groups})
    for g in groups:
        for n in g.nodes:
            n.attrs["_kind"] = g.kind
    ctx.stats.update(groups=len(groups), fused=sum(len(g.nodes) for g in groups if len(g.nodes) > 1),
                     rebroadcast=rebroadcast)
    return graph


MAX_REMAT = 8           # nodes of a constant-only chain (a causal mask from iotas) copied into a reading group


def _rebroadcast(graph: Graph, kinds: dict[int, str]) -> int:
    """Broadcasts read by other groups are made again there, from the small value, instead of being stored.

    NOTE: a fused group exporting ``broadcast_in_dim(u)`` (rms-norm's ``rsqrt`` column, a bias row, a causal
    mask) would materialise it and store a full-size tensor, then the reader loads it back. A broadcast is free
    where it is used (the generated kernel reads ``u`` as a column or table, a matmul epilogue as an operand),
    so each fused group or matmul epilogue that reads it gets its own copy of the node, reading ``u``; ``u``
    itself is copied too when it is computed from constants and iotas alone (at most ``MAX_REMAT`` nodes),
    else exported. The original goes when nothing reads it any more. Returns the number of broadcasts moved."""
    readers: dict[int, list[Node]] = {}
    for node in graph.nodes:
        for v in _node_reads_all(node):
            readers.setdefault(v.id, []).append(node)
    results = {v.id for v in graph.results}
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    dot_at = {n.attrs["_group"]: position[id(n)] for n in graph.nodes if n.op in _TENSOR_OPS}
    inserts: dict[int, list[Node]] = {}          # position → nodes to insert before it
    copied: set[int] = set()                     # ids of the originals: dropped once nothing reads them
    moved = 0
    for node in list(graph.nodes):
        gid = node.attrs.get("_group", -1)
        if node.op != "broadcast_in_dim" or gid < 0 or kinds[gid] != "fused" or node.out.id in results or \
                node.inputs[0].type.size >= node.out.type.size:
            continue
        outside = [r for r in readers.get(node.out.id, []) if r.attrs.get("_group", -1) != gid]
        if not outside or not all(_takes_broadcast(r, kinds, dot_at, position) and node.out in r.inputs
                                  for r in outside):
            continue
        chain = _constant_chain(node.inputs[0], gid)
        copied.update(id(n) for n in (*chain, node))
        by_group: dict[int, list[Node]] = {}
        for r in outside:
            by_group.setdefault(r.attrs["_group"], []).append(r)
        for target, rs in by_group.items():
            copies: dict[int, Value] = {}
            made: list[Node] = []
            for original in (*chain, node):
                copy = Node.make(original.op, [copies.get(v.id, v) for v in original.inputs],
                                 [v.type for v in original.outputs],
                                 {k: a for k, a in original.attrs.items() if k != "_group"}, loc=original.loc)
                copy.attrs["_group"] = target
                copies[original.out.id] = copy.out
                made.append(copy)
            first = min(position[id(r)] for r in rs)
            inserts.setdefault(first, []).extend(made)
            for r in rs:
                r.inputs = [copies[node.out.id] if v is node.out else v for v in r.inputs]
            readers[node.out.id] = [r for r in readers[node.out.id] if r not in rs]
        moved += 1
    if not moved:
        return 0
    nodes: list[Node] = []
    for i, n in enumerate(graph.nodes):
        nodes.extend(inserts.get(i, ()))
        nodes.append(n)
    graph.nodes = _without_dead(nodes, copied, results)
    return moved


def _node_reads_all(node: Node) -> list[Value]:
    reads = list(node.inputs)
    for region in node.regions:
        reads += free_values(region)
    return reads


def _takes_broadcast(reader: Node, kinds: dict[int, str], dot_at: dict[int, int], position: dict[int, int]) -> bool:
    """A reader that can make the broadcast itself: in a fused group, or a matmul's epilogue."""
    gid = reader.attrs.get("_group", -1)
    if gid < 0 or reader.regions:
        return False
    if kinds[gid] == "fused":
        return True
    return kinds[gid] == "matmul" and reader.op not in _TENSOR_OPS and position[id(reader)] > dot_at.get(gid, 1 << 62)


def _constant_chain(v: Value, gid: int) -> list[Node]:
    """The nodes of group ``gid`` computing ``v`` from constants, iotas and parameters alone (in order), or
    [] when ``v`` depends on other values or takes more than ``MAX_REMAT`` nodes."""
    chain: dict[int, Node] = {}

    def visit(u: Value) -> bool:
        p = u.producer
        if p is None or p.op == "constant" or id(p) in chain:
            return True
        if p.attrs.get("_group") != gid or p.regions or len(p.outputs) != 1 or len(chain) >= MAX_REMAT or \
                not (p.op in _VIEW or lookup(p.op, where=p.loc).kind == "elementwise"):
            return False
        if not all(visit(w) for w in p.inputs):
            return False
        chain[id(p)] = p
        return True

    return list(chain.values()) if visit(v) else []


def _without_dead(nodes: list[Node], candidates: set[int], results: set[int]) -> list[Node]:
    """``nodes`` less the ``candidates`` (ids of copied nodes) that lost their last reader."""
    read: dict[int, int] = {}
    for n in nodes:
        for v in _node_reads_all(n):
            read[v.id] = read.get(v.id, 0) + 1
    kept: list[Node] = []
    for n in reversed(nodes):
        if id(n) in candidates and n.out.id not in results and not read.get(n.out.id):
            for v in n.inputs:
                read[v.id] -= 1
            continue
        kept.append(n)
    kept.reverse()
    return kept
