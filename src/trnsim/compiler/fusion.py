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
from trnsim.ir.graph import Graph, Node
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


def _fusible(node: Node) -> bool:
    if node.regions:
        return node.op == "reduce" and len(node.inputs) == 2 and simple_combiner(node.regions[0]) is not None
    if node.op in _VIEW:
        return True
    kind = lookup(node.op, where=node.loc).kind
    return kind == "elementwise"


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
        fusible = _fusible(node)
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
    for g in groups:
        for n in g.nodes:
            n.attrs["_kind"] = g.kind
    ctx.stats.update(groups=len(groups), fused=sum(len(g.nodes) for g in groups if len(g.nodes) > 1))
    return graph
