"""Selection steps: the sort that ``chlo.top_k`` becomes, lowered to the library's ``topk_kernel``, and the
variadic reduce of ``jnp.argmax`` / ``jnp.argmin``, lowered to ``argmax_kernel``.

jaxlib legalizes ``chlo.top_k(x, k)`` (what ``jax.lax.top_k`` emits) into a stable ``sort`` of ``x`` and an
``iota`` along the last axis, compared ``GT`` in the total order, and two ``slice``s of the first ``k``
columns (integers: compared ``GT`` as the type's SIGNED / UNSIGNED order). When every read of such a sort's
results is one of those slices, the step is the top-k kernel (``trnsim.kernels.selection``: ⌈k/8⌉ rounds of
VectorE's max8 / find_index8 / match_replace8 per tile of 128 rows; 32-bit integers as two exact 16-bit
halves, rows of at most ``MAX_SPLIT_ROW``), timed by the instruction-level model.

Any other ``sort`` whose comparator is one JAX emits (``lax.sort`` / ``jnp.sort`` / ``jnp.argsort``: keys
lexicographic, floats canonical in the total order, integers SIGNED / UNSIGNED; ``_comparator``) over
dtypes of ≤ 32 bits is the sort kernel (``trnsim.kernels.sort``: a bitonic network on VectorE, one row a
partition, long rows in chunks merged through HBM), an iota operand along the axis being its positions;
rows of ``2**22`` values or more, other comparators and 64-bit, boolean or complex operands keep the analytic
cost (``costs.sort_cost``).

``jnp.argmax(x, axis)`` (and ``lax.argmax``) is a ``reduce`` over ``axis`` of ``(x, iota along axis)`` from
``(-inf, 0)`` (the lowest integer for integer ``x``) whose body keeps the larger value, a NaN above any number,
and on equal values the lower index (``_ARG_BODY``); ``argmin`` the same with ``LT`` from ``+inf``. When only
the indices are read, the step is the argmax kernel (``trnsim.kernels.selection``: max8 / find_index8 per row
chunk, VectorE; 32-bit integers as two 16-bit keys); 64-bit types are not lowered at all.

A kernel of more than ``2 · SAMPLE_TILES`` row tiles is timed on ``SAMPLE_TILES`` and twice as many and
extrapolated linearly (``kernel_timing.linear_fit``): its tiles repeat the same rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from trnsim.compiler.kernel_timing import TileTime, extrapolate, linear_fit, time_kernel
from trnsim.ir.graph import Graph, Node
from trnsim.ir.types import FLOATS, INTS, isa_dtypes

DSL_DTYPE = isa_dtypes(*FLOATS)
# the dtypes the top-k kernel orders exactly (32-bit integers as two halves) → DSL dtype
TOPK_DTYPES = {**isa_dtypes(*FLOATS, *INTS), "i1": "uint8"}  # a bool is its byte: false < true as unsigned bytes
PARTITIONS = 128
SAMPLE_TILES = 16


@dataclass(frozen=True)
class TopK:
    """The ``k`` largest of each of ``rows`` rows of ``cols`` values (``dtype``: the DSL dtype)."""

    rows: int
    cols: int
    k: int
    dtype: str


def topk_for(sort: Node, consumers: dict[int, list[Node]], results: set[int]) -> TopK | None:
    """The top-k that ``sort`` computes, if it is the legalized ``chlo.top_k`` and only its first ``k``
    columns are read (module docstring); else None."""
    from trnsim.kernels.selection import MAX_ROW, MAX_SPLIT_ROW, SPLIT_KEYS

    if sort.op != "sort" or len(sort.inputs) != 2 or not sort.attrs.get("is_stable", False):
        return None
    values, index = sort.inputs
    shape = values.type.shape
    axis = len(shape) - 1
    dtype = TOPK_DTYPES.get(values.type.dtype)
    longest = MAX_SPLIT_ROW if dtype in SPLIT_KEYS else MAX_ROW
    if axis < 0 or sort.attrs.get("dimension") != axis or dtype is None or not 1 <= shape[-1] <= longest:
        return None
    src = index.producer
    if src is None or src.op != "iota" or src.attrs.get("iota_dimension") != axis or index.type.dtype != "i32":
        return None
    if not _descending(sort, values.type.dtype):
        return None
    k = 0
    for out in sort.outputs:
        if out.id in results:
            return None
        for user in consumers.get(out.id, []):
            start, limit, strides = (tuple(int(i) for i in user.attrs.get(a) or ())
                                     for a in ("start_indices", "limit_indices", "strides"))
            if user.op != "slice" or any(start) or any(s != 1 for s in strides) or limit[:-1] != tuple(shape[:-1]):
                return None
            k = max(k, int(limit[-1]))
    return TopK(math.prod(shape[:-1]), shape[-1], k, dtype) if k else None


def _descending(sort: Node, dtype: str) -> bool:
    """The comparator is one ``GT`` of the first operand's pair (``lhs0 > rhs0``): in the total order for
    floats, as the integer type orders (its compare type, or none: the type's default) for integers."""
    (region,) = sort.regions or (None,)
    if region is None or len(region.nodes) != 1 or len(region.params) != 4:
        return False
    (cmp,) = region.nodes
    kinds = ("TOTALORDER",) if dtype in FLOAT_TYPES else (None, COMPARE_TYPE[dtype])
    return (cmp.op == "compare" and cmp.attrs.get("comparison_direction") == "GT"
            and cmp.attrs.get("compare_type") in kinds
            and [v.id for v in cmp.inputs] == [region.params[0].id, region.params[1].id]
            and [v.id for v in region.results] == [cmp.out.id])


def topk_time(target: str, top: TopK) -> TileTime:
    """The top-k kernel's time (timing-only), sampled for many row tiles (module docstring)."""
    tiles = -(-top.rows // PARTITIONS)
    if tiles <= 2 * SAMPLE_TILES:
        return _timed(target, top)
    small, large = SAMPLE_TILES * PARTITIONS, 2 * SAMPLE_TILES * PARTITIONS
    a = _timed(target, TopK(small, top.cols, top.k, top.dtype))
    b = _timed(target, TopK(large, top.cols, top.k, top.dtype))
    return extrapolate(a, b, linear_fit(small, large, top.rows))


@lru_cache(maxsize=256)
def _timed(target: str, top: TopK) -> TileTime:
    import trnsim
    from trnsim.kernels.selection import topk_kernel

    spec: Any = trnsim.TensorSpec((top.rows, top.cols), top.dtype)   # a shape, no data: timing only
    return time_kernel(topk_kernel, spec, target=target, k=top.k)


# ---- argmax / argmin ----------------------------------------------------------------------------------

INF = float("inf")
# the dtypes the kernel's fp32 keys hold exactly (32-bit integers as two halves) → (DSL dtype, lowest value,
# highest value)
ARG_DTYPES: dict[str, tuple[str, float, float]] = {
    "f32": ("fp32", -INF, INF), "bf16": ("bf16", -INF, INF), "f16": ("fp16", -INF, INF),
    "i32": ("int32", -2.0**31, 2.0**31 - 1), "ui32": ("uint32", 0.0, 2.0**32 - 1),
    "i16": ("int16", -2.0**15, 2.0**15 - 1), "ui16": ("uint16", 0.0, 2.0**16 - 1),
    "i8": ("int8", -2.0**7, 2.0**7 - 1), "ui8": ("uint8", 0.0, 2.0**8 - 1),
}


@dataclass(frozen=True)
class ArgMax:
    """Where the largest (``smallest``: the smallest) of each row ``x[o, :, i]`` of ``x [outer, cols,
    inner]`` first occurs (``dtype``: the DSL dtype)."""

    outer: int
    cols: int
    inner: int
    dtype: str
    smallest: bool

    @property
    def tiles_per_outer(self) -> float:
        """Row tiles of the kernel per index of ``outer`` (``kernels.selection.tiles_per_outer``)."""
        from trnsim.kernels.selection import tiles_per_outer

        return tiles_per_outer(self.cols, self.inner, self.dtype, PARTITIONS)


Tree = tuple[Any, ...]


def _trees(region: Graph, compare_kind: Callable[[Any], Any]) -> list[Tree] | None:
    """The region's results as expression trees over ``("arg", k)`` and ``("const", v)`` leaves (``and``/``or``
    operands sorted: they commute; a compare's type as ``compare_kind`` maps it), or None for ops other than
    one-element constant / compare / and / or / select."""
    trees: dict[int, Tree] = {p.id: ("arg", k) for k, p in enumerate(region.params)}
    for node in region.nodes:
        if node.op == "constant" and node.out.type.size == 1:
            value = float(node.attrs["value"].reshape(-1)[0])
            trees[node.out.id] = ("const", "nan" if math.isnan(value) else value)
            continue
        args = [trees.get(v.id) for v in node.inputs]
        if any(a is None for a in args):
            return None
        if node.op == "compare":
            trees[node.out.id] = ("compare", node.attrs.get("comparison_direction"),
                                  compare_kind(node.attrs.get("compare_type")), *args)
        elif node.op in ("and", "or"):
            trees[node.out.id] = (node.op, *sorted(args, key=repr))
        elif node.op == "select":
            trees[node.out.id] = ("select", *args)
        else:
            return None
    out = [trees.get(v.id) for v in region.results]
    return None if any(t is None for t in out) else [t for t in out if t is not None]


def _tree(region: Graph) -> list[Tree] | None:
    """A reduce body's results (``_trees``), a compare's type as whether it is exact (not TOTALORDER)."""
    return _trees(region, lambda kind: kind != "TOTALORDER")


def _arg_body(direction: str) -> list[Tree]:
    """jax's argmax (``GT``) / argmin (``LT``) combiner over params ``(v0, i0, v1, i1)``::

        wins = v0 ▷ v1 or v0 ≠ v0            (a NaN wins)
        return select(wins, v0, v1), select(wins or (v0 = v1 and i0 < i1), i0, i1)
    """
    v0, i0, v1, i1 = (("arg", k) for k in range(4))
    wins = ("or", *sorted([("compare", direction, True, v0, v1), ("compare", "NE", True, v0, v0)], key=repr))
    tie = ("and", *sorted([("compare", "EQ", True, v0, v1), ("compare", "LT", True, i0, i1)], key=repr))
    return [("select", wins, v0, v1), ("select", ("or", *sorted([wins, tie], key=repr)), i0, i1)]


_ARG_BODY = {False: _arg_body("GT"), True: _arg_body("LT")}   # smallest → the body


def argmax_for(reduce: Node, consumers: dict[int, list[Node]], results: set[int]) -> ArgMax | None:
    """The argmax (or argmin) that ``reduce`` computes, if it is jax's form (module docstring) over one
    dimension and only its indices are read; else None."""
    if reduce.op != "reduce" or len(reduce.inputs) != 4 or len(reduce.regions) != 1:
        return None
    x, index, start, zero = reduce.inputs
    dims: tuple[int, ...] = tuple(int(d) for d in reduce.attrs.get("dimensions") or ())
    known = ARG_DTYPES.get(x.type.dtype)
    if known is None or len(dims) != 1 or x.type.size == 0 or index.type.dtype != "i32":
        return None
    d = dims[0]
    src = index.producer
    if src is None or src.op != "iota" or src.attrs.get("iota_dimension") != d:
        return None
    value, first = reduce.outputs
    if value.id in results or consumers.get(value.id) or first.type.dtype != "i32":
        return None
    body = _tree(reduce.regions[0])
    smallest = next((s for s, want in _ARG_BODY.items() if body == want), None)
    if smallest is None or _constant(zero) != 0:
        return None
    dtype, lowest, highest = known
    if _constant(start) != (highest if smallest else lowest):
        return None
    shape = x.type.shape
    return ArgMax(math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:]), dtype, smallest)


