"""Graph IR ⇄ JSON plus named arrays: the program section of an artifact.

Deterministic: values are numbered in definition order, arrays are named ``c0, c1, ...`` in the order met,
attribute keys keep their order. Nothing is pickled: attributes are JSON scalars, lists, string-keyed
dicts, tuples (``{"t": [...]}``), non-finite floats (``{"f": "nan"}``) and arrays (``{"a": "c3"}``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trnsim.errors import ArtifactError
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.types import DTYPES, TensorType

JSON = Any


class _Writer:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.arrays: dict[str, np.ndarray] = {}

    def value(self, v: Value) -> list[Any]:
        self.ids[v.id] = len(self.ids)
        return [self.ids[v.id], list(v.type.shape), v.type.dtype]

    def ref(self, v: Value) -> int:
        return self.ids[v.id]

    def attr(self, a: Any) -> JSON:
        if isinstance(a, np.ndarray):
            name = f"c{len(self.arrays)}"
            self.arrays[name] = a
            return {"a": name}
        if isinstance(a, bool | int | str) or a is None:
            return a
        if isinstance(a, float):
            return a if math.isfinite(a) else {"f": repr(a)}
        if isinstance(a, tuple):
            return {"t": [self.attr(x) for x in a]}
        if isinstance(a, list):
            return [self.attr(x) for x in a]
        if isinstance(a, dict):
            return {"d": [[str(k), self.attr(v)] for k, v in a.items()]}
        if isinstance(a, np.generic):
            return self.attr(a.item())
        raise TypeError(f"cannot serialise attribute of type {type(a).__name__}")

    def graph(self, g: Graph) -> JSON:
        params = [self.value(p) for p in g.params]
        nodes = []
        for n in g.nodes:
            entry: dict[str, Any] = {"op": n.op, "in": [self.ref(v) for v in n.inputs]}
            regions = [self.graph(r) for r in n.regions]
            entry["out"] = [self.value(v) for v in n.outputs]
            if n.attrs:
                entry["attrs"] = {"d": [[k, self.attr(v)] for k, v in n.attrs.items()]}
            if regions:
                entry["regions"] = regions
            entry["loc"] = n.loc
            nodes.append(entry)
        return {"name": g.name, "params": params, "nodes": nodes, "results": [self.ref(v) for v in g.results]}


def graph_to_json(graph: Graph) -> tuple[JSON, dict[str, np.ndarray]]:
    """(JSON-able description, arrays by name) of ``graph``."""
    w = _Writer()
    return w.graph(graph), w.arrays


class _Reader:
    def __init__(self, arrays: dict[str, np.ndarray], where: str) -> None:
        self.values: dict[int, Value] = {}
        self.arrays = arrays
        self.where = where

    def bad(self, what: str) -> ArtifactError:
        return ArtifactError(f"the program section is malformed: {what}", where=self.where,
                             hint="the artifact is damaged or from an incompatible trnsim; recompile it")

    def value(self, entry: Any, producer: Node | None = None) -> Value:
        try:
            vid, shape, dtype = entry
            if dtype not in DTYPES:
                raise self.bad(f"unknown element type {dtype!r}")
            v = Value(TensorType(tuple(int(s) for s in shape), str(dtype)), producer)
        except (TypeError, ValueError) as exc:
            raise self.bad(f"bad value entry {entry!r}") from exc
        self.values[int(vid)] = v
        return v

    def ref(self, vid: Any) -> Value:
        try:
            return self.values[int(vid)]
        except (KeyError, TypeError, ValueError):
            raise self.bad(f"reference to undefined value {vid!r}") from None

    def attr(self, a: JSON) -> Any:
        if isinstance(a, dict):
            if "a" in a:
                if a["a"] not in self.arrays:
                    raise self.bad(f"missing array {a['a']!r}")
                return np.array(self.arrays[a["a"]])
            if "t" in a:
                return tuple(self.attr(x) for x in a["t"])
            if "f" in a:
                return float(a["f"])
            if "d" in a:
                return {str(k): self.attr(v) for k, v in a["d"]}
            raise self.bad(f"unknown attribute encoding {sorted(a)}")
        if isinstance(a, list):
            return [self.attr(x) for x in a]
        return a

    def graph(self, d: JSON) -> Graph:
        try:
            params = [self.value(p) for p in d["params"]]
            nodes: list[Node] = []
            for e in d["nodes"]:
                inputs = [self.ref(v) for v in e["in"]]
                regions = [self.graph(r) for r in e.get("regions", [])]
                attrs = self.attr(e["attrs"]) if "attrs" in e else {}
                node = Node(str(e["op"]), inputs, [], attrs, regions, str(e.get("loc", "?")))
                node.outputs = [self.value(o, node) for o in e["out"]]
                nodes.append(node)
            results = [self.ref(v) for v in d["results"]]
            return Graph(params, nodes, results, str(d.get("name", "main")))
        except (KeyError, TypeError) as exc:
            raise self.bad(f"missing or mistyped field ({exc})") from exc


def graph_from_json(data: JSON, arrays: dict[str, np.ndarray], *, where: str) -> Graph:
    return _Reader(arrays, where).graph(data)
