"""The functional simulator's fast paths: they skip repeated work and keep the plain path's results.

The plain semantics (``semantics``, ``semantics_engines``, ``Context``) are the specification. These two
classes only avoid recomputing what cannot have changed, each behind one invariant, checked where every
access passes (``Context.region`` and ``Context._mark_written``) so no instruction can bypass it:

* ``OperandCache``: the fp32 values of an SBUF access pattern (``Context.read32``), decoded once and reused
  until a store overlaps its bytes. A moving tile that stays resident in SBUF for 16 row blocks is decoded
  once, not 16 times.
* ``DeferredMatmuls``: a Matmul that accumulates into a PSUM pattern joins that pattern's *accumulation
  group*; its product is computed when anything else touches those PSUM bytes (or the run ends), as one
  product over the group's concatenated contraction, ``[S₁; S₂; …]ᵀ @ [V₁; V₂; …]``, plus one PSUM update
  (with the pending groups that share its moving or stationary operands: one product for a GEMM's block).
  Faults are still raised by the instruction that causes them: each matmul's operands, bank and
  accumulator are checked when it is recorded; only the arithmetic waits.

NOTE: deferral changes the order of the fp32 additions within a group, which the documentation leaves open
(``reference/neuron.md`` §1.2 says only that accumulation is fp32): results are bit-exact with the plain
path wherever the partial sums are exactly representable, and within the fp32 rounding of K terms otherwise.

Both keep their arrays (decoded operands, concatenated contractions, products) in a ``Scratch`` arena that
is returned to a process-wide pool (at most ``SCRATCH_BYTES``) when the run ends (``Context.finish``): a run of a
large GEMM then reuses the last run's memory instead of faulting in ~60 MB of fresh 4 KiB pages. A run that
fills the arena applies what is pending and drops its caches between two instructions (``Context.between``),
and starts the arena over: a long run (flash attention decodes ~1 MB of Pᵀ tiles per step) then keeps
reusing warm memory instead of faulting in fresh pages for every decode after the first ``SCRATCH_BYTES``.

``Device(fast_paths=False)`` runs the plain path; setting ``ENABLED = False`` makes that the default of every
``Device`` (the tests compare the two paths on random programs and on the kernels).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern

ENABLED = True  # the default of ``Device(fast_paths=...)``
BUCKET = 4096  # bytes per partition of one bucket of the operand cache's index of byte ranges
CACHE_BYTES = 64 << 20  # decoded operands kept at most (the oldest dropped first)
STACK_BYTES = 64 << 20  # concatenated contractions kept at most (the least recently used dropped first)

SCRATCH_CHUNK = 8 << 20  # bytes per chunk of a run's scratch arena
SCRATCH_BYTES = 96 << 20  # arena bytes per run at most (beyond it arrays are allocated as usual)
SLAB_COLUMNS = 512  # columns of a slab of decoded operands (``Scratch.place``): TensorE's widest moving tile

Span = tuple[int, int, int, int]  # first partition, end partition, first byte, end byte
Parts = list[NDArray[np.float32]]


def span(ap: AccessPattern) -> Span:
    """The partitions and bytes an on-chip pattern may touch (its byte span covers any gaps)."""
    lo, hi = ap.byte_span()
    return ap.partition_start, ap.partition_start + ap.partitions, lo, hi


def overlap(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


_POOL: list[NDArray[np.uint8]] = []  # free chunks, process-wide (list.pop/append are atomic: threads may share it)


class Scratch:
    """fp32 arrays that live until ``release``, carved from chunks reused across runs.

    Invariant: an array handed out is referenced only by the fast paths' own structures (cache entries,
    pending groups, concatenations, products), which ``Context.finish`` empties before it calls ``release``;
    a chunk is in at most one arena or in the pool."""

    def __init__(self) -> None:
        self._chunks: list[NDArray[np.uint8]] = []
        self._used = SCRATCH_CHUNK  # bytes used of the last chunk (none yet: full)
        self.full = False  # an array did not fit in the arena (``Context.between`` then starts it over)
        self._slabs: dict[tuple[int, int], tuple[NDArray[np.float32], int, int]] = {}  # (rows, cols) → slab, cursor
        self._work = np.empty(0, dtype=np.float32)  # ``work``'s buffer
        self._columns: set[tuple[int, int]] = set()  # shapes laid out top to bottom (``stack_down``)

    def stack_down(self, shape: tuple[int, int]) -> None:
        """Lay arrays of ``shape`` out top to bottom from now on (a slab ``cols`` wide): ``DeferredMatmuls``
        asks for it when it had to copy such parts into one column (flash attention's Pᵀ tiles, 16 K tiles
        of one stationary in turn), so the next ones lie in place."""
        if shape not in self._columns:
            self._columns.add(shape)
            self._slabs.pop(shape, None)

    def work(self, shape: tuple[int, ...]) -> NDArray[np.float32]:
        """An uninitialised fp32 array of ``shape`` for one instruction's intermediate values, valid until the
        next ``work`` call: one buffer, grown as needed and kept for the arena's life, so the big elementwise
        instructions do not fault in fresh pages for every result (a [128, 2048] fp32 temporary allocated per
        instruction made ScalarE's exp ~2x slower inside a run)."""
        n = math.prod(shape)
        if self._work.size < n:
            self._work = np.empty(n, dtype=np.float32)
        return self._work[:n].reshape(shape)

    def take(self, shape: tuple[int, ...]) -> NDArray[np.float32]:
        """An uninitialised fp32 array of ``shape``."""
        nbytes = 4 * math.prod(shape)
        if nbytes > SCRATCH_CHUNK or (self._used + nbytes > SCRATCH_CHUNK and not self._new_chunk()):
            return np.empty(shape, dtype=np.float32)
        start = self._used
        self._used += -(-nbytes // 64) * 64  # cache-line aligned
        return self._chunks[-1][start : start + nbytes].view(np.float32).reshape(shape)

    def place(self, rows: int, cols: int) -> NDArray[np.float32]:
        """An uninitialised fp32 ``[rows, cols]`` array, possibly strided: arrays of one shape are laid out in
        turn, left to right then top to bottom, as blocks of a slab ``SLAB_COLUMNS`` wide (``cols`` wide if
        that does not divide it, or for a shape ``stack_down`` names). Operands decoded in the order TensorE
        reads them (a stationary tile's column slices, then the next K tile; a moving panel's K tiles) then
        already form the block matrix ``DeferredMatmuls`` multiplies, which ``_stack`` finds in place instead
        of copying."""
        tiled = cols <= SLAB_COLUMNS and SLAB_COLUMNS % cols == 0 and (rows, cols) not in self._columns
        width = SLAB_COLUMNS if tiled else cols
        hit = self._slabs.get((rows, cols))
        slab, row, col = hit if hit is not None else (None, 0, 0)
        if col == width:
            row, col = row + rows, 0
        if slab is None or row + rows > slab.shape[0]:
            height = SCRATCH_CHUNK // (4 * width)
            if rows > height or not self._new_chunk():
                return np.empty((rows, cols), dtype=np.float32)
            self._used = SCRATCH_CHUNK  # the slab fills the chunk
            slab, row, col = self._chunks[-1][: 4 * height * width].view(np.float32).reshape(height, width), 0, 0
        self._slabs[rows, cols] = (slab, row, col + cols)
        return slab[row : row + rows, col : col + cols]

    def _new_chunk(self) -> bool:
        """Start a new chunk (from the pool if it has one); False if the arena is at ``SCRATCH_BYTES``."""
        if len(self._chunks) * SCRATCH_CHUNK >= SCRATCH_BYTES:
            self.full = True
            return False
        chunk = _POOL.pop() if _POOL else None
        self._chunks.append(chunk if chunk is not None and chunk.size == SCRATCH_CHUNK
                            else np.empty(SCRATCH_CHUNK, dtype=np.uint8))
        self._used = 0
        return True

    def release(self) -> None:
        while self._chunks:
            chunk = self._chunks.pop()
            if len(_POOL) < SCRATCH_BYTES // SCRATCH_CHUNK and chunk.size == SCRATCH_CHUNK:
                _POOL.append(chunk)
        self._used = SCRATCH_CHUNK
        self._slabs.clear()
        self.full = False


class OperandCache:
    """fp32 values of SBUF patterns (``Context.read32``), keyed by the pattern (dtype included).

    Invariant: an entry exists only while no write has touched its bytes since it was decoded: every
    store to SBUF calls ``wrote``, which drops the entries it overlaps. So an entry equals a fresh decode,
    strict-read checks included (only stores change the written flags). Entries are read-only arrays,
    never modified, so callers may keep them (``DeferredMatmuls`` does)."""

    def __init__(self) -> None:
        self._entries: dict[AccessPattern, tuple[NDArray[np.float32], Span]] = {}
        self._buckets: dict[int, set[AccessPattern]] = {}  # byte range // BUCKET → entries touching it
        self._bytes = 0

    def get(self, ap: AccessPattern, decode: Callable[[], NDArray[np.float32]]) -> NDArray[np.float32]:
        hit = self._entries.get(ap)
        if hit is not None:
            return hit[0]
        values = decode()
        values.flags.writeable = False
        where = span(ap)
        self._entries[ap] = (values, where)
        for b in range(where[2] // BUCKET, (where[3] - 1) // BUCKET + 1):
            self._buckets.setdefault(b, set()).add(ap)
        self._bytes += values.nbytes
        while self._bytes > CACHE_BYTES and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))
        return values

    def wrote(self, ap: AccessPattern) -> None:
        """``ap``'s bytes are being stored to: drop every entry they overlap."""
        if self._entries:
            where = span(ap)
            for b in range(where[2] // BUCKET, (where[3] - 1) // BUCKET + 1):
                for key in [k for k in self._buckets.get(b, ()) if overlap(self._entries[k][1], where)]:
                    self._drop(key)

    def clear(self) -> None:
        self._entries.clear()
        self._buckets.clear()
        self._bytes = 0

    def _drop(self, ap: AccessPattern) -> None:
        values, where = self._entries.pop(ap)
        self._bytes -= values.nbytes
        for b in range(where[2] // BUCKET, (where[3] - 1) // BUCKET + 1):
            self._buckets[b].discard(ap)


@dataclass
class Group:
    """Matmuls accumulating into one PSUM pattern, not yet applied: ``dst (+)= Σ Sᵢᵀ @ Vᵢ``."""

    dst: AccessPattern
    accumulator: NDArray[np.float32]  # dst's fp32 view of PSUM
    add: bool  # the first matmul accumulated onto what PSUM held (else it overwrote it)
    span: Span
    stationary: list[NDArray[np.float32]]  # the Sᵢ [Kᵢ, M]
    moving: list[NDArray[np.float32]]  # the Vᵢ [Kᵢ, N]



COPY_COLUMNS = 32  # columns per block of a transposing copy (``copy_view``)
WORD = 8  # bytes of the words a narrow transposing copy moves (``_transpose_words``)
# A transposing copy of fewer bytes than this goes in one numpy assignment: the tile and its source stay in
# cache, and the word or block passes cost more than they save (a [128, 128] bf16 PSUM transpose: 8 µs
# assigned, 20 µs by words, 15 µs in blocks, measured on the development machine).
COPY_BLOCKED_BYTES = 64 * 1024


def copy_view(dst: NDArray[Any], src: NDArray[Any]) -> None:
    """``dst[...] = src`` for views of memory of one shape, as if ``src`` were read before ``dst`` is written:
    numpy copies through a buffer when the two overlap. A transposing 2-D copy (``src`` strided along the
    rows numpy walks ``dst`` by, as a DMA through ``isa.ap.transposed`` reads HBM) of 1-, 2- or 4-byte codes
    moves 8-byte words (``_transpose_words``); one that cannot goes in blocks of ``COPY_COLUMNS`` columns,
    whose source rows stay in cache and TLB, into a contiguous buffer, then to ``dst`` row by row (SBUF rows
    are a power of two apart and would share cache sets: writing the blocks straight into SBUF is ~30% slower
    inside a run). Overlapping views, and copies of at most ``COPY_BLOCKED_BYTES``, are never blocked."""
    if (dst.ndim == 2 and dst.shape[1] > COPY_COLUMNS and dst.nbytes > COPY_BLOCKED_BYTES
            and abs(src.strides[1]) > 8 * max(abs(src.strides[0]), 1) and not np.may_share_memory(dst, src)):
        if _transpose_words(dst, src):
            return
        tmp = np.empty(dst.shape, dtype=dst.dtype)
        for j in range(0, dst.shape[1], COPY_COLUMNS):
            tmp[:, j : j + COPY_COLUMNS] = src[:, j : j + COPY_COLUMNS]
        dst[...] = tmp
    else:
        dst[...] = src


def _transpose_words(dst: NDArray[Any], src: NDArray[Any]) -> bool:
    """``dst[...] = src`` where ``src = m.T`` for a matrix ``m`` of ``w``-byte codes with contiguous rows, by
    8-byte words: ``m``'s rows viewed as words of ``k = 8/w`` codes are copied out (a row-wise copy, fast),
    that buffer is transposed word by word (``k``× fewer elements than a code-by-code transpose, and the rows
    no longer a power of two apart, which made every read of the transpose land in one cache set), and each
    word's ``k`` codes are spread over ``k`` rows of ``dst``. Inside a 2048³ bf16 matmul run its 64
    [128, 512] tiles of ``a.T`` take 8 ms this way against 15 ms in blocks. Only bits move (any code width,
    NaN payloads kept). False, having done nothing, when the views do not allow it (dtype, alignment, rows)."""
    w = src.itemsize
    k = WORD // w
    rows, cols = dst.shape
    m = src.T  # [cols, rows], rows of it contiguous when src is a transposed view
    if (w not in (1, 2, 4) or src.dtype != dst.dtype or rows % k or m.strides[1] != w or m.strides[0] % WORD
            or m.__array_interface__["data"][0] % WORD):
        return False
    words = np.ascontiguousarray(m.view(np.uint64))  # [cols, rows/k]
    swapped = np.ascontiguousarray(words.T)  # [rows/k, cols]: word j of every row of m
    spread = swapped.view(dst.dtype).reshape(rows // k, cols, k).transpose(0, 2, 1)  # [rows/k, k, cols]
    s0, s1 = dst.strides
    np.lib.stride_tricks.as_strided(dst, (rows // k, k, cols), (k * s0, s0, s1))[...] = spread
    return True


def well_formed(ap: AccessPattern, s: NDArray[np.float32], v: NDArray[np.float32]) -> bool:
    """``sᵀ @ v`` is defined and fills ``ap``: only such products are deferred (others take the plain path,
    which raises what it raises)."""
    return s.ndim == 2 and v.ndim == 2 and s.shape[0] == v.shape[0] and s.shape[1] * v.shape[1] == ap.size


def _in_place(columns: list[list[NDArray[np.float32]]]) -> NDArray[np.float32] | None:
    """The block matrix of ``columns`` (``DeferredMatmuls._stack``) as a view, if the parts already lie in
    memory as its blocks (``Scratch.place``): same row stride, unit column stride, each part where its block
    goes. The parts then cover every element of the view, so it reads only their memory."""
    first = columns[0][0]
    rs, base = first.strides[0], first.__array_interface__["data"][0]
    height = sum(p.shape[0] for p in columns[0])
    c0 = 0
    for column in columns:
        k0 = 0
        for p in column:
            if (p.ndim != 2 or p.strides[1] != 4 or p.strides[0] != rs or p.shape[1] != column[0].shape[1]
                    or p.__array_interface__["data"][0] != base + k0 * rs + c0 * 4):
                return None
            k0 += p.shape[0]
        if k0 != height:
            return None
        c0 += column[0].shape[1]
    if rs < 4 * c0:
        return None
    return np.lib.stride_tricks.as_strided(first, (height, c0), (rs, 4), writeable=False)


def _same(a: list[NDArray[np.float32]], b: list[NDArray[np.float32]]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class DeferredMatmuls:
    """The pending accumulation groups of one run, at most one per PSUM pattern, pairwise disjoint.

    Invariant: PSUM bytes under a pending group are touched by nothing else: ``Context.region`` flushes
    every group overlapping the pattern it locates, before the access (a new group's own accumulator
    included), and the run flushes the rest when it ends. Applying a group earlier than that is always
    allowed, so a flush also applies the *siblings* of the group, pending groups with the same moving (or
    stationary) operands, in the same product: ``[Sₐ | S_b | …]ᵀ @ V`` (or ``Sᵀ @ [Vₐ | V_b | …]``)."""

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch
        self.groups: dict[AccessPattern, Group] = {}
        # ids of the parts, column by column → (the parts, kept alive; their block matrix)
        self._stacks: OrderedDict[tuple[tuple[int, ...], ...], tuple[Parts, NDArray[np.float32]]] = OrderedDict()
        self._stack_bytes = 0
        self._out: NDArray[np.float32] | None = None  # the products' buffer (``_product``)

    def extend(self, ap: AccessPattern, s: NDArray[np.float32], v: NDArray[np.float32]) -> bool:
        """Add ``dst += sᵀ @ v`` to ``ap``'s pending group, if there is one of the same product shape."""
        g = self.groups.get(ap)
        if g is None or s.shape[1] != g.stationary[0].shape[1] or v.shape[1] != g.moving[0].shape[1]:
            return False
        g.stationary.append(s)
        g.moving.append(v)
        return True

    def start(self, ap: AccessPattern, accumulator: NDArray[np.float32], s: NDArray[np.float32],
              v: NDArray[np.float32], *, add: bool) -> None:
        """A new group ``dst (+)= sᵀ @ v``; the caller has checked the access and flushed what overlapped."""
        where = span(ap)
        assert ap not in self.groups and not any(overlap(g.span, where) for g in self.groups.values())
        self.groups[ap] = Group(ap, accumulator, add, where, [s], [v])

    def flush_overlapping(self, ap: AccessPattern) -> None:
        if self.groups:
            where = span(ap)
            for g in [g for g in self.groups.values() if overlap(g.span, where)]:
                if g.dst in self.groups:  # not applied yet as a sibling of an earlier one
                    self._apply(g)

    def flush_all(self) -> None:
        """Apply every pending group and forget the kept concatenations (their arrays are scratch)."""
        while self.groups:
            self._apply(next(iter(self.groups.values())))
        self._stacks.clear()
        self._stack_bytes = 0
        self._out = None

    def _apply(self, g: Group) -> None:
        """Apply ``g`` and its siblings (removing them from the pending groups)."""
        by_moving = [h for h in self.groups.values() if _same(h.moving, g.moving)]
        by_stationary = [h for h in self.groups.values() if _same(h.stationary, g.stationary)]
        along_m = len(by_moving) >= len(by_stationary)
        siblings = by_moving if along_m else by_stationary
        for h in siblings:
            del self.groups[h.dst]
        with np.errstate(all="ignore"):
            if along_m:  # [Sₐ | S_b | …]ᵀ @ V: row blocks of the product
                product = self._product(self._stack([h.stationary for h in siblings]), self._stack([g.moving]))
                ends = np.cumsum([h.stationary[0].shape[1] for h in siblings])
                pieces = np.split(product, ends[:-1], axis=0)
            else:  # Sᵀ @ [Vₐ | V_b | …]: column blocks
                product = self._product(self._stack([g.stationary]), self._stack([h.moving for h in siblings]))
                ends = np.cumsum([h.moving[0].shape[1] for h in siblings])
                pieces = np.split(product, ends[:-1], axis=1)
            for h, piece in zip(siblings, pieces, strict=True):
                if h.add:
                    np.add(h.accumulator, piece.reshape(h.accumulator.shape), out=h.accumulator)
                else:
                    h.accumulator[...] = piece.reshape(h.accumulator.shape)

    def _product(self, s: NDArray[np.float32], v: NDArray[np.float32]) -> NDArray[np.float32]:
        """``sᵀ @ v`` in one scratch buffer reused by every product (each is consumed before the next)."""
        n = s.shape[1] * v.shape[1]
        if self._out is None or self._out.size < n:
            self._out = self.scratch.take((n,))
        return np.matmul(s.T, v, out=self._out[:n].reshape(s.shape[1], v.shape[1]))

    def _stack(self, columns: list[list[NDArray[np.float32]]]) -> NDArray[np.float32]:
        """The block matrix whose column ``j`` is ``columns[j]`` concatenated along K (each column's parts
        have the same K splits). The result for read-only arrays (``OperandCache`` entries, never modified)
        is kept and reused for the same arrays: the entry holds them, so their ids are not reused while it
        lives. Parts that already lie as its blocks (``Scratch.place``) give it as a view, without a copy."""
        if len(columns) == 1 and len(columns[0]) == 1:
            return columns[0][0]
        parts = [p for column in columns for p in column]
        if any(p.flags.writeable for p in parts):
            return np.concatenate([np.concatenate(column) for column in columns], axis=1)
        key = tuple(tuple(id(p) for p in column) for column in columns)
        hit = self._stacks.get(key)
        if hit is not None:
            self._stacks.move_to_end(key)
            return hit[1]
        stacked = _in_place(columns)
        if stacked is None:
            if len(columns) == 1 and len({p.shape for p in parts}) == 1:
                self.scratch.stack_down(parts[0].shape)
            stacked = self.scratch.take((sum(p.shape[0] for p in columns[0]), sum(c[0].shape[1] for c in columns)))
            c0 = 0
            for column in columns:
                k0, width = 0, column[0].shape[1]
                for p in column:
                    stacked[k0 : k0 + p.shape[0], c0 : c0 + width] = p
                    k0 += p.shape[0]
                c0 += width
        self._stacks[key] = (parts, stacked)
        self._stack_bytes += stacked.nbytes
        while self._stack_bytes > STACK_BYTES and len(self._stacks) > 1:
            self._stack_bytes -= self._stacks.popitem(last=False)[1][1].nbytes
        return stacked