def _constant(value: Any) -> float | None:
    """The scalar a constant node gives ``value``, else None."""
    node = value.producer
    if node is None or node.op != "constant" or value.type.size != 1:
        return None
    return float(node.attrs["value"].reshape(-1)[0])


def argmax_time(target: str, arg: ArgMax) -> TileTime:
    """The argmax kernel's time (timing-only), sampled on ``outer`` when it has many row tiles (the tiles
    repeat the same work)."""
    per = arg.tiles_per_outer
    if arg.outer * per <= 2 * SAMPLE_TILES:
        return _arg_timed(target, arg)
    small = max(1, round(SAMPLE_TILES / per))    # whole tiles: per is 1/p or an integer
    large = 2 * small
    a = _arg_timed(target, ArgMax(small, arg.cols, arg.inner, arg.dtype, arg.smallest))
    b = _arg_timed(target, ArgMax(large, arg.cols, arg.inner, arg.dtype, arg.smallest))
    return extrapolate(a, b, linear_fit(small, large, arg.outer))


@lru_cache(maxsize=256)
def _arg_timed(target: str, arg: ArgMax) -> TileTime:
    import trnsim
    from trnsim.kernels.selection import argmax_kernel

    spec: Any = trnsim.TensorSpec((arg.outer, arg.cols, arg.inner), arg.dtype)   # timing only
    return time_kernel(argmax_kernel, spec, target=target, smallest=arg.smallest)


