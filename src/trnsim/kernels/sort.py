"""Sorting along an axis in the kernel language: a bitonic network on VectorE and GpSimd over rows in SBUF.

Rows go on partitions, 128 partitions a tile, a whole row along the free axis padded to ``M = 2**m``
positions, short rows several a partition (``Plan.pack``: ``PACK`` positions, as SBUF allows). A tile is
shaped ``[P, rows, 2, 2, …, 2]`` (``m`` axes of two, axis ``a ≥ 2`` the position's bit ``m + 1 - a``) so
that every compare-exchange stage is a handful of instructions on strided views of it: the pairs
``(i, i + 2**j)`` of a stage are the views with bit ``j`` at 0 and at 1, and the runs that sort upwards /
downwards the views with bit ``s`` at 0 / 1 (at most four free dimensions remain). Rows along a middle
axis (``I > 1``) are loaded and stored through transposed HBM views.

A row's order is lexicographic over *levels*: fp32-exact tiles made from the keys, then the position
(``iota``), so that no two elements compare equal and the network's result is the stable order::

    float key      value with NaN → +inf (a NaN's place decided by the position level, or by a 0/1 NaN
                   level in front when more keys follow); -0.0 == +0.0 as the comparison says
    ≤ 16-bit int   the value itself
    32-bit int     x >> 16 then x & 0xFFFF (each exact in fp32: the argmax kernel's two halves)
    descending     each level negated (ints: -1 - x); a sole float key's NaNs move to the front
    padding        the level dtype's largest value (+inf), the position +inf: after every element

    for s in 1..m:                             merge sorted runs of 2**(s-1) into runs of 2**s
        for j in s-1..0:                       (runs alternate up / down below s = m)
            swap = less(second, first)         lt / eq / select over the levels, last level first
            first', second' = min, max         the first level
            first', second' = select(swap, second, first), select(swap, first, second)   other tiles

Each operand whose result is read rides along as a *payload*: selects copy its bits (it is read through
its bit-transparent view: fp32 for 4-byte types, int16 / int8 for narrower ones, so integers beyond 2**24,
NaN payloads and -0.0 come out as they went in). A level that is the operand's own value (an ascending
≤ 16-bit integer key) is its own payload.

The position level is only carried when ties can show (``plan``). A row of ``N`` values costs
``m(m+1)/2`` stages of ``M/2`` pairs: ``(1 + 3(L-1)) + 2(L + Q)`` instructions a stage for ``L`` levels and
``Q`` payloads (each over half the pairs, as the upward and the downward runs are separate views); VectorE
makes the masks, the min / max and selects are shared with GpSimd by their expected cycles.

Rows whose levels and payloads (twice: a stage reads one copy and writes the next) do not fit SBUF (e.g.
an fp32 argsort beyond 8192 values, an fp32 sort beyond 4096) go in chunks of ``T`` positions, one a
partition (``_sort_long``): chunks sorted in SBUF, then the stages of distance ≥ ``T`` as passes over pairs
of chunks through HBM scratch tensors, each merge level ending with a pass inside each chunk. Rows of
``2**22`` values or more (positions beyond fp32's integers with a NaN's ``±M``) are refused: the compiler
keeps its analytic cost for them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.compute import Engine
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.gemm import blocks
from trnsim.kernels.layout import prefetch, prefetch_depth

FLOATS = ("fp32", "bf16", "fp16")
NARROW_INTS = ("int8", "uint8", "int16", "uint16")    # exact in fp32 as they are
WIDE_INTS = ("int32", "uint32")                       # two 16-bit halves
DTYPES = (*FLOATS, *NARROW_INTS, *WIDE_INTS)
BITS_VIEW = {1: "int8", 2: "int16", 4: "fp32"}        # itemsize → the view selects copy bits through
TOP = {"fp32": float("inf"), "bf16": float("inf"), "fp16": float("inf"), "int8": 127.0, "uint8": 255.0,
       "int16": 32767.0, "uint16": 65535.0, "int32": 2.0**31 - 1}   # a level's padding: its dtype's largest
MAX_OPERANDS = 4
# SBUF bytes a partition may spend on a row tile (Plan.row_bytes): 7/8 of trn3's 256 KiB a partition
# (reference/neuron.md §1.4: 32 MiB SBUF a core over 128 partitions), the rest for the allocator's slack
ROW_BUDGET = 224 * 1024


# elements a cycle over 128 partitions (reference/neuron.md §1.4 per-core table): (any dtype, 16-bit floats)
RATES: dict[Engine, tuple[int, int]] = {"vector": (256, 512), "gpsimd": (128, 128)}
HALF_FLOATS = ("bf16", "fp16")
STATIC_CYCLES = 100   # an instruction's fixed cost on either engine (reference/neuron.md §1.2: VectorE's ~100)
FP16_INTEGERS = 2048     # fp16 holds every integer up to 2**11
MIN_CHUNK = 512          # positions of a chunk of a long row at least (fewer: the analytic cost)
PACK = 4096              # positions a partition holds at least: short rows go several a partition


@dataclass(frozen=True)
class Plan:
    """What ``sort_kernel`` carries through the network: ``levels`` (their storage dtypes, the position
    level last when ``indexed``), ``payloads`` (their dtypes), rows of ``cols`` values."""

    cols: int
    levels: tuple[str, ...]
    payloads: tuple[str, ...]
    indexed: bool
    loaded: tuple[str, ...] = ()

    @property
    def bits(self) -> int:
        return max(1, (self.cols - 1).bit_length())

    @property
    def width(self) -> int:
        return 1 << self.bits

    @property
    def pack(self) -> int:
        """Rows a partition sorts at once: enough for ``PACK`` positions (an instruction's fixed cost then
        spreads over as many elements), as SBUF allows."""
        return max(1, min(PACK // self.width, ROW_BUDGET // self.row_bytes))

    @property
    def row_bytes(self) -> int:
        """SBUF bytes a partition holds at most for one row tile: levels and payloads twice (a stage reads
        one copy and writes the next), the raw keys as loaded, a stage's three bf16 masks of a quarter row
        and the position constant."""
        carried = sum(get_dtype(d).itemsize for d in (*self.levels, *self.payloads))
        loaded = sum(get_dtype(d).itemsize for d in self.loaded)
        return self.width * (2 * carried + loaded + 2 + (get_dtype(self.levels[-1]).itemsize if self.indexed else 0))


def key_levels(dtype: str, sole: bool, descending: bool) -> list[str]:
    """The storage dtypes of one key's levels (module docstring; ``_levels`` makes them)."""
    if dtype in FLOATS:
        return [dtype] if sole else ["bf16", dtype]
    if dtype in NARROW_INTS:
        return ["fp32" if descending else dtype]
    return ["fp32", "fp32"]


