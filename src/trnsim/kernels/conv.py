"""2-D convolution in the kernel language: StableHLO's ``convolution`` with strides, padding (negative pads
crop), input (lhs) and window (rhs) dilation, in any layout, fp32 or bf16 operands.

``conv_kernel`` works on canonical views of its HBM operands: ``x [N, H, W, Ci]``, ``w [KH, KW, Ci, Co]``
and ``out [N, OH, OW, Co]``; ``x_axes``/``w_axes``/``out_axes`` say where those axes are in the tensors
as given (``permute`` views: the DMAs walk them), so the gradient convolutions JAX emits run as they come:

* the input gradient is a forward convolution of ``dy`` with the reversed kernel (a separate ``reverse``)
  read with its ``I`` and ``O`` swapped, and ``lhs_dilation`` = the forward stride (zeros between inputs);
* the weight gradient is a convolution whose *batch* is the forward ``Ci``, whose contraction is the
  forward batch ``N``, whose window is ``dy`` (``rhs_dilation`` = the forward stride) and whose output
  pixels are the forward taps.

TensorE operands are 2-D tiles ``[K ≤ 128 partitions, free]`` (stationary free ≤ 128, moving ≤ 512: one fp32
PSUM bank), so a window of several output rows must be one single-stride run of SBUF. Input blocks load
(one DMA per channel tile: channels on the partitions, a DMA transpose for NHWC) into a zero-filled tile
``[Ci, rows, cols]`` of the padded, dilated image (halo and holes stay zero), rounded up to whole strides;
one engine copy per stride *phase* ``(py, px)`` lays ``tile[:, py::sh, px::sw]`` out flat, ``Wq`` elements a
row. A tap ``(ky·dh, kx·dw) = (ay·sh + py, ax·sw + px)`` then reads, for output ``(oy, ox)``, flat element
``(oy + ay) · Wq + ox + ax``: for ``R`` output rows one contiguous run of ``R · Wq`` — "wide" rows whose last
``Wq - OW`` columns are garbage, computed and dropped on the store. Three mappings (NKI's convolution
layout: contraction over input channels on the partitions; FP32 runs TensorE at 1/4 rate and a matmul
costs at least 64 columns, ``reference/neuron.md`` §2.6 and the trn3 preset, so few deep matmuls win):

* *stacked taps* (``Ci ≤ 64``): ``128 // Ci`` taps share one matmul, each tap's shifted window loaded onto
  its own partitions (im2col of the taps by DMA): ``stationary = w[taps] [taps · Ci, Co ≤ 128]``,
  ``moving = [taps · Ci, ≤ 512 output pixels]`` (rows exactly ``OW`` wide: no garbage);
* *shared input* (``Ci > 64``): one load per channel tile, each tap a matmul reading the flat tile at its
  offset, accumulating taps × channel tiles in one PSUM bank;
* *pixel contraction* (a window larger than the output, the weight gradient's shape; ``pixel_contract``):
  the window's pixels on the partitions, ``(output pixel, batch member)`` pairs as stationary columns (each
  pixel's window loaded shifted onto its own partitions, transposed on TensorE), ``Co`` as moving columns.

Rows wider than 512 go one output row at a time in column chunks. Banks drain on VectorE/ScalarE in turn and
store through a transposed view of the output; the next unit's loads are issued before this one's stores
(``layout.prefetch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.isa.base import Engine
from trnsim.kernels.gemm import blocks
from trnsim.kernels.layout import prefetch

Pair = tuple[int, int]
CANONICAL = (0, 1, 2, 3)
WEIGHT_BYTES = 96 * 1024  # SBUF bytes per partition the resident weight tiles may take (else reloaded)
PREFETCH = 3  # units loaded ahead of the one being computed
TRANSPOSES_AHEAD = 3  # pixel_contract: stationary transposes issued ahead of their matmuls
PIECE_BYTES = 64 * 1024  # a large load or store goes in pieces of at least this (_pieces)
MAX_PIECES = 8
UNIT_BANKS = 4  # PSUM banks of output a unit of loaded input feeds (half the 8: the next unit's run meanwhile)


@dataclass(frozen=True)
class Geometry:
    """Sizes of one convolution in canonical axes (module docstring)."""

    n: int
    h: int
    w: int
    ci: int
    kh: int
    kw: int
    co: int
    stride: Pair
    pad: tuple[Pair, Pair]
    lhs: Pair
    rhs: Pair

    @property
    def padded(self) -> Pair:
        """The padded, dilated input's rows and columns."""
        (pt, pb), (pl, pr) = self.pad
        return pt + (self.h - 1) * self.lhs[0] + 1 + pb, pl + (self.w - 1) * self.lhs[1] + 1 + pr

    @property
    def out(self) -> Pair:
        hp, wp = self.padded
        eh, ew = (self.kh - 1) * self.rhs[0] + 1, (self.kw - 1) * self.rhs[1] + 1
        return (hp - eh) // self.stride[0] + 1, (wp - ew) // self.stride[1] + 1

    @property
    def pixel_mode(self) -> bool:
        """The window covers more pixels than the output: contract over them (``pixel_contract``)."""
        oh, ow = self.out
        return self.kh * self.kw > oh * ow

    @property
    def wq(self) -> int:
        """Flat elements per row of a phase tile."""
        return -(-self.padded[1] // self.stride[1])

    def tap(self, ky: int, kx: int) -> tuple[Pair, Pair]:
        """((py, px), (ay, ax)): the phase a tap reads and its offset in rows and columns of that phase."""
        (sh, sw), (dh, dw) = self.stride, self.rhs
        return (ky * dh % sh, kx * dw % sw), (ky * dh // sh, kx * dw // sw)


@dataclass(frozen=True)
class Slot:
    """One matmul of every output bank: ``taps`` stacked on the partitions (``len(taps) · cn`` rows of
    contraction) of channel tile ``ct``, read from its flat tile at ``shift``."""

    taps: tuple[Pair, ...]
    ct: int
    shift: int


@dataclass(frozen=True)
class Unit:
    """Output rows ``oy .. oy + rows`` of image ``n``, loaded together; ``banks`` are its PSUM tiles:
    (first row, rows, first column, columns) of the flat layout, ``width`` elements a row."""

    n: int
    oy: int
    rows: int
    banks: tuple[tuple[int, int, int, int], ...]


def units(g: Geometry, width: int, bank: int) -> list[Unit]:
    oh, _ = g.out
    if width <= bank:  # whole rows, as many as one PSUM bank holds, UNIT_BANKS banks a unit
        per = bank // width
        return [Unit(n, oy, r, tuple((r0, rr, 0, width) for r0, rr in blocks(r, per)))
                for n in range(g.n) for oy, r in blocks(oh, per * UNIT_BANKS)]
    return [Unit(n, oy, 1, tuple((0, 1, c0, c) for c0, c in blocks(width, bank)))
            for n in range(g.n) for oy in range(oh)]


def _span(count: int, lo_pad: int, dil: int, lo: int, hi: int) -> tuple[int, int]:
    """(first input index, how many) of inputs whose padded position ``lo_pad + i·dil`` is in [lo, hi)."""
    first = max(0, -(-(lo - lo_pad) // dil))
    last = min(count - 1, (hi - 1 - lo_pad) // dil)
    return first, max(0, last - first + 1)


def _window(img: Tensor, view: Callable[[slice, slice], Tensor], g: Geometry, top: int, left: int,
            part: int, split: bool = False) -> None:
    """Load into ``img [P, rows, cols]`` from partition ``part`` the padded, dilated input from padded row
    ``top`` and column ``left`` (where there is no input the caller memsets): ``view(rows, cols)`` is the
    HBM view ``[p, rows, cols]`` of those input rows and columns; ``split``: in pieces (``_pieces``)."""
    (lh, lw), ((pt, _), (pl, _)) = g.lhs, g.pad
    hp, wp = g.padded
    _, rows, cols = img.shape
    r0, nr = _span(g.h, pt - top, lh, 0, min(rows, hp - top))
    x0, nx = _span(g.w, pl - left, lw, 0, min(cols, wp - left))
    if nr and nx:
        src = view(slice(r0, r0 + nr), slice(x0, x0 + nx))
        d0, e0 = pt - top + r0 * lh, pl - left + x0 * lw
        dsl.load(img[part : part + src.shape[0], d0 : d0 + (nr - 1) * lh + 1 : lh, e0 : e0 + (nx - 1) * lw + 1 : lw],
                 src, split=_pieces(src) if split else 1)


def _pieces(view: Tensor) -> int:
    """DMAs to move ``view`` in: one queue moves one transfer at a time (``reference/neuron.md`` §1.2, 33 GB/s
    a queue on trn3 after ~2 us), so a large transfer goes in pieces of at least ``PIECE_BYTES`` on up to
    ``MAX_PIECES`` queues (by partitions). NOTE: only where a unit's input is one transfer (the shared
    mapping): stacked taps already load in many transfers at once, and the fixed cost of more pieces then
    costs queue time (a 56x56x64 bf16 layer: 705 -> 764 us split)."""
    nbytes = view.size * (2 if view.dtype == "bf16" else 4)
    return max(1, min(MAX_PIECES, view.shape[0], nbytes // PIECE_BYTES))


def _channels(xv: Tensor, n: int, c0: int, cn: int) -> Callable[[slice, slice], Tensor]:
    """Channel-major views ``[cn, rows, cols]`` of image ``n``."""
    return lambda rows, cols: xv[n, rows, cols, c0 : c0 + cn].permute(2, 0, 1)


def _covered(g: Geometry, top: int, left: int, rows: int, cols: int) -> bool:
    """The input fills a ``rows × cols`` window at (top, left) of the padded image: no memset needed."""
    (lh, lw), ((pt, _), (pl, _)) = g.lhs, g.pad
    return ((lh, lw) == (1, 1) and top >= pt and left >= pl and top + rows <= pt + g.h
            and left + cols <= pl + g.w)


def load_packed(xv: Tensor, g: Geometry, u: Unit, slots: list[Slot], width: int) -> list[Tensor]:
    """Per slot, the flat tile ``[taps · ci, rows · OW]``: each tap's window on its own partitions, shifted
    so that output ``(oy, ox)`` reads element ``oy · OW + ox`` (im2col of the slot's taps)."""
    (sh, sw), (dh, dw) = g.stride, g.rhs
    ci = g.ci
    rows, cols = u.rows * sh, width * sw
    tiles: list[Tensor] = []
    for i, slot in enumerate(slots):
        img = dsl.sbuf((len(slot.taps) * ci, rows, cols), xv.dtype)
        corners = [(u.oy * sh + ky * dh, kx * dw) for ky, kx in slot.taps]
        if not all(_covered(g, t, left, (u.rows - 1) * sh + 1, (width - 1) * sw + 1) for t, left in corners):
            dsl.memset(img, 0.0, engine="gpsimd")
        for j, (top, left) in enumerate(corners):
            _window(img, _channels(xv, u.n, 0, ci), g, top, left, j * ci)
        flat = dsl.sbuf((len(slot.taps) * ci, u.rows * width), xv.dtype)
        dsl.copy(img[:, ::sh, ::sw], out=flat, engine="vector" if i % 2 == 0 else "scalar")
        tiles.append(flat)
    return tiles


def load_shared(xv: Tensor, g: Geometry, u: Unit, slots: list[Slot], ci_tiles: list[Pair],
                phases: dict[Pair, int], slack: int) -> list[Tensor]:
    """Per slot, its channel tile's flat phase tile ``[ci, hq · wq + slack]`` of unit ``u``'s input window
    (one load per channel tile, one copy per phase; module docstring)."""
    sh, sw = g.stride
    hq = u.rows - 1 + -(-((g.kh - 1) * g.rhs[0] + 1) // sh)
    wq = g.wq
    flats: dict[tuple[int, int], Tensor] = {}
    for t, (c0, cn) in enumerate(ci_tiles):
        img = dsl.sbuf((cn, hq * sh, wq * sw), xv.dtype)
        if not _covered(g, u.oy * sh, 0, hq * sh, wq * sw):
            dsl.memset(img, 0.0, engine="gpsimd")
        _window(img, _channels(xv, u.n, c0, cn), g, u.oy * sh, 0, 0, split=True)
        for (py, px), p in phases.items():
            flat = dsl.sbuf((cn, hq * wq + slack), xv.dtype)
            if slack:
                dsl.memset(flat[:, hq * wq :], 0.0, engine="gpsimd")
            engine: Engine = "vector" if (t + p) % 2 == 0 else "scalar"
            dsl.copy(img[:, py::sh, px::sw], out=flat[:, : hq * wq], engine=engine)
            flats[(t, p)] = flat
    return [flats[(s.ct, phases[g.tap(*s.taps[0])[0]])] for s in slots]


def _members(xv: Tensor, b0: int, bn: int, i: int, rows: slice, cols: slice) -> Tensor:
    """Batch-major views ``[bn, rows, cols]`` of channel ``i``."""
    return xv[b0 : b0 + bn, rows, cols, i]


def _windows(xv: Tensor, g: Geometry, b0: int, bn: int, group: list[Pair], i: int) -> Tensor:
    """Channel ``i``'s windows of output pixels ``group`` for batch members ``b0 .. b0 + bn``, each pixel's on
    its own partitions, flat ``[pixels · bn, KH · KW]`` (``pixel_contract``)."""
    (sh, sw), (dh, dw) = g.stride, g.rhs
    img = dsl.sbuf((len(group) * bn, g.kh * dh, g.kw * dw), xv.dtype)
    if not all(_covered(g, oy * sh, ox * sw, (g.kh - 1) * dh + 1, (g.kw - 1) * dw + 1) for oy, ox in group):
        dsl.memset(img, 0.0, engine="gpsimd")
    for k, (oy, ox) in enumerate(group):
        _window(img, partial(_members, xv, b0, bn, i), g, oy * sh, ox * sw, k * bn)
    flat = dsl.sbuf((len(group) * bn, g.kh * g.kw), xv.dtype)
    dsl.copy(img[:, ::dh, ::dw], out=flat, engine="vector" if i % 2 else "scalar")
    return flat


def pixel_contract(xv: Tensor, wv: Tensor, ov: Tensor, g: Geometry) -> None:
    """The contraction over the window's pixels on the partitions (the weight gradient's shape: a large window,
    few output pixels, a small batch and few channels): ``acc[(pixel, b), o] += X[(ky, kx), (pixel, b)].T @
    W[(ky, kx), o]`` per channel ``i`` and block of window rows.

    For a group of ``128 // b`` output pixels, each pixel's window of the ``b ≤ 128`` batch members of channel
    ``i`` loads onto its own partitions (zero halo), shifted so that every pixel's window starts at the tile's
    origin; one copy per channel lays the dilated window out flat, ``KW`` a row. A block of window rows is
    then one run of that tile, transposed on TensorE to ``[rows · KW, pixels · b]``: the stationary, every
    pixel of the group at once. ``W`` loads pixel-major (one DMA per channel and block), kept in SBUF when it
    fits: the moving operand."""
    ts = dsl.tile_size()
    oh, ow = g.out
    if g.kw <= ts.pmax:
        pieces = [(k0, r, 0, g.kw) for k0, r in blocks(g.kh, ts.pmax // g.kw)]
    else:
        pieces = [(k0, 1, c0, c) for k0 in range(g.kh) for c0, c in blocks(g.kw, ts.pmax)]
    pixels = [(oy, ox) for oy in range(oh) for ox in range(ow)]
    o_tiles = blocks(g.co, ts.psum_fmax)
    steps = [(i, q) for i in range(g.ci) for q in range(len(pieces))]
    itemsize = 2 if xv.dtype == "bf16" else 4
    resident = len(steps) * g.co * itemsize <= WEIGHT_BYTES
    kept: dict[tuple[int, int], list[Tensor]] = {}

    def moving(i: int, q: int) -> list[Tensor]:
        """``W`` of channel ``i`` and block ``q``, per output tile (kept in SBUF when all of it fits)."""
        tiles = kept.get((i, q))
        if tiles is None:
            k0, r, c0, c = pieces[q]
            tiles = [dsl.sbuf((r * c, on), xv.dtype) for _, on in o_tiles]
            for tile, (o0, on) in zip(tiles, o_tiles, strict=True):
                dsl.dma_copy(tile, wv[k0 : k0 + r, c0 : c0 + c, i, o0 : o0 + on])
            if resident:
                kept[(i, q)] = tiles
        return tiles

    def operands(window: Callable[[int], Tensor], flats: dict[int, Tensor], step: tuple[int, int],
                 s: int) -> tuple[Tensor, list[Tensor]]:
        i, q = step
        if i not in flats:      # one channel's windows at a time: the previous channel's are dropped
            flats.clear()
            flats[i] = window(i)
        k0, r, c0, c = pieces[q]
        part = dsl.transpose(flats[i][:, k0 * g.kw + c0 : k0 * g.kw + c0 + r * c])
        return dsl.copy(part, engine="vector" if s % 2 else "scalar"), moving(i, q)

    j = 0
    for b0, bn in blocks(g.n, ts.gemm_stationary_fmax):
        for p0, pn in blocks(len(pixels), ts.pmax // bn):
            group = pixels[p0 : p0 + pn]
            flats: dict[int, Tensor] = {}

            # NOTE: transposes run TRANSPOSES_AHEAD steps ahead of their matmuls (TensorE works in program
            # order: a matmul waiting for its stationary's copy out of PSUM would hold the next transpose)
            window = partial(_windows, xv, g, b0, bn, group)
            made = prefetch([partial(operands, window, flats, step, s) for s, step in enumerate(steps)],
                            TRANSPOSES_AHEAD)
            accs = [dsl.psum((pn * bn, on)) for _, on in o_tiles]
            for s, (xs, ws) in enumerate(made):
                for acc, w_tile in zip(accs, ws, strict=True):
                    dsl.matmul(acc, xs, w_tile, accumulate=s > 0)
            for acc, (o0, on) in zip(accs, o_tiles, strict=True):
                res = dsl.copy(acc, dtype=ov.dtype, engine="vector" if j % 2 else "scalar")
                dsl.release(acc)
                for k, (oy, ox) in enumerate(group):
                    dsl.store(ov[b0 : b0 + bn, oy, ox, o0 : o0 + on], res[k * bn : (k + 1) * bn])
                j += 1


@dsl.kernel
def conv_kernel(x: Tensor, w: Tensor, *, stride: Pair = (1, 1), padding: tuple[Pair, Pair] = ((0, 0), (0, 0)),
                lhs_dilation: Pair = (1, 1), rhs_dilation: Pair = (1, 1), x_axes: tuple[int, ...] = CANONICAL,
                w_axes: tuple[int, ...] = CANONICAL, out_axes: tuple[int, ...] = CANONICAL,
                out_dtype: str = "fp32") -> Tensor:
    """``out[n, oy, ox, o] = Σ x̂[n, oy·sh + ky·dh, ox·sw + kx·dw, i] · w[ky, kx, i, o]`` (x̂: ``x`` dilated by
    ``lhs_dilation`` and padded by ``padding``), rounded to ``out_dtype``. ``x_axes``: where ``N, H, W, Ci``
    are in ``x``; ``w_axes``: where ``KH, KW, Ci, Co`` are in ``w``; ``out_axes``: where ``N, OH, OW, Co``
    go in the result."""
    if len(x.shape) != 4 or len(w.shape) != 4:
        fail(f"a 2-D convolution of x {x.shape} with w {w.shape}",
             "give a 4-D input (N, H, W, Ci: NHWC by default) and a 4-D kernel (KH, KW, Ci, Co: HWIO by default)")
    xv, wv = x.permute(*x_axes), w.permute(*w_axes)
    n, h, wd, ci = xv.shape
    kh, kw, ci2, co = wv.shape
    if ci != ci2:
        fail(f"convolution of {ci} input channels with a kernel of {ci2}", "give x and w the same Ci")
    if min(*stride, *lhs_dilation, *rhs_dilation) < 1:
        fail(f"strides {stride} and dilations {lhs_dilation}, {rhs_dilation}", "use strides and dilations ≥ 1")
    g = Geometry(n, h, wd, ci, kh, kw, co, stride, padding, lhs_dilation, rhs_dilation)
    oh, ow = g.out
    if oh < 1 or ow < 1:
        fail(f"a {kh}x{kw} window over a padded {g.padded} input", "pad the input to at least the window")
    shape = [0, 0, 0, 0]
    for axis, size in zip(out_axes, (n, oh, ow, co), strict=True):
        shape[axis] = size
    out = dsl.hbm_tensor(tuple(shape), out_dtype, name="out")
    ov = out.permute(*out_axes)
    if g.pixel_mode:
        pixel_contract(xv, wv, ov, g)
        return out
    ts = dsl.tile_size()
    ci_tiles, co_tiles = blocks(ci, ts.pmax), blocks(co, ts.gemm_stationary_fmax)
    taps = [(ky, kx) for ky in range(kh) for kx in range(kw)]
    per = ts.pmax // ci
    packed = per >= 2
    phases: dict[Pair, int] = {}
    if packed:  # taps stacked on the partitions: ci · taps rows of contraction a matmul
        slots = [Slot(tuple(taps[i : i + per]), 0, 0) for i in range(0, len(taps), per)]
        width = ow
    else:
        phases = {p: i for i, p in enumerate(sorted({g.tap(ky, kx)[0] for ky, kx in taps}))}
        slots = [Slot((tap,), t, g.tap(*tap)[1][0] * g.wq + g.tap(*tap)[1][1])
                 for tap in taps for t in range(len(ci_tiles))]
        width = g.wq
    slack = max(g.tap(ky, kx)[1][1] for ky, kx in taps)
    itemsize = 2 if x.dtype == "bf16" else 4
    resident = len(co_tiles) * len(slots) * ts.gemm_stationary_fmax * itemsize <= WEIGHT_BYTES
    weights: dict[tuple[int, int], Tensor] = {}

    def weight(s: int, o: int) -> Tensor:
        tile = weights.get((s, o))
        if tile is None:
            slot, (c0, cn), (o0, on) = slots[s], ci_tiles[slots[s].ct], co_tiles[o]
            tile = dsl.sbuf((len(slot.taps) * cn, on), x.dtype)
            for j, (ky, kx) in enumerate(slot.taps):
                dsl.load(tile[j * cn : (j + 1) * cn, :], wv[ky, kx, c0 : c0 + cn, o0 : o0 + on])
            if resident:
                weights[(s, o)] = tile
        return tile

    work = units(g, width, ts.psum_fmax)
    loads = [partial(load_packed, xv, g, u, slots, width) if packed else
             partial(load_shared, xv, g, u, slots, ci_tiles, phases, slack) for u in work]
    j = 0
    for u, tiles in zip(work, prefetch(loads, PREFETCH), strict=True):
        for o, (o0, on) in enumerate(co_tiles):
            for r0, rr, c0, cc in u.banks:
                acc = dsl.psum((on, rr * cc))
                for s, slot in enumerate(slots):
                    start = slot.shift + r0 * width + c0
                    dsl.matmul(acc, weight(s, o), tiles[s][:, start : start + rr * cc], accumulate=s > 0)
                res = dsl.sbuf((on, rr, cc), out_dtype)
                dsl.copy(acc, out=res, engine="scalar" if j % 2 else "vector")
                dsl.release(acc)
                j += 1
                valid = min(cc, ow - c0)
                dst = ov[u.n, u.oy + r0 : u.oy + r0 + rr, c0 : c0 + valid, o0 : o0 + on].permute(2, 0, 1)
                dsl.store(dst, res[:, :, :valid], split=1 if packed else _pieces(dst))
    return out


def conv2d(x: ArrayLike, w: ArrayLike, dtype: str = "fp32", *, stride: Pair = (1, 1),
           padding: tuple[Pair, Pair] = ((0, 0), (0, 0)), lhs_dilation: Pair = (1, 1), rhs_dilation: Pair = (1, 1),
           out_dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """``jax.lax.conv_general_dilated(x, w, stride, padding, lhs_dilation, rhs_dilation)`` for NHWC ``x`` and
    HWIO ``w`` on a simulated NeuronCore, operands rounded to ``dtype`` (fp32 or bf16).

        >>> conv2d(np.ones((1, 3, 3, 2)), np.ones((2, 2, 2, 1)))[0, :, :, 0].tolist()
        [[8.0, 8.0], [8.0, 8.0]]
    """
    xs = dsl.typed(np.asarray(x, np.float32), dtype)
    ws = dsl.typed(np.asarray(w, np.float32), dtype)
    res = dsl.run_kernel(conv_kernel, xs, ws, target=target, stride=stride, padding=padding,
                         lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, out_dtype=out_dtype)
    return res.outputs[0]
