"""The pool kernels' forward passes (``kernels.pool``): ``pool_kernel``, StableHLO's ``reduce_window`` with
``max``, ``min`` or ``add``, and ``pool_gather_kernel``, ``select_and_gather_add`` (the JVP of a max pool).

The forward pass is one VectorE ``tensor_tensor`` per tap (``taps - 1`` of them): ``acc = op(acc, tap)``,
max/min in the input's dtype (exact), sums in fp32 in window order — the reference's order and precision, so
the result rounds once, at the store, exactly as ``trnsim.ir.semantics.reduce`` computes it. Sums of 8- and
16-bit integers are exact in int32 and wrap to the type at the store (``WRAP``), as StableHLO's do.
"""

from __future__ import annotations

import math
from functools import partial

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.kernels.layout import blocks, prefetch
from trnsim.kernels.pool_bands import Move, Plan, load_tile, plan_bands, store_tile, tap_view
from trnsim.kernels.pool_window import (
    FLAT,
    IDENTITY,
    MAX_INT_TERMS,
    SELECT,
    WRAP,
    Depth,
    Pair,
    Window,
    itemsize,
    kernel_window,
    sum_dtype,
    wrap_sums,
)


def _forward_span(win: Window, r: int, q: int) -> Pair:
    """Input rows and columns a band of ``r × q`` windows loads (rows whole strides: one reshape DMA)."""
    (sh, sw), (eh, ew) = win.stride, win.extent
    return max((r - 1) * sh + eh, r * sh), (q - 1) * sw + ew


def forward_plan(win: Window, dtype: str, op: str, pmax: int, start: int = 0, gather: bool = False) -> Plan:
    """``pool_kernel``'s bands (``plan_bands``) for ``x`` of ``dtype``: a band is one output plane's windows, its
    tile the window's planes stacked along the rows; ``gather``: ``pool_gather_kernel``'s (a tangent tile
    of ``x``'s size loaded too, and a maximum, a hit and a result tile)."""
    oh, ow = win.out
    # an accumulator a band (gather: 3; logaddexp: 5, its temporaries)
    acc = itemsize(sum_dtype(dtype) if op == "add" else dtype) * (3 if gather else 5 if op == "logaddexp" else 1)

    def loaded(r: int, q: int) -> int:
        rows, cols = _forward_span(win, r, q)
        return (2 if gather else 1) * win.depth.size * rows * cols * itemsize(dtype)

    return plan_bands(win, loaded, lambda r, q: r * q * acc, pmax, lambda r: -(-oh // r), lambda q: -(-ow // q),
                      square=False, start=start, images=win.shape[0] * win.depth.out)


@dsl.kernel
def pool_kernel(x: Tensor, *, size: Pair, stride: Pair = (1, 1), pad: tuple[Pair, Pair] = ((0, 0), (0, 0)),
                dilation: Pair = (1, 1), op: str = "max", init: float | None = None, scale: float = 1.0,
                out_dtype: str | None = None, rows: int = 0, depth: Depth = FLAT) -> Tensor:
    """``out[n, oy, ox, c] = scale · op(init, x̂[n, oy·sh + ky·dh, ox·sw + kx·dw, c] for (ky, kx) in the
    window)`` for ``x [N, H, W, C]``, ``x̂`` padded with ``init`` (default: ``op``'s identity), ``op`` in
    ``max``, ``min``, ``add``, ``mul`` (combined in window order; sums and products of floats in fp32, as
    StableHLO's reference computes narrow floats), rounded once to ``out_dtype``, or ``logaddexp`` (fp32:
    ``jnp.logaddexp``'s ops in its order, from the init, ``logaddexp``; ``lax.cumlogsumexp``'s window).
    With a ``depth`` window over ``D`` planes, ``x`` is ``[N·D, H, W, C]``, ``out`` ``[N·OD, OH, OW, C]``
    and the window's taps ``(kd, ky, kx)`` (plane ``od·sd + kd·dd``) in that order.
    ``rows``: the band height to start from (``plan_bands``; 0: ``start_rows``)."""
    if op not in IDENTITY:
        fail(f"pooling op {op!r}", f"use one of {', '.join(IDENTITY)}")
    win = kernel_window(x, size, stride, pad, dilation, depth)
    n, _, _, c = win.shape
    fill = IDENTITY[op] if init is None else float(init)
    oh, ow = win.out
    if op == "mul" and x.dtype not in ("fp32", "bf16", "fp16"):
        fail(f"a {x.dtype} product", "multiply floats: StableHLO wraps integer products, which fp32 does not")
    if op == "logaddexp" and (x.dtype != "fp32" or (out_dtype or x.dtype) != "fp32" or scale != 1.0):
        fail(f"a {x.dtype} logaddexp window", "logaddexp windows run on fp32, unscaled")
    acc_dtype = sum_dtype(x.dtype) if op in ("add", "mul") else x.dtype
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
        if op == "logaddexp":            # from the init, as the reference folds it (its -inf turns -0 into +0)
            acc, rest = dsl.full(views[0].shape, fill), []
            for v in views:
                logaddexp(acc, v)
        elif fill != IDENTITY[op]:        # init first, as the reference folds it: exact sums
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
            acc = wrap_sums(acc, out_dtype or x.dtype)
        fw.store(out[:, :, :, c0 : c0 + cc], acc, q, p0, pn)
    return out


def logaddexp(acc: Tensor, v: Tensor) -> None:
    """``acc = log(exp(acc) + exp(v))`` in place, as ``jnp.logaddexp`` computes it, op for op (each rounded to
    fp32 once, the exp and log1p on ScalarE): ``select(d != d, acc + v, max(acc, v) + log1p(exp(-|d|)))``
    with ``d = acc - v`` (NaN where both are the same infinity, or either is NaN)."""
    d = dsl.tensor_tensor(acc, v, "sub")
    nan = dsl.tensor_tensor(d, d, "ne")
    total = dsl.tensor_tensor(acc, v, "add")
    high = dsl.tensor_tensor(acc, v, "max")
    tail = dsl.activation("exp", dsl.tensor_scalar(d, "abs_max", 0.0), scale=-1.0)
    dsl.activation("log1p", tail, out=tail)
    dsl.tensor_tensor(high, tail, "add", out=high)
    dsl.where(nan, total, high, out=acc)


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
        return load_tile(x[:, :, :, c0 : c0 + cc], (pn, depth.size * self.span[0], self.span[1], cc), x.dtype, planes,
                         rows * sh, q * cols * sw - pl, fill)

    def taps(self, tile: Tensor, pn: int) -> list[Tensor]:
        """The window's taps ``(kd, ky, kx)`` in window order, each ``[pn, R, Q, cc]``."""
        span = self.span[0]
        return [tap_view(tile[:, kd * span : (kd + 1) * span], self.win, ky, kx, self.plan.rows, self.plan.cols, pn)
                for kd in range(self.win.depth.size) for ky, kx in self.win.taps]

    def store(self, out: Tensor, acc: Tensor, q: int, p0: int, pn: int) -> None:
        """Store the results ``acc`` of bands ``p0 ..`` into ``out [N·OD, OH, OW, cc]``."""
        od, rows, cols = self.win.depth.out, self.plan.rows, self.plan.cols
        moves = [Move(i * od + z, b * rows, k) for k, (i, z, b) in enumerate(self.bands[p0 : p0 + pn])]
        store_tile(out, acc, moves, rows, 0, q * cols, cols, 0)


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
    win = kernel_window(x, size, stride, pad, dilation, depth)
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
