"""canonicalize: fold constants, drop no-op reshapes/converts/transposes/broadcasts, split variadic reduces
whose results combine independently, remove dead code.

Folding evaluates a node whose inputs are all constants with the reference semantics, when its result has
at most ``fold_limit`` elements and is no larger than its inputs (broadcasts of constants stay ops: the
device makes them on chip), so compile time and artifacts stay small and folded values are bit-identical
to what the device would compute.

A variadic ``reduce`` whose reducer computes each result from its own accumulator and element alone (JAX's
``lax.reduce`` over a tuple with one combiner per operand) is the same as one ``reduce`` per operand: split,
each is an ordinary reduction the kernels take (and an unused one is dead code). Reducers that mix operands
(argmax's value-and-index pairs) stay whole.
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.pipeline import PassContext
from trnsim.compiler.rewrite import dead_code, substitute
from trnsim.ir.graph import Graph, Node, Value, free_values
from trnsim.ir.interp import Interpreter

_NO_FOLD = frozenset({"rng_bit_generator", "custom_call", "while", "case", "if", "optimization_barrier",
                      "replica_id", "partition_id"})


def _is_noop(node: Node) -> bool:
    if len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0].type != node.out.type:
        return False
    a = node.attrs
    if node.op in ("reshape", "convert", "bitcast_convert"):
        return True
    if node.op == "transpose":
        return list(a["permutation"]) == sorted(a["permutation"])
    if node.op == "broadcast_in_dim":
        return list(a["broadcast_dimensions"]) == list(range(node.out.type.rank))
    return False


def _expands(node: Node) -> bool:
    """Folding would store a larger constant than its inputs (a broadcast, an iota, padding): the device
    generates those values on chip for free, so they stay ops."""
    biggest = max(v.type.size for v in node.inputs)
    return any(v.type.size > max(biggest, 64) for v in node.outputs)


def canonicalize(graph: Graph, ctx: PassContext) -> Graph:
    limit = ctx.options.fold_limit
    constants: dict[int, np.ndarray] = {}
    mapping: dict[int, Value] = {}
    interp = Interpreter()
    nodes: list[Node] = []
    folded = noops = 0
    split = 0
    for node in graph.nodes:
        node.inputs = [mapping.get(v.id, v) for v in node.inputs]
        parts = _split_reduce(node)
        if parts is not None:
            for old, part in zip(node.outputs, parts, strict=True):
                mapping[old.id] = part.out
            nodes.extend(parts)
            split += 1
            continue
        if _is_noop(node):
            mapping[node.out.id] = node.inputs[0]
            noops += 1
            continue
        if node.op == "constant":
            constants[node.out.id] = node.attrs["value"]
        elif (node.op not in _NO_FOLD and node.inputs and all(v.id in constants for v in node.inputs)
              and not node.regions and all(v.type.size <= limit for v in node.outputs)
              and not _expands(node)):
            values = interp.run_node(node, [constants[v.id] for v in node.inputs], _empty_env())
            replacements = []
            for v, a in zip(node.outputs, values, strict=True):
                const = Node.make("constant", [], [v.type], {"value": np.array(a, order="C")}, loc=node.loc)
                constants[const.out.id] = const.attrs["value"]
                mapping[v.id] = const.out
                replacements.append(const)
            nodes.extend(replacements)
            folded += 1
            continue
        nodes.append(node)
    graph.nodes = nodes
    substitute(graph, mapping)
    removed = dead_code(graph)
    ctx.stats.update(folded=folded, noops=noops, dead=removed, split_reduces=split)
    return graph


def _split_reduce(node: Node) -> list[Node] | None:
    """One ``reduce`` per operand of a variadic ``reduce`` whose reducer's result ``j`` depends only on its
    parameters ``j`` and ``n + j`` (accumulator and element of operand ``j``) through region nodes of its
    own (module docstring), else None. Inputs are ``[x_0 .. x_n-1, init_0 .. init_n-1]``."""
    n = len(node.outputs)
    if node.op != "reduce" or n < 2 or len(node.regions) != 1:
        return None
    body = node.regions[0]
    if len(body.params) != 2 * n or len(body.results) != n or free_values(body):
        return None
    producer = {v.id: nd for nd in body.nodes for v in nd.outputs}
    owner: dict[int, int] = {}  # id(node) → the result whose cone it is in
    for j, result in enumerate(body.results):
        stack, allowed = [result], {body.params[j].id, body.params[n + j].id}
        while stack:
            v = stack.pop()
            nd = producer.get(v.id)
            if nd is None:
                if v.id not in allowed:
                    return None  # another operand's parameter (or the other result's)
                continue
            if owner.setdefault(id(nd), j) != j or nd.regions:
                return None
            stack.extend(nd.inputs)
    parts = []
    for j in range(n):
        region = Graph([body.params[j], body.params[n + j]], [nd for nd in body.nodes if owner.get(id(nd)) == j],
                       [body.results[j]], body.name)
        parts.append(Node.make("reduce", [node.inputs[j], node.inputs[n + j]], [node.outputs[j].type],
                               dict(node.attrs), [region], node.loc))
    return parts


def _empty_env():  # type: ignore[no-untyped-def]
    from trnsim.ir.interp import Env

    return Env()
