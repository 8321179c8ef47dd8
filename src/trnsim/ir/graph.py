"""The graph IR: values, nodes and graphs (a function body), with nested graphs for regions.

A ``Graph`` is a list of nodes in a valid execution order, the values they consume and produce, the
graph's parameters and its results. A node's ``regions`` are graphs too (the body of a ``reduce``, the
condition and body of a ``while``, the comparator of a ``sort``). Nodes keep the StableHLO op name without
its dialect prefix (``dot_general``, ``add``) and attributes as plain Python values, so passes and rules
never touch MLIR objects. ``str(graph)`` prints a readable, MLIR-like dump, used by ``TRNSIM_DUMP_IR``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trnsim.ir.types import TensorType

_ids = itertools.count()


class Value:
    """An SSA value: a tensor of ``type``, produced by at most one node (none for parameters)."""

    __slots__ = ("id", "producer", "type")

    def __init__(self, type: TensorType, producer: Node | None = None) -> None:
        self.type = type
        self.producer = producer
        self.id = next(_ids)

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type}"


@dataclass(eq=False)
class Node:
    """One op: ``outputs = op(inputs) {attrs} (regions)``; ``loc`` is the StableHLO source location."""

    op: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict[str, Any])
    regions: list[Graph] = field(default_factory=list["Graph"])
    loc: str = "?"

    @staticmethod
    def make(op: str, inputs: Sequence[Value], out_types: Sequence[TensorType], attrs: dict[str, Any] | None = None,
             regions: Sequence[Graph] = (), loc: str = "?") -> Node:
        node = Node(op, list(inputs), [], dict(attrs or {}), list(regions), loc)
        node.outputs = [Value(t, node) for t in out_types]
        return node

    @property
    def out(self) -> Value:
        """The single output (most ops have exactly one)."""
        return self.outputs[0]


@dataclass(eq=False)
class Graph:
    params: list[Value]
    nodes: list[Node]
    results: list[Value]
    name: str = "main"

    def walk(self) -> Iterator[Node]:
        """Every node, nested regions included (pre-order)."""
        for node in self.nodes:
            yield node
            for region in node.regions:
                yield from region.walk()

    def __str__(self) -> str:
        return format_graph(self)


def _node_reads(node: Node) -> Iterator[Value]:
    yield from node.inputs
    for region in node.regions:
        yield from free_values(region)


def free_values(graph: Graph) -> list[Value]:
    """Values a region reads from its enclosing graph (StableHLO regions may capture outer values)."""
    defined = {v.id for v in graph.params}
    free: dict[int, Value] = {}
    for node in graph.nodes:
        for v in _node_reads(node):
            if v.id not in defined:
                free.setdefault(v.id, v)
        defined.update(v.id for v in node.outputs)
    for v in graph.results:
        if v.id not in defined:
            free.setdefault(v.id, v)
    return list(free.values())


def _fmt_attr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"dense<{np.asarray(value).tolist()}>"
        return f"dense<...{value.size} elements>"
    return repr(value)


def format_graph(graph: Graph, indent: str = "", names: dict[int, str] | None = None) -> str:
    names = {} if names is None else names

    def name(v: Value) -> str:
        if v.id not in names:
            names[v.id] = f"%{len(names)}"
        return names[v.id]

    params = ", ".join(f"{name(p)}: {p.type}" for p in graph.params)
    lines = [f"{indent}func @{graph.name}({params}) {{"]
    for node in graph.nodes:
        outs = ", ".join(name(v) for v in node.outputs)
        ins = ", ".join(name(v) for v in node.inputs)
        attrs = ", ".join(f"{k} = {_fmt_attr(v)}" for k, v in node.attrs.items() if not k.startswith("_"))
        types = ", ".join(str(v.type) for v in node.outputs)
        head = f"{indent}  {outs} = " if node.outputs else f"{indent}  "
        text = f"{head}{node.op}({ins})" + (f" {{{attrs}}}" if attrs else "") + f" : {types}"
        lines.append(text + f"  // {node.loc}")
        for region in node.regions:
            lines.append(format_graph(region, indent + "    ", names))
    lines.append(f"{indent}  return " + ", ".join(name(v) for v in graph.results))
    lines.append(f"{indent}}}")
    return "\n".join(lines)
