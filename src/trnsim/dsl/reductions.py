"""Reductions and cross-partition movement: along the free axes (VectorE), across partitions (GpSimd),
and the batch-norm statistics pair (VectorE ``bn_stats`` / ``bn_aggr``).

Axes count tile dimensions: 0 is the partition dimension, 1.. the free ones (``-1`` the last). Reduced free
axes keep size 1, so ``sum(t)`` of a ``[P, F]`` tile is ``[P, 1]``, a per-partition scalar operand.

    m = reduce_max(x, negate=True)           # [P, 1] of -max per row, ready as an activation bias
    col = reduce_sum(x, axis=0)              # [1, F]: partition_reduce on GpSimd
"""

from __future__ import annotations

from collections.abc import Sequence

from trnsim.dsl.data import default_dtype
from trnsim.dsl.errors import fail
from trnsim.dsl.tensor import Tensor
from trnsim.dsl.trace import current
from trnsim.isa.base import Engine
from trnsim.isa.ops import REDUCE_OPS
from trnsim.isa.reduction import (
    BN_STATS_WIDTH,
    SELECT_WIDTH,
    BnAggr,
    BnStats,
    FindIndex8,
    MatchReplace8,
    Max8,
    PartitionBroadcast,
    PartitionReduce,
    TensorReduce,
)


def _axes(x: Tensor, axis: int | Sequence[int]) -> tuple[int, ...]:
    ndim = len(x.shape)
    raw = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted({a % ndim if -ndim <= a < ndim else ndim for a in raw}))
    if not axes or axes[-1] >= ndim:
        fail(f"axis {axis} of a {ndim}-D tile", f"use axes in {-ndim}..{ndim - 1}")
    if 0 in axes and axes != (0,):
        fail("reduce across partitions and free axes at once", "reduce the free axes first, then axis 0")
    return axes


def reduce(
    op: str, x: Tensor, axis: int | Sequence[int] = -1, *, negate: bool = False, dtype: str | None = None,
    out: Tensor | None = None, engine: Engine = "vector",
) -> Tensor:
    """``REDUCE_OPS[op]`` over ``axis`` (free axes: TensorReduce; axis 0: PartitionReduce on GpSimd)."""
    if op not in REDUCE_OPS:
        fail(f"unknown reduce op {op!r}", f"use one of: {', '.join(REDUCE_OPS)}")
    axes = _axes(x, axis)
    if axes == (0,):
        if negate:
            fail("negate is a VectorE option", "negate the partition reduction separately")
        return partition_reduce(x, op, dtype=dtype, out=out)
    shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    if len(shape) == 1:
        shape = (shape[0], 1)
    if out is None:
        out = current().allocate("sbuf", shape, dtype or default_dtype(x))
    elif out.shape[0] != shape[0] or out.size != shape[0] * _prod(shape[1:]):
        fail(f"reduce into {out.shape}: the result is {shape}", "give out the reduced shape")
    src, dst = x.ap(exact=True), out.ap()
    free_axes = tuple(a - 1 for a in axes)
    current().emit(engine, lambda w, s: TensorReduce(dst, src, op, free_axes, negate, wait=w, signal=s), [x], [out])
    return out


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def reduce_sum(x: Tensor, axis: int | Sequence[int] = -1, *, dtype: str | None = None) -> Tensor:
    return reduce("add", x, axis, dtype=dtype)


def reduce_max(x: Tensor, axis: int | Sequence[int] = -1, *, negate: bool = False, dtype: str | None = None) -> Tensor:
    return reduce("max", x, axis, negate=negate, dtype=dtype)


def reduce_min(x: Tensor, axis: int | Sequence[int] = -1, *, negate: bool = False, dtype: str | None = None) -> Tensor:
    return reduce("min", x, axis, negate=negate, dtype=dtype)


def reduce_prod(x: Tensor, axis: int | Sequence[int] = -1, *, dtype: str | None = None) -> Tensor:
    return reduce("mul", x, axis, dtype=dtype)


