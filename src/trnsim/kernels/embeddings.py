"""Embedding lookup and its gradient by indirect DMA, in the kernel language.

``embedding(table [V, D], ids [...])`` gathers ``table[ids]`` into ``[..., D]``: up to 128 ids at a time are
DMAed into a ``[p, 1]`` int32 tile (``layout.index_tiles``: any ids shape, in index order), then
``dma_gather`` copies row ``ids[i]`` of the table to partition ``i`` of an SBUF tile and one DMA stores the
tile. No engine computes: the lookup is DMA only, bit-exact.

``embedding_backward(dout [..., D], ids [...], vocab)`` is the transpose: a zero ``[vocab, D]`` table (one
broadcast DMA from a zero tile) into which ``dma_scatter_add`` adds row ``i`` of each ``dout`` tile at row
``ids[i]``, in order, so repeated ids accumulate (in fp32, rounded to the table's dtype after each add).
Successive scatter-adds into the table are ordered by the kernel's dependency tracking.

Rows wider than ``ROW_BYTES`` per partition are moved in column slices.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.layout import blocks, index_tiles

ROW_BYTES = 32 * 1024  # bytes per partition of one gathered / scattered tile


def _row_width(dtype: str) -> int:
    return max(1, ROW_BYTES // get_dtype(dtype).itemsize)


@dsl.kernel
def embedding_kernel(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]``: ``[*ids.shape, D]`` rows of ``table [V, D]``; ``ids`` int32, any shape. An id outside
    ``[0, V)`` faults."""
    d = table.shape[1]
    out = dsl.hbm_tensor((*ids.shape, d), table.dtype, name="rows")
    for key, p in index_tiles(ids.shape, dsl.tile_size().pmax):
        index = dsl.dma_copy(dsl.sbuf((p, 1), ids.dtype), ids[key])
        for c0, w in blocks(d, _row_width(table.dtype)):
            rows = dsl.dma_gather(dsl.sbuf((p, w), table.dtype), table[:, c0 : c0 + w], index)
            dsl.dma_copy(out[key][..., c0 : c0 + w], rows)
    return out


def zero_rows(t: Tensor) -> None:
    """Zero an HBM ``[R, C]`` tensor: one DMA per column slice from a zero tile broadcast along a free axis
    (``[128, R // 128, C]``), plus one for the ``R % 128`` rows left."""
    n_rows, cols = t.shape
    pmax = dsl.tile_size().pmax
    p = min(pmax, n_rows)
    for c0, w in blocks(cols, _row_width(t.dtype)):
        zero = dsl.zeros((p, 1, w), t.dtype)
        full = n_rows // p * p
        dsl.dma_copy(t[0:full, c0 : c0 + w], zero.broadcast_to((p, full // p, w)))
        if full < n_rows:
            dsl.dma_copy(t[full:n_rows, c0 : c0 + w], zero[: n_rows - full])


@dsl.kernel
def embedding_backward_kernel(dout: Tensor, ids: Tensor, *, vocab: int, dtype: str = "fp32") -> Tensor:
    """``dtable [vocab, D]`` (in ``dtype``) with ``dtable[ids[i]] += dout[i]`` for every position ``i`` of
    ``ids``; ``dout`` is ``[*ids.shape, D]``. An id outside ``[0, vocab)`` faults."""
    d = dout.shape[-1]
    dtable = dsl.hbm_tensor((vocab, d), dtype, name="dtable")
    zero_rows(dtable)
    for key, p in index_tiles(ids.shape, dsl.tile_size().pmax):
        index = dsl.dma_copy(dsl.sbuf((p, 1), ids.dtype), ids[key])
        for c0, w in blocks(d, _row_width(dout.dtype)):
            rows = dsl.dma_copy(dsl.sbuf((p, w), dout.dtype), dout[key][..., c0 : c0 + w])
            dsl.dma_scatter_add(dtable[:, c0 : c0 + w], rows, index)
    return dtable


def embedding(table: ArrayLike, ids: ArrayLike, *, dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """``table[ids]`` on a simulated NeuronCore, the table stored as ``dtype``.

        >>> embedding([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [[2, 0], [2, 2]]).tolist()
        [[[4.0, 5.0], [0.0, 1.0]], [[4.0, 5.0], [4.0, 5.0]]]
    """
    res = dsl.run_kernel(embedding_kernel, dsl.typed(np.asarray(table, np.float32), dtype),
                         np.asarray(ids, np.int32), target=target)
    return res.outputs[0]


def embedding_backward(dout: ArrayLike, ids: ArrayLike, vocab: int, *, dtype: str = "fp32",
                       out_dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """The gradient of ``embedding`` with respect to the table: ``dout`` rows (stored as ``dtype``) summed
    into a zero ``[vocab, D]`` table of ``out_dtype``.

        >>> embedding_backward([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [1, 3, 1], 4).tolist()
        [[0.0, 0.0], [6.0, 8.0], [0.0, 0.0], [3.0, 4.0]]
    """
    res = dsl.run_kernel(embedding_backward_kernel, dsl.typed(np.asarray(dout, np.float32), dtype),
                         np.asarray(ids, np.int32), target=target, vocab=vocab, dtype=out_dtype)
    return res.outputs[0]
