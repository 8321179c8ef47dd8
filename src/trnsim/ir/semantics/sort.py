"""sort: by a comparator region, stable or not (trnsim always sorts stably, which is a valid unstable sort).

A comparator that compares the first operand's two elements with ``LT``/``GT`` (float or total order) runs as
``np.argsort``; any other comparator runs an odd-even transposition sort (a sorting network of n rounds of
compare-exchange), vectorised across all the rows at once and stable because it swaps only strict
inversions.
"""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Graph, Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import compute, is_float
from trnsim.ir.semantics.elementwise import total_order_key

Arrays = list[np.ndarray]


def _simple_order(region: Graph) -> tuple[int, str, bool] | None:
    """(operand index, LT|GT, total order?) if the comparator is ``compare(arg[2i], arg[2i+1])``."""
    if len(region.nodes) != 1 or region.nodes[0].op != "compare":
        return None
    node = region.nodes[0]
    if region.results[0] is not node.out:
        return None
    params = [p.id for p in region.params]
    a, b = (params.index(v.id) if v.id in params else -1 for v in node.inputs)
    direction = node.attrs["comparison_direction"]
    if a < 0 or b < 0 or a == b or a // 2 != b // 2 or direction not in ("LT", "GT"):
        return None
    if a % 2 == 1:          # compare(rhs, lhs): flip
        direction = "GT" if direction == "LT" else "LT"
    return a // 2, direction, node.attrs.get("compare_type") == "TOTALORDER"


def _key(x: np.ndarray, total: bool) -> np.ndarray:
    x = compute(x)
    if not is_float(x.dtype):
        return x
    if total:
        return total_order_key(x)
    return x


@semantics("sort", kind="sort")
def _sort(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = operands permuted along ``dimension`` so that comparator(results[i], results[i+1]) never
    says the later element goes first (stable)"""
    dim = node.attrs["dimension"]
    dim = dim + args[0].ndim if dim < 0 else dim
    region = node.regions[0]
    simple = _simple_order(region)
    if simple is not None:
        index, direction, total = simple
        key = _key(args[index], total)
        if is_float(key.dtype):
            # NOTE: with a plain float compare, NaNs are unordered; keep XLA's placement (NaNs last for LT)
            key = np.where(np.isnan(key), np.inf, key) if direction == "LT" else np.where(np.isnan(key), -np.inf,
                                                                                             key)
        if direction == "GT":
            key = -key if is_float(key.dtype) else ~key    # ~ reverses the order of any integer or bool
        perm = np.argsort(key, axis=dim, kind="stable")
        return [np.take_along_axis(a, perm, axis=dim) for a in args]
    return _network_sort(args, dim, region, interp)


def _network_sort(args: Arrays, dim: int, region: Graph, interp: Interpreter) -> Arrays:
    moved = [np.moveaxis(a, dim, -1).copy() for a in args]
    n = moved[0].shape[-1]
    for round_ in range(n):
        start = round_ % 2
        lo = np.arange(start, n - 1, 2)
        if lo.size == 0:
            continue
        hi = lo + 1
        left = [m[..., lo] for m in moved]
        right = [m[..., hi] for m in moved]
        pairs = [x for lr in zip(right, left, strict=True) for x in lr]
        swap = interp.call(region, pairs, vectorized=True)[0].astype(bool)       # right < left: a strict inversion
        for m, lv, rv in zip(moved, left, right, strict=True):
            m[..., lo] = np.where(swap, rv, lv)
            m[..., hi] = np.where(swap, lv, rv)
    return [np.moveaxis(m, -1, dim) for m in moved]
