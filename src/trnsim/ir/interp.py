"""The reference interpreter: runs a ``Graph`` on numpy arrays, one op at a time, with the semantics table.

Values are freed after their last use, so a training step holds only its live tensors. A numpy error
inside a rule becomes a ``SimError`` naming the op and its StableHLO location.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.errors import SimError, TrnsimError
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.rules import lookup


class Env(dict[int, np.ndarray]):
    """Value id → array, falling back to the enclosing graph's values (regions capture outer values)."""

    def __init__(self, parent: Env | None = None) -> None:
        super().__init__()
        self.parent = parent

    def __missing__(self, key: int) -> np.ndarray:
        if self.parent is None:
            raise KeyError(key)
        return self.parent[key]


class Interpreter:
    """Evaluates graphs; rules call back into ``run_region`` for reduce bodies, loop bodies, comparators."""

    def __init__(self) -> None:
        self.ops_run = 0
        self._envs: list[Env] = []
        self._vectorized = 0
        self.region_runs: dict[int, int] = {}    # id(region) → times run (while trips, branches taken)

    def run(self, graph: Graph, args: Sequence[np.ndarray], parent: Env | None = None) -> list[np.ndarray]:
        env = Env(parent)
        for p, a in zip(graph.params, args, strict=True):
            env[p.id] = a
        last_use = _last_uses(graph) if parent is None else None
        for index, node in enumerate(graph.nodes):
            outs = self.run_node(node, [env[v.id] for v in node.inputs], env)
            for v, a in zip(node.outputs, outs, strict=True):
                env[v.id] = a
            if last_use is not None:
                for vid in last_use.get(index, ()):
                    env.pop(vid, None)
        return [env[v.id] for v in graph.results]

    def call(self, region: Graph, args: Sequence[np.ndarray], *, vectorized: bool = False) -> list[np.ndarray]:
        """Run a region of the node being evaluated (its captured values come from the node's graph).

        ``vectorized``: the arguments carry extra leading or broadcast dimensions (a reduce body applied to
        all the rows at once); shapes are then not checked against the region's scalar types."""
        self._vectorized += vectorized
        self.region_runs[id(region)] = self.region_runs.get(id(region), 0) + 1
        try:
            return self.run(region, args, parent=self._envs[-1])
        finally:
            self._vectorized -= vectorized

    def run_node(self, node: Node, args: list[np.ndarray], env: Env) -> list[np.ndarray]:
        rule = lookup(node.op, where=node.loc)
        self.ops_run += 1
        self._envs.append(env)
        try:
            with np.errstate(all="ignore"):
                outs = rule.evaluate(node, args, self)
        except TrnsimError:
            raise
        except KeyError as exc:
            key = exc.args[0] if exc.args else None
            if isinstance(key, str) and key not in node.attrs:  # a graph built by the importer has them all
                raise SimError(f"`{node.op}` has no `{key}` attribute", where=node.loc,
                               hint="the program is damaged (a compiled artifact edited and re-hashed?); compile "
                                    "it again from its module with `trnsim compile`") from exc
            raise SimError(f"`{node.op}` failed: KeyError {exc}", where=node.loc,
                           hint="this is a bug in trnsim's semantics for this op; please report it with the "
                                "module") from exc
        except (ValueError, IndexError, TypeError, OverflowError, FloatingPointError, MemoryError) as exc:
            raise SimError(f"`{node.op}` failed: {exc}", where=node.loc,
                           hint="this is a bug in trnsim's semantics for this op; please report it with the "
                                "module") from exc
        finally:
            self._envs.pop()
        result: list[np.ndarray] = []
        for v, a in zip(node.outputs, outs, strict=True):
            arr = np.asarray(a)
            if arr.dtype != v.type.np_dtype:
                arr = arr.astype(v.type.np_dtype)
            if arr.shape != v.type.shape and not self._vectorized:
                raise SimError(f"`{node.op}` produced shape {arr.shape}, its type says {v.type}", where=node.loc,
                               hint="this is a bug in trnsim's semantics for this op; please report it")
            result.append(arr)
        return result


def _last_uses(graph: Graph) -> dict[int, list[int]]:
    """Node index → ids of values whose last use is that node (never graph results or parameters)."""
    from trnsim.ir.graph import free_values

    last: dict[int, int] = {}
    for index, node in enumerate(graph.nodes):
        reads: list[Value] = list(node.inputs)
        for region in node.regions:
            reads.extend(free_values(region))
        for v in reads:
            last[v.id] = index
        for v in node.outputs:
            last.setdefault(v.id, index)
    keep = {v.id for v in graph.results}
    out: dict[int, list[int]] = {}
    for vid, index in last.items():
        if vid not in keep:
            out.setdefault(index, []).append(vid)
    return out
