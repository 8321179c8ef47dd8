"""Embedding lookup and its gradient by indirect DMA, in the kernel language.

``embedding(table [V, D], ids [...])`` gathers ``table[ids]`` into ``[..., D]``: up to 128 ids at a time are
DMAed into a ``[p, 1]`` int32 tile (``layout.index_tiles``: any ids shape, in index order), then
``dma_gather`` copies row ``ids[i]`` of the table to partition ``i`` of an SBUF tile and one DMA stores the
tile. No engine computes: the lookup is DMA only, bit-exact.

``embedding_backward(dout [..., D], ids [...], vocab)`` is the transpose: a zero ``[vocab, D]`` table (one
broadcast DMA from a zero tile) into which ``dma_scatter_add`` adds row ``i`` of each ``dout`` tile at row
``ids[i]``, in order, so repeated ids accumulate (in fp32, rounded to the table's dtype after each add).
Successive scatter-adds into the table are ordered by the kernel's dependency tracking.

Rows wider than ``ROW_BYTES`` per partition are moved in column slices. The DMAs are spread over the
queues: gathers and stores in pieces of partitions, index tiles and row tiles loaded ahead of their use
(the sync engine issues DMAs in program order), scatter-adds in column slices of ``SCATTER_COLUMNS``
(scatter-adds into the same columns run one after another; different columns in parallel).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.layout import (
    DMA_PIECE_BYTES,
    DMA_PIECES,
    Key,
    blocks,
    dma_spread,
    gather_spread,
    index_tiles,
    prefetch,
)

ROW_BYTES = 32 * 1024  # bytes per partition of one gathered / scattered tile
SCATTER_COLUMNS = 512  # a scatter-add's column slice: independent slices run on separate DMA queues
DEPTH = 2  # row tiles loaded (gathered) ahead of their use


def _row_width(dtype: str) -> int:
    return max(1, ROW_BYTES // get_dtype(dtype).itemsize)


Work = tuple[int, Key, int, int, int]  # (tile number, ids key, ids in the tile, first column, columns)


def _plan(ids: Tensor, d: int, dtype: str) -> tuple[list[Work], Callable[[Work], Tensor]]:
    """The (tile, column slice) steps over ``ids`` and a function giving each step's index tile: index tiles
    are loaded ``2·DEPTH`` tiles ahead (``layout.prefetch``), so a gather never waits behind them."""
    tiles = index_tiles(ids.shape, dsl.tile_size().pmax)
    work = [(t, key, p, c0, w) for t, (key, p) in enumerate(tiles) for c0, w in blocks(d, _row_width(dtype))]
    def load(key: Key, p: int) -> Callable[[], Tensor]:
        return lambda: dsl.dma_copy(dsl.sbuf((p, 1), ids.dtype), ids[key])

    stream = prefetch([load(key, p) for key, p in tiles], 2 * DEPTH)
    held: dict[int, Tensor] = {}

    def index(step: Work) -> Tensor:
        t, _, _, c0, w = step
        if c0 == 0:
            held[t] = next(stream)
        return held[t] if c0 + w < d else held.pop(t)
    return work, index


def _check_ids(ids: Tensor) -> None:
    if ids.dtype != "int32":
        fail(f"embedding ids of dtype {ids.dtype}", "pass int32 ids (the index tiles dma_gather reads)")


def host_ids(ids: ArrayLike, rows: int, name: str) -> NDArray[np.int32]:
    """``ids`` as int32, checked: whole numbers (never truncated floats), and within int32 (never wrapped:
    an id that does not fit is outside ``[0, rows)``, which the contract makes an error)."""
    arr = np.asarray(ids)
    if arr.size and arr.dtype.kind not in "iu":
        raise KernelError(f"{name} ids of dtype {arr.dtype}", where=f"kernels.{name}",
                          hint="pass an integer array of row numbers (floats are never truncated silently: "
                               "np.rint(ids).astype(np.int64) if they are whole numbers)")
    if arr.size and arr.dtype.kind in "iu":
        lo, hi = int(arr.min()), int(arr.max())
        if lo < np.iinfo(np.int32).min or hi > np.iinfo(np.int32).max:
            bad = lo if lo < np.iinfo(np.int32).min else hi
            raise KernelError(f"{name} id {bad} is outside [0, {rows})", where=f"kernels.{name}",
                              hint=f"ids are rows of the table: 0..{rows - 1}")
    return arr.astype(np.int32)


@dsl.kernel
def embedding_kernel(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]``: ``[*ids.shape, D]`` rows of ``table [V, D]``; ``ids`` int32, any shape. An id outside
    ``[0, V)`` faults."""
    if len(table.shape) != 2:
        fail(f"an embedding table of shape {table.shape}", "the table is [V, D]: one row per id")
    _check_ids(ids)
    d = table.shape[1]
    out = dsl.hbm_tensor((*ids.shape, d), table.dtype, name="rows")
    work, index = _plan(ids, d, table.dtype)

    def gather(step: Work) -> Callable[[], Tensor]:
        _, _, p, c0, w = step
        return lambda: gather_spread(dsl.sbuf((p, w), table.dtype), table[:, c0 : c0 + w], index(step))

    for (_, key, _, c0, w), rows in zip(work, prefetch([gather(s) for s in work], DEPTH), strict=True):
        dma_spread(out[key][..., c0 : c0 + w], rows)
    return out


