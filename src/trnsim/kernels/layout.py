"""Laying tensors of any shape onto ``[P ≤ 128, F]`` tiles, for kernels that work element by element or row
by row (optimizers, gathers) and so may choose any layout.

A DMA copies in index order between views of equal size (``dsl.dma_copy``), so DMAing ``p · f`` consecutive
elements of a row-major HBM tensor into a ``[p, f]`` tile is a reshape: partition ``i`` gets elements
``i·f .. i·f+f-1``. ``flat_tiles`` cuts a tensor into such runs, each a *view* (slices of the leading axis,
or of the first two), so the same key addresses every tensor of that shape:

    (N,)                  [128, f] tiles of 128·f elements (f ≤ fmax), then one [k < 128, 1] tile
    (R, C), C ≤ fmax      whole rows packed 128 partitions wide: [128, g·C/128] tiles, g rows each (g·C a
                          multiple of 128), then one [k, C] tile of the k < 128 rows left
    (R ≥ 128, C > fmax)   [128 rows, ≤ fmax columns] blocks
    N-D, or fewer rows    per index of axis 0, recursively

    >>> [(key, p, f) for key, p, f in flat_tiles((300,), 128, 2)]
    [((slice(0, 256, None),), 128, 2), ((slice(256, 300, None),), 44, 1)]

``index_tiles`` is the one-element-per-partition case (gathers: one id per partition), in index order:

    >>> index_tiles((5, 50), 128)
    [((slice(0, 2, None),), 100), ((slice(2, 4, None),), 100), ((slice(4, 5, None),), 50)]

``dma_spread`` / ``gather_spread`` cut one large transfer along dimension 0 into pieces that the DSL puts
on successive DMA queues: a queue moves one transfer at a time at 33 GB/s on trn3 (neuron.md §1.2), so a
1 MiB tile in one DMA would use one of the core's 16 queues. ``prefetch`` issues the loads of later
blocks before the stores of earlier ones, so that DMAs, which issue in program order, overlap compute.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.dtypes import get_dtype

Key = tuple[int | slice, ...]
T = TypeVar("T")
U = TypeVar("U")

# NOTE: a transfer holds its queue for ~2 us before moving data (trn3 preset dma.latency), 66 KB at 33 GB/s;
# pieces of 128 KiB spend 2/3 of their queue time moving data, and 16 such queues ~350 GB/s
DMA_PIECE_BYTES = 128 * 1024
DMA_PIECES = 16  # at most one piece per DMA queue of a trn3 core


def blocks(n: int, size: int, start: int = 0) -> list[tuple[int, int]]:
    """(offset, length) of consecutive blocks of at most ``size`` covering ``start .. start + n``."""
    return [(start + i, min(size, n - i)) for i in range(0, n, size)]


def flat_tiles(shape: Sequence[int], pmax: int, fmax: int) -> list[tuple[Key, int, int]]:
    """``(key, p, f)`` per tile (module docstring): ``x[key]`` holds ``p · f`` consecutive elements of a
    row-major ``x`` of ``shape``, ``p ≤ pmax`` and ``f ≤ fmax``; the keys cover ``x`` once, in order."""
    lead, inner = shape[0], math.prod(shape[1:])
    if inner > fmax:
        if len(shape) == 2 and lead >= pmax:
            return [((slice(r, r + n), slice(c, c + w)), n, w)
                    for r, n in blocks(lead, pmax) for c, w in blocks(inner, fmax)]
        return [((i, *key), p, f) for i in range(lead) for key, p, f in flat_tiles(shape[1:], pmax, fmax)]
    unit = pmax // math.gcd(inner, pmax)  # rows whose elements split evenly over pmax partitions
    per_tile = max(unit, pmax * fmax // inner // unit * unit)
    tiles: list[tuple[Key, int, int]] = []
    r = 0
    while lead - r >= unit:
        g = min(per_tile, (lead - r) // unit * unit)
        tiles.append(((slice(r, r + g),), pmax, g * inner // pmax))
        r += g
    if r < lead:
        tiles.append(((slice(r, lead),), lead - r, inner))
    return tiles


def index_tiles(shape: Sequence[int], pmax: int) -> list[tuple[Key, int]]:
    """``(key, p)`` per tile: ``x[key]`` holds ``p ≤ pmax`` consecutive elements of a row-major ``x`` of
    ``shape``, one per partition; the keys cover ``x`` once, in index order (whole leading-axis rows are
    packed while they fit, else each row is split)."""
    lead, inner = shape[0], math.prod(shape[1:])
    if inner > pmax:
        return [((i, *key), p) for i in range(lead) for key, p in index_tiles(shape[1:], pmax)]
    return [((slice(r, r + g),), g * inner) for r, g in blocks(lead, pmax // inner)]



def _pieces(rows: int, nbytes: int) -> list[slice]:
    """Slices of ``range(rows)``: as many as ``nbytes`` fills pieces of ``DMA_PIECE_BYTES``, ≤ DMA_PIECES."""
    pieces = max(1, min(DMA_PIECES, rows, nbytes // DMA_PIECE_BYTES))
    return [slice(r0, r0 + n) for r0, n in blocks(rows, -(-rows // pieces))]


def _nbytes(*ts: Tensor) -> int:
    return max(t.size * get_dtype(t.dtype).itemsize for t in ts)


def dma_spread(dst: Tensor, src: Tensor) -> Tensor:
    """``dsl.dma_copy(dst, src)`` cut along dimension 0 into pieces on successive DMA queues (module
    docstring); one DMA when dimension 0 differs between the two. Returns ``dst``."""
    if dst.shape[0] != src.shape[0]:
        return dsl.dma_copy(dst, src)
    for s in _pieces(dst.shape[0], _nbytes(dst, src)):
        dsl.dma_copy(dst[s], src[s])
    return dst


def gather_spread(dst: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """``dsl.dma_gather(dst, table, index)`` cut along the partitions of ``dst`` and ``index``."""
    for s in _pieces(dst.shape[0], _nbytes(dst)):
        dsl.dma_gather(dst[s], table, index[s])
    return dst



def prefetch(loads: Sequence[Callable[[], T]], depth: int) -> Iterator[T]:
    """Call ``loads`` in order, ``depth`` ahead of the consumer: yields ``loads[i]()`` after the loads up to
    ``i + depth`` are issued. DMAs issue from the sync engine in program order, so a store placed before
    the next block's load holds that load until the store's data is computed; loads issued ahead keep
    the queues busy while the engines compute (``depth + 2`` results are alive at once)."""
    pending: deque[T] = deque()
    issued = 0
    for _ in range(len(loads)):
        while issued < len(loads) and len(pending) <= depth:
            pending.append(loads[issued]())
            issued += 1
        yield pending.popleft()


def staged(items: Iterable[T], stage: Callable[[T], U]) -> Iterator[tuple[T, U]]:
    """``(item, stage(item))`` with ``stage`` run one item ahead: the stage's instructions for item k+1
    come before the consumer's for item k in every engine's program order, so an engine works on the next
    block's first step (e.g. statistics) instead of waiting for another engine's step of this block."""
    previous: tuple[T, U] | None = None
    for item in items:
        current = (item, stage(item))
        if previous is not None:
            yield previous
        previous = current
    if previous is not None:
        yield previous


def prefetch_depth(tile_bytes: int, reserved: int, most: int = 3) -> int:
    """How far ahead to load tiles of ``tile_bytes`` per partition: 0..``most``, as SBUF allows beside
    ``reserved`` bytes (``depth + 2`` tiles are alive: the one in use, the next being allocated, and the
    prefetched ones); 0 loads each tile only when it is needed."""
    free = dsl.tile_size().sbuf_bytes_per_partition - reserved
    return max(0, min(most, free // max(1, tile_bytes) - 2))