# ---- general sorts ------------------------------------------------------------------------------------

# the dtypes the sort kernel's levels hold exactly (32-bit integers as two halves) → DSL dtype; 64-bit types,
# complex numbers and booleans keep the analytic cost
SORT_DTYPES = isa_dtypes(*FLOATS, *INTS)
FLOAT_TYPES = ("f32", "bf16", "f16")
SAMPLE_POSITIONS = 65536   # positions of a row a partition the sort kernel's samples cover at most
# NOTE: the sort kernel puts rows on partitions (one row a partition, short rows several): a sort of fewer rows than
# partitions runs its whole network on that few lanes, and its time says more about that mapping than about a
# NeuronCore (a 1-D sort of 5000 f32: 3.4 ms simulated). Until a row spreads over the partitions, such sorts of
# rows longer than this keep the analytic cost
FEW_ROWS_MAX_COLS = 256
COMPARE_TYPE = {"i32": "SIGNED", "i16": "SIGNED", "i8": "SIGNED", "ui32": "UNSIGNED", "ui16": "UNSIGNED",
                "ui8": "UNSIGNED", "i1": "UNSIGNED"}


@dataclass(frozen=True)
class Sort:
    """A stable sort of ``dtypes`` operands (DSL dtypes) ``[outer, cols, inner]`` along the middle axis by
    the first ``num_keys``; the results of ``keep`` are read, and ``positions`` (an iota operand's result)."""

    outer: int
    cols: int
    inner: int
    dtypes: tuple[str, ...]
    num_keys: int
    descending: bool
    keep: tuple[int, ...]
    positions: bool

    @property
    def tiles_per_outer(self) -> float:
        """Row tiles of the kernel per index of ``outer`` when ``outer`` is large (``sort_kernel``: 128
        partitions of ``pack`` rows of ``I = 1``, else 128 of ``I`` at one ``o``)."""
        from trnsim.kernels.sort import plan

        if self.inner > 1:
            return float(-(-self.inner // PARTITIONS))
        return 1 / (PARTITIONS * plan(self.dtypes, self.cols, self.num_keys, self.keep, self.positions,
                                      self.descending).pack)


def _sort_tree(region: Graph) -> Tree | None:
    """The comparator's one result (``_trees``), a compare's type as itself."""
    out = _trees(region, lambda kind: kind)
    return out[0] if out is not None and len(out) == 1 else None


def _comparator(dtypes: list[str], num_keys: int, direction: str) -> Tree:
    """JAX's ``lax.sort`` comparator (``_sort_lt_comparator``) of the first ``num_keys`` operands: each
    float made canonical (``-0.0`` → ``+0.0``, NaNs one NaN) and compared in the total order, integers as
    themselves; keys lexicographic, ``direction`` LT (GT: descending)::

        less = lt(k) for the last key;  less = lt(i) or (eq(i) and less) for the earlier ones
    """
    def canonical(k: int) -> Tree:
        zero = ("select", ("compare", "EQ", "FLOAT", ("arg", k), ("const", 0.0)), ("const", 0.0), ("arg", k))
        return ("select", ("compare", "NE", "FLOAT", ("arg", k), ("arg", k)), ("const", "nan"), zero)

    def compare(i: int, how: str) -> Tree:
        if dtypes[i] in FLOAT_TYPES:
            return ("compare", how, "TOTALORDER", canonical(2 * i), canonical(2 * i + 1))
        return ("compare", how, COMPARE_TYPE[dtypes[i]], ("arg", 2 * i), ("arg", 2 * i + 1))

    less = compare(num_keys - 1, direction)
    for i in range(num_keys - 2, -1, -1):
        tie = ("and", *sorted([compare(i, "EQ"), less], key=repr))
        less = ("or", *sorted([compare(i, direction), tie], key=repr))
    return less


def sort_for(sort: Node, consumers: dict[int, list[Node]], results: set[int]) -> Sort | None:
    """The sort kernel's form of ``sort`` (StableHLO ``sort`` of JAX's comparators: ``_comparator``), when
    its operands' dtypes have exact levels and its rows fit the kernel (``kernels.sort.fits``), and unless it
    has fewer rows than partitions and rows longer than ``FEW_ROWS_MAX_COLS``; an operand
    that is an iota along the axis is the kernel's positions (``jnp.argsort``); else None. A sort the top-k
    kernel computes (``topk_for``) is left to it."""
    from trnsim.kernels.sort import MAX_OPERANDS, fits

    if sort.op != "sort" or len(sort.regions) != 1 or topk_for(sort, consumers, results) is not None:
        return None
    types = [v.type for v in sort.inputs]
    shape = types[0].shape
    if not shape or any(t.dtype not in SORT_DTYPES for t in types) or types[0].size == 0:
        return None
    d = int(sort.attrs.get("dimension", -1)) % len(shape)
    body = _sort_tree(sort.regions[0])
    dtypes = [t.dtype for t in types]
    found = next(((k, how == "GT") for k in range(1, len(types) + 1) for how in ("LT", "GT")
                  if body == _comparator(dtypes, k, how)), None)
    if found is None:
        return None
    num_keys, descending = found
    read = [k for k, out in enumerate(sort.outputs) if out.id in results or consumers.get(out.id)]
    iotas = {k for k, v in enumerate(sort.inputs) if k >= num_keys and v.type.dtype == "i32" and
             (src := v.producer) is not None and src.op == "iota" and src.attrs.get("iota_dimension") == d}
    positions = any(k in iotas for k in read)
    operands = [k for k in range(len(types)) if k < num_keys or (k in read and k not in iotas)]
    keep = tuple(operands.index(k) for k in read if k not in iotas)
    kinds = tuple(SORT_DTYPES[dtypes[k]] for k in operands)
    if len(operands) > MAX_OPERANDS or not fits(kinds, shape[d], num_keys, keep, positions, descending):
        return None
    if math.prod(shape) // shape[d] < PARTITIONS and shape[d] > FEW_ROWS_MAX_COLS:
        return None     # few long rows: FEW_ROWS_MAX_COLS
    return Sort(math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:]), kinds, num_keys, descending, keep,
                positions)