def plan(dtypes: tuple[str, ...], cols: int, num_keys: int = 1, keep: tuple[int, ...] = (0,),
         positions: bool = False, descending: bool = False) -> Plan:
    """The levels and payloads of a sort of operands ``dtypes`` by the first ``num_keys`` (module docstring).
    The position level is left out when ties cannot show (integer keys, only keys read, no positions); it
    is fp16 while its values (``-M..2M``: a sole float key's NaNs move by ``±M``) are fp16 integers."""
    levels = [d for key in dtypes[:num_keys] for d in key_levels(key, num_keys == 1, descending)]
    own = not descending
    payloads = [dtypes[k] for k in keep if not (own and k < num_keys and dtypes[k] in NARROW_INTS)]
    width = 1 << max(1, (cols - 1).bit_length())
    indexed = positions or any(k >= num_keys for k in keep) or any(d in FLOATS for d in dtypes[:num_keys])
    if indexed:
        levels.append("fp16" if 2 * width <= FP16_INTEGERS else "fp32")
    loaded = tuple(d for k, d in enumerate(dtypes) if k < num_keys or k in keep)
    return Plan(cols, tuple(levels), tuple(payloads), indexed, loaded)


def fits(dtypes: tuple[str, ...], cols: int, num_keys: int = 1, keep: tuple[int, ...] = (0,),
         positions: bool = False, descending: bool = False) -> bool:
    """Whether ``sort_kernel`` takes rows of ``cols`` values of these operands (dtypes, a row in one tile
    or in chunks of at least ``MIN_CHUNK`` merged through HBM, positions exact in fp32)."""
    return (all(d in DTYPES for d in dtypes) and 1 <= num_keys <= len(dtypes) <= MAX_OPERANDS and cols < 2**22
            and (plan(dtypes, cols, num_keys, keep, positions, descending).row_bytes <= ROW_BUDGET
                 or chunk_plan(dtypes, cols, num_keys, keep, positions, descending) is not None))


