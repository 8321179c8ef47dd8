"""The max-pool gradient (``kernels.pool``): ``pool_grad_kernel``, StableHLO's ``select_and_scatter``
(select ``GE``, scatter ``add``: what ``jax.grad`` of a max pool emits), and its layout, ``Scatter``.

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

32-bit integers are not exact in fp32 (it rounds above 2**24): they compare as two exact halves, ``hi = x >> 16``
and ``lo = x & 0xFFFF`` (the selection kernels' technique), the window's largest pair found as ``m = max hi``,
then ``c = max (hi == m) · (lo + 1)`` over the taps (the smallest: ``min``, and ``lo - 65536``), a tap hit where
its own ``c`` equals it. Where windows do not overlap (``Scatter.disjoint``) an element gets one share or none,
copied through fp32 views of its bits (a select's value would round). Where they overlap (or init is not 0), an
int32 sum would need 32-bit integer adds the fp32 ALU does not have (neuron.md §1.4–1.5), so the shares are summed
as two exact fp32 halves (``Scatter.halves``), wrapped at the store (``_combine``)::

    lo = Σ (share & 0xFFFF)           < 2**24: at most MAX_INT_TERMS terms (the shares and init) of 16 bits
    hi = Σ (share & 0xFFFF0000)       2**16 · (a sum < 2**24): exact in fp32
    low = lo mod 2**16                out = ((hi + lo - low) mod 2**32) | low      (each step exact)

NOTE: padding is filled with -inf (+inf for LE/LT; an integer type's limit) and may be selected where every
element of a window is that value, which the reference never selects; a window holding NaN matches no tap and
gives no gradient (the reference gives it to one element). Finite inputs are exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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

SPLIT = ("int32", "uint32")     # compared as two 16-bit halves; shares copied as bits (module docstring)


@dataclass(frozen=True)
class Scatter:
    """How ``pool_grad_kernel`` lays out a window (module docstring): ``lead_r``/``lead_c`` windows before a
    band's own reach into its rows/columns; ``disjoint``: windows do not overlap (and init is 0); ``dtype``
    the gradient tile's; ``in_place``: windows tile the input exactly, the gradient replaces x in its tile;
    ``halves``: 32-bit integer shares summed as two fp32 halves, two gradient tiles (module docstring)."""

    win: Window
    x_dtype: str
    source_dtype: str
    lead_r: int
    lead_c: int
    disjoint: bool
    dtype: str
    in_place: bool
    halves: bool

    @classmethod
    def of(cls, win: Window, x_dtype: str, source_dtype: str, init: float) -> Scatter:
        (sh, sw), (eh, ew), depth = win.stride, win.extent, win.depth
        disjoint = eh <= sh and ew <= sw and depth.extent <= depth.stride and init == 0.0
        # NOTE: a window's share (its source value or 0) stays in the source's dtype (a 2-byte type streams
        # at twice fp32's rate, neuron.md §1.4), and so does the gradient where windows do not overlap (an
        # element gets one share or none); sums of several shares are fp32, rounded once at the store
        dtype = source_dtype if disjoint else sum_dtype(source_dtype)
        in_place = disjoint and (eh, ew, depth.extent) == (sh, sw, depth.stride) and dtype == x_dtype
        return cls(win, x_dtype, source_dtype, win.lead, max(0, -(-ew // sw) - 1), disjoint, dtype, in_place,
                   x_dtype in SPLIT and not disjoint)

    @property
    def shares(self) -> int:
        """The most windows one element lies in: the most shares it sums."""
        (sh, sw), (eh, ew), d = self.win.stride, self.win.extent, self.win.depth
        return -(-eh // sh) * -(-ew // sw) * -(-d.extent // d.stride)

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
        """The kernel's bands (``plan_bands``): they own all the padded rows and columns, those past the last
        window's included."""
        windows, planes = self.planes
        isz, ssz, gsz = itemsize(self.x_dtype), itemsize(self.source_dtype), itemsize(self.dtype)
        isz *= 3 if self.x_dtype in SPLIT else 1        # the values and their two fp32 halves
        (oh, ow), (hp, wp), (sh, sw) = self.win.out, self.win.padded, self.win.stride

        def loaded(r: int, q: int) -> int:      # bytes a channel: the input and the source
            rows, cols = self.span(r, q)
            return planes * rows * cols * isz + windows * (r + self.lead_r) * (q + self.lead_c) * ssz

        def temporary(r: int, q: int) -> int:   # zeros, maxima, hits, a share; two gradient tiles
            rows, cols = self.span(r, q)
            grads = 0 if self.in_place else 2 * planes * rows * cols * gsz * (2 if self.halves else 1)
            halves = windows * (r + self.lead_r) * (q + self.lead_c) * 2 * 4 if self.halves else 0
            return (r + self.lead_r) * (q + self.lead_c) * 2 * (ssz + isz) + grads + halves

        return plan_bands(self.win, loaded, temporary, pmax, lambda r: max(-(-oh // r), -(-hp // (r * sh))),
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
    ``rows``: the band height to start from (``plan_bands``; 0: ``start_rows``)."""
    if select not in SELECT:
        fail(f"select_and_scatter compare {select!r}", f"use one of {', '.join(SELECT)}")
    win = kernel_window(x, size, stride, pad, (1, 1), depth)
    if source.dtype in WRAP and depth.size * math.prod(size) > MAX_INT_TERMS:
        fail(f"{source.dtype} shares of {depth.size * math.prod(size)}-tap windows",
             f"scatter integers over windows of at most {MAX_INT_TERMS} taps")
    n, h, w, c = win.shape
    (oh, ow), od = win.out, depth.out
    if source.shape != (n * od, oh, ow, c):
        fail(f"a source of {source.shape} for windows over {x.shape}", f"give a source of {(n * od, oh, ow, c)}")
    lay = Scatter.of(win, x.dtype, source.dtype, init)
    split = x.dtype in SPLIT
    if split and (source.dtype != x.dtype or (out_dtype or x.dtype) not in SPLIT):
        fail(f"select_and_scatter of {x.dtype} with a {source.dtype} source into {out_dtype or x.dtype}",
             "give 32-bit integer operands and result of one type")
    terms = lay.shares + int(init != 0.0)
    if lay.halves and terms > MAX_INT_TERMS:
        fail(f"{x.dtype} select_and_scatter summing up to {terms} terms (the shares of {size} windows with "
             f"strides {stride}, and init) an element", f"sum at most {MAX_INT_TERMS} terms (16-bit halves stay "
             "exact in fp32 below 2**24): a smaller window or a larger stride")
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
        src = load_tile(source[:, :, :, c0 : c0 + cc], (pn, windows * wr, wc, cc), source.dtype, srcs, rows,
                        q * cols - lead_c, 0.0)
        xt = load_tile(x[:, :, :, c0 : c0 + cc], (pn, planes * t_rows, t_cols, cc), x.dtype, xs, rows * sh,
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
    # (32-bit integer sums: a pair of tiles, the low and the high halves' sums, ``inits`` theirs)
    inits = _init_halves(init) if lay.halves else (init,)
    grads = [] if in_place else [[dsl.sbuf((parts, planes * t_rows, t_cols, plan.chunk), grad_dtype) for _ in inits]
                                 for _ in range(2)]
    loads = [partial(load, *item) for item in work]
    for j, ((q, p0, pn, c0, cc), (xt, src)) in enumerate(zip(work, prefetch(loads, plan.depth), strict=True)):
        accs = [xt] if in_place else [g[:pn, :, :, :cc] for g in grads[j % 2]]
        grad = accs[0]
        halves = _halves(xt, reduce_op) if split else None
        shares = _source_halves(src) if lay.halves else None
        for acc, value in zip(accs, inits, strict=True):
            for p in range(0 if in_place else planes):
                for r0, r1, k0, k1 in strips:
                    dsl.memset(acc[:, p * t_rows + r0 : p * t_rows + r1, k0:k1, :], value, engine="gpsimd")
        z = zero[:pn, :, :, :cc]
        for wi in range(windows):
            rem = src[:, wi * wr : (wi + 1) * wr]
            rems = [] if shares is None else [s[:, wi * wr : (wi + 1) * wr] for s in shares]
            at = [(wi * sd + kd * depth.dilation) * t_rows for kd, _, _ in taps]     # each tap's plane
            views = [tap_view(xt[:, a : a + t_rows], win, ky, kx, wr, wc, pn)
                     for a, (_, ky, kx) in zip(at, taps, strict=True)]
            pairs = None
            if halves is not None:
                pairs = [[tap_view(h[:, a : a + t_rows], win, ky, kx, wr, wc, pn) for h in halves]
                         for a, (_, ky, kx) in zip(at, taps, strict=True)]
                views = [v for v, _ in pairs]
            best = views[0] if len(views) == 1 else dsl.tensor_tensor(views[0], views[1], reduce_op)
            for v in views[2:]:
                dsl.tensor_tensor(best, v, reduce_op, out=best)
            low = None
            if pairs is not None:       # the best lo among the taps holding the best hi (module docstring)
                for h, lo in pairs:     # (one tap's pick live at a time: windows of hundreds of taps)
                    pick = dsl.tensor_tensor(dsl.tensor_tensor(h, best, "eq"), lo, "mul")
                    low = pick if low is None else dsl.tensor_tensor(low, pick, reduce_op, out=low)
            for k, (a, tap, v) in enumerate(zip(at, taps, views, strict=True)):
                target = tap_view(grad[:, a : a + t_rows], win, tap[1], tap[2], wr, wc, pn)
                if pairs is not None and low is not None:
                    h, lo = pairs[k]
                    hit = dsl.tensor_tensor(dsl.tensor_tensor(dsl.tensor_tensor(h, best, "eq"), lo, "mul"), low, "eq")
                    # each half's share, summed as the float path's (z: 0 as fp32 bits too); the shares left
                    # updated on GpSimd, which then takes about VectorE's time a tap (the selection is VectorE's)
                    if rems:
                        for acc, r in zip(accs, rems, strict=True):
                            half = tap_view(acc[:, a : a + t_rows], win, tap[1], tap[2], wr, wc, pn)
                            if tap in writes:
                                dsl.where(hit, r, z.bitcast("fp32"), out=half)
                            else:
                                dsl.add(half, dsl.where(hit, r, z.bitcast("fp32")), out=half, engine="gpsimd")
                            if k + 1 < len(taps):
                                dsl.where(hit, z.bitcast("fp32"), r, out=r, engine="gpsimd")
                        continue
                    dsl.where(hit, rem.bitcast("fp32"), z.bitcast("fp32"), out=target.bitcast("fp32"))
                    if k + 1 < len(taps):
                        dsl.where(hit, z.bitcast("fp32"), rem.bitcast("fp32"), out=rem.bitcast("fp32"))
                    continue
                hit = dsl.tensor_tensor(v, best, "eq")
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
                if lay.halves:
                    own = _combine(own, accs[1][:, a : a + t_rows], out_dtype or x.dtype)
                elif grad_dtype == "int32" and not split:
                    own = wrap_sums(own, out_dtype or x.dtype)
                store_tile(out[:, :, :, c0 : c0 + cc], own, moves, rows * sh, lead_r * sh,
                           q * cols * sw - pl, cols * sw, lead_c * sw)
    return out


def _halves(xt: Tensor, reduce_op: str) -> tuple[Tensor, Tensor]:
    """The exact fp32 halves of a tile of 32-bit integers (module docstring): ``x >> 16``, and ``(x & 0xFFFF) +
    1`` for a max (``- 65536`` for a min: a tap whose hi is not the best then gives 0, below / above them)."""
    shift = 1.0 if reduce_op == "max" else -65536.0
    hi = dsl.tensor_scalar(xt, "shr", 16.0, dtype="fp32")
    lo = dsl.tensor_scalar(xt, "and", 65535.0, dtype="fp32", engine="gpsimd")
    dsl.tensor_scalar(lo, "add", shift, out=lo, engine="gpsimd")
    return hi, lo


def _source_halves(src: Tensor) -> tuple[Tensor, Tensor]:
    """A tile of 32-bit integer shares as two exact fp32 tiles (module docstring): ``src & 0xFFFF`` and
    ``src & 0xFFFF0000`` (16 significant bits)."""
    lo = dsl.tensor_scalar(src, "and", 65535.0, dtype="fp32", engine="gpsimd")
    hi = dsl.tensor_scalar(src, "and", float(0xFFFF0000), dtype="fp32")
    return lo, hi


def _init_halves(init: float) -> tuple[float, float]:
    """The 32-bit integer ``init``'s two halves, as ``_source_halves`` splits a share."""
    bits = int(init) & 0xFFFFFFFF
    return float(bits & 0xFFFF), float(bits & 0xFFFF0000)


def _combine(lo: Tensor, hi: Tensor, dtype: str) -> Tensor:
    """The 32-bit integers (``dtype``, wrapped) whose halves' sums are ``lo`` and ``hi`` (module docstring).

        low = lo mod 2**16                      exact (fmod), as uint32
        top = hi + (lo - low)                   2**16 · (hi's sum + the carry), < 2**40, 24 bits: exact
        out = (top mod 2**32) | low             the high half wrapped (fmod, exact), the low half joined
    """
    # NOTE: an integer tile is written from fp32 by rounding and clipping to its range; every value here is an
    # exact integer in uint32's, and the bitwise ``or`` acts on the integers themselves (isa.ops.ALU_OPS)
    low = dsl.tensor_scalar(lo, "mod", 65536.0, dtype="uint32")
    top = dsl.tensor_tensor(hi, dsl.tensor_tensor(lo, low, "sub", dtype="fp32", engine="gpsimd"), "add")
    high = dsl.tensor_scalar(top, "mod", 2.0**32, dtype="uint32")
    out = dsl.tensor_tensor(high, low, "or", out=high)
    return out if dtype == "uint32" else out.bitcast(dtype)
