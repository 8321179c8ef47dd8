"""MLIR (StableHLO) → trnsim graph IR.

``func.call`` is inlined at every call site, multi-result ops and ``%x#i`` references map to node outputs,
tuples are flattened (``tuple`` makes a Python tuple of its elements, ``get_tuple_element`` picks one,
tuple-typed arguments and results of the entry function become their leaves, depth first, with the nesting
kept in ``Imported.signature``), regions become nested graphs, attributes become plain Python values
through one table of converters, and sharding annotations (``sdy.sharding``, ``mhlo.sharding``) are read
and kept on the graph for the partitioner. The conformance runner can lift a function (``@inputs``) to graph
parameters and collect the ``check.*`` custom_calls instead of importing them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import numpy as np

from trnsim.errors import CompileError, UnsupportedError
from trnsim.frontend.constants import decode_dense
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.types import DTYPES, TensorType


@dataclass
class Check:
    """A ``check.expect_*`` custom_call of a conformance file: compare ``actual`` with ``expected``."""

    kind: str
    actual: Value
    expected: Value
    where: str


# A value of the module as the importer tracks it: a tensor, or a (nested) tuple of them.
Tree: TypeAlias = "Value | tuple[Tree, ...]"
# Where the leaves of a declared argument or result sit among the graph's flat parameters or results.
Structure: TypeAlias = "int | tuple[Structure, ...]"
T = TypeVar("T")


@dataclass(frozen=True)
class Signature:
    """The entry function's declared arguments and results over the graph's flat parameters and results: one
    entry per declared value, an int (its flat position) for a tensor, a tuple of entries for a tuple.

        func.func @main(%a: tuple<tensor<2xf32>, tuple<tensor<i32>>>, %b: tensor<f32>) -> tuple<...>
        params = ((0, (1,)), 2)   → graph.params [a.0, a.1.0, b]"""

    params: tuple[Structure, ...] = ()
    results: tuple[Structure, ...] = ()

    @property
    def has_tuples(self) -> bool:
        return any(isinstance(e, tuple) for e in (*self.params, *self.results))

    def unflatten_results(self, flat: Sequence[T]) -> list[Any]:
        """The program's flat outputs in the declared structure (tuples as Python tuples)."""
        return [_build(e, flat) for e in self.results]

    def to_json(self) -> dict[str, Any]:
        """Nested lists (an artifact's metadata); ``from_json`` reads them back."""
        return {"params": _lists(self.params), "results": _lists(self.results)}

    @staticmethod
    def from_json(data: Any, params: int, results: int) -> Signature:
        """The signature in ``to_json``'s form, checked against the graph's ``params`` and ``results`` counts
        (each flat position used once); ``ValueError`` says what is wrong."""
        if not isinstance(data, dict) or set(data) != {"params", "results"}:  # type: ignore[arg-type]
            raise ValueError(f"a signature is {{params, results}}, not {data!r}")
        sig = Signature(_tuples(data["params"]), _tuples(data["results"]))  # type: ignore[index]
        for name, entries, n in (("params", sig.params, params), ("results", sig.results, results)):
            leaves = sorted(_leaves(entries))
            if leaves != list(range(n)):
                raise ValueError(f"the signature's {name} cover positions {leaves}, not 0..{n - 1}")
        return sig

    def flatten_params(self, args: Sequence[Any]) -> list[Any]:
        """Arguments given in the declared structure (tuples as Python tuples or lists), as the program's flat
        inputs."""
        if len(args) != len(self.params):
            raise CompileError(f"the function takes {len(self.params)} arguments, got {len(args)}",
                               where="Signature.flatten_params", hint="pass one value per declared argument")
        flat: dict[int, Any] = {}
        for entry, arg in zip(self.params, args, strict=True):
            _scatter(entry, arg, flat)
        return [flat[i] for i in range(len(flat))]


def _lists(entries: tuple[Structure, ...]) -> list[Any]:
    return [e if isinstance(e, int) else _lists(e) for e in entries]