def chunk_plan(dtypes: tuple[str, ...], cols: int, num_keys: int = 1, keep: tuple[int, ...] = (0,),
               positions: bool = False, descending: bool = False) -> Plan | None:
    """The plan of the chunks a row too long for one tile is sorted in (``_sort_long``): the longest power
    of two whose two chunks, and their next copies, fit SBUF (a merge pass exchanges two chunks), the
    position level fp32 (positions of the whole row); None below ``MIN_CHUNK``."""
    for bits in range(max(1, (cols - 1).bit_length()) - 1, MIN_CHUNK.bit_length() - 2, -1):
        chunk = plan(dtypes, 1 << bits, num_keys, keep, positions, descending)
        if chunk.indexed:
            chunk = Plan(chunk.cols, (*chunk.levels[:-1], "fp32"), chunk.payloads, True, chunk.loaded)
        if 2 * chunk.row_bytes <= ROW_BUDGET:
            return chunk
    return None


@dsl.kernel
def sort_kernel(x0: Tensor, x1: Tensor | None = None, x2: Tensor | None = None, x3: Tensor | None = None, *,
                num_keys: int = 1, descending: bool = False, keep: tuple[int, ...] = (0,),
                positions: bool = False) -> tuple[Tensor, ...]:
    """The operands ``x0..x3 [O, N, I]`` sorted along their middle axis, lexicographically by the first
    ``num_keys`` (each row ``x[o, :, i]`` one sort), stably: ``lax.sort``'s results (``descending``: by
    each key's ``GT``). Floats compare as JAX's comparator does: -0.0 == +0.0, every NaN equal and above
    +inf. Returns the sorted operands listed in ``keep`` (in that order), then, with ``positions``, the
    int32 positions each element came from (``jnp.argsort``'s result). Rows of ``I = 1`` tile 128 of ``O``
    (``pack`` of them a partition); ``I > 1`` tiles 128 of ``I`` at one ``o``, loaded and stored through
    transposed views; rows too long for a tile go in chunks merged through HBM (``_sort_long``)."""
    xs = [x for x in (x0, x1, x2, x3) if x is not None]
    dtypes = tuple(x.dtype for x in xs)
    outer, cols, inner = x0.shape
    if any(x.shape != x0.shape for x in xs):
        fail(f"operands of shapes {[x.shape for x in xs]}", "sort operands of one shape")
    if not fits(dtypes, cols, num_keys, keep, positions, descending):
        fail(f"a sort of {dtypes} by {num_keys} keys, rows of {cols}",
             f"operands of {', '.join(DTYPES)}, 1..{MAX_OPERANDS} of them, rows below 2**22 values whose "
             f"chunks of {MIN_CHUNK} fit {ROW_BUDGET // 1024} KiB a partition (kernels.sort.chunk_plan)")
    shape = plan(dtypes, cols, num_keys, keep, positions, descending)
    m, width = shape.bits, shape.width
    outs = [dsl.hbm_tensor((outer, cols, inner), dtypes[k], name=f"sorted{k}") for k in keep]
    where_to = dsl.hbm_tensor((outer, cols, inner), "int32", name="positions") if positions else None
    pmax = dsl.tile_size().pmax
    if shape.row_bytes > ROW_BUDGET:
        _sort_long(xs, outs, where_to, num_keys, descending, keep, positions)
        return (*outs, *([where_to] if where_to is not None else []))
    filled, padding = _prefix(cols, m), _suffix(cols, m)
    iotas: dict[int, Tensor] = {}      # rows a partition → the position constant

    def iota(kn: int) -> Tensor:
        if kn not in iotas:
            iotas[kn] = dsl.sbuf((pmax, kn) + (2,) * m, shape.levels[-1])
            dsl.copy(dsl.iota((pmax, kn, width), "fp32", steps=[0, 1]), out=iotas[kn])
            for view in _blocks(iotas[kn], padding):
                dsl.memset(view, float("inf"))
        return iotas[kn]

    inf = dsl.full((pmax, 1) + (1,) * m, float("inf"))
    tiles = _row_tiles(outer, pmax, shape.pack) if inner == 1 else \
        [(o, i0, rn, 1) for o in range(outer) for i0, rn in blocks(inner, pmax)]
    needed = sorted({*range(num_keys), *keep})
    queues = itertools.cycle(range(16))   # a core's DMA queues (reference/neuron.md §1.2)

    def hbm(x: Tensor, o: int, i0: int, rn: int, v0: int, n: int) -> Tensor:
        return x[o : o + rn, v0 : v0 + n, 0] if inner == 1 else x[o, v0 : v0 + n, i0 : i0 + rn].T

    def load(tile: tuple[int, int, int, int]) -> Callable[[], dict[int, Tensor]]:
        o, i0, rn, kn = tile

        def issue() -> dict[int, Tensor]:
            raw: dict[int, Tensor] = {}
            for k in needed:
                t = dsl.sbuf((rn, kn) + (2,) * m, dtypes[k])
                for (v0, n), view in zip(filled, _blocks(t, filled), strict=True):
                    dsl.dma_copy(view, hbm(xs[k], o, i0, rn * kn, v0, n), queue=next(queues))
                for view in _blocks(t, padding):
                    dsl.memset(view, 0.0, engine="gpsimd")
                raw[k] = t
            return raw
        return issue

    loaded = shape.pack * width * sum(get_dtype(dtypes[k]).itemsize for k in needed)
    depth = prefetch_depth(loaded, shape.pack * shape.row_bytes)
    for (o, i0, rn, kn), raw in zip(tiles, prefetch([load(t) for t in tiles], depth), strict=True):
        levels, own = _row_levels(raw, num_keys, descending, inf[:rn], padding,
                                  iota(kn)[:rn] if shape.indexed else None, width)
        payloads = [raw[k] for k in keep if k not in own]
        raw.clear()          # keys not read back: their tiles go as soon as their levels are made
        _network(levels, payloads, m)
        done = iter(payloads)
        results = {k: levels[own[k]] if k in own else next(done) for k in keep}
        for k, out in zip(keep, outs, strict=True):
            for (v0, n), view in zip(filled, _blocks(results[k], filled), strict=True):
                dsl.dma_copy(hbm(out, o, i0, rn * kn, v0, n), view, queue=next(queues))
        if where_to is not None:
            wrap = float(width)    # a NaN's position ± M comes back to its own
            for (v0, n), view in zip(filled, _blocks(levels[-1], filled), strict=True):
                pos = dsl.tensor_scalar(view, "add", wrap, "mod", wrap, dtype="int32")
                dsl.dma_copy(hbm(where_to, o, i0, rn * kn, v0, n), pos, queue=next(queues))
    return (*outs, *([where_to] if where_to is not None else []))


