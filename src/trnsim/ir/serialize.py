"""Graph IR ⇄ an artifact's program sections: the structure as integer tables, the rest as small JSON.

``encode_graph`` returns three parts:

* ``tables`` (JSON): op names, source locations, value types and graph names, each listed once, and the
  node attributes (``attrs[i]`` is a JSON object; identical attribute sets are stored once);
* ``structure`` (int64 arrays): one row per graph, one per node, and the flat lists the rows index into
  (node inputs, output types, region graphs, a graph's parameter types, members and results);
* ``arrays``: the array-valued attributes, named ``c0, c1, ...`` in the order met.

Values are numbered in definition order — a graph's parameters, then for each node its regions' values,
then its outputs — so a reference is an index into the values defined so far, and loading is one pass over
plain Python lists (the tables are turned into lists up front). The encoding is deterministic. Nothing is
pickled: attributes are JSON scalars, lists, string-keyed dicts, tuples (``{"$t": [...]}``), non-finite
floats (``{"$f": "nan"}``) and arrays (``{"$a": "c3"}``).
"""

from __future__ import annotations

import gc
import json
import math
from typing import Any, cast

import numpy as np

from trnsim.errors import ArtifactError
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.types import DTYPES, TensorType

JSON = Any

# Column layout of the two row tables (``structure["graphs"]`` and ``structure["nodes"]``): each ``*_at``
# pair is a [start, end) range into the flat list of the same name.
GRAPH_COLUMNS = ("name", "params_at", "params_end", "members_at", "members_end", "results_at", "results_end")
NODE_COLUMNS = ("op", "loc", "attrs", "inputs_at", "inputs_end", "outputs_at", "outputs_end", "regions_at",
                "regions_end")
FLAT = ("params", "members", "results", "inputs", "outputs", "regions")


class _Writer:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.interned: dict[str, dict[str, int]] = {"ops": {}, "locations": {}, "types": {}, "names": {}}
        self.attrs: dict[str, int] = {}
        self.graphs: list[list[int]] = []
        self.nodes: list[list[int]] = []
        self.flat: dict[str, list[int]] = {name: [] for name in FLAT}

    def intern(self, table: str, key: Any) -> int:
        index = self.interned[table]
        return index.setdefault(key, len(index))

    def define(self, v: Value) -> int:
        self.ids[v.id] = len(self.ids)
        return self.intern("types", (v.type.shape, v.type.dtype))

    def extend(self, flat: str, items: list[int]) -> tuple[int, int]:
        column = self.flat[flat]
        start = len(column)
        column.extend(items)
        return start, len(column)

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

    def node_attrs(self, attrs: dict[str, Any]) -> int:
        if not attrs:
            return -1
        text = json.dumps({k: self.attr(v) for k, v in attrs.items()}, separators=(",", ":"), allow_nan=False)
        return self.attrs.setdefault(text, len(self.attrs))

    def graph(self, g: Graph) -> int:
        row = len(self.graphs)
        self.graphs.append([])
        params = self.extend("params", [self.define(p) for p in g.params])
        members: list[int] = []
        for n in g.nodes:
            members.append(len(self.nodes))
            self.nodes.append([])
            inputs = self.extend("inputs", [self.ids[v.id] for v in n.inputs])
            regions = [self.graph(r) for r in n.regions]
            outputs = self.extend("outputs", [self.define(v) for v in n.outputs])
            self.nodes[members[-1]] = [self.intern("ops", n.op), self.intern("locations", n.loc),
                                       self.node_attrs(n.attrs), *inputs, *outputs,
                                       *self.extend("regions", regions)]
        members_span = self.extend("members", members)
        results = self.extend("results", [self.ids[v.id] for v in g.results])
        self.graphs[row] = [self.intern("names", g.name), *params, *members_span, *results]
        return row