def _tuples(data: Any) -> tuple[Structure, ...]:
    if not isinstance(data, list):
        raise ValueError(f"expected a list of positions and lists, got {data!r}")
    out: list[Structure] = []
    for e in data:  # type: ignore[union-attr]
        if isinstance(e, bool) or not isinstance(e, int | list):
            raise ValueError(f"expected a position or a list, got {e!r}")
        out.append(e if isinstance(e, int) else _tuples(e))
    return tuple(out)


def _leaves(entries: tuple[Structure, ...]) -> list[int]:
    return [x for e in entries for x in ([e] if isinstance(e, int) else _leaves(e))]


def _build(entry: Structure, flat: Sequence[T]) -> Any:
    return flat[entry] if isinstance(entry, int) else tuple(_build(e, flat) for e in entry)


def _scatter(entry: Structure, arg: Any, flat: dict[int, Any]) -> None:
    if isinstance(entry, int):
        flat[entry] = arg
        return
    if not isinstance(arg, tuple | list) or len(arg) != len(entry):   # type: ignore[arg-type]
        raise CompileError(f"expected a tuple of {len(entry)} values, got {type(arg).__name__}",
                           where="Signature.flatten_params", hint="pass tuple arguments as Python tuples")
    for e, a in zip(entry, arg, strict=True):   # type: ignore[arg-type]
        _scatter(e, a, flat)


def _structures(trees: Sequence[Tree]) -> tuple[list[Structure], int]:
    out: list[Structure] = []
    start = 0
    for t in trees:
        entry, start = _structure(t, start)
        out.append(entry)
    return out, start


def leaves(tree: Tree) -> list[Value]:
    """The tensors of a tree, depth first."""
    if isinstance(tree, Value):
        return [tree]
    return [v for t in tree for v in leaves(t)]


def _structure(tree: Tree, start: int) -> tuple[Structure, int]:
    """The positions of ``tree``'s leaves when they are numbered from ``start``; the next free number."""
    if isinstance(tree, Value):
        return start, start + 1
    out: list[Structure] = []
    for t in tree:
        entry, start = _structure(t, start)
        out.append(entry)
    return tuple(out), start


@dataclass
class Imported:
    graph: Graph
    checks: list[Check] = field(default_factory=list[Check])
    lifted: Graph | None = None           # the lifted function, evaluated to give the arguments
    shardings: dict[str, str] = field(default_factory=dict[str, str])
    attributes: dict[str, str] = field(default_factory=dict[str, str])
    signature: Signature = field(default_factory=Signature)


_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')