def _row_levels(raw: dict[int, Tensor], num_keys: int, descending: bool, inf: Tensor,
                padding: list[tuple[int, int]], iota: Tensor | None, width: int) -> tuple[list[Tensor], dict[int, int]]:
    """A row tile's levels (the keys' ``_levels``, padded, then the positions when ``iota`` is given: a
    NaN's moved by ``±width``) and, for each operand whose level is its values, that level (module
    docstring)."""
    levels: list[Tensor] = []
    nan: Tensor | None = None
    own: dict[int, int] = {}
    for k in range(num_keys):
        made, isnan = _levels(raw[k], descending, num_keys == 1, inf)
        if made[0] is raw[k]:
            own[k] = len(levels)
        levels += made
        nan = isnan if isnan is not None else nan
    for level in levels:
        if level.dtype in TOP:
            for view in _blocks(level, padding):
                dsl.memset(view, TOP[level.dtype], engine="gpsimd")
    if iota is not None:
        index = iota
        if nan is not None:   # a sole float key: NaNs after +inf (descending: before -inf), in position order
            index = dsl.tensor_scalar(nan, "mul", float(-width if descending else width), dtype=iota.dtype)
            dsl.tensor_tensor(index, iota, "add", out=index)
        levels.append(index)
    return levels, own