def partition_reduce(x: Tensor, op: str = "add", *, dtype: str | None = None, out: Tensor | None = None) -> Tensor:
    """``[1, *free]``: ``op`` over the partitions of ``x`` (GpSimd)."""
    if out is None:
        out = current().allocate("sbuf", (1, *x.shape[1:]), dtype or default_dtype(x))
    dst, src = out.ap(), x.ap()
    current().emit("gpsimd", lambda w, s: PartitionReduce(dst, src, op, wait=w, signal=s), [x], [out])
    return out


def partition_broadcast(x: Tensor, partitions: int, *, dtype: str | None = None, out: Tensor | None = None) -> Tensor:
    """``[partitions, *free]``: the one partition of ``x`` copied to every partition (GpSimd)."""
    if x.shape[0] != 1:
        fail(f"partition_broadcast of {x.shape}", "broadcast a one-partition tile, e.g. t[0:1, :]")
    if out is None:
        out = current().allocate("sbuf", (partitions, *x.shape[1:]), dtype or default_dtype(x))
    dst, src = out.ap(), x.ap()
    current().emit("gpsimd", lambda w, s: PartitionBroadcast(dst, src, wait=w, signal=s), [x], [out])
    return out


def bn_stats(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """VectorE: a [P, 3] fp32 record (count, mean, M2) per partition of ``x`` (≤ 512 elements each); ``out``
    (e.g. ``stats[:, 3 * g:3 * g + 3]``) collects the records of several chunks for ``bn_aggr``."""
    if out is None:
        out = current().allocate("sbuf", (x.shape[0], BN_STATS_WIDTH), "fp32")
    dst, src = out.ap(), x.ap()
    current().emit("vector", lambda w, s: BnStats(dst, src, wait=w, signal=s), [x], [out])
    return out


def bn_aggr(stats: Tensor) -> Tensor:
    """VectorE: combine bn_stats records ``[P, 3·G]`` into ``[P, 2]`` = (mean, population variance)."""
    out = current().allocate("sbuf", (stats.shape[0], 2), "fp32")
    dst, src = out.ap(), stats.ap()
    current().emit("vector", lambda w, s: BnAggr(dst, src, wait=w, signal=s), [stats], [out])
    return out



def _rows(x: Tensor, what: str) -> None:
    if len(x.shape) != 2 or x.shape[1] < SELECT_WIDTH:
        fail(f"{what} of a {x.shape} tile", f"give a [P, F ≥ {SELECT_WIDTH}] tile (pad short rows with -inf)")


def max8(x: Tensor, *, dtype: str = "fp32", out: Tensor | None = None) -> Tensor:
    """``[P, 8]``: the 8 largest values of each row of ``x [P, F ≥ 8]``, largest first (VectorE ``max8``;
    IEEE total order, so NaNs first)."""
    _rows(x, "max8")
    if out is None:
        out = current().allocate("sbuf", (x.shape[0], SELECT_WIDTH), dtype)
    dst, src = out.ap(), x.ap(exact=True)
    current().emit("vector", lambda w, s: Max8(dst, src, wait=w, signal=s), [x], [out])
    return out


def find_index8(data: Tensor, vals: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``[P, 8]`` uint32: where each of the 8 values of ``vals`` first occurs in its row of ``data`` (a value
    given twice: its next occurrence; none: 0xFFFFFFFF). VectorE ``find_index8``."""
    _rows(data, "find_index8")
    if out is None:
        out = current().allocate("sbuf", (data.shape[0], SELECT_WIDTH), "uint32")
    dst, src, v = out.ap(), data.ap(exact=True), vals.ap(exact=True)
    current().emit("vector", lambda w, s: FindIndex8(dst, src, v, wait=w, signal=s), [data, vals], [out])
    return out


def match_replace8(data: Tensor, vals: Tensor, imm: float = float("-inf"), *, out: Tensor | None = None) -> Tensor:
    """``data`` with the first occurrence in each row of each of the 8 values of ``vals`` replaced by ``imm``
    (VectorE ``match_replace8``); ``out`` may be ``data`` itself."""
    _rows(data, "match_replace8")
    if out is None:
        out = current().allocate("sbuf", data.shape, data.dtype)
    dst, src, v = out.ap(), data.ap(exact=True), vals.ap(exact=True)
    current().emit("vector", lambda w, s: MatchReplace8(dst, src, v, imm, wait=w, signal=s), [data, vals], [out])
    return out
