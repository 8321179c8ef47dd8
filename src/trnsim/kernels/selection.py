"""Top-k and argmax / argmin along an axis in the kernel language, on VectorE's selection instructions.

Rows go on partitions, 128 per tile, a whole row in the free axis. Each round takes the next 8 values::

    vals  = max8(work)                        the row's 8 largest, largest first (IEEE total order)
    idx   = find_index8(work, vals)           their positions (equal values: successive occurrences)
    work  = match_replace8(work, vals, -NaN)  taken out: -NaN is the lowest value of the order

so ``⌈k/8⌉`` rounds give the k largest values and their indices, ties in index order: ``jax.lax.top_k``'s
results. A row shorter than 8 is padded with -inf after its values (their indices come first on ties).

NOTE: a row that itself holds a negative NaN with the quiet bit set (fp32 0xFFC00000, -NaN of the
replacement) may, in a later round, report a replaced position for it; every other value is exact.

Integers of ≤ 16 bits are exact in the fp32 tile as they are. 32-bit integers are not (fp32 rounds above
2**24): their rounds run on two exact halves, ``hi = x >> 16`` and ``lo = x & 0xFFFF`` (``_topk_split``).

Argmax (``argmax_kernel``) is one max8 + find_index8 round on keys whose largest is the answer (NaNs one
canonical +NaN, -0.0 folded into +0.0, argmin negated, 32-bit integers as two 16-bit halves), per chunk
of a row, the chunks (and the partitions a few long rows are spread over) merged by the same instructions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

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
# 32-bit integers' top-k (_topk_split) keeps five fp32 rows (hi, lo, key, a mask, the raw values) a partition
MAX_SPLIT_ROW = MAX_ROW // 4
TAKEN_HI = float(1 << 20)   # taken from a taken value's hi: below every real hi (≥ -2**15), exact in fp32
PAD_HI = -float(1 << 21)    # the hi of padding past a short row: below every value, taken or not


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
    if x.dtype in SPLIT_KEYS:
        if cols > MAX_SPLIT_ROW:
            fail(f"rows of {cols} {x.dtype} values", f"top-k of 32-bit integers keeps a row's halves, its keys and "
                 f"their masks in one tile: at most {MAX_SPLIT_ROW} values")
        _topk_split(x, values, indices, k)
        return values, indices
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


def _topk_split(x: Tensor, values: Tensor, indices: Tensor, k: int) -> None:
    """``topk_kernel`` for 32-bit integers: each round picks the 8 lexicographically largest ``(hi, lo)``
    (``hi = x >> 16`` signed for int32, ``lo = x & 0xFFFF``: both exact in fp32) through one exact fp32 key::

        h8   = max8(hi)                               the 8 largest hi (repeats kept), h8[7] = t
        rank = Σ_j [hi ≥ h8[j]]                       0 below t; else 8 - (first j with h8[j] = hi):
        key  = rank · 65536 + lo                      strictly increasing in hi among hi ≥ t, < 2**20
        vals = max8(key);  idx = find_index8(key, vals)

    The 8 largest x all have ``hi ≥ t`` (8 values do), and on those the key orders as x itself, so ``vals``
    are the 8 largest x, ties (equal keys: equal x) in index order. A value comes back from its key:
    ``lo = key mod 65536`` and ``hi = h8[8 - rank]``, then ``(hi << 16) | lo`` in the integer ALU. Taken
    values leave the next rounds by ``match_replace8(key, vals, -1)`` and ``hi -= TAKEN_HI`` where the key
    is -1 (exact in fp32: below every real hi, above the padding's ``PAD_HI``); a round never takes one
    back before every remaining value (only the last round, when fewer than 8 remain, takes any).
    """
    rows, cols = x.shape
    pmax = dsl.tile_size().pmax
    width = max(cols, SELECT_WIDTH)
    step = float(1 << 16)
    # the one-hot of rank r at column i: r = 8 - i (a [P, 8, 8] broadcast of both, made once)
    ranks = dsl.tensor_scalar(dsl.iota((pmax, SELECT_WIDTH), "fp32"), "mul", -step, "add", SELECT_WIDTH * step)
    queues = itertools.cycle(range(LOAD_SPLIT))
    for r0, rn in blocks(rows, pmax):
        raw = dsl.sbuf((rn, cols), x.dtype)
        dsl.load(raw, x[r0 : r0 + rn, :], queue=next(queues))
        hi, lo = dsl.sbuf((rn, width), "fp32"), dsl.sbuf((rn, width), "fp32")
        if width > cols:
            dsl.memset(hi[:, cols:], PAD_HI)
            dsl.memset(lo[:, cols:], 0.0, engine="gpsimd")
        dsl.tensor_scalar(raw, "shr", 16.0, dtype="fp32", out=hi[:, :cols])
        dsl.tensor_scalar(raw, "and", 65535.0, dtype="fp32", out=lo[:, :cols], engine="gpsimd")
        dsl.release(raw)
        eight = (rn, SELECT_WIDTH, SELECT_WIDTH)
        for j0 in range(0, k, SELECT_WIDTH):
            take = min(SELECT_WIDTH, k - j0)
            h8 = dsl.max8(hi)
            # NOTE: GpSimd makes the masks while VectorE sums them: the two engines overlap
            key = dsl.tensor_scalar(hi, "ge", h8[:, :1], "mul", step, engine="gpsimd")
            dsl.tensor_tensor(key, lo, "add", out=key)
            for j in range(1, SELECT_WIDTH):
                mask = dsl.tensor_scalar(hi, "ge", h8[:, j : j + 1], "mul", step, engine="gpsimd")
                dsl.tensor_tensor(key, mask, "add", out=key)
            vals = dsl.max8(key)
            idx = dsl.find_index8(key, vals)
            if j0 + SELECT_WIDTH < k:
                dsl.match_replace8(key, vals, -1.0, out=key)
                gone = dsl.tensor_scalar(key, "lt", 0.0, "mul", -TAKEN_HI)
                dsl.tensor_tensor(hi, gone, "add", out=hi)
            low = dsl.tensor_scalar(vals, "mod", step)
            high = dsl.tensor_tensor(vals, low, "sub")
            hot = dsl.tensor_tensor(high[:, :, None].broadcast_to(eight), ranks[:rn, None, :].broadcast_to(eight), "eq")
            dsl.tensor_tensor(hot, h8[:, None, :].broadcast_to(eight), "mul", out=hot)
            top = dsl.reduce("add", hot, dtype="int32", out=dsl.sbuf((rn, SELECT_WIDTH), "int32"))
            shifted = dsl.tensor_scalar(top, "shl", 16.0, dtype=x.dtype)
            value = dsl.tensor_tensor(shifted, dsl.copy(low, dtype=x.dtype), "or", dtype=x.dtype)
            dsl.store(values[r0 : r0 + rn, j0 : j0 + take], value[:, :take], queue=next(queues))
            dsl.store(indices[r0 : r0 + rn, j0 : j0 + take], dsl.copy(idx[:, :take], dtype="int32"),
                      queue=next(queues))


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
# loads and stores go round the 16 DMA queues of a core (reference/neuron.md §1.2); loads are issued ahead
# (prefetch), so a store ahead of a load on its queue rarely holds it
LOAD_SPLIT = 16
LOAD_PIECE = 32 * 1024   # bytes a load DMA moves at least when split (each DMA also pays the queue's latency)
# values of an o's [N, I] slab read through strided views at most (_argmax_strided): two VectorE passes of N a
# row there, against a transposed load per o (a DMA's fixed latency) and five passes of 128 rows a tile in
# the packed layout; measured on trn3 ([200, 1000, 12] packs faster, [3000, 60, 40] strides 2x faster)
STRIDED_SLAB = 8192
MIN_SEGMENT = 2048   # values of a row per partition at least, when few long rows are spread over partitions
PIPELINE = 4         # chunks a kernel of fewer row tiles splits its rows into, at most MIN_PIECE values each...
MIN_PIECE = 512      # ...so that loads, the three engines' passes and the merges overlap
FLOAT_KEYS = ("fp32", "bf16", "fp16")
SPLIT_KEYS = ("int32", "uint32")          # keys (x >> 16, x & 0xFFFF): two fp32-exact halves, compared in turn
EXACT_KEYS = (*FLOAT_KEYS, "int16", "uint16", "int8", "uint8", *SPLIT_KEYS)


@dataclass(frozen=True)
class _Rows:
    """How argmax_kernel lays rows out: ``segs`` partitions a row (values ``j·width .. (j+1)·width`` of a row,
    a piece, go to partition ``j mod segs`` in chunk ``j div segs``), ``chunks`` column blocks of ``width``."""

    cols: int
    segs: int
    width: int

    @property
    def pieces(self) -> int:
        return -(-self.cols // self.width)

    @property
    def chunks(self) -> int:
        return -(-self.pieces // self.segs)

    def chunk(self, c: int) -> list[tuple[int, int, int]]:
        """(partition in the row, first value, values) of each piece chunk ``c`` loads."""
        j0 = c * self.segs
        return [(j - j0, j * self.width, min(self.width, self.cols - j * self.width))
                for j in range(j0, min(self.pieces, j0 + self.segs))]


@dsl.kernel
def argmax_kernel(x: Tensor, *, smallest: bool = False, chunk: int = MAX_ROW, segment: int = MIN_SEGMENT) -> Tensor:
    """``indices[O, I, 1]`` (int32): where the largest (``smallest``: the smallest) value of each row
    ``x[o, :, i]`` of ``x [O, N, I]`` first occurs, a NaN counting above every number (its first occurrence
    wins): the results of ``jnp.argmax`` / ``jnp.argmin`` along the middle axis.

    Each row becomes keys in fp32 tiles whose lexicographic largest is the row's answer: floats one key,
    ``(±x) + 0.0`` (``-0.0`` folded into ``+0.0``, which compare equal) with every NaN made the one
    canonical ``+NaN`` (the largest in max8's total order); integers of ≤ 16 bits ``±x``; 32-bit integers
    two, ``±(x >> 16)`` then ``±(x & 0xFFFF)`` (each exact in fp32). ``_first_best`` finds the first
    position of the lexicographic largest with max8 / find_index8. Rows longer than ``chunk`` go in chunks:
    each chunk's best keys and position join ``[P, chunks]`` tiles whose own ``_first_best`` picks the first
    chunk holding the row's best (a one-hot sum then reads its position). Few long rows (``I = 1``) are
    spread over the partitions in pieces of at least ``segment`` values (``_Rows``), each partition's best
    then merged with the position as a last key (pieces are not in partition order across chunks). A few
    rows to an ``o`` (an ``[N, I]`` slab of ≤ ``STRIDED_SLAB`` values) go through strided views of it
    (``_argmax_strided``).

        for each row tile (rows × segs ≤ 128 partitions; I > 1: a block of i at one o, loaded through a
                           transposed view):
            for each chunk c:
                keys = key(x[tile, chunk]), -inf where there is no value
                best[:, c], at[:, c] = _first_best(keys) (its keys, the value's position)
            position = merge(best, at) over chunks, then over a row's partitions
    Positions are exact in the fp32 ALU while ``N < 2**24``.
    """
    outer, cols, inner = x.shape
    if x.dtype not in EXACT_KEYS:
        fail(f"argmax of {x.dtype} values", f"fp32 keys are exact for {', '.join(EXACT_KEYS)}")
    if cols >= 2**24:
        fail(f"rows of {cols} values", "argmax positions are fp32-exact below 2**24 values a row")
    indices = dsl.hbm_tensor((outer, inner, 1), "int32", name="indices")
    pmax = dsl.tile_size().pmax
    levels = 2 if x.dtype in SPLIT_KEYS else 1
    if strided(outer, cols, inner, x.dtype, chunk):
        _argmax_strided(x, indices, smallest)
        return indices
    segs = max(1, min(pmax // outer, cols // segment)) if inner == 1 else 1
    # NOTE: 32-bit integers keep 18 more bytes a value alive (the second key, the halves, the mask and
    # the masked key of _first_best): a quarter of the chunk keeps them, and the loads ahead, in SBUF
    span = -(-cols // segs)
    # row tiles: (first o, first i, o's, rows); I > 1: rows are (o, i), the i of an o on consecutive
    # partitions, as many o as fit when I < 128
    pack = max(1, pmax // inner)
    tiles = ([(o0, 0, n, n) for o0, n in blocks(outer, pmax // segs)] if inner == 1 else
             [(o, i0, 1, n) for o in range(outer) for i0, n in blocks(inner, pmax)] if pack == 1 else
             [(o0, 0, n, n * inner) for o0, n in blocks(outer, pack)])
    row_tiles = len(tiles)
    if row_tiles < PIPELINE:     # too few tiles to overlap one's load with another's compute: split the rows
        span = max(min(span, MIN_PIECE), -(-span // -(-PIPELINE // row_tiles)))
    rows = _Rows(cols, segs, min(chunk if levels == 1 else MAX_ROW // 4, span))
    width = max(rows.width, SELECT_WIDTH)
    nan = dsl.full((pmax, 1), CANONICAL_NAN) if x.dtype in FLOAT_KEYS else None
    low = dsl.full((pmax, 1), float("-inf"))      # both read through free-axis broadcasts
    column = dsl.iota((pmax, max(rows.chunks, segs)), "fp32") if rows.chunks > 1 or segs > 1 else None
    # a partition's offset in a row's positions: (p mod segs) · width
    offset = (dsl.tensor_scalar(dsl.iota((pmax, 1), "fp32", channel_multiplier=rows.width), "mod",
                                float(segs * rows.width)) if segs > 1 else None)
    valid = None   # the last chunk's values: position (p mod segs)·width + f below what is left of a row
    last = cols - (rows.chunks - 1) * segs * rows.width
    if segs > 1 and last < segs * rows.width:
        place = dsl.iota((pmax, rows.width), "fp32", channel_multiplier=rows.width)
        valid = dsl.tensor_scalar(place, "mod", float(segs * rows.width), "lt", float(last), dtype="uint8")
    pieces = [(a, i0, og, rn, c) for a, i0, og, rn in tiles for c in range(rows.chunks)]
    queues = itertools.cycle(range(LOAD_SPLIT))     # loads (a row's pieces too) and stores go round the queues

    def load(piece: tuple[int, int, int, int, int]) -> Callable[[], tuple[Tensor, Tensor]]:
        a, i0, og, rn, c = piece

        def issue() -> tuple[Tensor, Tensor]:
            cn = rows.width
            key = dsl.sbuf((rn * segs, width), "fp32")
            raw = key[:, :cn] if x.dtype == "fp32" else dsl.sbuf((rn * segs, cn), x.dtype)
            whole = rows.chunk(c)
            if segs > 1 and len(whole) == segs and whole[-1][2] == cn and rn >= LOAD_SPLIT // 2:
                # [rows, segs·width] of x is [rows·segs, width] of the tile in index order: DMAs of rows
                v0 = c * segs * cn
                for r0, k in blocks(rn, -(-rn // LOAD_SPLIT)):
                    dsl.dma_copy(raw[r0 * segs : (r0 + k) * segs, :], x[a + r0 : a + r0 + k, v0 : v0 + segs * cn, 0],
                                 queue=next(queues))
            elif segs > 1:   # whole pieces in LOAD_SPLIT DMAs a row, a short last piece in one
                for r in range(rn):
                    for p, v0, n in _runs(rows.chunk(c)):
                        if n % cn:
                            dsl.dma_copy(raw[r * segs + p : r * segs + p + 1, :n], x[a + r, v0 : v0 + n, 0])
                            continue
                        for q0, k in blocks(n // cn, -(-n // cn // LOAD_SPLIT)):
                            dsl.dma_copy(raw[r * segs + p + q0 : r * segs + p + q0 + k, :cn],
                                         x[a + r, v0 + q0 * cn : v0 + (q0 + k) * cn, 0], queue=next(queues))
            elif og > 1 and inner > 1:   # a transposed [I, n] per o (the DMA-transpose path), round the queues
                c0 = c * cn
                n = min(cn, cols - c0)
                for k in range(og):
                    dsl.load(raw[k * inner : (k + 1) * inner, :n], x[a + k, c0 : c0 + n, :].T, queue=next(queues))
            else:
                c0 = c * cn
                n = min(cn, cols - c0)
                view = x[a : a + rn, c0 : c0 + n, 0] if inner == 1 else x[a, c0 : c0 + n, i0 : i0 + rn].T
                ways = max(1, min(LOAD_SPLIT, rn, rn * n * itemsize // LOAD_PIECE))   # a .T view: the DMA transpose
                dsl.load(raw[:, :n], view, queue=next(queues), split=ways)
            return key, raw
        return issue

    itemsize = get_dtype(x.dtype).itemsize
    size = itemsize if x.dtype != "fp32" else 0
    depth = prefetch_depth(width * (4 + size), width * (1 + 17 * (levels - 1)) + 1024)
    loaded = prefetch([load(piece) for piece in pieces], depth)
    for a, i0, og, rn in tiles:
        parts = rn * segs
        best = [dsl.sbuf((parts, max(rows.chunks, SELECT_WIDTH)), "fp32") for _ in range(levels)]
        at = dsl.sbuf((parts, rows.chunks), "fp32")
        for c in range(rows.chunks):
            key, raw = next(loaded)
            keys = _keys(key, raw, smallest, nan)
            _blank(keys, rows, c, valid, low)
            found, tops = _first_best(keys, low)
            for level, top in zip(best, tops, strict=True):
                dsl.copy(top, out=level[:, c : c + 1])
            start = float(c * segs * rows.width)      # the chunk's first position (partition offsets: later)
            dsl.tensor_scalar(found[:, :1], "add", start, dtype="fp32", out=at[:, c : c + 1])
        position, tops = _merge(best, at, rows.chunks, column, low)
        if segs > 1 and offset is not None and column is not None:
            placed = dsl.tensor_tensor(position, offset[:parts], "add")
            spread = [dsl.sbuf((rn, max(segs, SELECT_WIDTH)), "fp32") for _ in range(levels + 1)]
            for level, top in zip(spread, [*tops, dsl.tensor_scalar(placed, "mul", -1.0)], strict=True):
                dsl.dma_copy(level[:, :segs], top)          # [rn·segs, 1] → [rn, segs]: a row's partitions
            at_row = dsl.sbuf((rn, segs), "fp32")
            dsl.dma_copy(at_row, placed)
            position, _ = _merge(spread, at_row, segs, column, low, nans=nan is not None)
        result = dsl.copy(position, dtype="int32")
        if inner == 1:
            dsl.store(indices[a : a + rn, 0], result, queue=next(queues))
        else:   # [o's · i's, 1] → [o's, i's] in index order
            dsl.dma_copy(indices[a : a + og, i0 : i0 + rn // og, 0], result, queue=next(queues))
    return indices


def strided(outer: int, cols: int, inner: int, dtype: str, chunk: int = MAX_ROW) -> bool:
    """Whether ``argmax_kernel`` reads rows of ``x [O, cols, inner]`` through strided views
    (``_argmax_strided``): a few rows to an ``o`` whose slab fits a chunk, ``o`` filling the partitions (a
    tile's passes cost the same with fewer)."""
    return outer >= 128 and 1 < inner < 128 and cols >= SELECT_WIDTH and \
        cols * inner <= min(STRIDED_SLAB, chunk if dtype not in SPLIT_KEYS else MAX_ROW // 4)


def tiles_per_outer(cols: int, inner: int, dtype: str, pmax: int = 128) -> float:
    """Row tiles ``argmax_kernel`` spends per index of ``O`` when ``O`` is large (≥ 128, no rows spread over
    partitions): the kernel's time grows linearly with it."""
    if inner == 1 or strided(pmax, cols, inner, dtype):
        return 1 / pmax
    return 1 / (pmax // inner) if inner < pmax else float(-(-inner // pmax))


def _argmax_strided(x: Tensor, indices: Tensor, smallest: bool) -> None:
    """``argmax_kernel`` for a few rows to an ``o`` (``strided``): ``o`` on the partitions, its whole
    ``[N, I]`` slab along the free axis, loaded as it lies (one DMA a block of partitions), keys made once,
    and each row ``i`` selected through the strided view ``key[:, i::I]`` (two VectorE passes per ``i``,
    at the engines' penalty for strides over 16 bytes, instead of a transposed load per ``o``)."""
    outer, cols, inner = x.shape
    pmax = dsl.tile_size().pmax
    nan = dsl.full((pmax, 1), CANONICAL_NAN) if x.dtype in FLOAT_KEYS else None
    low = dsl.full((pmax, 1), float("-inf"))
    queues = itertools.cycle(range(LOAD_SPLIT))
    itemsize = get_dtype(x.dtype).itemsize
    tiles = blocks(outer, pmax)

    def load(tile: tuple[int, int]) -> Callable[[], tuple[Tensor, Tensor]]:
        o0, rn = tile

        def issue() -> tuple[Tensor, Tensor]:
            key = dsl.sbuf((rn, cols * inner), "fp32")
            raw = key if x.dtype == "fp32" else dsl.sbuf((rn, cols * inner), x.dtype)
            ways = max(1, min(LOAD_SPLIT, rn, rn * cols * inner * itemsize // LOAD_PIECE))
            for r0, k in blocks(rn, -(-rn // ways)):   # [rows, N, I] of x is [rows, N·I] of the tile
                dsl.dma_copy(raw[r0 : r0 + k], x[o0 + r0 : o0 + r0 + k], queue=next(queues))
            return key, raw
        return issue

    size = itemsize if x.dtype != "fp32" else 0
    width = cols * inner
    depth = prefetch_depth(width * (4 + size), width * (1 + 17 * (x.dtype in SPLIT_KEYS)) + 1024)
    for (o0, rn), (key, raw) in zip(tiles, prefetch([load(t) for t in tiles], depth), strict=True):
        keys = _keys(key, raw, smallest, nan)
        result = dsl.sbuf((rn, inner), "int32")
        for i in range(inner):
            found, _ = _first_best([k[:, i::inner] for k in keys], low)
            dsl.copy(found[:, :1], out=result[:, i : i + 1])
        dsl.store(indices[o0 : o0 + rn, :, 0], result, queue=next(queues))


def _runs(pieces: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The pieces of a chunk as DMAs: (first partition, first value, values) of the consecutive whole
    pieces together, and of a last short piece alone."""
    if not pieces:
        return []
    whole = [p for p in pieces if p[2] == pieces[0][2]]
    runs = [(whole[0][0], whole[0][1], sum(n for _, _, n in whole))]
    return runs + [p for p in pieces[len(whole):]]


def _keys(key: Tensor, raw: Tensor, smallest: bool, nan: Tensor | None) -> list[Tensor]:
    """The key tiles of values ``raw [R, w]``: ``key [R, ≥ w]`` (and a second tile for 32-bit integers)
    holding them in their first ``w`` columns (kernel docstring)."""
    rn, cn = raw.shape
    real = key[:, :cn]
    tiles, sources = [key], [(raw, real)]
    if raw.dtype in SPLIT_KEYS:
        second = dsl.sbuf(key.shape, "fp32")
        high = dsl.tensor_scalar(raw, "shr", 16.0, dtype="int32")
        halves = dsl.tensor_scalar(raw, "and", 65535.0, dtype="int32", engine="gpsimd")
        sources = [(high, real), (halves, second[:, :cn])]
        tiles.append(second)
    # NOTE: ScalarE makes the keys and GpSimd finds the NaNs, so VectorE (twice their fp32 rate) is left
    # the select and the two selection passes: tiles pipeline over the three engines
    isnan = dsl.tensor_tensor(raw, raw, "ne", dtype="uint8", engine="gpsimd") if nan is not None else None
    for src, dst in sources:
        dsl.activation("identity", src, scale=-1.0 if smallest else 1.0, bias=0.0, out=dst)
    if isnan is not None and nan is not None:
        dsl.where(isnan, nan[:rn].broadcast_to((rn, cn)), real, out=real)
    return tiles


def _blank(keys: list[Tensor], rows: _Rows, c: int, valid: Tensor | None, low: Tensor) -> None:
    """-inf where chunk ``c`` of a row tile has no value: the columns past a short piece, or past ``width``
    (max8 reads 8), and with a row over several partitions, where ``valid`` (the last chunk's mask, made
    once) is 0: partitions address ranges from 0, 32, 64 or 96 only, so a select over the whole tile."""
    parts, cols = keys[0].shape
    n = min(rows.width, rows.cols - c * rows.width) if rows.segs == 1 else rows.width
    for key in keys:
        if n < cols:
            dsl.memset(key[:, n:], float("-inf"))
        if valid is not None and c == rows.chunks - 1:
            head = key[:, : rows.width]
            dsl.where(valid[:parts], head, low[:parts].broadcast_to(head.shape), out=head)


def _first_best(keys: list[Tensor], low: Tensor, nans: bool = False) -> tuple[Tensor, list[Tensor]]:
    """Where the lexicographic largest of ``keys`` (tiles ``[R, W ≥ 8]``) first occurs in each row
    (``find_index8``'s ``[R, 8]``, column 0), and each key's value there (``[R, 1]`` views): the first key's
    largest by max8, then the next key's among the positions that hold it (others set to -inf). ``nans``:
    the first key may hold the canonical NaN, which ``eq`` does not match: NaN positions hold a NaN."""
    rn, w = keys[0].shape
    current = keys[0]
    vals = dsl.max8(current)
    tops = [vals[:, :1]]
    for j, key in enumerate(keys[1:]):
        holds = dsl.tensor_scalar(current, "eq", tops[-1], dtype="uint8")
        if nans and j == 0:
            both = dsl.tensor_scalar(dsl.tensor_tensor(current, current, "ne"), "mul",
                                     dsl.tensor_tensor(tops[-1], tops[-1], "ne"))
            holds = dsl.tensor_tensor(holds, both, "max", dtype="uint8")
        current = dsl.where(holds, key, low[:rn].broadcast_to((rn, w)))
        vals = dsl.max8(current)
        tops.append(vals[:, :1])
    return dsl.find_index8(current, vals), tops


def _merge(best: list[Tensor], at: Tensor, k: int, column: Tensor | None, low: Tensor,
           nans: bool = False) -> tuple[Tensor, list[Tensor]]:
    """The position ``at[:, j]`` of the first ``j < k`` whose keys ``best[·][:, j]`` are the lexicographic
    largest of each row, and those keys: a one-hot of ``j`` summed against ``at`` (``nans``: ``_first_best``)."""
    if k == 1:
        return at[:, :1], [b[:, :1] for b in best]
    rn = at.shape[0]
    if best[0].shape[1] > k:
        for b in best:
            dsl.copy(low[:rn].broadcast_to((rn, b.shape[1] - k)), out=b[:, k:])
    found, tops = _first_best(best, low, nans)
    assert column is not None
    first = dsl.copy(found[:, :1], dtype="fp32")
    hot = dsl.tensor_scalar(column[:rn, :k], "eq", first)
    return dsl.reduce("add", dsl.tensor_tensor(hot, at, "mul")), tops


def argmax(x: ArrayLike, axis: int = -1, dtype: str | None = None, *, smallest: bool = False,
           chunk: int = MAX_ROW, segment: int = MIN_SEGMENT, target: str = "trn3") -> NDArray[np.int64]:
    """Where the largest value along ``axis`` of ``x`` first occurs, NaNs above every number
    (``jnp.argmax``'s result; ``smallest``: ``jnp.argmin``'s); ``dtype`` is the ISA dtype of ``x``, rows go
    in chunks of ``chunk`` values, few long rows over the partitions in pieces of ``segment`` or more
    (``argmax_kernel``).

        >>> argmax([[3.0, 1.0, 5.0, 5.0]]).tolist(), argmax([[3.0, 1.0, 5.0, 1.0]], smallest=True).tolist()
        ([2], [1])
    """
    arr = np.asarray(x)
    if arr.ndim == 0 or arr.size == 0:
        raise KernelError(f"argmax of an array of shape {arr.shape}", where="kernels.argmax",
                          hint="pass at least one value along the axis")
    if not -arr.ndim <= axis < arr.ndim:
        raise KernelError(f"axis {axis} of a {arr.ndim}-D array", where="kernels.argmax",
                          hint=f"use an axis in {-arr.ndim}..{arr.ndim - 1}")
    axis %= arr.ndim
    shape = arr.shape
    view = arr.reshape(int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:])))
    arg = dsl.typed(view, dtype) if dtype is not None else view
    out = dsl.run_kernel(argmax_kernel, arg, target=target, smallest=smallest, chunk=chunk,
                         segment=segment).outputs[0]
    return out.reshape(shape[:axis] + shape[axis + 1:])
