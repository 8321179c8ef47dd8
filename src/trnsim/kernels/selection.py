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

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.reduction import SELECT_WIDTH
from trnsim.kernels.gemm import blocks

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