def sort_time(target: str, srt: Sort) -> TileTime:
    """The sort kernel's time (timing-only), sampled when it has many row tiles (the tiles repeat the same
    network): on ``sample`` and twice as many tiles, fewer for long rows (``SAMPLE_POSITIONS`` a partition
    over the samples: a tile of 65536 positions is some 30000 instructions)."""
    from trnsim.kernels.sort import plan

    width = plan(srt.dtypes, srt.cols, srt.num_keys, srt.keep, srt.positions, srt.descending).width
    sample = max(1, min(SAMPLE_TILES, SAMPLE_POSITIONS // width))
    per = srt.tiles_per_outer
    if srt.outer * per <= 2 * sample:
        return _sort_timed(target, srt)
    if per > sample:    # many tiles at each o: sample the tiles of one o
        a, b = (_sort_timed(target, replace(srt, outer=1, inner=n * PARTITIONS)) for n in (sample, 2 * sample))
        return extrapolate(a, b, linear_fit(sample, 2 * sample, srt.outer * per))
    small = max(1, round(sample / per))    # whole tiles: per is 1/p or an integer
    large = 2 * small
    a, b = (_sort_timed(target, replace(srt, outer=n)) for n in (small, large))
    return extrapolate(a, b, linear_fit(small, large, srt.outer))


@lru_cache(maxsize=256)
def _sort_timed(target: str, srt: Sort) -> TileTime:
    import trnsim
    from trnsim.kernels.sort import sort_kernel

    specs: list[Any] = [trnsim.TensorSpec((srt.outer, srt.cols, srt.inner), d) for d in srt.dtypes]   # timing only
    return time_kernel(sort_kernel, *specs, target=target, num_keys=srt.num_keys, descending=srt.descending,
                       keep=srt.keep, positions=srt.positions)


def clear_memo() -> None:
    """Forget the timed top-k, argmax and sort kernels and their traces (``kernel_timing.clear_memo``)."""
    from trnsim.kernels.selection import argmax_kernel, topk_kernel
    from trnsim.kernels.sort import sort_kernel

    _timed.cache_clear()
    _arg_timed.cache_clear()
    _sort_timed.cache_clear()
    for kernel in (topk_kernel, argmax_kernel, sort_kernel):
        kernel.forget_traces()