def zero_rows(t: Tensor) -> None:
    """Zero an HBM ``[R, C]`` tensor by DMAs from a zero tile broadcast along a free axis (``[128, k, C]``
    fills 128·k rows), spread over the queues, plus one for the ``R % 128`` rows left."""
    n_rows, cols = t.shape
    p = min(dsl.tile_size().pmax, n_rows)
    itemsize = get_dtype(t.dtype).itemsize
    for c0, w in blocks(cols, _row_width(t.dtype)):
        zero = dsl.zeros((p, 1, w), t.dtype)
        full = n_rows // p
        pieces = max(1, min(DMA_PIECES, full, full * p * w * itemsize // DMA_PIECE_BYTES))
        for b0, k in blocks(full, -(-full // pieces)):
            dsl.dma_copy(t[b0 * p : (b0 + k) * p, c0 : c0 + w], zero.broadcast_to((p, k, w)))
        if full * p < n_rows:
            dsl.dma_copy(t[full * p : n_rows, c0 : c0 + w], zero[: n_rows - full * p])


@dsl.kernel
def embedding_backward_kernel(dout: Tensor, ids: Tensor, *, vocab: int, dtype: str = "fp32") -> Tensor:
    """``dtable [vocab, D]`` (in ``dtype``) with ``dtable[ids[i]] += dout[i]`` for every position ``i`` of
    ``ids``; ``dout`` is ``[*ids.shape, D]``. An id outside ``[0, vocab)`` faults."""
    _check_ids(ids)
    if dout.shape[:-1] != ids.shape:
        fail(f"embedding_backward of dout {dout.shape} for ids {ids.shape}",
             f"dout is [*ids.shape, D]: ({', '.join(map(str, ids.shape))}, D), one row per id")
    if vocab < 1:
        fail(f"embedding_backward with vocab={vocab}", "the table has at least one row")
    d = dout.shape[-1]
    dtable = dsl.hbm_tensor((vocab, d), dtype, name="dtable")
    zero_rows(dtable)
    work, index = _plan(ids, d, dout.dtype)

    def load(step: Work) -> Callable[[], tuple[Tensor, Tensor]]:
        _, key, p, c0, w = step
        return lambda: (dma_spread(dsl.sbuf((p, w), dout.dtype), dout[key][..., c0 : c0 + w]), index(step))

    for (_, _, _, c0, w), (rows, idx) in zip(work, prefetch([load(s) for s in work], DEPTH), strict=True):
        for s0, sw in blocks(w, SCATTER_COLUMNS):
            dsl.dma_scatter_add(dtable[:, c0 + s0 : c0 + s0 + sw], rows[:, s0 : s0 + sw], idx)
    return dtable


def embedding(table: ArrayLike, ids: ArrayLike, *, dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """``table[ids]`` on a simulated NeuronCore, the table stored as ``dtype``.

        >>> embedding([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [[2, 0], [2, 2]]).tolist()
        [[[4.0, 5.0], [0.0, 1.0]], [[4.0, 5.0], [4.0, 5.0]]]
    """
    tab = np.asarray(table, np.float32)
    res = dsl.run_kernel(embedding_kernel, dsl.typed(tab, dtype), host_ids(ids, len(tab) if tab.ndim else 1,
                                                                           "embedding"), target=target)
    return res.outputs[0]


def embedding_backward(dout: ArrayLike, ids: ArrayLike, vocab: int, *, dtype: str = "fp32",
                       out_dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """The gradient of ``embedding`` with respect to the table: ``dout`` rows (stored as ``dtype``) summed
    into a zero ``[vocab, D]`` table of ``out_dtype``.

        >>> embedding_backward([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [1, 3, 1], 4).tolist()
        [[0.0, 0.0], [6.0, 8.0], [0.0, 0.0], [3.0, 4.0]]
    """
    res = dsl.run_kernel(embedding_backward_kernel, dsl.typed(np.asarray(dout, np.float32), dtype),
                         host_ids(ids, vocab, "embedding_backward"), target=target, vocab=vocab, dtype=out_dtype)
    return res.outputs[0]