def encode_graph(graph: Graph) -> tuple[JSON, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tables, structure, arrays) of ``graph``: see the module docstring."""
    w = _Writer()
    w.graph(graph)
    tables = {"ops": list(w.interned["ops"]), "locations": list(w.interned["locations"]),
              "types": [[list(shape), dtype] for shape, dtype in w.interned["types"]],
              "names": list(w.interned["names"]), "attrs": "[" + ",".join(w.attrs) + "]"}
    structure = {"graphs": np.array(w.graphs, dtype=np.int64).reshape(-1, len(GRAPH_COLUMNS)),
                 "nodes": np.array(w.nodes, dtype=np.int64).reshape(-1, len(NODE_COLUMNS))}
    structure.update({name: np.array(items, dtype=np.int64) for name, items in w.flat.items()})
    return tables, structure, w.arrays


class _Reader:
    def __init__(self, where: str, tables: JSON, structure: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> None:
        self.where = where
        self.ops: list[str] = [str(x) for x in tables["ops"]]
        self.locs: list[str] = [str(x) for x in tables["locations"]]
        self.names: list[str] = [str(x) for x in tables["names"]]
        self.types = [self.tensor_type(t) for t in tables["types"]]
        self.attrs = self.decode_attrs(tables["attrs"], arrays)
        bounds = {"params": len(self.types), "outputs": len(self.types), "members": None, "regions": None,
                  "inputs": None, "results": None}    # references to values are checked as they are resolved
        self.flat: dict[str, list[int]] = {name: self.column(structure, name, bounds[name]) for name in FLAT}
        sizes = {"name": len(self.names), "op": len(self.ops), "loc": len(self.locs), "attrs": len(self.attrs),
                 **{name: len(items) for name, items in self.flat.items()}}
        self.graphs: list[list[int]] = self.rows(structure, "graphs", GRAPH_COLUMNS, sizes)
        self.nodes: list[list[int]] = self.rows(structure, "nodes", NODE_COLUMNS, sizes)
        self.values: list[Value] = []

    def bad(self, what: str) -> ArtifactError:
        return ArtifactError(f"the program section is malformed: {what}", where=self.where,
                             hint="the artifact is damaged or from an incompatible trnsim; recompile it")

    def tensor_type(self, entry: Any) -> TensorType:
        try:
            shape, dtype = entry
            if dtype in DTYPES and all(isinstance(s, int) and s >= 0 for s in shape):
                return TensorType(tuple(shape), str(dtype))
        except (TypeError, ValueError):
            pass
        raise self.bad(f"bad type {entry!r}")

    def decode_attrs(self, text: Any, arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        def hook(d: dict[str, Any]) -> Any:
            if len(d) == 1:
                if "$a" in d:
                    name = d["$a"]
                    if name not in arrays:
                        raise self.bad(f"reference to a missing array {name!r}")
                    return np.array(arrays[name])
                if "$t" in d:
                    return tuple(d["$t"])
                if "$f" in d:
                    return float(d["$f"])
            return d

        try:
            decoded = json.loads(text, object_hook=hook)
        except (ValueError, TypeError) as exc:
            raise self.bad(f"the attributes are not valid JSON ({exc})") from exc
        if not isinstance(decoded, list) or not all(isinstance(a, dict) for a in decoded):
            raise self.bad("the attributes are not a list of objects")
        return cast(list[dict[str, Any]], decoded)

    def rows(self, structure: dict[str, np.ndarray], name: str, columns: tuple[str, ...],
             sizes: dict[str, int]) -> list[list[int]]:
        """The table as lists, after checking every index in it (so the loading loop need not)."""
        table = structure.get(name)
        if table is None or table.ndim != 2 or table.shape[1] != len(columns):
            raise self.bad(f"table {name!r} is missing or not {len(columns)} columns wide")
        for i, column in enumerate(columns):
            values = table[:, i]
            if column.endswith("_at"):
                end = table[:, i + 1]
                if ((values < 0) | (values > end) | (end > sizes[column[:-3]])).any():
                    raise self.bad(f"a {column[:-3]} range of {name!r} is out of bounds")
            elif not column.endswith("_end"):
                lowest = -1 if column == "attrs" else 0     # a node without attributes has attrs -1
                if ((values < lowest) | (values >= sizes[column])).any():
                    raise self.bad(f"a {column} index of {name!r} is out of bounds")
        return table.tolist()

    def column(self, structure: dict[str, np.ndarray], name: str, bound: int | None) -> list[int]:
        column = structure.get(name)
        if column is None or column.ndim != 1:
            raise self.bad(f"list {name!r} is missing or not flat")
        if column.size and (int(column.min()) < 0 or (bound is not None and int(column.max()) >= bound)):
            raise self.bad(f"list {name!r} holds an index out of bounds")
        return column.tolist()

    def graph(self, row: int) -> Graph:
        values, types, flat, rows = self.values, self.types, self.flat, self.nodes
        inputs_of, outputs_of, regions_of = flat["inputs"], flat["outputs"], flat["regions"]
        name, p0, p1, m0, m1, r0, r1 = self.graphs[row]
        params = [Value(types[t]) for t in flat["params"][p0:p1]]
        values.extend(params)
        nodes: list[Node] = []
        for member in flat["members"][m0:m1]:
            op, loc, attrs, i0, i1, o0, o1, g0, g1 = rows[member]
            # NOTE: arguments evaluate left to right: inputs refer to earlier values, then the regions define
            # theirs, then the outputs are defined — the writer's numbering
            node = Node(self.ops[op], [values[v] for v in inputs_of[i0:i1]], [],
                        {} if attrs < 0 else dict(self.attrs[attrs]),
                        [self.graph(g) for g in regions_of[g0:g1]] if g1 > g0 else [], self.locs[loc])
            outputs = node.outputs = [Value(types[t], node) for t in outputs_of[o0:o1]]
            values.extend(outputs)
            nodes.append(node)
        results = [values[v] for v in flat["results"][r0:r1]]
        return Graph(params, nodes, results, self.names[name])


def decode_graph(tables: JSON, structure: dict[str, np.ndarray], arrays: dict[str, np.ndarray], *,
                 where: str) -> Graph:
    """The graph of ``encode_graph``. Any inconsistency is an ``ArtifactError`` naming ``where``."""
    gc_was_enabled = gc.isenabled()
    gc.disable()    # NOTE: building ~10^3 Node/Value cycles would trigger collections that cost twice the build
    try:
        return _decode(tables, structure, arrays, where)
    finally:
        if gc_was_enabled:
            gc.enable()


def _decode(tables: JSON, structure: dict[str, np.ndarray], arrays: dict[str, np.ndarray], where: str) -> Graph:
    try:
        reader = _Reader(where, tables, structure, arrays)
    except (KeyError, TypeError) as exc:
        raise ArtifactError(f"the program section is malformed: missing or mistyped table ({exc})", where=where,
                            hint="the artifact is damaged or from an incompatible trnsim; recompile it") from exc
    if not reader.graphs or sorted(reader.flat["members"]) != list(range(len(reader.nodes))) or \
            sorted(reader.flat["regions"]) != list(range(1, len(reader.graphs))):
        raise reader.bad("its graphs and nodes do not form one tree")
    try:
        return reader.graph(0)
    except (IndexError, RecursionError) as exc:
        raise reader.bad(f"a value is used before it is defined ({type(exc).__name__})") from exc
