"""Top-k steps: the sort that ``chlo.top_k`` becomes, lowered to the library's ``topk_kernel``.

jaxlib legalizes ``chlo.top_k(x, k)`` (what ``jax.lax.top_k`` emits) into a stable ``sort`` of ``x`` and an
``iota`` along the last axis, compared ``GT`` in the total order, and two ``slice``s of the first ``k``
columns. When every read of such a sort's results is one of those slices, the step is the top-k kernel
(``trnsim.kernels.selection``: ⌈k/8⌉ rounds of VectorE's max8 / find_index8 / match_replace8 per tile of
128 rows), timed by the instruction-level model; any other sort keeps the analytic cost (``costs``).

A kernel of more than ``2 · SAMPLE_TILES`` row tiles is timed on ``SAMPLE_TILES`` and twice as many and
extrapolated linearly (``kernel_timing.linear_fit``): its tiles repeat the same rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trnsim.compiler.kernel_timing import TileTime, extrapolate, linear_fit, time_kernel
from trnsim.ir.graph import Node

DSL_DTYPE = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
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
    from trnsim.kernels.selection import MAX_ROW

    if sort.op != "sort" or len(sort.inputs) != 2 or not sort.attrs.get("is_stable", False):
        return None
    values, index = sort.inputs
    shape = values.type.shape
    axis = len(shape) - 1
    dtype = DSL_DTYPE.get(values.type.dtype)
    if axis < 0 or sort.attrs.get("dimension") != axis or dtype is None or not 1 <= shape[-1] <= MAX_ROW:
        return None
    src = index.producer
    if src is None or src.op != "iota" or src.attrs.get("iota_dimension") != axis or index.type.dtype != "i32":
        return None
    if not _descending(sort):
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


def _descending(sort: Node) -> bool:
    """The comparator is one total-order ``GT`` of the first operand's pair (``lhs0 > rhs0``)."""
    (region,) = sort.regions or (None,)
    if region is None or len(region.nodes) != 1 or len(region.params) != 4:
        return False
    (cmp,) = region.nodes
    return (cmp.op == "compare" and cmp.attrs.get("comparison_direction") == "GT"
            and cmp.attrs.get("compare_type") == "TOTALORDER"
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


def clear_memo() -> None:
    """Forget the timed top-k kernels and their traces (``kernel_timing.clear_memo``)."""
    from trnsim.kernels.selection import topk_kernel

    _timed.cache_clear()
    cache = getattr(topk_kernel, "_cache", None)
    if isinstance(cache, dict):
        cache.clear()
