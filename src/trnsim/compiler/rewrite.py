"""Helpers for passes that replace values: substitute through a graph (regions included)."""

from __future__ import annotations

from trnsim.ir.graph import Graph, Value


def substitute(graph: Graph, mapping: dict[int, Value]) -> None:
    """Replace every read of a value id in ``mapping`` (in nodes, nested regions and results), in place."""
    if not mapping:
        return

    def resolve(v: Value) -> Value:
        while v.id in mapping:
            v = mapping[v.id]
        return v

    def visit(g: Graph) -> None:
        for node in g.nodes:
            node.inputs = [resolve(v) for v in node.inputs]
            for region in node.regions:
                visit(region)
        g.results = [resolve(v) for v in g.results]

    visit(graph)


def dead_code(graph: Graph) -> int:
    """Remove nodes none of whose outputs are used (side-effecting custom_calls stay); returns the count."""
    from trnsim.ir.graph import free_values

    live: set[int] = {v.id for v in graph.results}
    kept = []
    removed = 0
    for node in reversed(graph.nodes):
        effect = node.op == "custom_call" and node.attrs.get("has_side_effect", False)
        if effect or any(v.id in live for v in node.outputs):
            kept.append(node)
            live.update(v.id for v in node.inputs)
            for region in node.regions:
                live.update(v.id for v in free_values(region))
        else:
            removed += 1
    kept.reverse()
    graph.nodes = kept
    return removed
