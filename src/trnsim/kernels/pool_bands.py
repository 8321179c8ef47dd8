"""Bands, the pool kernels' partitions (``kernels.pool``): how an image's windows are cut into them
(``plan_bands``), and the DMAs that load a tile of bands from HBM and store one back.

* partitions are *bands*: ``(image n, R output rows × Q output columns)``, 128 bands a tile (one column
  block ``q`` and channel chunk a tile), ``R`` chosen so that the batch fills the partitions, then ``R`` and
  ``Q`` halved until a band fits its share of SBUF (``plan_bands``, ``BAND_BYTES``); a band's input rows,
  halo included, are one run of HBM rows, so a DMA moves all the bands of an image in one
  ``[bands, rows, cols, C]`` reshape (plus one DMA per halo row where windows overlap, one per band at the
  image's edges, where padding is, and one for a run of whole images); only what no DMA writes is filled;
* the free dimension is ``[rows, cols, C]`` (``C`` cut into chunks only when one window would not fit): a
  window tap ``(ky, kx)`` is the strided view ``tile[:, ky·dh :: sh, kx·dw :: sw, :]`` of ``[R, Q, C]``
  elements, contiguous in ``C`` (no stride penalty once a channel run is ≥ 16 bytes, ``reference/neuron.md``
  §1.2).

With a ``Depth`` window, a band is one output plane's (the gradient's: one group of ``stride`` planes') rows,
and its tile holds the planes its windows reach, stacked along the rows, each loaded as a 2-D band is (a
plane in the depth padding: filled).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.kernels.layout import blocks, prefetch_depth
from trnsim.kernels.pool_window import Window, itemsize

# SBUF bytes per partition for two bands' loaded tiles and one's temporaries: 3/8 of trn3's 256 KiB
# (32 MiB over 128 partitions, the trn3 preset's core.sbuf), the rest for loads ahead (``prefetch_depth``)
BAND_BYTES = 128 * 1024
# a DMA of a large run of bands goes in pieces of at least PIECE_BYTES on successive queues: a queue moves one
# transfer at a time, 33 GB/s after ~2 us on trn3 (reference/neuron.md §1.2; as kernels.conv's pieces)
PIECE_BYTES = 64 * 1024
MAX_PIECES = 8
PREFETCH = 2  # at most this many tiles of bands loaded ahead of the one being computed


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


def plan_bands(win: Window, loaded: Callable[[int, int], int], temporary: Callable[[int, int], int], pmax: int,
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
    """The band height bands start from (``plan_bands``): enough bands that ``n`` images fill ``pmax`` partitions."""
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
            nbytes = len(group) * hbm.size // hbm.shape[0] * itemsize(hbm.dtype)
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
        nbytes = count * main * hbm.shape[2] * hbm.shape[3] * itemsize(hbm.dtype)
        pieces = max(1, min(MAX_PIECES, count, nbytes // PIECE_BYTES))
        if count < pieces * (bool(main) + rows - main):
            # NOTE: windows much taller than their stride (a 608-tap window, stride 3) overlap so much that a
            # DMA per halo row would outnumber the bands: each band's rows, consecutive in HBM, in one DMA
            for mv in run:
                _dma(tile[mv.part : mv.part + 1, tile_row : tile_row + rows, cols, :],
                     hbm[mv.n, mv.row : mv.row + rows], store)
            continue
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


def tap_view(tile: Tensor, win: Window, ky: int, kx: int, rows: int, cols: int, parts: int) -> Tensor:
    """Tap ``(ky, kx)`` of ``rows × cols`` windows of every band: ``[parts, rows, cols, cc]``."""
    (sh, sw), (dh, dw) = win.stride, win.dilation
    return tile[:parts, ky * dh : ky * dh + (rows - 1) * sh + 1 : sh, kx * dw : kx * dw + (cols - 1) * sw + 1 : sw, :]


def load_tile(hbm: Tensor, shape: tuple[int, int, int, int], dtype: str, planes: list[list[Move]], step: int,
              col: int, fill: float) -> Tensor:
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
    """Fill one plane ``tile [bands, rows, cols, cc]`` as ``load_tile`` does: what no DMA writes with ``fill``
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
    for r0, r1, c0, c1 in ((0, top, 0, cols), (bottom, rows, 0, cols),
                           (top, bottom, 0, min(offset, cols)), (top, bottom, min(offset + end - first, cols), cols)):
        if r0 < r1 and c0 < c1 and not whole:   # (a column padding wider than the tile: all of it is fill)
            dsl.memset(tile[:, r0:r1, c0:c1, :], fill, engine="gpsimd")
    if first < end:
        _move(tile, hbm[:, :, first:end, :], moves, rows, step, 0, slice(offset, offset + end - first), store=False)


def store_tile(hbm: Tensor, tile: Tensor, moves: list[Move], rows: int, tile_row: int, col: int, cols: int,
               tile_col: int) -> None:
    """Store ``rows × cols`` of each band (from ``tile[k, tile_row, tile_col]``) at ``hbm[n, moves[k].row,
    col]``, the part inside ``hbm [N, height, width, cc]``."""
    first, end, offset = _span(col, cols, hbm.shape[2])
    if first < end:
        _move(tile, hbm[:, :, first:end, :], moves, rows, rows, tile_row,
              slice(tile_col + offset, tile_col + offset + end - first), store=True)

