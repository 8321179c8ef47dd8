"""2-D convolution in the kernel language: StableHLO's ``convolution`` with strides, padding (negative pads
crop), input (lhs) and window (rhs) dilation, in any layout; fp32, bf16, fp16, fp8 or integer operands.

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

Groups (``feature_groups``: ResNeXt, depthwise) run in the output-stationary mappings with *block-diagonal*
stationaries: each group's ``[Ci/G, Co/G]`` block of a tap on its diagonal place of a zeroed ``[ci, co]``
tile (one DMA a group for all its taps), and a Co tile contracts only the channel tiles of its own groups,
so a 128 x 128 matmul does ``128 / (Ci/G)`` groups at once instead of one tiny matmul a group. Depthwise
(one channel a group) runs one of two ways, whichever the timing model's cost rules make faster
(``sim/timing/costs.py``, trn3 preset: TensorE 2.4 GHz; VectorE, ScalarE, GpSimd 1.2 GHz at 256, 128, 128
fp32 elements a cycle). A tap of 128 channels costs per output pixel 1/2.4 ns as a *diagonal* TensorE
matmul in bf16 (4/2.4 ns in fp32, rate 1/4); as a per-channel *multiply-accumulate* with channels on the
partitions it is a product by the tap's per-partition weight (ScalarE ``activation`` scale or GpSimd, 1
cycle) and a VectorE add into the fp32 sum (1 cycle: two inputs), pipelined 1/1.2 ns. So bf16 takes
TensorE (2x faster), building each tap's diagonal on chip (an identity times the tap's weight column: one
DMA for all taps), and fp32 the vector engines (2x faster; ``DEPTHWISE_ON_TENSOR``: a depthwise 3x3 of
[8, 56, 56, 128] fp32 413 -> 261 us), as do fewer than 65 channels (a diagonal of them leaves most of
TensorE's rows idle). ``batch_groups`` (JAX's weight gradient of a grouped convolution) are separate
convolutions of views, one a group, unless the groups are small: then blocks of whole groups contract at
once, each group's block of the result kept (``pixel_contract``), and a depthwise one multiplies and sums
per channel (``depthwise_gradient``). A 1-D convolution is a 2-D one of a unit H axis (``x[:, None]``
views), a 3-D one sums each output plane's kernel planes into the same PSUM tiles (``Depth``).

Operands multiply in one TensorE format (``tensor_format``: ``FORMATS``; integers as floats, ``INTEGER_FORMAT``,
since TensorE has no integer datapath, ``reference/neuron.md`` §1.5), their tiles cast to it as they load and the
result rounded (integers: to nearest, saturating, where StableHLO wraps) as PSUM drains. DMA transposes take 2-
and 4-byte types only (§1.3): a 1-byte (or differently sized) ``x`` is first widened in HBM (bf16) by contiguous
DMAs, its tiles load in that and the copies that lay them out cast to an fp8 format; a 1-byte result stores in
fp32/int32 and is narrowed by one more HBM-to-HBM pass (``_widened``, ``_copy_in_pieces``).

Rows wider than 512 go one output row at a time in column chunks. Banks drain on VectorE/ScalarE in turn and
store through a transposed view of the output; the next unit's loads are issued before this one's stores
(``layout.prefetch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.isa.base import Engine
from trnsim.isa.dtypes import DTYPES
from trnsim.kernels.gemm import blocks
from trnsim.kernels.layout import prefetch

Pair = tuple[int, int]
CANONICAL = (0, 1, 2, 3)
WEIGHT_BYTES = 96 * 1024  # SBUF bytes per partition the resident weight tiles may take (else reloaded)
PREFETCH = 3  # units loaded ahead of the one being computed
TRANSPOSES_AHEAD = 3  # pixel_contract: stationary transposes issued ahead of their matmuls
PIXEL_BANKS = 4  # pixel_contract: PSUM banks of pixel groups accumulated at once, sharing each W tile
PIECE_BYTES = 64 * 1024  # a large load or store goes in pieces of at least this (_pieces)
MAX_PIECES = 8
UNIT_BANKS = 4  # PSUM banks of output a unit of loaded input feeds (half the 8: the next unit's run meanwhile)
DMA_TRANSPOSE_ITEMSIZES = (2, 4)  # reference/neuron.md §1.3: DMA transposes take 2- and 4-byte types
DMA_COUNT = 65535  # elements a DMA's free dimension may count
MAC_BANK = 2048  # fp32 elements a partition of one depthwise multiply-accumulate (SBUF, not PSUM: no 512 limit)
# Depthwise (one channel a group) of 128-channel tiles by operand dtype: on TensorE as diagonal stationaries,
# or as per-channel multiply-accumulates on the vector engines (module docstring: the faster by the cost
# rules); fewer than 65 channels always multiply-accumulate (a diagonal of them would waste TensorE more).
DEPTHWISE_ON_TENSOR = {"bf16": True, "fp32": False}
# TensorE operand formats, fastest first (neuron.md §1.4: FP8 at the MX rate, BF16/FP16 at one rate, FP32 at a
# quarter of it), with the formats each holds exactly: mixed operands multiply in the fastest that holds both. MX
# formats are left out (their scale tiles are not built here).
FORMATS: dict[str, frozenset[str]] = {
    "fp8_e4m3": frozenset({"fp8_e4m3"}), "fp8_e5m2": frozenset({"fp8_e5m2"}),
    "bf16": frozenset({"bf16", "fp8_e4m3", "fp8_e5m2"}), "fp16": frozenset({"fp16", "fp8_e4m3", "fp8_e5m2"}),
    "fp32": frozenset({"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}),
}
# Integer operands: TensorE has no integer datapath ("Matmul ... have no integer datapath; integer inputs are
# computed in FP32", neuron.md §1.5), so their values multiply as floats and accumulate in fp32 PSUM. 8-bit
# integers are exact in bf16 (8 significant bits: every integer of magnitude ≤ 256) and a product of two is
# exact in fp32, so they run in bf16, at 4x the fp32 rate and with the very results of fp32 operands; wider
# integers run in fp32 (exact to 2^24, rounded beyond: as the chip computes them).
INTEGER_FORMAT = {"int8": "bf16", "uint8": "bf16", "int16": "fp32", "uint16": "fp32", "int32": "fp32",
                  "uint32": "fp32"}
DEPTHWISE_IMAGE = 48 * 1024  # SBUF bytes a partition a depthwise weight gradient's padded input image may take
SUMS_AT_ONCE = 32  # a depthwise weight gradient's (plane, image) partial sums reduced together


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
    groups: int = 1  # feature groups: input channels ``ci // groups`` to an output group of ``co // groups``
    dtype: str = "fp32"  # the TensorE operand format: every SBUF tile of ``x`` and ``w`` (``operand_format``)

    @property
    def itemsize(self) -> int:
        """Bytes an SBUF element of the operands takes."""
        return DTYPES[self.dtype].itemsize

    @property
    def load(self) -> str:
        """The dtype ``x``'s tiles load in (DMA transposes take 2- and 4-byte types only, ``reference/neuron.md``
        §1.3): the operand format, or bf16 for an fp8 one, cast to it on chip by the copy that lays tiles out."""
        return _transposable(self.dtype, "bf16")

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
class Depth:
    """The depth axis of a 3-D convolution (unit for 2-D and 1-D ones): ``d`` input planes, ``k`` kernel
    planes, stride, (low, high) padding and input (lhs) and kernel (rhs) dilation."""

    d: int = 1
    k: int = 1
    stride: int = 1
    pad: Pair = (0, 0)
    lhs: int = 1
    rhs: int = 1

    @property
    def out(self) -> int:
        lo, hi = self.pad
        return (lo + (self.d - 1) * self.lhs + 1 + hi - (self.k - 1) * self.rhs - 1) // self.stride + 1

    def planes(self, od: int) -> list[Pair]:
        """(kernel plane, input plane) pairs output plane ``od`` sums: those that fall on an input plane, not
        on padding or between dilated planes (those contribute zeros and are skipped)."""
        at = [(kd, od * self.stride + kd * self.rhs - self.pad[0]) for kd in range(self.k)]
        return [(kd, p // self.lhs) for kd, p in at if p % self.lhs == 0 and 0 <= p // self.lhs < self.d]


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
    # NOTE: chunks of the output's columns, not the flat row's: a chunk of only garbage columns would store nothing
    return [Unit(n, oy, 1, tuple((0, 1, c0, c) for c0, c in blocks(g.out[1], bank)))
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
    nbytes = view.size * DTYPES[view.dtype].itemsize
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
        img = dsl.sbuf((len(slot.taps) * ci, rows, cols), g.load)
        corners = [(u.oy * sh + ky * dh, kx * dw) for ky, kx in slot.taps]
        if not all(_covered(g, t, left, (u.rows - 1) * sh + 1, (width - 1) * sw + 1) for t, left in corners):
            dsl.memset(img, 0.0, engine="gpsimd")
        for j, (top, left) in enumerate(corners):
            _window(img, _channels(xv, u.n, 0, ci), g, top, left, j * ci)
        flat = dsl.sbuf((len(slot.taps) * ci, u.rows * width), g.dtype)
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
        img = dsl.sbuf((cn, hq * sh, wq * sw), g.load)
        if not _covered(g, u.oy * sh, 0, hq * sh, wq * sw):
            dsl.memset(img, 0.0, engine="gpsimd")
        _window(img, _channels(xv, u.n, c0, cn), g, u.oy * sh, 0, 0, split=True)
        for (py, px), p in phases.items():
            flat = dsl.sbuf((cn, hq * wq + slack), g.dtype)
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
    img = dsl.sbuf((len(group) * bn, g.kh * dh, g.kw * dw), g.load)
    if not all(_covered(g, oy * sh, ox * sw, (g.kh - 1) * dh + 1, (g.kw - 1) * dw + 1) for oy, ox in group):
        dsl.memset(img, 0.0, engine="gpsimd")
    for k, (oy, ox) in enumerate(group):
        _window(img, partial(_members, xv, b0, bn, i), g, oy * sh, ox * sw, k * bn)
    flat = dsl.sbuf((len(group) * bn, g.kh * g.kw), g.dtype)
    dsl.copy(img[:, ::dh, ::dw], out=flat, engine="vector" if i % 2 else "scalar")
    return flat


def pixel_contract(xv: Tensor, wv: Tensor, ov: Tensor, g: Geometry, depth: Depth, groups: int = 1) -> None:
    """The contraction over the window's pixels on the partitions (the weight gradient's shape: a large window,
    few output pixels, a small batch and few channels): ``acc[(pixel, b), o] += X[(ky, kx), (pixel, b)].T @
    W[(ky, kx), o]`` per channel ``i`` and block of window rows.

    For a group of ``128 // b`` output pixels, each pixel's window of the ``b ≤ 128`` batch members of channel
    ``i`` loads onto its own partitions (zero halo), shifted so that every pixel's window starts at the tile's
    origin; one copy per channel lays the dilated window out flat, ``KW`` a row. A block of window rows is
    then one run of that tile, transposed on TensorE to ``[rows · KW, pixels · b]``: the stationary, every
    pixel of the group at once. ``W`` loads pixel-major (one DMA per channel and block), kept in SBUF when it
    fits: the moving operand. Views are 5-D (``depth``): an output plane's pixels contract over each kernel
    plane that meets the input as more steps into the same PSUM tiles.

    ``groups`` > 1: batch groups of fewer than 64 members (the weight gradient of a grouped or depthwise
    convolution) contract as one convolution, a block of whole groups' members against the ``Co`` of those
    groups, and keep only each group's own ``[members, Co / groups]`` block of the result (depthwise: the
    diagonal, masked and summed on VectorE): a block's matmuls do up to 128 groups at once where a
    convolution a group would have a stationary of one member."""
    ts = dsl.tile_size()
    oh, ow = g.out
    if g.kw <= ts.pmax:
        pieces = [(k0, r, 0, g.kw) for k0, r in blocks(g.kh, ts.pmax // g.kw)]
    else:
        pieces = [(k0, 1, c0, c) for k0 in range(g.kh) for c0, c in blocks(g.kw, ts.pmax)]
    pixels = [(oy, ox) for oy in range(oh) for ox in range(ow)]
    nb, cob = g.n // groups, g.co // groups
    diagonal = groups > 1 and nb == cob == 1
    block = ts.gemm_stationary_fmax // nb * nb if groups > 1 else ts.gemm_stationary_fmax
    resident = g.ci * depth.k * len(pieces) * g.co * g.itemsize <= WEIGHT_BYTES
    kept: dict[tuple[int, int, int, int], list[Tensor]] = {}

    def columns(b0: int, bn: int) -> list[Pair]:
        """The output tiles of batch members ``b0 .. b0 + bn``: every ``Co``, or their groups' ``Co``."""
        lo, hi = (0, g.co) if groups == 1 else (b0 // nb * cob, ((b0 + bn - 1) // nb + 1) * cob)
        return [(lo + o0, on) for o0, on in blocks(hi - lo, ts.psum_fmax)]

    def moving(i: int, kd: int, q: int, o_tiles: list[Pair]) -> list[Tensor]:
        """``W`` of channel ``i``, kernel plane ``kd`` and block ``q``, per output tile (kept in SBUF when all
        of it fits)."""
        tiles = kept.get((i, kd, q, o_tiles[0][0]))
        if tiles is None:
            k0, r, c0, c = pieces[q]
            tiles = [dsl.sbuf((r * c, on), g.dtype) for _, on in o_tiles]
            for tile, (o0, on) in zip(tiles, o_tiles, strict=True):
                # NOTE: one window row drops its row axis, so that the DMA's rows are the columns (a [1, c · on]
                # transfer would exceed a DMA's 65535 elements a row at c = 128, on = 512)
                rows = wv[kd, k0, c0 : c0 + c] if r == 1 else wv[kd, k0 : k0 + r, c0 : c0 + c]
                dsl.dma_copy(tile, rows[..., i, o0 : o0 + on])
            if resident:
                kept[(i, kd, q, o_tiles[0][0])] = tiles
        return tiles

    def operands(windows: list[Callable[[int, int], Tensor]], flats: list[dict[Pair, Tensor]], o_tiles: list[Pair],
                 step: tuple[int, Pair, int], s: int) -> tuple[list[Tensor], list[Tensor]]:
        """Each pixel group's stationary of ``step`` and the moving ``W`` tiles they share."""
        i, (kd, d), q = step
        k0, r, c0, c = pieces[q]
        stationaries: list[Tensor] = []
        for k, (window, kept_windows) in enumerate(zip(windows, flats, strict=True)):
            if (i, d) not in kept_windows:  # one channel's (and plane's) windows at a time: the previous dropped
                kept_windows.clear()
                kept_windows[(i, d)] = window(d, i)
            part = dsl.transpose(kept_windows[(i, d)][:, k0 * g.kw + c0 : k0 * g.kw + c0 + r * c])
            # NOTE: back in the operands' dtype (exact: a transpose moves values): an fp32 stationary would run
            # a bf16 contraction at fp32's quarter rate
            stationaries.append(dsl.copy(part, dtype=g.dtype, engine="vector" if (s + k) % 2 else "scalar"))
        return stationaries, moving(i, kd, q, o_tiles)

    def window(b0: int, bn: int, group: list[Pair], d: int, i: int) -> Tensor:
        return _windows(xv[:, d], g, b0, bn, group, i)

    idents: dict[int, Tensor] = {}

    def identity(n: int) -> Tensor:
        if n not in idents:
            idents[n] = dsl.affine_select(dsl.full((n, n), 1.0), "eq", 0.0, channel_multiplier=1, steps=[-1])
        return idents[n]

    j = 0
    for od in range(depth.out):
        steps = [(i, plane, q) for i in range(g.ci) for plane in depth.planes(od) for q in range(len(pieces))]
        for b0, bn in blocks(g.n, block):
            o_tiles = columns(b0, bn)
            groups_of = [pixels[p0 : p0 + pn] for p0, pn in blocks(len(pixels), 1 if diagonal else ts.pmax // bn)]
            at_once = max(1, PIXEL_BANKS // len(o_tiles))
            for a0, an in blocks(len(groups_of), at_once):
                chunk = groups_of[a0 : a0 + an]
                flats: list[dict[Pair, Tensor]] = [{} for _ in chunk]

                # NOTE: transposes run TRANSPOSES_AHEAD ahead of their matmuls (TensorE works in program order: a
                # matmul waiting for its stationary's copy out of PSUM would hold the next transpose); the pixel
                # groups of a chunk share each step's W tiles (loaded once for them all)
                made = prefetch([partial(operands, [partial(window, b0, bn, group) for group in chunk], flats,
                                         o_tiles, step, s) for s, step in enumerate(steps)],
                                max(1, TRANSPOSES_AHEAD // an))
                accs = [[dsl.psum((len(group) * bn, on)) for _, on in o_tiles] for group in chunk]
                for s, (xss, ws) in enumerate(made):
                    for xs, group_accs in zip(xss, accs, strict=True):
                        for acc, w_tile in zip(group_accs, ws, strict=True):
                            dsl.matmul(acc, xs, w_tile, accumulate=s > 0)
                for group, group_accs in zip(chunk, accs, strict=True):
                    pn = len(group)
                    for acc, (o0, on) in zip(group_accs, o_tiles, strict=True):
                        if diagonal:  # member b's own channel is column b - b0: mask the rest, sum the row
                            kept_part = dsl.multiply(acc, identity(bn)) if steps else dsl.full((bn, bn), 0.0)
                            res = dsl.reduce_sum(kept_part, axis=-1, dtype=ov.dtype)
                        elif steps:
                            res = dsl.copy(acc, dtype=ov.dtype, engine="vector" if j % 2 else "scalar")
                        else:  # an output plane of only padding
                            res = dsl.memset(dsl.sbuf((pn * bn, on), ov.dtype), 0.0)
                        dsl.release(acc)
                        for k, (oy, ox) in enumerate(group):
                            for dst, rows, cols in _grouped_stores(ov, od, oy, ox, b0, bn, o0, on, nb, cob, groups):
                                dsl.store(dst, res[k * bn + rows[0] : k * bn + rows[1], cols[0] : cols[1]])
                        j += 1


def depthwise_gradient(xv: Tensor, wv: Tensor, ov: Tensor, g: Geometry, depth: Depth) -> None:
    """The weight gradient of a depthwise convolution (batch groups of one member and one output channel
    each): ``out[0, od, ty, tx, c] = Σ_(plane, i) Σ_(wy, wx) x̂[c, d, ty·sh + wy·dh, tx·sw + wx·dw, i] ·
    w[kd, wy, wx, i, c]``, channels on the partitions. Per forward image ``i`` and plane, the padded input
    and the window (``dy``) load as ``[c, ...]`` tiles; each output pixel (a forward tap) is a VectorE
    product of the input's strided view with the window, summed along the free axis on ScalarE (the
    multiply-accumulate of the forward depthwise convolution, module docstring: TensorE would contract one
    channel at a time, or all 128 against each other to keep the diagonal)."""
    ts = dsl.tile_size()
    oh, ow = g.out
    hp, wp = g.padded
    (sh, sw), (dh, dw) = g.stride, g.rhs
    for b0, bn in blocks(g.n, ts.pmax):
        for od in range(depth.out):
            pairs = [(kd, d, i) for kd, d in depth.planes(od) for i in range(g.ci)]
            total = dsl.memset(dsl.sbuf((bn, oh, ow, 1), "fp32"), 0.0) if not pairs else None
            for c0, cn in blocks(len(pairs), SUMS_AT_ONCE):
                sums = dsl.sbuf((bn, oh, ow, cn), "fp32")
                for s, (kd, d, i) in enumerate(pairs[c0 : c0 + cn]):
                    img = dsl.sbuf((bn, hp, wp), g.load)
                    if not _covered(g, 0, 0, hp, wp):
                        dsl.memset(img, 0.0, engine="gpsimd")
                    _window(img, partial(_members, xv[:, d], b0, bn, i), g, 0, 0, 0, split=True)
                    window = dsl.load(dsl.sbuf((bn, g.kh, g.kw), g.dtype),
                                      wv[kd, :, :, i, b0 : b0 + bn].permute(2, 0, 1))
                    for ty in range(oh):
                        for tx in range(ow):
                            view = img[:, ty * sh : ty * sh + (g.kh - 1) * dh + 1 : dh,
                                       tx * sw : tx * sw + (g.kw - 1) * dw + 1 : dw]
                            prod = dsl.multiply(view, window, dtype="fp32")
                            dsl.activation("identity", prod, out=prod, reduce_res=sums[:, ty, tx, s : s + 1])
                part = dsl.reduce_sum(sums, axis=-1)
                total = part if total is None else dsl.add(total, part)
            assert total is not None
            total = dsl.copy(total, dtype=ov.dtype)
            dsl.store(ov[0, od, :, :, b0 : b0 + bn, None].permute(2, 0, 1, 3), total)


def _grouped_stores(ov: Tensor, od: int, oy: int, ox: int, b0: int, bn: int, o0: int, on: int, nb: int,
                    cob: int, groups: int) -> list[tuple[Tensor, Pair, Pair]]:
    """Where pixel ``(od, oy, ox)``'s result rows of members ``b0 .. b0 + bn`` and columns ``o0 .. o0 + on``
    go: (HBM view, rows, columns of the result), every member's row with one batch group (a whole block),
    else each group's own members and ``Co`` (depthwise: the masked sums, one column)."""
    if groups == 1:
        return [(ov[b0 : b0 + bn, od, oy, ox, o0 : o0 + on], (0, bn), (0, on))]
    if nb == cob == 1:
        return [(ov[0, od, oy, ox, b0 : b0 + bn, None], (0, bn), (0, 1))]
    stores: list[tuple[Tensor, Pair, Pair]] = []
    for k in range(b0 // nb, (b0 + bn - 1) // nb + 1):
        q0, q1 = max(o0, k * cob), min(o0 + on, (k + 1) * cob)
        if q0 < q1:
            stores.append((ov[0:nb, od, oy, ox, q0:q1], (k * nb - b0, k * nb - b0 + nb), (q0 - o0, q1 - o0)))
    return stores


def _live(g: Geometry, ci: Pair, co: Pair) -> bool:
    """Input channels ``ci`` (first, count) feed some of output channels ``co``: with feature groups the
    weights are block-diagonal, and a channel tile outside a Co tile's groups would multiply zeros."""
    if g.groups == 1:
        return True
    cig, cog = g.ci // g.groups, g.co // g.groups
    lo, hi = co[0] // cog * cig, ((co[0] + co[1] - 1) // cog + 1) * cig
    return ci[0] < hi and lo < ci[0] + ci[1]


def _block_diagonal(tile: Tensor, wv: Tensor, g: Geometry, taps: tuple[Pair, ...], ci: Pair, co: Pair) -> None:
    """Fill ``tile [taps · cn, on]`` with the grouped kernel's taps for input channels ``ci`` and output
    channels ``co``: each group's ``[cig, cog]`` block on its diagonal place, zeros elsewhere (one DMA a group
    and tap). NOTE: depthwise (one channel a group) in whole channel tiles builds the diagonal on chip
    instead (``_diagonal``): 128 one-element DMAs a tap would cost more than the convolution."""
    (c0, cn), (o0, on) = ci, co
    cig, cog = g.ci // g.groups, g.co // g.groups
    dsl.memset(tile, 0.0, engine="gpsimd")
    for k in range(c0 // cig, (c0 + cn - 1) // cig + 1):
        r0, r1 = max(c0, k * cig), min(c0 + cn, (k + 1) * cig)
        q0, q1 = max(o0, k * cog), min(o0 + on, (k + 1) * cog)
        if r0 >= r1 or q0 >= q1:
            continue
        for j, (ky, kx) in enumerate(taps):
            dsl.load(tile[j * cn + r0 - c0 : j * cn + r1 - c0, q0 - o0 : q1 - o0],
                     wv[ky, kx, r0 - k * cig : r1 - k * cig, q0:q1])


def _grouped_taps(wv: Tensor, g: Geometry, ci: Pair, co: Pair, dtype: str) -> Tensor:
    """Every tap's block-diagonal stationary of input channels ``ci`` and output channels ``co`` at once,
    ``[cn, KH, KW, on]`` (the shared-input mapping's weights: one DMA a group for all its taps)."""
    (c0, cn), (o0, on) = ci, co
    cig, cog = g.ci // g.groups, g.co // g.groups
    tile = dsl.memset(dsl.sbuf((cn, g.kh, g.kw, on), dtype), 0.0, engine="gpsimd")
    for k in range(c0 // cig, (c0 + cn - 1) // cig + 1):
        r0, r1 = max(c0, k * cig), min(c0 + cn, (k + 1) * cig)
        q0, q1 = max(o0, k * cog), min(o0 + on, (k + 1) * cog)
        if r0 < r1 and q0 < q1:
            dsl.load(tile[r0 - c0 : r1 - c0, :, :, q0 - o0 : q1 - o0],
                     wv[:, :, r0 - k * cig : r1 - k * cig, q0:q1].permute(2, 0, 1, 3))
    return tile


def _diagonal(wv: Tensor, g: Geometry, c: Pair, dtype: str) -> Callable[[int, int], Tensor]:
    """Depthwise taps as diagonal stationaries ``[cn, cn]`` of channels ``c``: the kernel's taps load once
    as columns ``[cn, KH, KW]`` (one DMA) and each tap's diagonal is an identity scaled per partition."""
    c0, cn = c
    cols = dsl.sbuf((cn, g.kh, g.kw), dtype)
    dsl.load(cols, wv[:, :, 0, c0 : c0 + cn].permute(2, 0, 1))
    ident = dsl.affine_select(dsl.full((cn, cn), 1.0, dtype), "eq", 0.0, channel_multiplier=1, steps=[-1])
    made: dict[Pair, Tensor] = {}

    def tap(ky: int, kx: int) -> Tensor:
        if (ky, kx) not in made:
            made[(ky, kx)] = dsl.multiply(ident, cols[:, ky, kx : kx + 1], engine="vector" if kx % 2 else "gpsimd")
        return made[(ky, kx)]
    return tap


def dense(xv: Tensor, wv: Tensor, ov: Tensor, g: Geometry, depth: Depth, out_dtype: str) -> None:
    """The output-stationary mappings (stacked taps, shared input; module docstring) of canonical 5-D views
    (``depth``: each output plane's rows a unit, loaded once for each kernel plane that meets the input, all
    of whose taps accumulate into the same PSUM bank); with feature groups the stationaries are
    block-diagonal and only the channel tiles of a Co tile's groups contract into it."""
    ts = dsl.tile_size()
    _, ow = g.out
    ci_tiles, co_tiles = blocks(g.ci, ts.pmax), blocks(g.co, ts.gemm_stationary_fmax)
    taps = [(ky, kx) for ky in range(g.kh) for kx in range(g.kw)]
    per = ts.pmax // g.ci
    mac = g.groups == g.ci == g.co and (per >= 2 or not DEPTHWISE_ON_TENSOR.get(g.dtype, True))
    packed = per >= 2 and not mac
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
    resident = depth.k * len(co_tiles) * len(slots) * ts.gemm_stationary_fmax * g.itemsize <= WEIGHT_BYTES
    weights: dict[tuple[int, int, int], Tensor] = {}
    depthwise = g.groups == g.ci == g.co and not packed
    diagonals: dict[tuple[int, Pair], Callable[[int, int], Tensor]] = {}
    columns: dict[int, Tensor] = {}
    blocked: dict[tuple[int, Pair, Pair], Tensor] = {}

    def column(kd: int, o: int, tap: Pair) -> Tensor:
        """Depthwise multiply-accumulate: the tap's per-channel weights ``[on, 1]`` of Co tile ``o`` (all taps
        load in one DMA a tile)."""
        if o not in columns:
            o0, on = co_tiles[o]
            columns[o] = dsl.load(dsl.sbuf((on, depth.k, g.kh, g.kw), g.dtype),
                                  wv[:, :, :, 0, o0 : o0 + on].permute(3, 0, 1, 2))
        return columns[o][:, kd, tap[0], tap[1] : tap[1] + 1]

    def multiply_accumulate(res: Tensor, tiles: list[list[Tensor]], steps: list[tuple[int, int, int]], o: int,
                            first: int, count: int) -> None:
        """``res = Σ window · w`` per channel (partition) over ``steps``: products on ScalarE and GpSimd in
        turn, sums in fp32 on VectorE."""
        acc = dsl.sbuf((res.shape[0], count), "fp32")
        for k, (kd, p, s) in enumerate(steps):
            start = slots[s].shift + first
            window, scale = tiles[p][s][:, start : start + count], column(kd, o, slots[s].taps[0])
            last = k == len(steps) - 1
            if k == 0:
                dsl.identity(window, scale=scale, out=res if last else acc)
                continue
            if k % 2:
                prod = dsl.identity(window, scale=scale, dtype="fp32")
            else:
                prod = dsl.multiply(window, scale, dtype="fp32", engine="gpsimd")
            dsl.add(acc, prod, out=res if last else acc)

    def weight(kd: int, s: int, o: int) -> Tensor:
        tile = weights.get((kd, s, o))
        if tile is None:
            slot, ci, co = slots[s], ci_tiles[slots[s].ct], co_tiles[o]
            if depthwise:
                if (kd, ci) not in diagonals:
                    diagonals[(kd, ci)] = _diagonal(wv[kd], g, ci, g.dtype)
                tile = diagonals[(kd, ci)](*slot.taps[0])
            elif g.groups > 1 and not packed:
                if (kd, ci, co) not in blocked:
                    if not resident:  # one channel tile pair's taps at a time
                        blocked.clear()
                    blocked[(kd, ci, co)] = _grouped_taps(wv[kd], g, ci, co, g.dtype)
                tile = blocked[(kd, ci, co)][:, slot.taps[0][0], slot.taps[0][1], :]
            else:
                tile = dsl.sbuf((len(slot.taps) * ci[1], co[1]), g.dtype)
                if g.groups > 1:
                    _block_diagonal(tile, wv[kd], g, slot.taps, ci, co)
                for j, (ky, kx) in enumerate(slot.taps if g.groups == 1 else ()):
                    dsl.load(tile[j * ci[1] : (j + 1) * ci[1], :],
                             wv[kd, ky, kx, ci[0] : ci[0] + ci[1], co[0] : co[0] + co[1]])
            if resident:
                weights[(kd, s, o)] = tile
        return tile

    def load(u: Unit, od: int) -> list[list[Tensor]]:
        """Per kernel plane of output plane ``od``, unit ``u``'s tiles of its input plane."""
        return [load_packed(xv[:, d], g, u, slots, width) if packed else
                load_shared(xv[:, d], g, u, slots, ci_tiles, phases, slack) for _, d in depth.planes(od)]

    live = [[s for s, slot in enumerate(slots) if _live(g, ci_tiles[slot.ct], co)] for co in co_tiles]
    base = units(replace(g, n=1), width, MAC_BANK if mac else ts.psum_fmax)
    work = [(replace(u, n=n), od) for n in range(g.n) for od in range(depth.out) for u in base]
    j = 0
    for (u, od), tiles in zip(work, prefetch([partial(load, u, od) for u, od in work], PREFETCH), strict=True):
        planes = depth.planes(od)
        for o, (o0, on) in enumerate(co_tiles):
            for r0, rr, c0, cc in u.banks:
                res = dsl.sbuf((on, rr, cc), out_dtype)
                steps = [(kd, p, s) for p, (kd, _) in enumerate(planes) for s in live[o]]
                if steps and mac:
                    multiply_accumulate(res, tiles, steps, o, r0 * width + c0, rr * cc)
                elif steps:
                    acc = dsl.psum((on, rr * cc))
                    for k, (kd, p, s) in enumerate(steps):
                        start = slots[s].shift + r0 * width + c0
                        dsl.matmul(acc, weight(kd, s, o), tiles[p][s][:, start : start + rr * cc], accumulate=k > 0)
                    dsl.copy(acc, out=res, engine="scalar" if j % 2 else "vector")
                    dsl.release(acc)
                else:  # an output plane of only padding
                    dsl.memset(res, 0.0)
                j += 1
                valid = min(cc, ow - c0)
                dst = ov[u.n, od, u.oy + r0 : u.oy + r0 + rr, c0 : c0 + valid, o0 : o0 + on].permute(2, 0, 1)
                dsl.store(dst, res[:, :, :valid], split=1 if packed else _pieces(dst))


def tensor_format(x_dtype: str, w_dtype: str) -> str | None:
    """The TensorE operand format of a convolution of ``x_dtype`` and ``w_dtype`` operands: integers as their
    float format (``INTEGER_FORMAT``), then the fastest of ``FORMATS`` that holds both exactly (None: none)."""
    a, b = INTEGER_FORMAT.get(x_dtype, x_dtype), INTEGER_FORMAT.get(w_dtype, w_dtype)
    return next((f for f, held in FORMATS.items() if a in held and b in held), None)


def _spatial(values: Sequence[Any] | None, rank: int, unit: Any, what: str) -> tuple[Any, Any, Any]:
    """A per-spatial-axis parameter of a ``rank``-D convolution as (depth, height, width): a 2-D one gets a
    unit depth axis, a 1-D one unit depth and height (None: ``unit`` on every axis)."""
    values = (unit,) * rank if values is None else tuple(values)
    if len(values) != rank:
        fail(f"{len(values)} {what} {values} for a {rank}-D convolution", f"give {rank}, one a spatial axis")
    d, h, w = (unit,) * (3 - rank) + values
    return d, h, w


@dsl.kernel
def conv_kernel(x: Tensor, w: Tensor, *, stride: Sequence[int] | None = None,
                padding: Sequence[Pair] | None = None, lhs_dilation: Sequence[int] | None = None,
                rhs_dilation: Sequence[int] | None = None, x_axes: tuple[int, ...] = CANONICAL,
                w_axes: tuple[int, ...] = CANONICAL, out_axes: tuple[int, ...] = CANONICAL,
                out_dtype: str = "fp32", feature_groups: int = 1, batch_groups: int = 1,
                operand_format: str | None = None) -> Tensor:
    """``out[n, oy, ox, o] = Σ x̂[n, oy·sh + ky·dh, ox·sw + kx·dw, i] · w[ky, kx, i, o]`` (x̂: ``x`` dilated by
    ``lhs_dilation`` and padded by ``padding``), rounded to ``out_dtype``. ``x_axes``: where ``N, H, W, Ci``
    are in ``x``; ``w_axes``: where ``KH, KW, Ci, Co`` are in ``w``; ``out_axes``: where ``N, OH, OW, Co``
    go in the result (None: no padding, unit strides and dilations). 3-D operands are a 1-D convolution
    (``N, W, Ci`` / ``KW, Ci, Co`` / ``N, OW, Co``), 5-D ones a 3-D convolution (``N, D, H, W, Ci`` / ``KD,
    KH, KW, Ci, Co`` / ``N, OD, OH, OW, Co``), one stride, pad and dilation a spatial axis; both run as the 3-D
    one of unit axes (views: nothing is copied), whose kernel planes accumulate into the same PSUM tiles.

    StableHLO's groups: ``feature_groups`` G splits ``Ci`` and ``Co`` into G groups, output group ``k`` the
    convolution of input channels group ``k`` with ``w[..., :, k·Co/G : (k+1)·Co/G]`` (``w`` has ``Ci / G``
    input channels); ``batch_groups`` G splits ``N`` and ``Co`` likewise (the output has ``N / G`` images).

    ``operand_format``: the TensorE format ``x`` and ``w`` are multiplied in, their tiles cast to it as they
    load (None: ``operand_format(x.dtype, w.dtype)``, module docstring)."""
    rank = len(x.shape) - 2
    if rank not in (1, 2, 3) or len(w.shape) != rank + 2:
        fail(f"a 2-D convolution of x {x.shape} with w {w.shape}",
             "give a 4-D input (N, H, W, Ci: NHWC by default) and a 4-D kernel (KH, KW, Ci, Co: HWIO by default)"
             ", or 3-D ones for a 1-D convolution, 5-D for a 3-D one")
    fmt = operand_format or tensor_format(x.dtype, w.dtype)
    if fmt is None or fmt not in FORMATS:
        fail(f"a convolution of {x.dtype} and {w.dtype} operands in {operand_format or 'no TensorE format'}",
             f"give operands (or operand_format) in {', '.join(FORMATS)}, or integers ({', '.join(INTEGER_FORMAT)})")
    load = _transposable(fmt, "bf16")
    if DTYPES[x.dtype].itemsize != DTYPES[load].itemsize:  # x loads channel-major: DMA transposes (_widened)
        x = _widened(x, load)
    unit: tuple[None, ...] = (None,) * (3 - rank)
    xv, wv = x.permute(*x_axes)[(slice(None), *unit)], w.permute(*w_axes)[unit]
    n, dd, h, wd, ci = xv.shape
    kd, kh, kw, ci2, co = wv.shape
    if ci != ci2 * feature_groups or min(feature_groups, batch_groups) < 1 or co % feature_groups \
            or co % batch_groups or n % batch_groups or (feature_groups > 1 and batch_groups > 1):
        fail(f"convolution of {ci} input channels with a kernel of {ci2} ({feature_groups} feature groups, "
             f"{batch_groups} batch groups; {n} images, {co} output channels)",
             "give x and w the same Ci (w: Ci / feature_groups), and feature or batch groups that divide "
             "Co (batch groups: and N), not both")
    st, lhs = _spatial(stride, rank, 1, "strides"), _spatial(lhs_dilation, rank, 1, "lhs dilations")
    rhs, pad = _spatial(rhs_dilation, rank, 1, "rhs dilations"), _spatial(padding, rank, (0, 0), "pads")
    if min(*st, *lhs, *rhs) < 1:
        fail(f"strides {st} and dilations {lhs}, {rhs}", "use strides and dilations ≥ 1")
    nb = n // batch_groups
    depth = Depth(dd, kd, st[0], (int(pad[0][0]), int(pad[0][1])), lhs[0], rhs[0])
    g = Geometry(nb, h, wd, ci, kh, kw, co // batch_groups, (st[1], st[2]), (pad[1], pad[2]), (lhs[1], lhs[2]),
                 (rhs[1], rhs[2]), feature_groups, fmt)
    oh, ow = g.out
    if min(oh, ow, depth.out) < 1:
        fail(f"a {kd}x{kh}x{kw} window over a padded {g.padded} input of {dd} planes",
             "pad the input to at least the window")
    sizes = (nb, *(depth.out, oh, ow)[3 - rank :], co)
    shape = [0] * len(sizes)
    for axis, size in zip(out_axes, sizes, strict=True):
        shape[axis] = size
    out = dsl.hbm_tensor(tuple(shape), out_dtype, name="out")
    # NOTE: results store channel-major (DMA transposes): a 1-byte result goes through an fp32/int32 copy in HBM
    wide = out if DTYPES[out_dtype].itemsize in DMA_TRANSPOSE_ITEMSIZES else \
        dsl.hbm_tensor(tuple(shape), _transposable(out_dtype, "fp32"), name="out_wide")
    ov = wide.permute(*out_axes)[(slice(None), *unit)]
    _mappings(xv, wv, ov, g, depth, batch_groups)
    if wide is not out:
        _copy_in_pieces(out, wide)
    return out


def _mappings(xv: Tensor, wv: Tensor, ov: Tensor, g: Geometry, depth: Depth, batch_groups: int) -> None:
    """Run the convolution of canonical 5-D views (``g``: of one batch group) in its mapping (module docstring)."""
    n, ci, co, nb = xv.shape[0], g.ci, g.co * batch_groups, g.n
    cb, feature_groups = g.co, g.groups
    if g.pixel_mode and nb == 1 and co == batch_groups and \
            g.padded[0] * g.padded[1] * DTYPES[g.load].itemsize <= DEPTHWISE_IMAGE:
        depthwise_gradient(xv, wv, ov, replace(g, n=n, co=co), depth)
        return
    if g.pixel_mode and batch_groups > 1 and 2 * nb <= dsl.tile_size().pmax:  # small groups: one contraction
        pixel_contract(xv, wv, ov, replace(g, n=n, co=co), depth, batch_groups)
        return
    for k in range(batch_groups):  # each batch group its own convolution (JAX's grouped weight gradient)
        xk, wk, ok = xv[k * nb : (k + 1) * nb], wv[..., k * cb : (k + 1) * cb], ov[..., k * cb : (k + 1) * cb]
        if not g.pixel_mode:
            dense(xk, wk, ok, g, depth, ov.dtype)
            continue
        cig, cog = ci // feature_groups, cb // feature_groups
        one = replace(g, ci=cig, co=cog, groups=1)
        for f in range(feature_groups):  # NOTE: a grouped forward with a window larger than its output
            pixel_contract(xk[..., f * cig : (f + 1) * cig], wk[..., f * cog : (f + 1) * cog],
                           ok[..., f * cog : (f + 1) * cog], one, depth)


def _transposable(dtype: str, wider: str) -> str:
    """``dtype`` if a DMA transposes it (2- and 4-byte types, ``reference/neuron.md`` §1.3), else ``wider`` (a
    float of that size) or int32 for an integer: a type that holds its values exactly."""
    d = DTYPES[dtype]
    if d.itemsize in DMA_TRANSPOSE_ITEMSIZES:
        return dtype
    return "int32" if d.kind == "int" else wider


def _copy_in_pieces(dst: Tensor, src: Tensor) -> None:
    """``dst = src`` (casting) HBM to HBM, in blocks of its first axis on up to ``MAX_PIECES`` queues (each
    block's rows at most ``DMA_COUNT`` elements: else a copy a member of the first axis)."""
    rows, per_row = src.shape[0], math.prod(src.shape[1:])
    if per_row > DMA_COUNT:
        for i in range(rows):
            _copy_in_pieces(dst[i], src[i])
        return
    for r0, rn in blocks(rows, -(-rows // MAX_PIECES)):
        dsl.dma_copy(dst[r0 : r0 + rn], src[r0 : r0 + rn])


def _widened(x: Tensor, dtype: str) -> Tensor:
    """``x`` cast to ``dtype`` in HBM: one pass of contiguous DMAs, after which its channel-major loads are DMA
    transposes (a 1-byte or casting transpose would move one element a descriptor)."""
    wide = dsl.hbm_tensor(x.shape, dtype, name="x_wide")
    _copy_in_pieces(wide, x)
    return wide


def conv2d(x: ArrayLike, w: ArrayLike, dtype: str = "fp32", *, stride: Sequence[int] | None = None,
           padding: Sequence[Pair] | None = None, lhs_dilation: Sequence[int] | None = None,
           rhs_dilation: Sequence[int] | None = None, feature_groups: int = 1, batch_groups: int = 1,
           out_dtype: str = "fp32", target: str = "trn3") -> NDArray[np.float32]:
    """``jax.lax.conv_general_dilated(x, w, stride, padding, lhs_dilation, rhs_dilation, feature_group_count,
    batch_group_count)`` for NHWC ``x`` and HWIO ``w`` (or NWC and WIO: a 1-D convolution, one stride, pad
    and dilation each; None: unit strides and dilations, no padding) on a simulated NeuronCore, operands
    rounded to ``dtype`` (fp32 or bf16).

        >>> conv2d(np.ones((1, 3, 3, 2)), np.ones((2, 2, 2, 1)))[0, :, :, 0].tolist()
        [[8.0, 8.0], [8.0, 8.0]]
        >>> conv2d(np.ones((1, 4, 2)), np.ones((3, 1, 2)), stride=(1,), padding=((1, 1),),
        ...        feature_groups=2)[0, :, 0].tolist()
        [2.0, 3.0, 3.0, 2.0]
    """
    xs = dsl.typed(np.asarray(x, np.float32), dtype)
    ws = dsl.typed(np.asarray(w, np.float32), dtype)
    canonical = tuple(range(len(xs.shape)))
    res = dsl.run_kernel(conv_kernel, xs, ws, target=target, stride=stride, padding=padding,
                         lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, x_axes=canonical,
                         w_axes=canonical, out_axes=canonical, out_dtype=out_dtype,
                         feature_groups=feature_groups, batch_groups=batch_groups)
    return res.outputs[0]
