"""Tensors and data movement: HBM outputs and on-chip tiles, DMA load/store, copies and casts, memset, iota.

DMAs (``load``, ``store``, ``dma_copy``, the indirect ``dma_gather``, ``dma_scatter`` and ``dma_scatter_add``)
run on a DMA queue (round-robin unless ``queue=`` says which), issued from the ``sync`` engine, and cast when
the two dtypes differ. ``copy`` is an engine copy/cast (VectorE by default): the way results leave PSUM.

    t = load(x[0:128, :])                    # HBM → new SBUF tile of the view's shape and dtype
    load(t2, x[0:128, :].T)                  # into an existing tile, transposing on the way (DMA transpose)
    load(t3, x[0:128, :], split=4)           # as 4 DMAs of 32 partitions on 4 queues, in parallel
    store(out[0:128, :], t)                  # SBUF → HBM (a cast when the dtypes differ)
    dma_gather(rows, table, ids)             # rows[p, :] = table[ids[p], :] (an embedding lookup)
    dma_scatter(table, rows, ids)            # table[ids[p], :] = rows[p, :] (a dynamic_update_slice's rows)
    acc = psum((128, 512)); s = copy(acc, dtype="bf16")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from trnsim.dsl.errors import fail
from trnsim.dsl.tensor import Memory, Tensor
from trnsim.dsl.trace import current
from trnsim.isa.base import Engine
from trnsim.isa.dma import DmaCopy, DmaGather, DmaScatter, DmaScatterAdd
from trnsim.isa.elementwise import Iota, Memset, TensorCopy


def ndarray(shape: Sequence[int], dtype: str = "fp32", buffer: Memory = "sbuf", name: str | None = None) -> Tensor:
    """A new tensor in ``buffer`` (NKI's ``nl.ndarray``): an SBUF/PSUM tile, or an HBM tensor the kernel
    returns as an output (or keeps as scratch)."""
    tr = current()
    if buffer == "hbm":
        return tr.declare(name, shape, dtype, "scratch")
    return tr.allocate(buffer, shape, dtype, name)


def hbm_tensor(shape: Sequence[int], dtype: str, name: str | None = None) -> Tensor:
    """An HBM tensor of the kernel: return it to make it an output."""
    return ndarray(shape, dtype, "hbm", name)


def sbuf(shape: Sequence[int], dtype: str = "fp32", name: str | None = None) -> Tensor:
    """A new SBUF tile ``[P ≤ 128, *free]`` (freed when the kernel drops its last reference)."""
    return ndarray(shape, dtype, "sbuf", name)


def psum(shape: Sequence[int], dtype: str = "fp32", name: str | None = None) -> Tensor:
    """A new PSUM tile, on whole 2 KiB banks (a matmul output ``[M ≤ 128, N ≤ 512]`` fp32 is one bank)."""
    return ndarray(shape, dtype, "psum", name)


def default_dtype(t: Tensor) -> str:
    """Result dtype of an engine op on ``t`` when none is given: its own, or fp32 out of PSUM."""
    return "fp32" if t.memory == "psum" else t.dtype


def result(like: Tensor, dtype: str | None, out: Tensor | None) -> Tensor:
    """``out`` (checked to hold as many elements per partition as ``like``) or a new SBUF tile."""
    if out is None:
        return current().allocate("sbuf", like.shape, dtype or default_dtype(like))
    if dtype is not None and dtype != out.dtype:
        fail(f"dtype={dtype} but out is {out.dtype}", "give one of them")
    if not out.on_chip:
        fail("engine results go to SBUF or PSUM, not HBM", "compute into a tile, then store it")
    same_shape(out, like, "out")
    return out


def same_shape(a: Tensor, b: Tensor, what: str) -> None:
    if a.shape[0] != b.shape[0] or a.size != b.size:
        fail(f"{what}: shapes {a.shape} and {b.shape} differ",
             "operands need the same partitions and elements per partition")


def _dma(dst: Tensor, src: Tensor, queue: int | None, split: int = 1) -> Tensor:
    tr = current()
    if dst.size != src.size:
        fail(f"DMA of {src.shape} into {dst.shape}: sizes differ", "copy views with the same number of elements")
    if split > 1:
        # one transfer per block of rows (tile partitions), each on the next queue (from ``queue`` if given):
        # a DMA engine moves one transfer at a time (reference/neuron.md §1.2), so a large tile moves split ways
        rows = dst.shape[0]  # load and store move views of one shape
        step = -(-rows // min(split, rows))
        for i, r in enumerate(range(0, rows, step)):
            q = None if queue is None else (queue + i) % tr.core.dma.queues
            end = min(r + step, rows)
            _dma(dst[r:end], src[r:end], q)
        return dst
    q = tr.next_queue() if queue is None else queue
    dst_ap, src_ap = dst.ap(), src.ap()
    tr.emit("sync", lambda w, s: DmaCopy(dst_ap, src_ap, q, wait=w, signal=s), [src], [dst], domain=f"dma{q}")
    return dst


@overload
def load(src: Tensor, /, *, dtype: str | None = None, queue: int | None = None, split: int = 1) -> Tensor: ...
@overload
def load(dst: Tensor, src: Tensor, /, *, queue: int | None = None, split: int = 1) -> Tensor: ...
def load(a: Tensor, b: Tensor | None = None, /, *, dtype: str | None = None, queue: int | None = None,
         split: int = 1) -> Tensor:
    """``load(hbm_view)`` → a new SBUF tile of its shape (``dtype`` casts); ``load(tile, hbm_view)`` fills a
    tile. Returns the tile. ``split=n``: as ``n`` DMAs of consecutive blocks of partitions on ``n`` queues
    (the next ones round-robin, or ``queue``, ``queue + 1``, …): a large tile then moves ``n`` ways at once."""
    src = a if b is None else b
    if src.on_chip:
        fail(f"load reads HBM, not {src.memory}", "use copy() between tiles, or dma_copy")
    if b is None:
        if src.shape[0] > current().core.sbuf.partitions:
            fail(f"load of {src.shape}: dimension 0 ({src.shape[0]}) becomes the partitions, > 128",
                 "load at most 128 rows at a time, e.g. x[i * 128:(i + 1) * 128, :]")
        dst = current().allocate("sbuf", src.shape, dtype or src.dtype)
    else:
        dst = a
        if dtype is not None:
            fail("load(tile, view) takes its dtype from the tile", "drop dtype=")
        if dst.shape != src.shape:
            fail(f"load of {src.shape} into a tile of {dst.shape}", "load a view of the tile's shape")
    return _dma(dst, src, queue, split)


def store(dst: Tensor, src: Tensor, *, queue: int | None = None, split: int = 1) -> None:
    """DMA the tile ``src`` into the HBM view ``dst`` (casting to its dtype); ``split`` as for ``load``."""
    if dst.on_chip:
        fail(f"store writes HBM, not {dst.memory}", "store into an HBM tensor (or a view of one)")
    if dst.shape != src.shape:
        fail(f"store of {src.shape} into {dst.shape}", "store a tile into a view of the same shape")
    _dma(dst, src, queue, split)


def dma_copy(dst: Tensor, src: Tensor, *, queue: int | None = None) -> Tensor:
    """A DMA between any two views with the same number of elements (copied in index order)."""
    return _dma(dst, src, queue)


def dma_gather(dst: Tensor, table: Tensor, index: Tensor, *, queue: int | None = None) -> Tensor:
    """Indirect DMA: ``dst[p, ...] = table[index[p], ...]`` for each partition ``p`` of ``dst``. ``table`` is a
    view whose dimension 0 is the rows (an HBM table, or a column slice of one), ``index`` a [P, 1] int32
    tile; an index outside the table faults at run time. Returns ``dst``."""
    tr = current()
    q = tr.next_queue() if queue is None else queue
    d, t, i = dst.ap(), table.ap(), index.ap()
    tr.emit("sync", lambda w, s: DmaGather(d, t, i, q, wait=w, signal=s), [table, index], [dst], domain=f"dma{q}")
    return dst


def dma_scatter(table: Tensor, src: Tensor, index: Tensor, *, queue: int | None = None) -> Tensor:
    """Indirect DMA: ``table[index[p], ...] = src[p, ...]`` for each partition ``p`` of ``src``, in partition
    order (of repeated indices the last wins); rows the index does not name keep their contents, and an index
    outside the table faults at run time. Returns ``table``.

    NOTE: which rows are written is data, so the write counts as touching all of ``table``'s box: it waits
    for every earlier access of the view on another queue or engine (the copy that filled the table), and
    every later one waits for it. Scatters into disjoint views (another column block, another span of
    rows) stay independent."""
    tr = current()
    q = tr.next_queue() if queue is None else queue
    t, s_, i = table.ap(), src.ap(), index.ap()
    tr.emit("sync", lambda w, s: DmaScatter(t, s_, i, q, wait=w, signal=s), [src, index], [table], domain=f"dma{q}")
    return table


def dma_scatter_add(table: Tensor, src: Tensor, index: Tensor, *, queue: int | None = None) -> None:
    """Indirect read-add-write DMA: ``table[index[p], ...] += src[p, ...]`` for each partition ``p`` of
    ``src``, in partition order (repeated indices accumulate), computed in fp32."""
    tr = current()
    q = tr.next_queue() if queue is None else queue
    t, s_, i = table.ap(), src.ap(), index.ap()
    tr.emit("sync", lambda w, s: DmaScatterAdd(t, s_, i, q, wait=w, signal=s), [table, src, index], [table],
            domain=f"dma{q}")


def copy(src: Tensor, *, dtype: str | None = None, out: Tensor | None = None, engine: Engine = "vector") -> Tensor:
    """An engine copy (``dtype`` casts, RNE or the kernel's rounding): how data leaves PSUM."""
    dst = result(src, dtype, out)
    dst_ap, src_ap = dst.ap(), src.ap()
    current().emit(engine, lambda w, s: TensorCopy(dst_ap, src_ap, wait=w, signal=s), [src], [dst])
    return dst


def memset(dst: Tensor, value: float, *, engine: Engine = "vector") -> Tensor:
    """Fill a tile with ``value`` (rounded to its dtype)."""
    ap = dst.ap()
    current().emit(engine, lambda w, s: Memset(ap, float(value), wait=w, signal=s), [], [dst])
    return dst


def full(shape: Sequence[int], value: float, dtype: str = "fp32", buffer: Memory = "sbuf") -> Tensor:
    return memset(ndarray(shape, dtype, buffer), value)


def zeros(shape: Sequence[int], dtype: str = "fp32", buffer: Memory = "sbuf") -> Tensor:
    return full(shape, 0.0, dtype, buffer)


def iota(
    shape: Sequence[int], dtype: str = "int32", *, base: int = 0, channel_multiplier: int = 0,
    steps: Sequence[int] | None = None,
) -> Tensor:
    """A new tile of ``base + channel_multiplier * p + Σ steps[k] * i_k`` (GpSimd); ``steps`` has one entry
    per free dimension (default: row-major positions, ``[0, 1, …]`` along each partition)."""
    dst = ndarray(shape, dtype)
    free = dst.shape[1:] or (1,)
    if steps is None:
        steps = [1] * len(free)
        for k in range(len(free) - 2, -1, -1):
            steps[k] = steps[k + 1] * free[k + 1]
    if len(steps) != len(free):
        fail(f"{len(steps)} steps for {len(free)} free dimensions", "give one step per free dimension")
    ap, st = dst.ap(exact=True), tuple(int(s) for s in steps)
    current().emit("gpsimd", lambda w, s: Iota(ap, base, channel_multiplier, st, wait=w, signal=s), [], [dst])
    return dst


def release(*tiles: Tensor) -> None:
    """Free tiles now (their memory is reused by the next tiles); later use of them is an error."""
    tr = current()
    for t in tiles:
        tr.release(t.buffer)
