"""Graph IR ⇄ JSON plus named arrays: the program section of an artifact.

Deterministic: values are numbered in definition order, arrays are named ``c0, c1, ...`` in the order met,
attribute keys keep their order. Nothing is pickled: attributes are JSON scalars, lists, string-keyed
dicts, tuples (``{"$t": [...]}``), non-finite floats (``{"$f": "nan"}``) and arrays (``{"$a": "c3"}``); the
markers are decoded while the JSON is parsed (an ``object_hook``), so loading a program is one pass.
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
        self.locs: dict[str, int] = {}

    def value(self, v: Value) -> list[Any]:
        self.ids[v.id] = len(self.ids)
        return [self.ids[v.id], list(v.type.shape), v.type.dtype]

    def ref(self, v: Value) -> int:
        return self.ids[v.id]

    def attr(self, a: Any) -> JSON:
        if isinstance(a, np.ndarray):
            name = f"c{len(self.arrays)}"
            self.arrays[name] = a
            return {"$a": name}
        if isinstance(a, bool | int | str) or a is None:
            return a
        if isinstance(a, float):
            return a if math.isfinite(a) else {"$f": repr(a)}
        if isinstance(a, tuple):
            return {"$t": [self.attr(x) for x in a]}
        if isinstance(a, list):
            return [self.attr(x) for x in a]
        if isinstance(a, dict):
            return {str(k): self.attr(v) for k, v in a.items()}
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
                entry["attrs"] = {k: self.attr(v) for k, v in n.attrs.items()}
            if regions:
                entry["regions"] = regions
            entry["loc"] = self.locs.setdefault(n.loc, len(self.locs))     # interned: locations repeat
            nodes.append(entry)
        return {"name": g.name, "params": params, "nodes": nodes, "results": [self.ref(v) for v in g.results]}


def graph_to_json(graph: Graph) -> tuple[JSON, dict[str, np.ndarray]]:
    """(JSON-able description, arrays by name) of ``graph``."""
    w = _Writer()
    body = w.graph(graph)
    return {"locations": list(w.locs), "graph": body}, w.arrays


class _Reader:
    def __init__(self, where: str, locs: list[str]) -> None:
        self.locs = locs
        self.values: dict[int, Value] = {}
        self.types: dict[tuple[tuple[int, ...], str], TensorType] = {}
        self.where = where

    def bad(self, what: str) -> ArtifactError:
        return ArtifactError(f"the program section is malformed: {what}", where=self.where,
                             hint="the artifact is damaged or from an incompatible trnsim; recompile it")

    def value(self, entry: Any, producer: Node | None = None) -> Value:
        try:
            vid, shape, dtype = entry
            key = (tuple(shape), dtype)
            t = self.types.get(key)
            if t is None:
                if dtype not in DTYPES or not all(isinstance(s, int) for s in shape):
                    raise self.bad(f"bad type {shape} x {dtype!r}")
                t = self.types[key] = TensorType(key[0], str(dtype))
            v = Value(t, producer)
        except (TypeError, ValueError) as exc:
            raise self.bad(f"bad value entry {entry!r}") from exc
        self.values[vid] = v
        return v

    def location(self, index: Any) -> str:
        try:
            return self.locs[index]
        except (IndexError, TypeError):
            raise self.bad(f"unknown location index {index!r}") from None

    def ref(self, vid: Any) -> Value:
        try:
            return self.values[vid]
        except (KeyError, TypeError):
            raise self.bad(f"reference to undefined value {vid!r}") from None

    def graph(self, d: JSON) -> Graph:
        try:
            params = [self.value(p) for p in d["params"]]
            nodes: list[Node] = []
            for e in d["nodes"]:
                inputs = [self.ref(v) for v in e["in"]]
                regions = [self.graph(r) for r in e["regions"]] if "regions" in e else []
                node = Node(e["op"], inputs, [], e.get("attrs") or {}, regions, self.location(e.get("loc")))
                node.outputs = [self.value(o, node) for o in e["out"]]
                nodes.append(node)
            results = [self.ref(v) for v in d["results"]]
            return Graph(params, nodes, results, str(d.get("name", "main")))
        except (KeyError, TypeError) as exc:
            raise self.bad(f"missing or mistyped field ({exc})") from exc


def graph_from_json(text: bytes | str, arrays: dict[str, np.ndarray], *, where: str) -> Graph:
    """The graph of ``graph_to_json``, from its JSON text and arrays."""
    import json

    def hook(d: dict[str, Any]) -> Any:
        if len(d) == 1:
            if "$a" in d:
                name = d["$a"]
                if name not in arrays:
                    raise ArtifactError(f"the program refers to a missing array {name!r}", where=where,
                                        hint="the artifact is damaged; recompile it")
                return np.array(arrays[name])
            if "$t" in d:
                return tuple(d["$t"])
            if "$f" in d:
                return float(d["$f"])
        return d

    try:
        data = json.loads(text, object_hook=hook)
    except ValueError as exc:
        raise ArtifactError(f"the program section is not valid JSON: {exc}", where=where,
                            hint="the artifact is damaged; recompile it") from exc
    if not isinstance(data, dict) or not isinstance(data.get("locations"), list) or "graph" not in data:
        raise ArtifactError("the program section lacks its locations table or graph", where=where,
                            hint="the artifact is damaged or from an incompatible trnsim; recompile it")
    return _Reader(where, [str(x) for x in data["locations"]]).graph(data["graph"])
