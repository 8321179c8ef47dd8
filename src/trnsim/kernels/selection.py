"""Top-k along the last axis in the kernel language, on VectorE's selection instructions.

Rows go on partitions, 128 per tile, a whole row in the free axis. Each round takes the next 8 values::

    vals  = max8(work)                        the row's 8 largest, largest first (IEEE total order)
    idx   = find_index8(work, vals)           their positions (equal values: successive occurrences)
    work  = match_replace8(work, vals, -NaN)  taken out: -NaN is the lowest value of the order

so ``⌈k/8⌉`` rounds give the k largest values and their indices, ties in index order: ``jax.lax.top_k``'s
results. A row shorter than 8 is padded with -inf after its values (their indices come first on ties).

NOTE: a row that itself holds a negative NaN with the quiet bit set (fp32 0xFFC00000, -NaN of the
replacement) may, in a later round, report a replaced position for it; every other value is exact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.reduction import SELECT_WIDTH
from trnsim.kernels.gemm import blocks
from trnsim.kernels.layout import prefetch, prefetch_depth

MAX_ROW = 16384  # values per row kept in one tile: 64 KiB of fp32 per partition (a third of trn3's SBUF row)
TAKEN = float("-nan")  # what match_replace8 leaves where a value was taken


@dsl.kernel
def topk_kernel(x: Tensor, *, k: int) -> tuple[Tensor, Tensor]:
    """``values[R, k]`` (x's dtype) and ``indices[R, k]`` (int32) of the ``k`` largest of each row of
    ``x [R, C]``, largest first."""
    rows, cols = x.shape
    if not 1 <= k <= cols:
        fail(f"top-{k} of rows of {cols}", f"choose k in 1..{cols}")
    if cols > MAX_ROW:
        fail(f"rows of {cols} values", f"top-k keeps a row in one tile: at most {MAX_ROW} values")
    values = dsl.hbm_tensor((rows, k), x.dtype, name="values")
    indices = dsl.hbm_tensor((rows, k), "int32", name="indices")
    width = max(cols, SELECT_WIDTH)
    for r0, rn in blocks(rows, dsl.tile_size().pmax):
        work = dsl.sbuf((rn, width), "fp32")
        if width > cols:
            dsl.memset(work[:, cols:], float("-inf"))
        dsl.load(work[:, :cols], x[r0 : r0 + rn, :])
        for j0 in range(0, k, SELECT_WIDTH):
            take = min(SELECT_WIDTH, k - j0)
            vals = dsl.max8(work)
            idx = dsl.find_index8(work, vals)
            if j0 + SELECT_WIDTH < k:
                dsl.match_replace8(work, vals, TAKEN, out=work)
            dsl.store(values[r0 : r0 + rn, j0 : j0 + take], dsl.copy(vals[:, :take], dtype=x.dtype))
            dsl.store(indices[r0 : r0 + rn, j0 : j0 + take], dsl.copy(idx[:, :take], dtype="int32"))
    return values, indices


def topk(x: ArrayLike, k: int, dtype: str | None = None, *, target: str = "trn3") -> tuple[NDArray[np.float32],
                                                                                          NDArray[np.int64]]:
    """The ``k`` largest values along the last axis of ``x`` (any shape) and their indices, largest first,
    ties in index order, NaNs above +inf (``jax.lax.top_k``'s results); ``dtype`` is the ISA dtype of ``x``.

        >>> v, i = topk([[3.0, 1.0, 4.0, 1.0, 5.0]], 2)
        >>> v.tolist(), i.tolist()
        ([[5.0, 4.0]], [[4, 2]])
    """
    arr = np.asarray(x)
    if arr.ndim == 0 or arr.size == 0:
        raise KernelError(f"top-{k} of an array of shape {arr.shape}", where="kernels.topk",
                          hint="pass at least one row of values along the last axis")
    shape = arr.shape
    rows = arr.reshape(-1, shape[-1])
    arg = dsl.typed(rows, dtype) if dtype is not None else rows
    out = dsl.run_kernel(topk_kernel, arg, target=target, k=k).outputs
    return out[0].reshape(*shape[:-1], k), out[1].reshape(*shape[:-1], k)


# ---- argmax / argmin: one max8 + find_index8 per chunk of a row, chunks merged the same way -------------

CANONICAL_NAN = float("nan")  # fp32 0x7FC00000: every NaN of a key becomes this one, the largest key
# a row tile's load is split over queues 0..14, its indices stored on queue 15 (reference/neuron.md §1.2: 16
# DMA queues a core): a store sharing a load queue would hold the next tile's load behind this tile's compute
LOAD_SPLIT = 15
STORE_QUEUE = 15
EXACT_KEYS = ("fp32", "bf16", "fp16", "int16", "uint16", "int8", "uint8")   # dtypes fp32 holds exactly


@dsl.kernel
def argmax_kernel(x: Tensor, *, smallest: bool = False, chunk: int = MAX_ROW) -> Tensor:
    """``indices[O, I, 1]`` (int32): where the largest (``smallest``: the smallest) value of each row
    ``x[o, :, i]`` of ``x [O, N, I]`` first occurs, a NaN counting above every number (its first occurrence
    wins): the results of ``jnp.argmax`` / ``jnp.argmin`` along the middle axis. ``x``'s dtype is one the
    fp32 keys hold exactly (floats of ≤ 32 bits, integers of ≤ 16).

    Each row becomes keys in an fp32 tile, ``key = (±x) + 0.0`` (``-0.0`` folded into ``+0.0``, which
    compare equal) with every NaN made the one canonical ``+NaN``, so that in max8's total order the largest
    key is the row's answer and ``find_index8`` gives its first position. Rows longer than ``chunk`` go in
    chunks; each chunk's best key and its position join a ``[P, chunks]`` tile whose own max8 / find_index8
    pick the first chunk holding the row's best key (a one-hot sum then reads its position).

        for each row tile (128 rows, I = 1: consecutive o; else a block of i at one o, a transposed load):
            for each chunk c of ≤ MAX_ROW columns:
                key  = where(x ≠ x, +NaN, ±x + 0.0);  pad to 8 with -inf
                best[:, c] = max8(key)[:, 0];  at[:, c] = c0 + find_index8(key, max8(key))[:, 0]
            j = find_index8(best, max8(best))[:, 0];  index = Σ_c (c == j) · at[:, c]
    Positions are exact in the fp32 ALU while ``N < 2**24``.
    """
    outer, cols, inner = x.shape
    if x.dtype not in EXACT_KEYS:
        fail(f"argmax of {x.dtype} values", f"fp32 keys are exact for {', '.join(EXACT_KEYS)}")
    if cols >= 2**24:
        fail(f"rows of {cols} values", "argmax positions are fp32-exact below 2**24 values a row")
    indices = dsl.hbm_tensor((outer, inner, 1), "int32", name="indices")
    pmax = dsl.tile_size().pmax
    chunks = blocks(cols, chunk)
    width = max(min(cols, chunk), SELECT_WIDTH)
    floats = x.dtype in ("fp32", "bf16", "fp16")
    nan = dsl.full((pmax, width), CANONICAL_NAN) if floats else None
    many = len(chunks) > 1
    column = dsl.iota((pmax, len(chunks)), "fp32") if many else None
    tiles = ([(o0, 0, n) for o0, n in blocks(outer, pmax)] if inner == 1 else
             [(o, i0, n) for o in range(outer) for i0, n in blocks(inner, pmax)])
    pieces = [(a, i0, rn, c0, cn) for a, i0, rn in tiles for c0, cn in chunks]

    def load(piece: tuple[int, int, int, int, int]) -> Callable[[], tuple[Tensor, Tensor]]:
        a, i0, rn, c0, cn = piece

        def issue() -> tuple[Tensor, Tensor]:
            key = dsl.sbuf((rn, max(cn, SELECT_WIDTH)), "fp32")
            raw = key[:, :cn] if x.dtype == "fp32" else dsl.sbuf((rn, cn), x.dtype)
            view = x[a : a + rn, c0 : c0 + cn, 0] if inner == 1 else x[a, c0 : c0 + cn, i0 : i0 + rn].T
            dsl.load(raw, view, queue=0, split=min(LOAD_SPLIT, rn))   # x's dtype: a .T view takes the DMA transpose
            return key, raw
        return issue

    size = get_dtype(x.dtype).itemsize if x.dtype != "fp32" else 0
    depth = prefetch_depth(width * (4 + size), width * (4 + 1) + 64)
    loaded = prefetch([load(piece) for piece in pieces], depth)
    for a, i0, rn in tiles:
        best = dsl.sbuf((rn, max(len(chunks), SELECT_WIDTH)), "fp32") if many else None
        at = dsl.sbuf((rn, len(chunks)), "fp32") if many else None
        if best is not None and len(chunks) < SELECT_WIDTH:
            dsl.memset(best[:, len(chunks):], float("-inf"))
        found: Tensor | None = None
        for c, (c0, cn) in enumerate(chunks):
            key, raw = next(loaded)
            if cn < SELECT_WIDTH:
                dsl.memset(key[:, cn:], float("-inf"))
            real = key[:, :cn]
            isnan = dsl.tensor_tensor(raw, raw, "ne", dtype="uint8") if floats else None
            if smallest:
                dsl.tensor_scalar(raw, "mul", -1.0, "add", 0.0, out=real)
            else:
                dsl.tensor_scalar(raw, "add", 0.0, out=real)
            if isnan is not None and nan is not None:
                dsl.where(isnan, nan[:rn, :cn], real, out=real)
            vals = dsl.max8(key)
            found = dsl.find_index8(key, vals)
            if best is not None and at is not None:
                dsl.copy(vals[:, :1], out=best[:, c : c + 1])
                dsl.tensor_scalar(found[:, :1], "add", float(c0), dtype="fp32", out=at[:, c : c + 1])
        if best is not None and at is not None and column is not None:
            first = dsl.copy(dsl.find_index8(best, dsl.max8(best))[:, :1], dtype="fp32")
            hot = dsl.tensor_scalar(column[:rn], "eq", first)
            found = dsl.reduce("add", dsl.tensor_tensor(hot, at, "mul"))
        assert found is not None
        out = indices[a : a + rn, 0] if inner == 1 else indices[a, i0 : i0 + rn]
        dsl.store(out, dsl.copy(found[:, :1], dtype="int32"), queue=STORE_QUEUE)
    return indices


def argmax(x: ArrayLike, axis: int = -1, dtype: str | None = None, *, smallest: bool = False,
           chunk: int = MAX_ROW, target: str = "trn3") -> NDArray[np.int64]:
    """Where the largest value along ``axis`` of ``x`` first occurs, NaNs above every number
    (``jnp.argmax``'s result; ``smallest``: ``jnp.argmin``'s); ``dtype`` is the ISA dtype of ``x``, rows go
    in chunks of ``chunk`` values (``argmax_kernel``).

        >>> argmax([[3.0, 1.0, 5.0, 5.0]]).tolist(), argmax([[3.0, 1.0, 5.0, 1.0]], smallest=True).tolist()
        ([2], [1])
    """
    arr = np.asarray(x)
    if arr.ndim == 0 or arr.size == 0:
        raise KernelError(f"argmax of an array of shape {arr.shape}", where="kernels.argmax",
                          hint="pass at least one value along the axis")
    axis %= arr.ndim
    shape = arr.shape
    view = arr.reshape(int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:])))
    arg = dsl.typed(view, dtype) if dtype is not None else view
    out = dsl.run_kernel(argmax_kernel, arg, target=target, smallest=smallest, chunk=chunk).outputs[0]
    return out.reshape(shape[:axis] + shape[axis + 1:])