def _sort_long(xs: list[Tensor], outs: list[Tensor], where_to: Tensor | None, num_keys: int, descending: bool,
               keep: tuple[int, ...], positions: bool) -> None:
    """``sort_kernel`` for rows too long for one tile: each row in ``C`` chunks of ``T`` positions
    (``chunk_plan``), the bitonic network's stages of distance ``≥ T`` as passes over pairs of chunks
    through HBM scratch tensors (one a level or payload)::

        for each chunk c:              levels; stages s ≤ t inside it, the last one downwards for odd c; store
        for s in t+1..m:
            for j in s-1..t:           each pair (c, c + 2**(j-t)): load both, one compare-exchange, store both
            for each chunk c:          load; stages (s, t-1..0) inside it; store (s = m: the results)

    (runs of bit ``s`` sort downwards where bit ``s - t`` of ``c`` is 1, below ``s = m``)."""
    dtypes = tuple(x.dtype for x in xs)
    outer, cols, inner = xs[0].shape
    chunk = chunk_plan(dtypes, cols, num_keys, keep, positions, descending)
    assert chunk is not None
    t, size = chunk.bits, chunk.width
    m = max(1, (cols - 1).bit_length())
    width, count = 1 << m, (1 << m) // size
    pmax = dsl.tile_size().pmax
    shape = (pmax, 1) + (2,) * t
    inf = dsl.full((pmax, 1) + (1,) * t, float("inf"))
    iota = dsl.sbuf(shape, "fp32")
    dsl.copy(dsl.iota((pmax, size), "fp32"), out=iota)
    kinds = [*chunk.levels, *chunk.payloads]
    scratch = [dsl.hbm_tensor((outer * inner, width), d, name=f"scratch{k}") for k, d in enumerate(kinds)]
    needed = sorted({*range(num_keys), *keep})
    queues = itertools.cycle(range(16))   # a core's DMA queues (reference/neuron.md §1.2)
    tiles = _row_tiles(outer, pmax, 1) if inner == 1 else \
        [(o, i0, rn, 1) for o in range(outer) for i0, rn in blocks(inner, pmax)]

    def spans(c: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Chunk ``c``'s positions holding values and padding, as aligned blocks of the chunk."""
        n = min(size, max(0, cols - c * size))
        return _prefix(n, t), _suffix(n, t) if n else [(0, size)]

    own: dict[int, int] = {}      # the same operands' levels are their values in every tile
    for o, i0, rn, _ in tiles:
        def hbm(x: Tensor, v0: int, n: int, o: int = o, i0: int = i0, rn: int = rn) -> Tensor:
            return x[o : o + rn, v0 : v0 + n, 0] if inner == 1 else x[o, v0 : v0 + n, i0 : i0 + rn].T

        row = o * inner + i0

        def fetch(c: int, row: int = row, rn: int = rn) -> list[Tensor]:
            got = [dsl.sbuf((rn, *shape[1:]), d) for d in kinds]
            for tile, sc in zip(got, scratch, strict=True):
                dsl.dma_copy(tile, sc[row : row + rn, c * size : (c + 1) * size], queue=next(queues))
            return got

        def put(c: int, got: list[Tensor], row: int = row, rn: int = rn) -> None:
            for tile, sc in zip(got, scratch, strict=True):
                dsl.dma_copy(sc[row : row + rn, c * size : (c + 1) * size], tile, queue=next(queues))

        def first_pass(c: int, hbm: Callable[[Tensor, int, int], Tensor] = hbm,
                       put: Callable[[int, list[Tensor]], None] = put, rn: int = rn) -> None:
            filled, padding = spans(c)
            raw: dict[int, Tensor] = {}
            for k in needed:
                tile = dsl.sbuf((rn, *shape[1:]), dtypes[k])
                for (v0, n), view in zip(filled, _blocks(tile, filled), strict=True):
                    dsl.dma_copy(view, hbm(xs[k], c * size + v0, n), queue=next(queues))
                for view in _blocks(tile, padding):
                    dsl.memset(view, 0.0, engine="gpsimd")
                raw[k] = tile
            index = None
            if chunk.indexed:
                index = dsl.tensor_scalar(iota[:rn], "add", float(c * size))
                for view in _blocks(index, padding):
                    dsl.memset(view, float("inf"))
            levels, made = _row_levels(raw, num_keys, descending, inf[:rn], padding, index, width)
            own.update(made)
            payloads = [raw[k] for k in keep if k not in made]
            raw.clear()
            del index
            _network(levels, payloads, t, down=bool(c & 1))
            put(c, [*levels, *payloads])

        def across(c: int, apart: int, down: bool, fetch: Callable[[int], list[Tensor]] = fetch,
                   put: Callable[[int, list[Tensor]], None] = put) -> None:
            first, second = fetch(c), fetch(c + apart)
            low, high = [dsl.sbuf(x.shape, x.dtype) for x in first], [dsl.sbuf(x.shape, x.dtype) for x in first]
            nlev = len(chunk.levels)
            ins = (second, first) if down else (first, second)
            views = [[_bits(x, k >= nlev) for k, x in enumerate(group)] for group in (*ins, low, high)]
            a, b, x, y = views
            _exchange(a, b, x, y, nlev)
            put(c, high if down else low)
            put(c + apart, low if down else high)

        def inside(c: int, s: int, down: bool, fetch: Callable[[int], list[Tensor]] = fetch,
                   put: Callable[[int, list[Tensor]], None] = put,
                   hbm: Callable[[Tensor, int, int], Tensor] = hbm) -> None:
            got = fetch(c)
            levels, payloads = got[: len(chunk.levels)], got[len(chunk.levels):]
            del got
            _network(levels, payloads, t, [(s, j) for j in range(t - 1, -1, -1)], down)
            if s < m:
                put(c, [*levels, *payloads])
                return
            filled, _ = spans(c)
            done = iter(payloads)
            results = {k: levels[own[k]] if k in own else next(done) for k in keep}
            for k, out in zip(keep, outs, strict=True):
                for (v0, n), view in zip(filled, _blocks(results[k], filled), strict=True):
                    dsl.dma_copy(hbm(out, c * size + v0, n), view, queue=next(queues))
            if where_to is not None:
                for (v0, n), view in zip(filled, _blocks(levels[-1], filled), strict=True):
                    pos = dsl.tensor_scalar(view, "add", float(width), "mod", float(width), dtype="int32")
                    dsl.dma_copy(hbm(where_to, c * size + v0, n), pos, queue=next(queues))

        for c in range(count):
            first_pass(c)
        for s in range(t + 1, m + 1):
            for j in range(s - 1, t - 1, -1):
                apart = 1 << (j - t)
                for c in (c for c in range(count) if not c & apart):
                    across(c, apart, s < m and bool((c >> (s - t)) & 1))
            for c in range(count):
                inside(c, s, s < m and bool((c >> (s - t)) & 1))


def _row_tiles(outer: int, pmax: int, pack: int) -> list[tuple[int, int, int, int]]:
    """Tiles ``(first row, 0, partitions, rows a partition)`` of ``outer`` rows: row ``first + p·kn + kk``
    on partition ``p`` at ``kk`` (a block of positions of the tile is then one DMA of consecutive rows);
    ``pack`` rows a partition while 128 partitions fill, then as many as fill them, then the rest one a
    partition."""
    tiles: list[tuple[int, int, int, int]] = []
    o = 0
    while o < outer:
        kn = max(1, min(pack, (outer - o) // pmax))
        rn = min(pmax, outer - o) if kn == 1 else pmax
        tiles.append((o, 0, rn, kn))
        o += rn * kn
    return tiles


def _prefix(cols: int, m: int) -> list[tuple[int, int]]:
    """Positions ``0..cols`` as aligned power-of-two blocks ``(first, size)``, largest first."""
    out: list[tuple[int, int]] = []
    v0 = 0
    for b in range(m, -1, -1):
        if cols & (1 << b):
            out.append((v0, 1 << b))
            v0 += 1 << b
    return out


def _suffix(cols: int, m: int) -> list[tuple[int, int]]:
    """Positions ``cols..2**m`` (the padding) as aligned power-of-two blocks ``(first, size)``."""
    out: list[tuple[int, int]] = []
    v0 = cols
    for b in range(m + 1):
        if v0 < 1 << m and v0 & (1 << b):
            out.append((v0, 1 << b))
            v0 += 1 << b
    return out


def _blocks(t: Tensor, spans: list[tuple[int, int]]) -> list[Tensor]:
    """The views of bit-shaped tile ``t`` (``[P, rows, 2, …, 2]``) holding each aligned block of positions."""
    m = len(t.shape) - 2
    views: list[Tensor] = []
    for v0, n in spans:
        b = n.bit_length() - 1
        index = [slice(None)] * 2 + [(v0 >> (m - 1 - a)) & 1 if a < m - b else slice(None) for a in range(m)]
        views.append(t[tuple(index)])
    return views


def _levels(raw: Tensor, descending: bool, sole: bool, inf: Tensor) -> tuple[list[Tensor], Tensor | None]:
    """The levels of one key (module docstring) and, for a sole float key, its 0/1 NaN mask."""
    shape = raw.shape
    if raw.dtype in FLOATS:
        isnan = dsl.tensor_tensor(raw, raw, "ne", dtype="bf16")
        value = dsl.where(isnan, inf.broadcast_to(shape), raw, dtype=raw.dtype)
        if descending:
            dsl.tensor_scalar(value, "mul", -1.0, out=value)
        if sole:
            return [value], isnan
        flag = dsl.tensor_scalar(isnan, "mul", -1.0) if descending else isnan
        return [flag, value], None
    if raw.dtype in NARROW_INTS:
        return [dsl.tensor_scalar(raw, "mul", -1.0, "add", -1.0, dtype="fp32") if descending else raw], None
    halves = [dsl.tensor_scalar(raw, "shr", 16.0, dtype="fp32"),
              dsl.tensor_scalar(raw, "and", 65535.0, dtype="fp32", engine="gpsimd")]
    if descending:
        for h in halves:
            dsl.tensor_scalar(h, "mul", -1.0, "add", -1.0, out=h)
    return halves, None


def _pair(t: Tensor, s: int, j: int, up: int | None, down: bool = False) -> tuple[Tensor, Tensor]:
    """The views of stage ``(s, j)`` of bit-shaped ``t``: the pair members that take the lower and the
    higher of each pair, in the runs of bit ``s`` = ``up`` (``None``: bit ``s`` is above the tile's, and
    the whole tile sorts downwards if ``down``, else upwards)."""
    m = len(t.shape) - 2
    index: list[slice | int] = [slice(None)] * (m + 2)
    if up is not None:
        index[m + 1 - s] = up           # bit b is axis m + 1 - b (axis 1: the rows of a partition)
    lo, hi = list(index), list(index)
    lo[m + 1 - j], hi[m + 1 - j] = 0, 1
    a, b = t[tuple(lo)], t[tuple(hi)]
    return (b, a) if up == 1 or (up is None and down) else (a, b)


def _network(levels: list[Tensor], payloads: list[Tensor], m: int, stages: list[tuple[int, int]] | None = None,
             down: bool = False) -> None:
    """The bitonic network over bit-shaped tiles of ``2**m`` positions (module docstring), replacing the
    tiles of ``levels`` and ``payloads`` (in place: a stage's inputs are freed as it ends) by the sorted
    ones; ``stages`` ``(s, j)`` (default: all of them), the runs of ``s ≥ m`` sorting ``down`` or up."""
    order = stages if stages is not None else [(s, j) for s in range(1, m + 1) for j in range(s - 1, -1, -1)]
    for s, j in order:
        new_levels = [dsl.sbuf(t.shape, t.dtype) for t in levels]
        new_payloads = [dsl.sbuf(t.shape, t.dtype) for t in payloads]
        for up in ((0, 1) if s < m else (None,)):
            tiles, new = [*levels, *payloads], [*new_levels, *new_payloads]
            firsts, seconds = zip(*(_pair(_bits(t, k >= len(levels)), s, j, up, down) for k, t in enumerate(tiles)),
                                  strict=True)
            lows, highs = zip(*(_pair(_bits(t, k >= len(levels)), s, j, up, down) for k, t in enumerate(new)),
                              strict=True)
            _exchange(list(firsts), list(seconds), list(lows), list(highs), len(levels))
        levels[:], payloads[:] = new_levels, new_payloads


def _bits(t: Tensor, payload: bool) -> Tensor:
    """A payload's bit-transparent view (module docstring); a level as it is."""
    return t.bitcast(BITS_VIEW[get_dtype(t.dtype).itemsize]) if payload else t


def _exchange(firsts: list[Tensor], seconds: list[Tensor], lows: list[Tensor], highs: list[Tensor],
              count: int) -> None:
    """One compare-exchange: ``lows`` / ``highs`` get the lexicographically lower / higher of ``firsts`` and
    ``seconds`` (views of the levels, the first ``count``, then of the payloads' bits). The first level goes
    by min / max (two inputs, not a select's three); a single level needs no swap mask. VectorE makes the
    mask; each min / max / select goes to VectorE or GpSimd, whichever would finish it first (``_cycles``)."""
    swap = _less(seconds[:count], firsts[:count]) if len(firsts) > 1 else None
    load = {"vector": sum(_cycles("vector", [x, x, swap]) * (1 if k == count - 1 else 3)
                          for k, x in enumerate(firsts[:count])) if swap is not None else 0.0, "gpsimd": 0.0}

    def engine(*operands: Tensor) -> Engine:
        best = min(RATES, key=lambda e: load[e] + _cycles(e, list(operands)))
        load[best] += _cycles(best, list(operands))
        return best

    a, b = firsts[0], seconds[0]
    dsl.tensor_tensor(a, b, "min", out=lows[0], engine=engine(a, b, lows[0]))
    dsl.tensor_tensor(a, b, "max", out=highs[0], engine=engine(a, b, highs[0]))
    for a, b, na, nb in zip(firsts[1:], seconds[1:], lows[1:], highs[1:], strict=True):
        assert swap is not None
        dsl.where(swap, b, a, out=na, engine=engine(swap, b, a, na))
        dsl.where(swap, a, b, out=nb, engine=engine(swap, a, b, nb))


def _cycles(engine: Engine, operands: list[Tensor]) -> float:
    """Cycles ``engine`` takes for an instruction: its static overhead and its inputs (all but the last
    operand, its output) streamed at the rate of the slowest dtype (the timing model's, ``sim.timing.costs``)."""
    wide, narrow = RATES[engine]
    rate = narrow if all(t.dtype in HALF_FLOATS for t in operands) else wide
    return STATIC_CYCLES + (len(operands) - 1) * operands[0].size / operands[0].shape[0] * 128 / rate


def _less(a: list[Tensor], b: list[Tensor]) -> Tensor:
    """1 where levels ``a`` are lexicographically below ``b`` (the last level decides ties), else 0 (bf16:
    VectorE's fast rate for the masks' own select)."""
    less = dsl.tensor_tensor(a[-1], b[-1], "lt", dtype="bf16")
    for x, y in zip(reversed(a[:-1]), reversed(b[:-1]), strict=True):
        lt = dsl.tensor_tensor(x, y, "lt", dtype="bf16")
        eq = dsl.tensor_tensor(x, y, "eq", dtype="bf16")
        less = dsl.where(eq, less, lt)
    return less


def sort(*operands: ArrayLike, axis: int = -1, num_keys: int = 1, descending: bool = False,
         dtypes: tuple[str | None, ...] | None = None, positions: bool = False, values: bool = True,
         target: str = "trn3") -> list[NDArray[np.float32] | NDArray[np.int64]]:
    """``operands`` (one shape) sorted along ``axis`` by the first ``num_keys``, stably (``lax.sort``'s
    results; ``descending``: each key's ``GT``), each operand's sorted values (none without ``values``);
    with ``positions`` also where each came from (``jnp.argsort``). ``dtypes`` gives ISA dtypes numpy lacks
    (``"bf16"``).

        >>> sort([[3.0, 1.0, 2.0, 1.0]], positions=True)[1].tolist()
        [[1, 3, 2, 0]]
    """
    arrs = [np.asarray(x) for x in operands]
    if not arrs or arrs[0].ndim == 0 or arrs[0].size == 0:
        raise KernelError("a sort of no operands" if not arrs else f"a sort of an array of shape {arrs[0].shape}",
                          where="kernels.sort",
                          hint="pass at least one array with values along the axis")
    shape = arrs[0].shape
    if not -len(shape) <= axis < len(shape):
        raise KernelError(f"axis {axis} of a {len(shape)}-D array", where="kernels.sort",
                          hint=f"use an axis in {-len(shape)}..{len(shape) - 1}")
    if any(a.shape != shape for a in arrs):
        raise KernelError(f"operands of shapes {[a.shape for a in arrs]}", where="kernels.sort",
                          hint="every operand has the keys' shape")
    axis %= len(shape)
    views = [a.reshape(int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))) for a in arrs]
    kinds = dtypes or (None,) * len(views)
    args = [dsl.typed(v, d) if d is not None else v for v, d in zip(views, kinds, strict=True)]
    out = dsl.run_kernel(sort_kernel, *args, target=target, num_keys=num_keys, descending=descending,
                         keep=tuple(range(len(args))) if values else (), positions=positions).outputs
    return [o.reshape(shape) for o in out]