class _Importer:
    def __init__(self, module: Any, where: str, lift: str | None, collect_checks: bool) -> None:
        self.where = where
        self.lift = lift
        self.collect_checks = collect_checks
        self.checks: list[Check] = []
        self.lifted: Graph | None = None
        self.lifted_values: list[Value] = []
        self.shardings: dict[str, str] = {}
        self.funcs: dict[str, Any] = {}
        self.depth = 0
        self.sites: list[str] = []          # file:line:col of the calls being inlined
        for op in module.body.operations:
            o = op.operation
            if o.name == "func.func":
                self.funcs[_str_attr(o.attributes["sym_name"])] = o

    # -- locations and types --------------------------------------------------------------------------
    def loc(self, op: Any) -> str:
        text = str(op.location)
        m = _LOC.search(text)
        name = re.match(r'loc\("([^"]+)"\(', text)
        if m is None:
            # NOTE: ops in outlined functions may carry only a name (loc("lu")): point at the call site
            only = re.fullmatch(r'loc\("([^"]+)"\)', text)
            label = f", {only.group(1)}" if only else ""
            site = self.sites[-1] if self.sites else self.where
            return f"{site} ({op.name}{label})"
        file = m.group(1)
        place = f"{self.where if file in ('-', '') else file}:{m.group(2)}:{m.group(3)}"
        return f"{place} ({op.name}{', ' + name.group(1) if name else ''})"

    def tensor_type(self, t: Any, where: str) -> TensorType:
        from jaxlib.mlir import ir

        if isinstance(t, ir.TupleType):
            raise UnsupportedError(f"a value of tuple type {t} here cannot be flattened", where=where,
                                   hint="trnsim flattens tuples made by `tuple`, read by `get_tuple_element`, "
                                        "passed to calls and taken or returned by the entry function; unpack "
                                        "the tuple into separate tensors for other ops")
        if not isinstance(t, ir.RankedTensorType):
            raise UnsupportedError(f"values of type {t} are not supported", where=where,
                                   hint="trnsim compiles programs over ranked tensors (no tokens)")
        rt = ir.RankedTensorType(t)
        if not rt.has_static_shape:
            raise UnsupportedError(f"dynamic shape {t}", where=where,
                                   hint="export with static shapes (no shape polymorphism)")
        name = str(rt.element_type)
        dt = DTYPES.get(name)
        if dt is None:
            known = ", ".join(n for n, d in DTYPES.items() if d.support != "unsupported")
            raise UnsupportedError(f"element type {name} is not supported", where=where,
                                   hint=f"supported element types: {known}")
        if dt.support == "unsupported":
            raise UnsupportedError(f"element type {name} is not supported", where=where, hint=dt.why)
        return TensorType(tuple(rt.shape), name)

    def tree_type(self, t: Any, where: str) -> Tree:
        """A fresh value for an argument of type ``t``; a tuple type gives a tuple of them, nested alike."""
        from jaxlib.mlir import ir

        if isinstance(t, ir.TupleType):
            tt = ir.TupleType(t)
            return tuple(self.tree_type(tt.get_type(i), f"{where}, element {i}") for i in range(tt.num_types))
        return Value(self.tensor_type(t, where))

    # -- functions -------------------------------------------------------------------------------------
    def function(self, name: str, where: str) -> Any:
        f = self.funcs.get(name)
        if f is None:
            raise CompileError(f"function @{name} is not defined in the module", where=where,
                               hint=f"functions here: {', '.join('@' + n for n in self.funcs) or 'none'}")
        return f

    def import_entry(self, name: str) -> tuple[Graph, Signature]:
        f = self.function(name, self.where)
        block = f.regions[0].blocks[0]
        where = self.loc(f)
        if not _LOC.search(str(f.location)):
            # NOTE: JAX's debug info leaves functions at loc(unknown); the first op's source line is the
            # nearest place to point at
            first = next((op for op in block.operations if _LOC.search(str(op.operation.location))), None)
            if first is not None:
                where = self.loc(first.operation)
        trees = [self.tree_type(a.type, f"{where}, argument {i} of @{name}") for i, a in enumerate(block.arguments)]
        vmap: dict[Any, Tree] = dict(zip(block.arguments, trees, strict=True))
        param_entries, count = _structures(trees)
        self._read_arg_shardings(f, param_entries)
        nodes: list[Node] = []
        results = self.block(block, vmap, nodes)
        result_entries, _ = _structures(results)
        params = [v for t in trees for v in leaves(t)]
        assert len(params) == count
        graph = Graph(params, nodes, [v for t in results for v in leaves(t)], name=name)
        return graph, Signature(tuple(param_entries), tuple(result_entries))

    def _read_arg_shardings(self, f: Any, entries: list[Structure]) -> None:
        """Shardings of the arguments, keyed by flat parameter (``arg3``); a tuple argument's applies to none
        of its leaves (XLA's tuple shardings list one per leaf, which JAX never emits for StableHLO)."""
        attrs = f.attributes
        if "arg_attrs" not in attrs:
            return
        for i, a in enumerate(attrs["arg_attrs"]):
            text = str(a)
            m = re.search(r'(sdy\.sharding = #sdy\.sharding<[^>]*>|mhlo\.sharding = "[^"]*")', text)
            if m and isinstance(entries[i], int):
                self.shardings[f"arg{entries[i]}"] = m.group(1)

    def block(self, block: Any, vmap: dict[Any, Tree], nodes: list[Node]) -> list[Tree]:
        for op in block.operations:
            o = op.operation
            name = o.name
            if name in ("func.return", "stablehlo.return", "sdy.return"):
                return [vmap[v] for v in o.operands]
            if name == "func.call":
                outs = self.inline(o, vmap, nodes)
            elif name == "stablehlo.composite":      # its decomposition is its meaning: inline it
                outs = self.inline(o, vmap, nodes, callee_attr="decomposition")
            elif name in ("stablehlo.tuple", "mhlo.tuple"):
                outs = [tuple(vmap[v] for v in o.operands)]
            elif name in ("stablehlo.get_tuple_element", "mhlo.get_tuple_element"):
                outs = [self.tuple_element(o, vmap)]
            elif name == "stablehlo.custom_call" and self.collect_checks and \
                    _str_attr(o.attributes["call_target_name"]).startswith("check."):
                outs = self.check(o, vmap, nodes)
            elif name == "stablehlo.custom_call" and _str_attr(o.attributes["call_target_name"]) == "ApproxTopK":
                outs = self.approx_top_k(o, vmap, nodes)
            else:
                outs = self.node(o, vmap, nodes)
            for r, v in zip(o.results, outs, strict=True):
                vmap[r] = v
        raise CompileError("a block has no terminator", where=self.where)

    def tuple_element(self, o: Any, vmap: dict[Any, Tree]) -> Tree:
        """``get_tuple_element``: the element itself (tuples exist only at import)."""
        tree = vmap[o.operands[0]]
        index = int(o.attributes["index"].value)
        if isinstance(tree, Value) or not 0 <= index < len(tree):
            raise CompileError(f"get_tuple_element index {index} is out of range for its operand",
                               where=self.loc(o), hint="the module is malformed")
        return tree[index]

    def inline(self, o: Any, vmap: dict[Any, Tree], nodes: list[Node], callee_attr: str = "callee") -> list[Tree]:
        if callee_attr not in o.attributes:
            raise CompileError(f"`{o.name}` has no `{callee_attr}` function", where=self.loc(o),
                               hint="the module is malformed")
        callee_name = str(o.attributes[callee_attr]).lstrip("@")
        where = self.loc(o)
        if callee_name == self.lift:
            return self.lift_call(callee_name, o, where)
        callee = self.function(callee_name, where)
        self.depth += 1
        if _LOC.search(str(o.location)):
            self.sites.append(where.split(" (")[0])
        if self.depth > 200:
            raise UnsupportedError(f"recursive call of @{callee_name}", where=where,
                                   hint="StableHLO programs from JAX never recurse; unroll the recursion")
        block = callee.regions[0].blocks[0]
        inner: dict[Any, Tree] = dict(zip(block.arguments, (vmap[v] for v in o.operands), strict=True))
        try:
            outs = self.block(block, inner, nodes)
        finally:
            self.depth -= 1
            if _LOC.search(str(o.location)):
                self.sites.pop()
        return outs

    def lift_call(self, name: str, o: Any, where: str) -> list[Tree]:
        """The call's results become parameters of the entry graph; the callee is kept to compute them."""
        self.lifted = self.import_entry(name)[0]
        values = [Value(self.tensor_type(r.type, where)) for r in o.results]
        self.lifted_values.extend(values)
        return list[Tree](values)

    def check(self, o: Any, vmap: dict[Any, Tree], nodes: list[Node]) -> list[Tree]:
        """Record the check; the older ``check.eq`` form returns an i1 that ``main`` returns: true here (the
        runner applies the check itself)."""
        where = self.loc(o)
        kind = _str_attr(o.attributes["call_target_name"]).removeprefix("check.")
        operands = self.tensors(o, vmap, where)
        if len(operands) == 1 and kind.endswith("_const") and "value" in o.attributes:
            value = convert_attribute("value", o.attributes["value"], where)
            const = Node.make("constant", [], [operands[0].type], {"value": value}, loc=where)
            nodes.append(const)
            operands.append(const.out)
            kind = kind.removesuffix("_const")
        if len(operands) != 2:
            raise CompileError(f"check.{kind} takes an actual and an expected value, not {len(operands)} operands",
                               where=where, hint="conformance checks compare two tensors of one type")
        self.checks.append(Check(kind, operands[0], operands[1], where))
        outs: list[Tree] = []
        for r in o.results:
            t = self.tensor_type(r.type, where)
            const = Node.make("constant", [], [t], {"value": np.ones(t.shape, t.np_dtype)}, loc=where)
            nodes.append(const)
            outs.append(const.out)
        return outs

    def approx_top_k(self, o: Any, vmap: dict[Any, Tree], nodes: list[Node]) -> list[Tree]:
        """``ApproxTopK`` (``lax.approx_max_k``/``approx_min_k``): ``n`` operands, then ``n`` initial values, a
        comparator function of ``2n`` scalars in ``called_computations``, and ``reduction_dim``/``top_k`` in
        ``mhlo.backend_config``. Imported as XLA runs it where no approximate kernel exists (its fallback): a
        stable sort of the operands along the reduction dim by the comparator, each result the first entries of
        its sorted operand (``top_k`` of them, or what the result type has when ``aggregate_to_topk`` is off).
        An exact top-k is a valid answer to any recall target."""
        where = self.loc(o)
        operands = self.tensors(o, vmap, where)
        n = len(o.results)
        config, computations = _optional(o, "mhlo.backend_config"), _optional(o, "called_computations") or []
        if config is None or "reduction_dim" not in config or len(operands) != 2 * n or len(computations) != 1:
            raise CompileError("ApproxTopK needs n operands, n initial values, one comparator in "
                               "called_computations and reduction_dim in mhlo.backend_config", where=where,
                               hint="the module is malformed (JAX's lax.approx_max_k emits this form)")
        dim = int(config["reduction_dim"].value)
        callee = self.function(str(computations[0]).strip('"').lstrip("@"), where)
        block = callee.regions[0].blocks[0]
        params = [Value(self.tensor_type(a.type, where)) for a in block.arguments]
        body: list[Node] = []
        results = self.block(block, dict(zip(block.arguments, params, strict=True)), body)
        if len(params) != 2 * n or len(results) != 1 or not isinstance(results[0], Value):
            raise CompileError(f"the ApproxTopK comparator takes {len(params)} scalars and returns "
                               f"{len(results)} values, not {2 * n} and one i1", where=where,
                               hint="the module is malformed")
        comparator = Graph(params, body, [results[0]], name="sort.region")
        inputs = operands[:n]
        sort = Node.make("sort", inputs, [v.type for v in inputs], {"dimension": dim, "is_stable": True},
                         [comparator], where)
        nodes.append(sort)
        outs: list[Tree] = []
        for value, r in zip(sort.outputs, o.results, strict=True):
            t = self.tensor_type(r.type, where)
            if t.rank != value.type.rank or not 0 <= dim < t.rank or \
                    any(a != b for d, (a, b) in enumerate(zip(t.shape, value.type.shape, strict=True)) if d != dim):
                raise CompileError(f"an ApproxTopK result of shape {t.shape} for an operand of shape "
                                   f"{value.type.shape} along dim {dim}", where=where, hint="the module is malformed")
            take = Node.make("slice", [value], [t], {"start_indices": (0,) * t.rank, "limit_indices": t.shape,
                                                     "strides": (1,) * t.rank}, [], where)
            nodes.append(take)
            outs.append(take.out)
        return outs

    # -- ops -------------------------------------------------------------------------------------------
    def tensors(self, o: Any, vmap: dict[Any, Tree], where: str) -> list[Value]:
        """The operands of an op that takes tensors only."""
        out: list[Value] = []
        for i, v in enumerate(o.operands):
            tree = vmap[v]
            if not isinstance(tree, Value):
                self.tensor_type(v.type, f"{where}, operand {i}")       # raises: a tuple cannot be flattened here
                raise AssertionError("a tuple value with a tensor type")
            out.append(tree)
        return out

    def node(self, o: Any, vmap: dict[Any, Tree], nodes: list[Node]) -> list[Tree]:
        where = self.loc(o)
        dialect, _, op = o.name.partition(".")
        if dialect not in ("stablehlo", "mhlo"):
            if o.name == "sdy.sharding_constraint":
                op = "custom_call"
            else:
                raise UnsupportedError(f"op `{o.name}` is not supported", where=where,
                                       hint="trnsim compiles the stablehlo dialect (chlo is legalised first)")
        inputs = self.tensors(o, vmap, where)
        out_types = [self.tensor_type(r.type, where) for r in o.results]
        attrs = {}
        for named in o.attributes:
            key = named if isinstance(named, str) else named.name
            attrs[key] = convert_attribute(key, o.attributes[key], where)
        if o.name == "sdy.sharding_constraint":
            attrs = {"call_target_name": "Sharding", "sharding": attrs.get("sharding", "")}
        if op == "custom_call":
            _check_custom_call(str(attrs.get("call_target_name", "")), where)
        regions: list[Graph] = []
        for region in o.regions:
            block = region.blocks[0]
            params = [Value(self.tensor_type(a.type, where)) for a in block.arguments]
            inner = dict(vmap)
            inner.update(zip(block.arguments, params, strict=True))
            body: list[Node] = []
            results = self.block(block, inner, body)
            if not all(isinstance(r, Value) for r in results):
                raise UnsupportedError(f"a region of `{o.name}` returns a tuple", where=where,
                                       hint="return the tuple's elements as separate values")
            regions.append(Graph(params, body, [r for r in results if isinstance(r, Value)], name=f"{op}.region"))
        node = Node.make(op, inputs, out_types, attrs, regions, where)
        nodes.append(node)
        return list(node.outputs)


