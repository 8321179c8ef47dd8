"""Window pooling in the kernel language: StableHLO's ``reduce_window`` (max, min or sum over windows of any
size, stride, padding and window dilation along axes within three adjacent ones) and the max-pool gradient,
``select_and_scatter`` (select ``GE``, scatter ``add``: what ``jax.grad`` of a max pool emits).

Both kernels work on a canonical view ``x [N, H, W, C]``: ``H`` and ``W`` are the windowed axes (``W = 1``
for a 1-D window), ``N`` all axes before them and ``C`` all axes after them, merged (``canonical``: a reshape
of a row-major tensor, free). The layout suits channels-last tensors (NHWC, as ``flax``'s pools take them):

* partitions are *bands*: ``(image n, R output rows × Q output columns)``, 128 bands a tile (one column
  block ``q`` and channel chunk a tile), ``R`` chosen so that the batch fills the partitions, then ``R`` and
  ``Q`` halved until a band fits its share of SBUF (``_plan``, ``BAND_BYTES``); a band's input rows, halo
  included, are one run of HBM rows, so a DMA moves all the bands of an image in one
  ``[bands, rows, cols, C]`` reshape (plus one DMA per halo row where windows overlap, one per band at the
  image's edges, where padding is, and one for a run of whole images); only what no DMA writes is filled;
* the free dimension is ``[rows, cols, C]`` (``C`` cut into chunks only when one window would not fit): a
  window tap ``(ky, kx)`` is the strided view ``tile[:, ky·dh :: sh, kx·dw :: sw, :]`` of ``[R, Q, C]``
  elements, contiguous in ``C`` (no stride penalty once a channel run is ≥ 16 bytes, ``reference/neuron.md``
  §1.2).

A window along three axes (3-D pooling, ``x [N, D, H, W, C]``, or two windowed axes with one between) has
the outermost as its ``Depth``: the kernels take ``x [N·D, H, W, C]`` (a free reshape), a band is one output
plane's (the gradient's: one group of ``stride`` planes') rows, and its tile holds the planes its windows
reach, stacked along the rows, each loaded as a 2-D band is (a plane in the depth padding: filled); a tap
``(kd, ky, kx)`` is then a view of plane ``kd``'s rows. Taps go in window order, ``kd`` outermost.

The forward pass is one VectorE ``tensor_tensor`` per tap (``taps - 1`` of them): ``acc = op(acc, tap)``,
max/min in the input's dtype (exact), sums in fp32 in window order — the reference's order and precision, so
the result rounds once, at the store, exactly as ``trnsim.ir.semantics.reduce`` computes it. Sums of 8- and
16-bit integers are exact in int32 and wrap to the type at the store (``WRAP``), as StableHLO's do.

The gradient's band ``b`` owns rows ``[b·R·sh, (b+1)·R·sh)`` and columns ``[q·Q·sw, (q+1)·Q·sw)`` of the
padded input and computes every window that touches them (``lead`` windows before the band's own where
windows overlap: recomputed, fewer the squarer the band), so no two bands write the same element::

    m = max over taps of x[tap]                           the window's maximum
    rem = source                                          the share not yet given to a tap
    for tap in window order:                              (ties: the first tap that equals the maximum)
        hit = x[tap] == m
        grad[tap] += where(hit, rem, 0)                   (written, not added, where windows do not
        rem = where(hit, 0, rem)                           overlap and by the first tap of each stride phase)

which is StableHLO's ``select_and_scatter`` with ``compare GE`` (the first element no later one beats) and
``add``; ``GT`` (the last such element) walks the taps in reverse, ``LE``/``LT`` use the minimum. Where
windows overlap, the sums are fp32 on GpSimd while VectorE selects (``Scatter``); where they tile the input
exactly, the gradient overwrites the input in its tile. Integer shares (8- and 16-bit: their compares are
exact in fp32) are summed in int32 and wrapped at the store.

NOTE: padding is filled with -inf (+inf for LE/LT) and may be selected where every element of a window is
-inf, which the reference never selects; a window holding NaN matches no tap and gives no gradient (the
reference gives it to one element). Finite inputs are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.kernels.layout import blocks, prefetch, prefetch_depth

Pair = tuple[int, int]
IDENTITY = {"max": float("-inf"), "min": float("inf"), "add": 0.0}
SELECT: dict[str, tuple[str, bool]] = {  # select comparison → (the reduction its winner attains, walk backwards)
    "GE": ("max", False), "GT": ("max", True), "LE": ("min", False), "LT": ("min", True),
}
# SBUF bytes per partition for two bands' loaded tiles and one's temporaries: 3/8 of trn3's 256 KiB
# (32 MiB over 128 partitions, the trn3 preset's core.sbuf), the rest for loads ahead (``prefetch_depth``)
BAND_BYTES = 128 * 1024
# a DMA of a large run of bands goes in pieces of at least PIECE_BYTES on successive queues: a queue moves one
# transfer at a time, 33 GB/s after ~2 us on trn3 (reference/neuron.md §1.2; as kernels.conv's pieces)
PIECE_BYTES = 64 * 1024
MAX_PIECES = 8
PREFETCH = 2  # at most this many tiles of bands loaded ahead of the one being computed
# NOTE: sums of 8- and 16-bit integers (a pool's, the gradient's shares) are made exactly in int32 (VectorE
# and GpSimd compute in fp32, exact below 2**24: MAX_INT_TERMS terms of 16 bits), then wrapped to the type as
# StableHLO's integer add does: the low bits (``and`` with the unsigned twin's mask), read as the type
WRAP = {"int8": ("uint8", 8), "int16": ("uint16", 16), "uint8": ("uint8", 8), "uint16": ("uint16", 16)}
MAX_INT_TERMS = 256


@dataclass(frozen=True)
class Depth:
    """The window along a third windowed axis ``D`` outside ``H, W`` (3-D pooling of volumes and video;
    ``D`` of one plane and a window of one: none): ``planes`` the axis's length, the window's size, stride,
    padding ``(front, back)`` and dilation along it."""

    planes: int = 1
    size: int = 1
    stride: int = 1
    pad: Pair = (0, 0)
    dilation: int = 1

    @property
    def extent(self) -> int:
        return (self.size - 1) * self.dilation + 1

    @property
    def out(self) -> int:
        return (self.pad[0] + self.planes + self.pad[1] - self.extent) // self.stride + 1

    @property
    def lead(self) -> int:
        """Windows before a plane group's own that reach into its planes (as ``Window.lead``)."""
        return max(0, -(-self.extent // self.stride) - 1)

    @property
    def groups(self) -> int:
        """The gradient's plane groups: ``stride`` padded planes each, every padded plane in one."""
        return max(self.out, -(-(self.pad[0] + self.planes + self.pad[1]) // self.stride))

    def plane(self, padded: int) -> int | None:
        """The plane of ``x`` at padded plane ``padded``; None in the padding."""
        d = padded - self.pad[0]
        return d if 0 <= d < self.planes else None


FLAT = Depth()      # no third windowed axis


@dataclass(frozen=True)
class Window:
    """A pooling window over the canonical ``[N, H, W, C]`` view (module docstring): ``shape`` that view,
    the window's size, strides, padding ``((top, bottom), (left, right))`` and dilation along ``H, W``, and
    along ``depth`` (the kernels' ``x`` is then ``[N·D, H, W, C]``: plane ``d`` of image ``n`` at ``n·D + d``)."""

    shape: tuple[int, int, int, int]
    size: Pair
    stride: Pair
    pad: tuple[Pair, Pair]
    dilation: Pair
    depth: Depth = FLAT

    @property
    def extent(self) -> Pair:
        """Padded-input rows and columns one window spans (dilation included)."""
        return (self.size[0] - 1) * self.dilation[0] + 1, (self.size[1] - 1) * self.dilation[1] + 1

    @property
    def padded(self) -> Pair:
        (pt, pb), (pl, pr) = self.pad
        return pt + self.shape[1] + pb, pl + self.shape[2] + pr

    @property
    def out(self) -> Pair:
        (hp, wp), (eh, ew) = self.padded, self.extent
        return (hp - eh) // self.stride[0] + 1, (wp - ew) // self.stride[1] + 1

    @property
    def taps(self) -> list[Pair]:
        """The window's offsets ``(ky, kx)`` in window (row-major) order."""
        return [(ky, kx) for ky in range(self.size[0]) for kx in range(self.size[1])]

    @property
    def lead(self) -> int:
        """Windows before a band's own that reach into its rows (overlapping windows: ``extent > stride``)."""
        return max(0, -(-self.extent[0] // self.stride[0]) - 1)


def canonical(shape: Sequence[int], size: Sequence[int], stride: Sequence[int], pad: Sequence[Pair],
              dilation: Sequence[int]) -> Window | None:
    """The canonical window of a full-rank StableHLO window over ``shape``, or None if it is not one the
    kernels take: windowed axes more than three apart, negative padding, or a 0-d operand. The axes from
    the first windowed one to the last are ``D, H, W`` (three), ``H, W`` (two) or ``H`` (one; ``W = 1``),
    so two windowed axes with one between are a 3-D window of one along the middle. A window of one element
    everywhere is a copy, taken along the last axis."""
    rank = len(shape)
    windowed = [a for a in range(rank) if (size[a], stride[a], tuple(pad[a]), dilation[a]) != (1, 1, (0, 0), 1)]
    windowed = windowed or [rank - 1]
    if rank == 0 or windowed[-1] - windowed[0] > 2:
        return None
    if any(lo < 0 or hi < 0 for lo, hi in pad) or any(shape[a] < 1 for a in range(rank)):
        return None
    first, last = windowed[0], windowed[-1]
    span: list[int | None] = list(range(first, last + 1))
    d_ax, h_ax, w_ax = [None] * (3 - len(span)) + span if len(span) > 1 else [None, span[0], None]

    def pick(values: Sequence[int], a: int | None) -> int:
        return 1 if a is None else int(values[a])

    def pads(a: int | None) -> Pair:
        return (0, 0) if a is None else (int(pad[a][0]), int(pad[a][1]))

    assert h_ax is not None
    n, c = math.prod(shape[:first]), math.prod(shape[last + 1 :])
    depth = Depth(pick(shape, d_ax), pick(size, d_ax), pick(stride, d_ax), pads(d_ax), pick(dilation, d_ax))
    win = Window((n, pick(shape, h_ax), pick(shape, w_ax), c), (pick(size, h_ax), pick(size, w_ax)),
                 (pick(stride, h_ax), pick(stride, w_ax)), (pads(h_ax), pads(w_ax)),
                 (pick(dilation, h_ax), pick(dilation, w_ax)), depth)
    oh, ow = win.out
    return win if min(oh, ow, depth.out) >= 1 else None


@dataclass(frozen=True)
class Plan:
    """Bands of ``rows`` windows (output rows) by ``cols`` windows (output columns), ``bands`` of them down an
    image and ``blocks`` across; channels in chunks of ``chunk``; the bytes per partition a band tile loads
    and its temporaries take."""

    rows: int
    bands: int
    cols: int
    blocks: int
    chunk: int
    loaded: int
    temporary: int

    @property
    def depth(self) -> int:
        """Band tiles loaded ahead, as SBUF allows."""
        return prefetch_depth(self.loaded, self.temporary, PREFETCH)


def _plan(win: Window, loaded: Callable[[int, int], int], temporary: Callable[[int, int], int], pmax: int,
          bands: Callable[[int], int], blocks: Callable[[int], int], square: bool, start: int,
          images: int) -> Plan:
    """Band shape and channel chunk: enough bands down an image that ``N`` images fill ``pmax`` partitions,
    two bands' ``loaded`` tiles and one's ``temporary`` ones (bytes per channel for ``R × Q`` windows) within
    ``BAND_BYTES``: fewer rows, then fewer columns (both keep a DMA's contiguous runs whole rows of channels;
    whole rows are fewer, longer DMAs) or, when ``square``, the longer side first (a squarer band recomputes
    fewer lead windows), channels cut only when one window does not fit (short DMA runs are slow, neuron.md §1.2);
    ``bands(R)``, ``blocks(Q)``: how many bands of ``R`` rows and ``Q`` columns an image needs; ``start``:
    the band height to start from instead (``start_rows``: a sample of the batch takes the whole's bands);
    ``images``: the batch's images times their planes (output planes, or the gradient's plane groups)."""
    n, c = images, win.shape[3]
    oh, ow = win.out

    def per_channel(r: int, q: int) -> int:
        return 2 * loaded(r, q) + temporary(r, q)

    rows, cols = start or start_rows(oh, n, pmax), ow
    while (rows > 1 or cols > 1) and per_channel(rows, cols) * c > BAND_BYTES:
        if rows > 1 and (not square or rows >= cols or cols == 1):
            rows = -(-rows // 2)
        else:
            cols = -(-cols // 2)
    if per_channel(rows, cols) > BAND_BYTES:
        fail(f"one window of a {win.shape} pool takes {per_channel(rows, cols)} bytes a channel",
             f"pool windows that fit {BAND_BYTES} bytes of SBUF per partition")
    chunk = min(c, BAND_BYTES // per_channel(rows, cols))
    if n * bands(rows) <= pmax and blocks(cols) == 1 and chunk == c:
        # one tile would load, compute and store in turn: two overlap (~15% faster); two tiles of half the rows
        # where bands recompute no lead windows (whole rows: longer DMA runs; a 2x2x2/2 pool of [4, 16, 32, 32,
        # 32] bf16, one band tile of 4 rows of 2 planes: 35.4 -> 21.3 us, its gradient 61.3 -> 50.2 us)
        if rows > 1 and not square:
            rows = -(-rows // 2)
        elif cols > 1:
            cols = -(-cols // 2)
    return Plan(rows, bands(rows), cols, blocks(cols), chunk, loaded(rows, cols) * chunk,
                temporary(rows, cols) * chunk)


def start_rows(oh: int, n: int, pmax: int) -> int:
    """The band height bands start from (``_plan``): enough bands that ``n`` images fill ``pmax`` partitions."""
    return -(-oh // max(1, pmax // n))


def _span(start: int, width: int, limit: int) -> tuple[int, int, int]:
    """(first, end, offset): the part ``[first, end)`` of ``[start, start + width)`` inside ``[0, limit)``, at
    ``offset`` from ``start`` (``first == end``: none of it)."""
    first, end = max(0, start), max(max(0, start), min(limit, start + width))
    return first, end, first - start


@dataclass(frozen=True)
class Move:
    """One band's run of rows between its tile and HBM: the image, the first row (of the HBM view; may be
    negative or past the end: only rows in ``[0, height)`` move) and the tile partition."""

    n: int
    row: int
    part: int


def _move(tile: Tensor, hbm: Tensor, moves: list[Move], rows: int, step: int, tile_row: int, cols: slice,
          store: bool) -> None:
    """Move ``rows`` rows per band between ``tile[part, tile_row + i, cols, :]`` and ``hbm[n, row + i]`` (a
    ``[N, height, width, cc]`` view): bands of one image ``step`` rows apart move together, in one reshape
    DMA of ``step`` rows each plus one DMA per further row; bands at the image's edge move their rows in it;
    bands that are whole images, consecutive images together."""
    height = hbm.shape[1]
    if rows == height and all(mv.row == 0 for mv in moves):
        groups: list[list[Move]] = []
        for mv in moves:
            if groups and (groups[-1][-1].n + 1, groups[-1][-1].part + 1) == (mv.n, mv.part):
                groups[-1].append(mv)
            else:
                groups.append([mv])
        for group in groups:
            nbytes = len(group) * hbm.size // hbm.shape[0] * _itemsize(hbm.dtype)
            for g0, gn in blocks(len(group), -(-len(group) // max(1, min(MAX_PIECES, nbytes // PIECE_BYTES)))):
                n0, part = group[g0].n, group[g0].part
                _dma(tile[part : part + gn, tile_row : tile_row + rows, cols, :], hbm[n0 : n0 + gn], store)
        return
    runs: list[list[Move]] = []
    for mv in moves:
        if mv.row >= 0 and mv.row + rows <= height:
            last = runs[-1][-1] if runs else None
            if last is not None and (last.n, last.row + step, last.part + 1) == (mv.n, mv.row, mv.part):
                runs[-1].append(mv)
            else:
                runs.append([mv])
            continue
        lo, hi = max(0, mv.row), min(height, mv.row + rows)   # a band at the image's edge: its rows in it
        if lo < hi:
            _dma(tile[mv.part : mv.part + 1, tile_row + lo - mv.row : tile_row + hi - mv.row, cols, :],
                 hbm[mv.n, lo:hi], store)
    main = step if rows >= step else 0
    for run in runs:
        first, count = run[0], len(run)
        nbytes = count * main * hbm.shape[2] * hbm.shape[3] * _itemsize(hbm.dtype)
        pieces = max(1, min(MAX_PIECES, count, nbytes // PIECE_BYTES))
        for p0, pn in blocks(count, -(-count // pieces)):
            r0, part = first.row + p0 * step, first.part + p0
            if main:    # ``step`` rows of each band: consecutive in HBM, one reshape DMA
                _dma(tile[part : part + pn, tile_row : tile_row + step, cols, :], hbm[first.n, r0 : r0 + pn * step],
                     store)
            for j in range(main, rows):     # row j of each band (a halo row): one strided DMA
                _dma(tile[part : part + pn, tile_row + j, cols, :],
                     hbm[first.n, r0 + j : r0 + j + (pn - 1) * step + 1 : step], store)


def _dma(t: Tensor, h: Tensor, store: bool) -> None:
    if store:
        dsl.dma_copy(h, t)
    else:
        dsl.dma_copy(t, h)



def _tap(tile: Tensor, win: Window, ky: int, kx: int, rows: int, cols: int, parts: int) -> Tensor:
    """Tap ``(ky, kx)`` of ``rows × cols`` windows of every band: ``[parts, rows, cols, cc]``."""
    (sh, sw), (dh, dw) = win.stride, win.dilation
    return tile[:parts, ky * dh : ky * dh + (rows - 1) * sh + 1 : sh, kx * dw : kx * dw + (cols - 1) * sw + 1 : sw, :]


def _wrap(t: Tensor, dtype: str) -> Tensor:
    """The int32 sums ``t`` wrapped to the narrow integer ``dtype`` (``WRAP``)."""
    twin, bits = WRAP[dtype]
    low = dsl.binary("and", t, float((1 << bits) - 1), dtype=twin)
    return low if twin == dtype else low.bitcast(dtype)


def _sum_dtype(dtype: str) -> str:
    """The dtype a sum of ``dtype`` values is made in: int32 for a narrow integer (``WRAP``), else fp32."""
    return "int32" if dtype in WRAP else "fp32"


def _itemsize(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def _check(x: Tensor, win: Window) -> None:
    if len(x.shape) != 4:
        fail(f"a pool of a {len(x.shape)}-D tensor", "give the canonical [N, H, W, C] view (pool.canonical)")
    (pt, pb), (pl, pr) = win.pad
    if min(*win.size, *win.stride, *win.dilation) < 1 or min(pt, pb, pl, pr) < 0 or min(win.out) < 1:
        fail(f"a {win.size} window (strides {win.stride}, padding {win.pad}, dilation {win.dilation}) over "
             f"{x.shape}", "use sizes, strides and dilations ≥ 1, padding ≥ 0 and a window that fits the input")


def _load(hbm: Tensor, shape: tuple[int, int, int, int], dtype: str, planes: list[list[Move]], step: int, col: int,
          fill: float) -> Tensor:
    """A tile ``shape = [bands, rows, cols, cc]`` of ``hbm [N, height, width, cc]``, planes stacked along the
    rows (``rows // len(planes)`` each): plane ``p`` of band ``k`` holds rows ``planes[p][k].row ..`` and
    columns ``col ..`` (either may start before 0 or end past the edge), ``fill`` where there is no element
    (a band without a move in ``planes[p]``: a plane in the depth padding)."""
    tile = dsl.sbuf(shape, dtype)
    rows = shape[1] // len(planes)
    for p, moves in enumerate(planes):
        _fill(tile[:, p * rows : (p + 1) * rows], hbm, moves, step, col, fill, whole=len(moves) < shape[0])
    return tile


def _fill(tile: Tensor, hbm: Tensor, moves: list[Move], step: int, col: int, fill: float, whole: bool) -> None:
    """Fill one plane ``tile [bands, rows, cols, cc]`` as ``_load`` does: what no DMA writes with ``fill``
    (``whole``: all of it first, some band having no move), the rest by DMAs from ``hbm``."""
    _, rows, cols, _ = tile.shape
    height, width = hbm.shape[1], hbm.shape[2]
    first, end, offset = _span(col, cols, width)
    if whole or not moves:
        dsl.memset(tile, fill, engine="gpsimd")
        if not moves:
            return
    # only what some band's DMAs leave is filled, on every partition (an engine's partitions start at a
    # multiple of 32, neuron.md §1.2; the DMAs then overwrite the bands that have those rows)
    top = max(0, *(min(rows, -mv.row) for mv in moves))
    bottom = min(rows, *(max(0, height - mv.row) for mv in moves))
    for r0, r1, c0, c1 in ((0, top, 0, cols), (bottom, rows, 0, cols), (top, bottom, 0, offset),
                           (top, bottom, offset + end - first, cols)):
        if r0 < r1 and c0 < c1 and not whole:
            dsl.memset(tile[:, r0:r1, c0:c1, :], fill, engine="gpsimd")
    if first < end:
        _move(tile, hbm[:, :, first:end, :], moves, rows, step, 0, slice(offset, offset + end - first), store=False)


def _store(hbm: Tensor, tile: Tensor, moves: list[Move], rows: int, tile_row: int, col: int, cols: int,
           tile_col: int) -> None:
    """Store ``rows × cols`` of each band (from ``tile[k, tile_row, tile_col]``) at ``hbm[n, moves[k].row,
    col]``, the part inside ``hbm [N, height, width, cc]``."""
    first, end, offset = _span(col, cols, hbm.shape[2])
    if first < end:
        _move(tile, hbm[:, :, first:end, :], moves, rows, rows, tile_row,
              slice(tile_col + offset, tile_col + offset + end - first), store=True)


def _forward_span(win: Window, r: int, q: int) -> Pair:
    """Input rows and columns a band of ``r × q`` windows loads (rows whole strides: one reshape DMA)."""
    (sh, sw), (eh, ew) = win.stride, win.extent
    return max((r - 1) * sh + eh, r * sh), (q - 1) * sw + ew


def forward_plan(win: Window, dtype: str, op: str, pmax: int, start: int = 0, gather: bool = False) -> Plan:
    """``pool_kernel``'s bands (``_plan``) for ``x`` of ``dtype``: a band is one output plane's windows, its
    tile the window's planes stacked along the rows; ``gather``: ``pool_gather_kernel``'s (a tangent tile
    of ``x``'s size loaded too, and a maximum, a hit and a result tile)."""
    oh, ow = win.out
    acc = _itemsize(_sum_dtype(dtype) if op == "add" else dtype) * (3 if gather else 1)

    def loaded(r: int, q: int) -> int:
        rows, cols = _forward_span(win, r, q)
        return (2 if gather else 1) * win.depth.size * rows * cols * _itemsize(dtype)

    return _plan(win, loaded, lambda r, q: r * q * acc, pmax, lambda r: -(-oh // r), lambda q: -(-ow // q),
                 square=False, start=start, images=win.shape[0] * win.depth.out)


def _window(x: Tensor, size: Pair, stride: Pair, pad: tuple[Pair, Pair], dilation: Pair, depth: Depth) -> Window:
    """The window of a kernel's ``x [N·D, H, W, C]``, checked (``_check``)."""
    if len(x.shape) != 4:
        fail(f"a pool of a {len(x.shape)}-D tensor", "give the canonical [N, H, W, C] view (pool.canonical)")
    if (min(depth.planes, depth.size, depth.stride, depth.dilation) < 1 or min(depth.pad) < 0
            or x.shape[0] % depth.planes or depth.out < 1):
        fail(f"a depth window {depth} over {x.shape[0]} images' planes",
             "give x as [N·D, H, W, C], sizes, strides and dilations ≥ 1, padding ≥ 0, a window that fits")
    n, h, w, c = x.shape
    win = Window((n // depth.planes, h, w, c), size, stride, pad, dilation, depth)
    _check(x, win)
    return win


@dsl.kernel
def pool_kernel(x: Tensor, *, size: Pair, stride: Pair = (1, 1), pad: tuple[Pair, Pair] = ((0, 0), (0, 0)),
                dilation: Pair = (1, 1), op: str = "max", init: float | None = None, scale: float = 1.0,
                out_dtype: str | None = None, rows: int = 0, depth: Depth = FLAT) -> Tensor:
    """``out[n, oy, ox, c] = scale · op(init, x̂[n, oy·sh + ky·dh, ox·sw + kx·dw, c] for (ky, kx) in the
    window)`` for ``x [N, H, W, C]``, ``x̂`` padded with ``init`` (default: ``op``'s identity), ``op`` in
    ``max``, ``min``, ``add`` (combined in window order; sums in fp32), rounded once to ``out_dtype``.
    With a ``depth`` window over ``D`` planes, ``x`` is ``[N·D, H, W, C]``, ``out`` ``[N·OD, OH, OW, C]``
    and the window's taps ``(kd, ky, kx)`` (plane ``od·sd + kd·dd``) in that order.
    ``rows``: the band height to start from (``_plan``; 0: ``start_rows``)."""
    if op not in IDENTITY:
        fail(f"pooling op {op!r}", f"use one of {', '.join(IDENTITY)}")
    win = _window(x, size, stride, pad, dilation, depth)
    n, _, _, c = win.shape
    fill = IDENTITY[op] if init is None else float(init)
    oh, ow = win.out
    acc_dtype = _sum_dtype(x.dtype) if op == "add" else x.dtype
    wraps = op == "add" and x.dtype in WRAP
    if wraps and (scale != 1.0 or depth.size * math.prod(size) + 1 > MAX_INT_TERMS):
        fail(f"a {x.dtype} sum of {depth.size * math.prod(size)} taps scaled by {scale}",
             f"sum at most {MAX_INT_TERMS - 1} integer taps, unscaled")
    out = dsl.hbm_tensor((n * depth.out, oh, ow, c), out_dtype or x.dtype, name="out")
    ts = dsl.tile_size()
    fw = _Forward(win, forward_plan(win, x.dtype, op, ts.pmax, rows), ts.pmax)
    tiles = prefetch([partial(fw.load, x, fill, *w) for w in fw.work], fw.plan.depth)
    for (q, p0, pn, c0, cc), tile in zip(fw.work, tiles, strict=True):
        views = fw.taps(tile, pn)
        if fill != IDENTITY[op]:        # init first, as the reference folds it: exact sums
            acc, rest = dsl.tensor_scalar(views[0], op, fill, dtype=acc_dtype), views[1:]
        elif len(views) == 1:
            acc, rest = dsl.copy(views[0], dtype=acc_dtype), []
        else:
            acc, rest = dsl.tensor_tensor(views[0], views[1], op, dtype=acc_dtype), views[2:]
        for v in rest:
            dsl.tensor_tensor(acc, v, op, out=acc)
        if scale != 1.0:
            dsl.tensor_scalar(acc, "mul", scale, out=acc)
        if wraps:
            acc = _wrap(acc, out_dtype or x.dtype)
        fw.store(out[:, :, :, c0 : c0 + cc], acc, q, p0, pn)
    return out


class _Forward:
    """The forward kernels' bands (one output plane's ``R × Q`` windows of an image) and work items (column
    block, tile of bands, channel chunk), their loads, taps and stores."""

    def __init__(self, win: Window, plan: Plan, pmax: int) -> None:
        self.win, self.plan = win, plan
        n, _, _, c = win.shape
        self.bands = [(i, z, b) for i in range(n) for z in range(win.depth.out) for b in range(plan.bands)]
        self.work = [(q, p0, pn, c0, cc) for q in range(plan.blocks) for p0, pn in blocks(len(self.bands), pmax)
                     for c0, cc in blocks(c, plan.chunk)]
        self.span = _forward_span(win, plan.rows, plan.cols)

    def load(self, x: Tensor, fill: float, q: int, p0: int, pn: int, c0: int, cc: int) -> Tensor:
        """The planes of the windows of bands ``p0 ..`` (``pn`` of them), column block ``q``, channels ``c0 ..``."""
        win, depth, rows, cols = self.win, self.win.depth, self.plan.rows, self.plan.cols
        (pt, _), (pl, _) = win.pad
        sh, sw = win.stride
        planes = [[Move(i * depth.planes + d, b * rows * sh - pt, k)
                   for k, (i, z, b) in enumerate(self.bands[p0 : p0 + pn])
                   if (d := depth.plane(z * depth.stride + kd * depth.dilation)) is not None]
                  for kd in range(depth.size)]
        return _load(x[:, :, :, c0 : c0 + cc], (pn, depth.size * self.span[0], self.span[1], cc), x.dtype, planes,
                     rows * sh, q * cols * sw - pl, fill)

    def taps(self, tile: Tensor, pn: int) -> list[Tensor]:
        """The window's taps ``(kd, ky, kx)`` in window order, each ``[pn, R, Q, cc]``."""
        span = self.span[0]
        return [_tap(tile[:, kd * span : (kd + 1) * span], self.win, ky, kx, self.plan.rows, self.plan.cols, pn)
                for kd in range(self.win.depth.size) for ky, kx in self.win.taps]

    def store(self, out: Tensor, acc: Tensor, q: int, p0: int, pn: int) -> None:
        """Store the results ``acc`` of bands ``p0 ..`` into ``out [N·OD, OH, OW, cc]``."""
        od, rows, cols = self.win.depth.out, self.plan.rows, self.plan.cols
        moves = [Move(i * od + z, b * rows, k) for k, (i, z, b) in enumerate(self.bands[p0 : p0 + pn])]
        _store(out, acc, moves, rows, 0, q * cols, cols, 0)


@dsl.kernel
def pool_gather_kernel(x: Tensor, tangent: Tensor, *, size: Pair, stride: Pair = (1, 1),
                       pad: tuple[Pair, Pair] = ((0, 0), (0, 0)), dilation: Pair = (1, 1), select: str = "GE",
                       init: float | None = None, tangent_init: float = 0.0, rows: int = 0,
                       depth: Depth = FLAT) -> Tensor:
    """StableHLO's two-operand ``reduce_window`` over ``(x, tangent)`` pairs whose body keeps the accumulated
    pair where ``compare select (acc_x, x)`` holds, else the new one (``select_and_gather_add``: the JVP of a
    max pool): ``out[n, oy, ox, c]`` is the tangent of the window's element ``select`` picks — the first
    maximum in window order for ``GE``, the last for ``GT``, minima for ``LE``/``LT`` (``SELECT``), the init
    pair ``(init, tangent_init)`` first and padding made of it; ``x``, ``tangent`` and ``out`` as
    ``pool_kernel``'s, ``out`` of ``tangent``'s dtype. Exact: compares and selects only.

        walk = taps backwards (first-wins) or forwards (last-wins)
        m = op(init, max or min over taps of x[tap]);  out = tangent_init
        for tap in walk:  out = where(x[tap] == m, tangent[tap], out)
        (first-wins) out = where(init == m, tangent_init, out)        the init pair is first

    NOTE: a window holding NaN matches no tap and gives ``tangent_init`` (the reference's pick depends on
    where the NaN is)."""
    if select not in SELECT:
        fail(f"select_and_gather compare {select!r}", f"use one of {', '.join(SELECT)}")
    op, backwards = SELECT[select]
    win = _window(x, size, stride, pad, dilation, depth)
    if tangent.shape != x.shape:
        fail(f"a tangent of {tangent.shape} for {x.shape}", "give the tangent the operand's shape")
    n, _, _, c = win.shape
    fill = IDENTITY[op] if init is None else float(init)
    (oh, ow), od = win.out, depth.out
    out = dsl.hbm_tensor((n * od, oh, ow, c), tangent.dtype, name="out")
    ts = dsl.tile_size()
    fw = _Forward(win, forward_plan(win, x.dtype, op, ts.pmax, rows, gather=True), ts.pmax)
    start = dsl.sbuf((min(ts.pmax, len(fw.bands)), fw.plan.rows, fw.plan.cols, fw.plan.chunk), tangent.dtype)
    dsl.memset(start, tangent_init, engine="gpsimd")

    def load(q: int, p0: int, pn: int, c0: int, cc: int) -> tuple[Tensor, Tensor]:
        return fw.load(x, fill, q, p0, pn, c0, cc), fw.load(tangent, tangent_init, q, p0, pn, c0, cc)

    for (q, p0, pn, c0, cc), (xt, tt) in zip(fw.work, prefetch([partial(load, *w) for w in fw.work],
                                                                fw.plan.depth), strict=True):
        views, tangents = fw.taps(xt, pn), fw.taps(tt, pn)
        best = dsl.tensor_scalar(views[0], op, fill)
        for v in views[1:]:
            dsl.tensor_tensor(best, v, op, out=best)
        first = start[:pn, :, :, :cc]
        res = dsl.copy(first)
        order = list(zip(views, tangents, strict=True))
        for v, t in order if backwards else order[::-1]:
            dsl.where(dsl.tensor_tensor(v, best, "eq"), t, res, out=res)
        if not backwards:
            dsl.where(dsl.tensor_scalar(best, "eq", fill), first, res, out=res)
        fw.store(out[:, :, :, c0 : c0 + cc], res, q, p0, pn)
    return out


@dataclass(frozen=True)
class Scatter:
    """How ``pool_grad_kernel`` lays out a window (module docstring): ``lead_r``/``lead_c`` windows before a
    band's own reach into its rows/columns; ``disjoint``: windows do not overlap (and init is 0); ``dtype``
    the gradient tile's; ``in_place``: windows tile the input exactly, the gradient replaces x in its tile."""

    win: Window
    x_dtype: str
    source_dtype: str
    lead_r: int
    lead_c: int
    disjoint: bool
    dtype: str
    in_place: bool

    @classmethod
    def of(cls, win: Window, x_dtype: str, source_dtype: str, init: float) -> Scatter:
        (sh, sw), (eh, ew), depth = win.stride, win.extent, win.depth
        disjoint = eh <= sh and ew <= sw and depth.extent <= depth.stride and init == 0.0
        # NOTE: a window's share (its source value or 0) stays in the source's dtype (a 2-byte type streams
        # at twice fp32's rate, neuron.md §1.4), and so does the gradient where windows do not overlap (an
        # element gets one share or none); sums of several shares are fp32, rounded once at the store
        dtype = source_dtype if disjoint else _sum_dtype(source_dtype)
        in_place = disjoint and (eh, ew, depth.extent) == (sh, sw, depth.stride) and dtype == x_dtype
        return cls(win, x_dtype, source_dtype, win.lead, max(0, -(-ew // sw) - 1), disjoint, dtype, in_place)

    def span(self, r: int, q: int) -> Pair:
        """Padded rows and columns a band of ``r × q`` own windows (and the lead ones) spans."""
        (sh, sw), (eh, ew) = self.win.stride, self.win.extent
        return (max((r + self.lead_r - 1) * sh + eh, (r + self.lead_r) * sh),
                max((q + self.lead_c - 1) * sw + ew, (q + self.lead_c) * sw))

    @property
    def planes(self) -> tuple[int, int]:
        """(windows, planes): the depth windows a band computes (its own and the lead ones) and the padded
        planes they span; a band owns ``depth.stride`` planes, its tiles stack them along the rows."""
        d = self.win.depth
        return d.lead + 1, max(d.lead * d.stride + d.extent, (d.lead + 1) * d.stride)

    def plan(self, pmax: int, start: int = 0) -> Plan:
        """The kernel's bands (``_plan``): they own all the padded rows and columns, those past the last
        window's included."""
        windows, planes = self.planes
        isz, ssz, gsz = _itemsize(self.x_dtype), _itemsize(self.source_dtype), _itemsize(self.dtype)
        (oh, ow), (hp, wp), (sh, sw) = self.win.out, self.win.padded, self.win.stride

        def loaded(r: int, q: int) -> int:      # bytes a channel: the input and the source
            rows, cols = self.span(r, q)
            return planes * rows * cols * isz + windows * (r + self.lead_r) * (q + self.lead_c) * ssz

        def temporary(r: int, q: int) -> int:   # zeros, maxima, hits, a share; two gradient tiles
            rows, cols = self.span(r, q)
            grads = 0 if self.in_place else 2 * planes * rows * cols * gsz
            return (r + self.lead_r) * (q + self.lead_c) * 2 * (ssz + isz) + grads

        return _plan(self.win, loaded, temporary, pmax, lambda r: max(-(-oh // r), -(-hp // (r * sh))),
                     lambda q: max(-(-ow // q), -(-wp // (q * sw))), square=self.lead_r + self.lead_c > 0,
                     start=start, images=self.win.shape[0] * self.win.depth.groups)


@dsl.kernel
def pool_grad_kernel(x: Tensor, source: Tensor, *, size: Pair, stride: Pair = (1, 1),
                     pad: tuple[Pair, Pair] = ((0, 0), (0, 0)), select: str = "GE", init: float = 0.0,
                     out_dtype: str | None = None, rows: int = 0, depth: Depth = FLAT) -> Tensor:
    """StableHLO ``select_and_scatter(x, source, init)`` with select ``compare select`` and scatter ``add``
    over the canonical ``x [N, H, W, C]``, ``source [N, OH, OW, C]``: each window's element that ``select``
    picks (module docstring) receives the window's ``source`` value, summed in fp32 over the windows that
    pick it, plus ``init``; the result is ``x``'s shape, rounded once to ``out_dtype`` (default ``x``'s).
    With a ``depth`` window over ``D`` planes, ``x`` is ``[N·D, H, W, C]``, ``source`` ``[N·OD, OH, OW, C]``;
    a band then owns ``depth.stride`` padded planes (``Scatter.planes``).
    ``rows``: the band height to start from (``_plan``; 0: ``start_rows``)."""
    if select not in SELECT:
        fail(f"select_and_scatter compare {select!r}", f"use one of {', '.join(SELECT)}")
    win = _window(x, size, stride, pad, (1, 1), depth)
    if source.dtype in WRAP and depth.size * math.prod(size) > MAX_INT_TERMS:
        fail(f"{source.dtype} shares of {depth.size * math.prod(size)}-tap windows",
             f"scatter integers over windows of at most {MAX_INT_TERMS} taps")
    n, h, w, c = win.shape
    (oh, ow), od = win.out, depth.out
    if source.shape != (n * od, oh, ow, c):
        fail(f"a source of {source.shape} for windows over {x.shape}", f"give a source of {(n * od, oh, ow, c)}")
    lay = Scatter.of(win, x.dtype, source.dtype, init)
    reduce_op, backwards = SELECT[select]
    (pt, _), (pl, _) = pad
    sh, sw, sd = *stride, depth.stride
    lead_r, lead_c, disjoint, in_place, grad_dtype = lay.lead_r, lay.lead_c, lay.disjoint, lay.in_place, lay.dtype
    windows, planes = lay.planes
    ordered = [(kd, ky, kx) for kd in range(depth.size) for ky, kx in win.taps]
    taps = ordered[::-1] if backwards else ordered
    out = dsl.hbm_tensor((n * depth.planes, h, w, c), out_dtype or x.dtype, name="out")
    ts = dsl.tile_size()
    plan = lay.plan(ts.pmax, rows)
    rows, cols = plan.rows, plan.cols
    wr, wc = rows + lead_r, cols + lead_c       # windows a band computes
    t_rows, t_cols = lay.span(rows, cols)       # padded rows and columns a plane of its tiles spans
    bands = [(i, g, b) for i in range(n) for g in range(depth.groups) for b in range(plan.bands)]
    work = [(q, p0, pn, c0, cc) for q in range(plan.blocks) for p0, pn in blocks(len(bands), ts.pmax)
            for c0, cc in blocks(c, plan.chunk)]

    def load(q: int, p0: int, pn: int, c0: int, cc: int) -> tuple[Tensor, Tensor]:
        part = bands[p0 : p0 + pn]
        xs = [[Move(i * depth.planes + d, (b * rows - lead_r) * sh - pt, k) for k, (i, g, b) in enumerate(part)
               if (d := depth.plane((g - depth.lead) * sd + p)) is not None] for p in range(planes)]
        srcs = [[Move(i * od + z, b * rows - lead_r, k) for k, (i, g, b) in enumerate(part)
                 if 0 <= (z := g - depth.lead + j) < od] for j in range(windows)]
        # windows that do not exist (before the first, past the last) have a zero source: they give nothing
        src = _load(source[:, :, :, c0 : c0 + cc], (pn, windows * wr, wc, cc), source.dtype, srcs, rows,
                           q * cols - lead_c, 0.0)
        xt = _load(x[:, :, :, c0 : c0 + cc], (pn, planes * t_rows, t_cols, cc), x.dtype, xs, rows * sh,
                          (q * cols - lead_c) * sw - pl, IDENTITY[reduce_op])
        return xt, src

    # taps that write their shares (the rest add theirs): all of them where windows are disjoint, else the
    # first tap of each stride phase, whose windows then cover the band's first wr·sh rows and wc·sw columns
    # of each plane once (walking forwards, with every phase in the window; one depth window a band, with
    # every plane phase in it); what no tap writes is filled with init
    phases = (not disjoint and not backwards and init == 0.0 and win.size[0] >= sh and win.size[1] >= sw
              and windows == 1 and depth.size >= sd and depth.dilation == 1)
    writes = (set(taps) if disjoint else
              {(kd, ky, kx) for kd in range(sd) for ky in range(sh) for kx in range(sw)} if phases else set())
    strips = ([] if in_place else [(0, t_rows, 0, t_cols)] if not writes else
              [(r0, r1, k0, k1) for r0, r1, k0, k1 in ((wr * sh, t_rows, 0, t_cols), (0, wr * sh, wc * sw, t_cols))
               if r0 < r1 and k0 < k1] if phases else [(0, t_rows, 0, t_cols)])
    parts = min(ts.pmax, len(bands))
    zero = dsl.sbuf((parts, wr, wc, plan.chunk), source.dtype)
    dsl.memset(zero, 0.0, engine="gpsimd")
    # NOTE: two gradient tiles made once and used in turn (one is stored while the other is computed): the
    # largest tile, allocated anew per band tile, fragments SBUF between the loads of different sizes
    grads = [] if in_place else [dsl.sbuf((parts, planes * t_rows, t_cols, plan.chunk), grad_dtype) for _ in range(2)]
    loads = [partial(load, *item) for item in work]
    for j, ((q, p0, pn, c0, cc), (xt, src)) in enumerate(zip(work, prefetch(loads, plan.depth), strict=True)):
        grad = xt if in_place else grads[j % 2][:pn, :, :, :cc]
        for p in range(0 if in_place else planes):
            for r0, r1, k0, k1 in strips:
                dsl.memset(grad[:, p * t_rows + r0 : p * t_rows + r1, k0:k1, :], init, engine="gpsimd")
        z = zero[:pn, :, :, :cc]
        for wi in range(windows):
            rem = src[:, wi * wr : (wi + 1) * wr]
            at = [(wi * sd + kd * depth.dilation) * t_rows for kd, _, _ in taps]     # each tap's plane
            views = [_tap(xt[:, a : a + t_rows], win, ky, kx, wr, wc, pn)
                     for a, (_, ky, kx) in zip(at, taps, strict=True)]
            best = views[0] if len(views) == 1 else dsl.tensor_tensor(views[0], views[1], reduce_op)
            for v in views[2:]:
                dsl.tensor_tensor(best, v, reduce_op, out=best)
            for k, (a, tap, v) in enumerate(zip(at, taps, views, strict=True)):
                hit = dsl.tensor_tensor(v, best, "eq")
                target = _tap(grad[:, a : a + t_rows], win, tap[1], tap[2], wr, wc, pn)
                if disjoint:
                    dsl.where(hit, rem, z, out=target)
                elif tap in writes:     # (ScalarE widens the share to fp32: VectorE is the busiest engine)
                    dsl.copy(dsl.where(hit, rem, z), out=target, engine="scalar")
                else:
                    # NOTE: the fp32 sums on GpSimd (half VectorE's fp32 rate, neuron.md §1.4) while VectorE
                    # selects the next tap's share: the two engines then take about equal time a tap
                    dsl.add(target, dsl.where(hit, rem, z), out=target, engine="gpsimd")
                if k + 1 < len(taps):
                    dsl.where(hit, z, rem, out=rem)
        for p in range(sd):     # the band's own planes
            moves = [Move(i * depth.planes + d, b * rows * sh - pt, k)
                     for k, (i, g, b) in enumerate(bands[p0 : p0 + pn]) if (d := depth.plane(g * sd + p)) is not None]
            if moves:
                a = (depth.lead * sd + p) * t_rows
                own = grad[:, a : a + t_rows]
                if grad_dtype == "int32":
                    own = _wrap(own, out_dtype or x.dtype)
                _store(out[:, :, :, c0 : c0 + cc], own, moves, rows * sh, lead_r * sh,
                       q * cols * sw - pl, cols * sw, lead_c * sw)
    return out


def _window_args(rank: int, size: Sequence[int], stride: Sequence[int] | None, pad: Sequence[Pair] | None,
                 dilation: Sequence[int] | None) -> tuple[list[int], list[int], list[Pair], list[int]]:
    return (list(size), list(stride or [1] * rank), [(int(lo), int(hi)) for lo, hi in (pad or [(0, 0)] * rank)],
            list(dilation or [1] * rank))


def _canonical_or_raise(shape: tuple[int, ...], *args: Sequence[int] | Sequence[Pair]) -> Window:
    win = canonical(shape, *args)  # type: ignore[arg-type]
    if win is None:
        raise KernelError(f"a window over {shape} on axes more than three apart, or with negative padding",
                          where="kernels.pool", hint="window axes within three adjacent ones, padding ≥ 0")
    return win


def reduce_window(x: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                  pad: Sequence[Pair] | None = None, dilation: Sequence[int] | None = None, *, op: str = "max",
                  init: float | None = None, dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32]:
    """``jax.lax.reduce_window(x, init, op, size, stride, pad, window_dilation=dilation)`` (``op`` ``max``,
    ``min``, ``add``, or ``avg``: the sum divided by the window's size, padding counted) on a simulated
    NeuronCore; the window lies along one axis or two adjacent ones of ``x`` (any rank); ``dtype``: x's ISA dtype.

        >>> reduce_window(np.arange(16.0).reshape(1, 4, 4, 1), (1, 2, 2, 1), (1, 2, 2, 1))[0, :, :, 0].tolist()
        [[5.0, 7.0], [13.0, 15.0]]
    """
    arr = np.asarray(x, np.float32)
    sizes, strides, pads, dils = _window_args(arr.ndim, size, stride, pad, dilation)
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, dils)
    scale = 1.0 / math.prod(sizes) if op == "avg" else 1.0
    kernel_op = "add" if op == "avg" else op
    view = arr.reshape(win.shape[0] * win.depth.planes, *win.shape[1:])
    arg = dsl.typed(view, dtype) if dtype is not None else view
    res = dsl.run_kernel(pool_kernel, arg, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         dilation=win.dilation, op=kernel_op, init=init, scale=scale, depth=win.depth)
    out_shape = [(s + lo + hi - (k - 1) * d - 1) // st + 1
                 for s, k, st, (lo, hi), d in zip(arr.shape, sizes, strides, pads, dils, strict=True)]
    return res.outputs[0].reshape(out_shape)


def select_and_gather(x: ArrayLike, tangent: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                      pad: Sequence[Pair] | None = None, dilation: Sequence[int] | None = None, *,
                      select: str = "GE", init: float | None = None, tangent_init: float = 0.0,
                      dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32]:
    """The tangent of each window's element ``select`` picks (``pool_gather_kernel``: JAX's
    ``_select_and_gather_add``, the JVP of a max pool) on a simulated NeuronCore.

        >>> select_and_gather([[1.0, 3.0, 3.0, 2.0]], [[10.0, 20.0, 30.0, 40.0]], (1, 2), (1, 2)).tolist()
        [[20.0, 30.0]]
    """
    arr, tan = np.asarray(x, np.float32), np.asarray(tangent, np.float32)
    sizes, strides, pads, dils = _window_args(arr.ndim, size, stride, pad, dilation)
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, dils)
    args = [a.reshape(win.shape[0] * win.depth.planes, *win.shape[1:]) for a in (arr, tan)]
    typed = [dsl.typed(a, dtype) if dtype is not None else a for a in args]
    res = dsl.run_kernel(pool_gather_kernel, *typed, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         dilation=win.dilation, select=select, init=init, tangent_init=tangent_init, depth=win.depth)
    out_shape = [(s + lo + hi - (k - 1) * d - 1) // st + 1
                 for s, k, st, (lo, hi), d in zip(arr.shape, sizes, strides, pads, dils, strict=True)]
    return res.outputs[0].reshape(out_shape)


def select_and_scatter(x: ArrayLike, source: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                       pad: Sequence[Pair] | None = None, *, select: str = "GE", init: float = 0.0,
                       dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32]:
    """StableHLO ``select_and_scatter(x, source, init)`` with ``compare select`` and ``add`` (the gradient
    of a max pool: ``source`` goes to each window's first maximum) on a simulated NeuronCore.

        >>> select_and_scatter([[1.0, 3.0, 3.0, 2.0]], [[10.0, 20.0]], (1, 2), (1, 2)).tolist()
        [[0.0, 10.0, 20.0, 0.0]]
    """
    arr, src = np.asarray(x, np.float32), np.asarray(source, np.float32)
    sizes, strides, pads, _ = _window_args(arr.ndim, size, stride, pad, None)
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, [1] * arr.ndim)
    n, oh, ow, c = win.shape[0], *win.out, win.shape[3]
    args = [arr.reshape(n * win.depth.planes, *win.shape[1:]), src.reshape(n * win.depth.out, oh, ow, c)]
    typed = [dsl.typed(a, dtype) if dtype is not None else a for a in args]
    res = dsl.run_kernel(pool_grad_kernel, *typed, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         select=select, init=init, depth=win.depth)
    return res.outputs[0].reshape(arr.shape)
