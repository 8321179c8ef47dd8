"""autocast and sparsity: narrow the operands of TensorE ops, as neuronx-cc's ``--auto-cast`` does.

``auto_cast="matmul"`` rewrites each float ``dot_general``/``convolution`` operand ``x`` to ``qdq(x)`` in
``auto_cast_type`` (bf16: a plain convert) and records the operand format on the node
(``operand_format``), which the cost rules read: TensorE runs fp8/MX/int4 at its low-precision rate
(``reference/neuron.md`` §1.4). Accumulation stays fp32 and the result type is unchanged. ``"all"`` also
computes every f32 elementwise op in bf16 (inputs converted, result converted back), as neuronx-cc's
``--auto-cast all`` does; reductions and compares stay in f32.

``sparsity="2:4"|"4:8"`` prunes the weight operand of each dot_general along its contracting dimension:
the operand that comes from a program parameter through layout ops only (the rhs when both do).
"""

from __future__ import annotations

from trnsim.compiler.pipeline import PassContext
from trnsim.compiler.rewrite import substitute
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.types import TensorType

_TENSOR_OPS = ("dot_general", "convolution")
_LAYOUT = frozenset({"reshape", "transpose", "convert", "broadcast_in_dim", "slice", "bitcast_convert", "qdq"})
_FLOATS = frozenset({"f32", "bf16", "f16"})
_NO_AUTOCAST_ALL = frozenset({"compare", "convert", "bitcast_convert", "reduce_precision", "qdq", "prune",
                              "iota", "constant", "is_finite"})


def _contracting_axis(node: Node, operand: int) -> int:
    if node.op == "dot_general":
        dims = node.attrs["dot_dimension_numbers"]
        key = "lhs_contracting_dimensions" if operand == 0 else "rhs_contracting_dimensions"
        return dims[key][-1] if dims[key] else -1
    dn = node.attrs["dimension_numbers"]
    return dn["input_feature_dimension"] if operand == 0 else dn["kernel_input_feature_dimension"]


def autocast(graph: Graph, ctx: PassContext) -> Graph:
    opts = ctx.options
    if opts.auto_cast == "none":
        ctx.stats.update(cast=0)
        return graph
    nodes: list[Node] = []
    mapping: dict[int, Value] = {}
    cast = 0
    for node in graph.nodes:
        if node.op in _TENSOR_OPS and all(v.type.dtype in _FLOATS for v in node.inputs):
            new_inputs = []
            for i, v in enumerate(node.inputs):
                if opts.auto_cast_type == "bf16":
                    if v.type.dtype == "bf16":
                        new_inputs.append(v)
                        continue
                    q = Node.make("convert", [v], [TensorType(v.type.shape, "bf16")], loc=node.loc)
                else:
                    q = Node.make("qdq", [v], [v.type], {"format": opts.auto_cast_type,
                                                         "axis": _contracting_axis(node, i)}, loc=node.loc)
                nodes.append(q)
                new_inputs.append(q.out)
            node.inputs = new_inputs
            node.attrs["operand_format"] = opts.auto_cast_type
            cast += 1
        elif (opts.auto_cast == "all" and not node.regions and node.op not in _NO_AUTOCAST_ALL
              and node.outputs and all(v.type.dtype == "f32" for v in node.outputs)
              and all(v.type.dtype == "f32" for v in node.inputs) and node.inputs
              and _kind(node.op) == "elementwise"):
            narrowed = [Node.make("convert", [v], [TensorType(v.type.shape, "bf16")], loc=node.loc)
                        for v in node.inputs]
            nodes.extend(narrowed)
            old = node.out
            inner = Node.make(node.op, [n.out for n in narrowed], [TensorType(old.type.shape, "bf16")],
                              node.attrs, loc=node.loc)
            back = Node.make("convert", [inner.out], [old.type], loc=node.loc)
            nodes.extend([inner, back])
            mapping[old.id] = back.out
            cast += 1
            continue
        nodes.append(node)
    graph.nodes = nodes
    substitute(graph, mapping)
    ctx.stats.update(cast=cast)
    return graph


def _kind(op: str) -> str:
    from trnsim.ir.rules import SEMANTICS, _load_rules  # pyright: ignore[reportPrivateUsage]

    _load_rules()
    rule = SEMANTICS.get(op)
    return rule.kind if rule else ""


def _from_parameter(v: Value, params: set[int]) -> bool:
    while v.id not in params:
        node = v.producer
        if node is None or node.op not in _LAYOUT or not node.inputs:
            return False
        v = node.inputs[0]
    return True


def sparsify(graph: Graph, ctx: PassContext) -> Graph:
    pattern = ctx.options.sparsity
    if pattern == "none":
        ctx.stats.update(pruned=0)
        return graph
    n, m = (int(x) for x in pattern.split(":"))
    params = {p.id for p in graph.params}
    nodes: list[Node] = []
    pruned = 0
    for node in graph.nodes:
        if node.op == "dot_general" and all(v.type.dtype in _FLOATS for v in node.inputs):
            choice = next((i for i in (1, 0) if _from_parameter(node.inputs[i], params)), None)
            if choice is not None:
                v = node.inputs[choice]
                p = Node.make("prune", [v], [v.type], {"n": n, "m": m, "axis": _contracting_axis(node, choice)},
                              loc=node.loc)
                nodes.append(p)
                node.inputs[choice] = p.out
                node.attrs["sparse"] = pattern
                node.attrs["sparse_operand"] = choice
                pruned += 1
        nodes.append(node)
    graph.nodes = nodes
    ctx.stats.update(pruned=pruned)
    return graph