def _optional(o: Any, name: str) -> Any:
    """The op's attribute ``name``, or None (MLIR's attribute maps have no ``get``)."""
    return o.attributes[name] if name in o.attributes else None  # noqa: SIM401


def _check_custom_call(target: str, where: str) -> None:
    """Reject a custom_call target trnsim cannot run now, at compile time, not when the program runs."""
    from trnsim.ir.semantics.control import CUSTOM_CALLS

    if target not in CUSTOM_CALLS:
        raise UnsupportedError(
            f"custom_call target `{target}` is not supported", where=where,
            hint=f"trnsim runs these custom_calls: {', '.join(sorted(CUSTOM_CALLS))}; a library call (LAPACK, "
                 "cuDNN) needs the plain-JAX form of the computation (for example jnp ops instead of "
                 "jnp.linalg)")


def _str_attr(a: Any) -> str:
    return str(a.value) if hasattr(a, "value") else str(a).strip('"')


# ---- attributes: one converter per attribute name, then by attribute class ------------------------------

def _dims(names: tuple[str, ...], rename: dict[str, str] | None = None) -> Callable[[Any], dict[str, Any]]:
    def convert(wrapped: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n in names:
            value = getattr(wrapped, (rename or {}).get(n, n))
            out[n] = value if isinstance(value, int) else tuple(int(x) for x in value)
        return out

    return convert


def _wrapped(cls_name: str, convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def fn(a: Any) -> Any:
        from jaxlib.mlir.dialects import stablehlo

        return convert(getattr(stablehlo, cls_name)(a))

    return fn


def _enum(cls_name: str) -> Callable[[Any], str]:
    def fn(a: Any) -> str:
        from jaxlib.mlir.dialects import stablehlo

        try:
            return str(getattr(stablehlo, cls_name)(a).value)
        except Exception:   # an enum spelled in another form: keep the last word of its text
            return str(a).rstrip(">").split()[-1]

    return fn


_DOT = ("lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
        "rhs_contracting_dimensions")
_GATHER = ("offset_dims", "collapsed_slice_dims", "operand_batching_dims", "start_indices_batching_dims",
           "start_index_map", "index_vector_dim")
_SCATTER = ("update_window_dims", "inserted_window_dims", "input_batching_dims", "scatter_indices_batching_dims",
            "scatter_dims_to_operand_dims", "index_vector_dim")
_CONV = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
         "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions",
         "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions")

_BY_NAME: dict[str, Callable[[Any], Any]] = {
    "dot_dimension_numbers": _wrapped("DotDimensionNumbers", _dims(_DOT)),
    "scatter_dimension_numbers": _wrapped(
        "ScatterDimensionNumbers",
        _dims(_SCATTER, {"scatter_dims_to_operand_dims": "scattered_dims_to_operand_dims"})),
    "comparison_direction": _enum("ComparisonDirectionAttr"),
    "compare_type": _enum("ComparisonTypeAttr"),
    "transpose_a": _enum("TransposeAttr"),
    "fft_type": _enum("FftTypeAttr"),
    "rng_algorithm": _enum("RngAlgorithmAttr"),
    "rng_distribution": _enum("RngDistributionAttr"),
    "precision_config": lambda a: tuple(str(x).rstrip(">").split()[-1] for x in a),
}


def convert_attribute(name: str, a: Any, where: str) -> Any:
    """A plain Python value for an MLIR attribute: ints, bools, strings, tuples, numpy arrays, dicts."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    if name in _BY_NAME:
        return _BY_NAME[name](a)
    if name == "dimension_numbers":     # gather and convolution share the attribute name
        if stablehlo.GatherDimensionNumbers.isinstance(a):
            return _dims(_GATHER)(stablehlo.GatherDimensionNumbers(a))
        if stablehlo.ConvDimensionNumbers.isinstance(a):
            return _dims(_CONV)(stablehlo.ConvDimensionNumbers(a))
    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, ir.IntegerAttr):
        return int(a.value)
    if isinstance(a, ir.FloatAttr):
        return float(a.value)
    if isinstance(a, ir.StringAttr):
        return str(a.value)
    if isinstance(a, ir.DenseI64ArrayAttr | ir.DenseI32ArrayAttr):
        return tuple(int(x) for x in a)
    if isinstance(a, ir.DenseBoolArrayAttr):
        return tuple(bool(x) for x in a)
    if isinstance(a, ir.DenseIntElementsAttr | ir.DenseFPElementsAttr | ir.DenseElementsAttr):
        return decode_dense(a, where)
    if isinstance(a, ir.ArrayAttr):
        return tuple(str(x) for x in a)
    if isinstance(a, ir.FlatSymbolRefAttr):
        return str(a.value)
    if isinstance(a, ir.TypeAttr):
        return str(a.value)
    if name == "value":
        raise UnsupportedError(f"constant {str(a)[:80]} is not supported", where=where,
                               hint="complex and opaque (dense_resource without data) constants are not "
                                    "supported")
    return str(a)


def import_module(module: Any, *, where: str, entry: str = "main", lift: str | None = None,
                  collect_checks: bool = False) -> Imported:
    """The entry function of ``module`` as a graph (calls inlined), with checks and the lifted function."""
    imp = _Importer(module, where, lift, collect_checks)
    if entry not in imp.funcs:
        public = [n for n, f in imp.funcs.items() if "sym_visibility" not in f.attributes]
        if len(public) == 1:
            entry = public[0]
    graph, signature = imp.import_entry(entry)
    graph.params.extend(imp.lifted_values)
    attrs = {}
    for named in module.operation.attributes:
        key = named if isinstance(named, str) else named.name
        attrs[key] = str(module.operation.attributes[key])
    return Imported(graph, imp.checks, imp.lifted, imp.shardings, attrs, signature)


__all__ = ["Check", "Imported", "Signature", "convert_attribute", "import_module", "leaves"]
