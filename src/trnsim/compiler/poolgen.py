"""Pooling steps: ``reduce_window`` and ``select_and_scatter`` lowered to the library's pool kernels.

A ``reduce_window`` of one fp32/bf16/fp16 or 8-/16-bit integer (``EXACT_INTS``) operand whose body is one
``add``, ``maximum`` or ``minimum`` of its two arguments, whose init value is a constant, with no base
dilation, no negative padding, and a window along axes within three adjacent ones
(``trnsim.kernels.pool.canonical``: ``flax``-style ``max_pool``/``avg_pool`` on NHWC, 1-D windows, 2-D
arrays, 3-D pools of volumes and video on NDHWC, two windowed axes one apart) runs as ``pool_kernel``; a
``select_and_scatter`` of such a type and window whose select is one ``compare`` ``GE``/``GT``/``LE``/``LT``
of its arguments in order (FLOAT, or SIGNED/UNSIGNED as the integer type: ``COMPARE_TYPE``) and whose
scatter is one ``add`` (what ``jax.grad`` of a max pool emits) runs as ``pool_grad_kernel``, as does one of
32-bit integers (``SPLIT_INTS``: compared as two exact 16-bit halves; where windows overlap, the shares summed
as two exact fp32 halves and wrapped at the store, up to ``MAX_INT_TERMS`` terms an element, the shares and a
non-zero init: ``kernels.pool_grad``); a two-operand
``reduce_window`` of (value, tangent) pairs of one float type whose body keeps the pair one FLOAT compare
picks (``select_and_gather_add``, the JVP of a max pool: ``_gather_select``) runs as ``pool_gather_kernel``
(its tangents; the values' output, which the JVP does not read, is not timed). The step's time
is the kernel's, timed by the instruction-level model (timing-only); every other form keeps the analytic cost
(``costs``), as does one the kernel cannot trace (a window row too wide for SBUF, or more than
``MAX_TAP_OPS`` tap instructions, as ``jnp.cumsum``'s whole-axis window: the ``pool_fallbacks`` statistic).

The kernels' work is tiles of 128 bands (a block of an image's windows, ``kernels.pool``), every image the
same bands when they all start from the whole batch's band height (the kernels' ``rows``): a batch of more
than twice the images whose bands fill ``SAMPLE_BANDS`` partitions is timed on that many images and twice
as many and extrapolated linearly (``kernel_timing.linear_fit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from trnsim.compiler.kernel_timing import TileTime, extrapolate, linear_fit, time_kernel
from trnsim.dsl.errors import KernelError
from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.semantics.reduce import simple_combiner
from trnsim.ir.types import FLOATS, isa_dtypes
from trnsim.kernels.pool import FLAT, Depth

DSL_DTYPE = isa_dtypes(*FLOATS)
# NOTE: VectorE computes in fp32, exact for integers of up to 16 bits: their max and min, their sums (made in
# int32 and wrapped as StableHLO's: ``kernels.pool.WRAP``) and their select_and_scatter run as the kernels
# too; the init is then the type's limit, not ±inf (padding with it)
EXACT_INTS = isa_dtypes("i8", "ui8", "i16", "ui16")
SPLIT_INTS = isa_dtypes("i32", "ui32")              # select_and_scatter only (module docstring)
COMPARE_TYPE = {"i8": "SIGNED", "i16": "SIGNED", "ui8": "UNSIGNED", "ui16": "UNSIGNED", "i32": "SIGNED",
                "ui32": "UNSIGNED"}    # else FLOAT
REDUCE_OP = {"add": "add", "maximum": "max", "minimum": "min", "multiply": "mul"}  # body → pool_kernel op
SAMPLE_BANDS = 256     # bands of the smaller sample: two tiles of 128
# NOTE: a window of thousands of taps (jnp.cumsum's reduce_window on the CPU lowering: the whole axis, padded
# by its length) is a scan, not a pool: one instruction a tap is quadratic work and a trace of millions
MAX_TAP_OPS = 40_000
PARTITIONS = 128


@dataclass(frozen=True)
class Pool:
    """A pool kernel's arguments: ``select`` None for ``pool_kernel`` (``op``, ``init``: None when it is
    ``op``'s identity, ``dilation``), a compare direction for ``pool_grad_kernel`` (``init``: its value); the
    canonical ``[N, H, W, C]`` shape (``N`` images, each of ``depth.planes`` planes) and the window along
    ``H, W`` and ``depth``."""

    shape: tuple[int, int, int, int]
    size: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[tuple[int, int], tuple[int, int]]
    dilation: tuple[int, int]
    dtype: str
    op: str
    init: float | None
    select: str | None = None
    rows: int = 0          # the band height to start from (the kernels' ``rows``; 0: the kernel's choice)
    depth: Depth = FLAT
    gather: float | None = None     # pool_gather_kernel's: the tangent's init (``select`` its compare)

    @property
    def forward(self) -> bool:
        """A forward kernel's (``pool_kernel``, ``pool_gather_kernel``): bands of output planes."""
        return self.select is None or self.gather is not None

    def with_images(self, n: int) -> Pool:
        return replace(self, shape=(n, *self.shape[1:]))


def _scalar_constant(v: Value) -> float | None:
    src = v.producer
    if src is None or src.op != "constant" or v.type.size != 1:
        return None
    return float(np.asarray(src.attrs["value"]).reshape(-1)[0])


def _window(node: Node, x: Value, dilation: list[int]) -> Any:
    from trnsim.kernels.pool import canonical

    a, rank = node.attrs, len(x.type.shape)
    size = [int(s) for s in a["window_dimensions"]]
    stride = [int(s) for s in a.get("window_strides") or [1] * rank]
    pads = a.get("padding")
    pad = [(0, 0)] * rank if pads is None else [(int(lo), int(hi)) for lo, hi in np.asarray(pads).reshape(rank, 2)]
    return canonical(tuple(x.type.shape), size, stride, pad, dilation)


def logaddexp(region: Graph) -> bool:
    """Whether ``region`` is ``jnp.logaddexp(a, b)`` as JAX writes it (``lax.cumlogsumexp``'s body)::

        d = a - b;  m = max(a, b)
        return select(d != d, a + b, m + log1p(exp(-|d|)))

    (sums in either operand order): the pool kernel's ``logaddexp`` op, the same ops in the same order."""
    if len(region.params) != 2 or len(region.results) != 1 or len(region.nodes) != 10:
        return False
    a, b = (v.id for v in region.params)

    def node(v: Value | None, op: str) -> Node | None:
        n = v.producer if v is not None else None
        return n if n is not None and n.op == op and n in region.nodes else None

    def args(n: Node | None) -> list[int]:
        return [v.id for v in n.inputs] if n is not None else []

    pick = node(region.results[0], "select")
    if pick is None:
        return False
    cmp, on_nan, finite = (node(pick.inputs[0], "compare"), node(pick.inputs[1], "add"),
                           node(pick.inputs[2], "add"))
    diff = node(cmp.inputs[0], "subtract") if cmp is not None else None
    if (cmp is None or diff is None or cmp.attrs.get("comparison_direction") != "NE" or args(cmp) != [diff.out.id] * 2
            or args(diff) != [a, b] or sorted(args(on_nan)) != sorted([a, b]) or finite is None):
        return False
    high = next((node(v, "maximum") for v in finite.inputs if node(v, "maximum") is not None), None)
    log = next((node(v, "log_plus_one") for v in finite.inputs if node(v, "log_plus_one") is not None), None)
    exp = node(log.inputs[0], "exponential") if log is not None else None
    neg = node(exp.inputs[0], "negate") if exp is not None else None
    mag = node(neg.inputs[0], "abs") if neg is not None else None
    return (high is not None and sorted(args(high)) == sorted([a, b]) and mag is not None
            and args(mag) == [diff.out.id])


def _compare(region: Graph, dtype: str) -> str | None:
    """The direction of a select region that is one ``compare`` of its arguments in order, of the type for
    ``dtype`` (``COMPARE_TYPE``)."""
    if len(region.nodes) != 1 or len(region.params) != 2 or len(region.results) != 1:
        return None
    (cmp,) = region.nodes
    if (cmp.op != "compare" or cmp.attrs.get("compare_type", "FLOAT") != COMPARE_TYPE.get(dtype, "FLOAT")
            or [v.id for v in cmp.inputs] != [p.id for p in region.params] or region.results[0] is not cmp.out):
        return None
    return str(cmp.attrs.get("comparison_direction"))


def _gather_select(region: Graph) -> str | None:
    """The direction of a two-pair reduce_window body that keeps the accumulated pair where one FLOAT
    ``compare`` of the accumulated and the new value holds: ``c = compare(a0, a2); return select(c, a0, a2),
    select(c, a1, a3)`` (``jax``'s ``_select_and_gather_add``, the JVP of a max pool)."""
    if len(region.params) != 4 or len(region.nodes) != 3 or len(region.results) != 2:
        return None
    p = [v.id for v in region.params]
    cmp = next((n for n in region.nodes if n.op == "compare"), None)
    if (cmp is None or cmp.attrs.get("compare_type", "FLOAT") != "FLOAT"
            or [v.id for v in cmp.inputs] != [p[0], p[2]]):
        return None
    picks = [n for n in region.nodes if n.op == "select"]
    want = [[cmp.out.id, p[0], p[2]], [cmp.out.id, p[1], p[3]]]
    if [[v.id for v in n.inputs] for n in picks] != want or [r.id for r in region.results] != [
            n.out.id for n in picks]:
        return None
    return str(cmp.attrs.get("comparison_direction"))


def _pool(node: Node) -> Pool | None:
    """``pool_kernel``'s arguments for a one-operand reduce_window."""
    from trnsim.kernels.pool import IDENTITY, MAX_INT_TERMS

    x, init_v = node.inputs
    op = REDUCE_OP.get(simple_combiner(node.regions[0]) or "")
    if op is None and x.type.dtype == "f32" and logaddexp(node.regions[0]):
        op = "logaddexp"                 # (f32 only: each op of a narrower body rounds to its type)
    init = _scalar_constant(init_v)
    rank = len(x.type.shape)
    base = [int(d) for d in node.attrs.get("base_dilations") or [1] * rank]
    dilation = [int(d) for d in node.attrs.get("window_dilations") or [1] * rank]
    dtype = DSL_DTYPE.get(x.type.dtype) or EXACT_INTS.get(x.type.dtype)
    if op is None or init is None or dtype is None or any(d != 1 for d in base) or np.isnan(init) or \
            (op == "mul" and dtype not in ("fp32", "bf16", "fp16")):
        return None                      # (integer products wrap in StableHLO: the fp32 ALU does not)
    win = _window(node, x, dilation)
    if win is None or (op == "add" and x.type.dtype in EXACT_INTS
                       and math.prod(win.size) * win.depth.size + 1 > MAX_INT_TERMS):
        return None
    return Pool(win.shape, win.size, win.stride, win.pad, win.dilation, dtype, op,
                None if init == IDENTITY[op] else init, depth=win.depth)


def _scatter(node: Node) -> Pool | None:
    """``pool_grad_kernel``'s arguments for a select_and_scatter."""
    from trnsim.kernels.pool import MAX_INT_TERMS, SELECT, Scatter

    x, source, init_v = node.inputs
    select = _compare(node.regions[0], x.type.dtype)
    init = _scalar_constant(init_v)
    dtype = DSL_DTYPE.get(x.type.dtype) or EXACT_INTS.get(x.type.dtype) or SPLIT_INTS.get(x.type.dtype)
    if (select not in SELECT or simple_combiner(node.regions[1]) != "add" or init is None or dtype is None
            or source.type.dtype != x.type.dtype or not np.isfinite(init)):
        return None
    win = _window(node, x, [1] * len(x.type.shape))
    if win is None or (x.type.dtype in EXACT_INTS and math.prod(win.size) * win.depth.size > MAX_INT_TERMS):
        return None
    lay = Scatter.of(win, dtype, dtype, init)
    if x.type.dtype in SPLIT_INTS and lay.halves and lay.shares + int(init != 0.0) > MAX_INT_TERMS:
        return None
    return Pool(win.shape, win.size, win.stride, win.pad, win.dilation, dtype, "add", init, select,
                depth=win.depth)


def _gather(node: Node) -> Pool | None:
    """``pool_gather_kernel``'s arguments for a two-operand reduce_window."""
    from trnsim.kernels.pool import IDENTITY, SELECT

    x, t, init_v, init_t = node.inputs
    select = _gather_select(node.regions[0])
    init, tangent_init = _scalar_constant(init_v), _scalar_constant(init_t)
    dtype = DSL_DTYPE.get(x.type.dtype)
    rank = len(x.type.shape)
    base = [int(d) for d in node.attrs.get("base_dilations") or [1] * rank]
    if (select not in SELECT or init is None or tangent_init is None or dtype is None
            or t.type.dtype != x.type.dtype or any(d != 1 for d in base) or np.isnan(init)):
        return None
    win = _window(node, x, [int(d) for d in node.attrs.get("window_dilations") or [1] * rank])
    if win is None:
        return None
    op = SELECT[select][0]
    return Pool(win.shape, win.size, win.stride, win.pad, win.dilation, dtype, op,
                None if init == IDENTITY[op] else init, select, depth=win.depth, gather=tangent_init)


# (op, operands and inits, regions) → the arguments of the kernel that computes such a node, or None
FORMS = {("reduce_window", 2, 1): _pool, ("select_and_scatter", 3, 2): _scatter, ("reduce_window", 4, 1): _gather}


def pool_for(node: Node) -> Pool | None:
    """The pool kernel's arguments if one computes ``node`` (module docstring); else None."""
    form = FORMS.get((node.op, len(node.inputs), len(node.regions)))
    return form(node) if form is not None else None


def pool_time(target: str, pool: Pool) -> TileTime:
    """The kernel's time (timing-only), sampled over the batch when it is large (module docstring)."""
    from trnsim.kernels.pool import Scatter, Window, forward_plan, start_rows

    n = pool.shape[0]
    win = Window(pool.shape, pool.size, pool.stride, pool.pad, pool.dilation, pool.depth)
    planes = win.depth.out if pool.forward else win.depth.groups        # bands of an image: planes × rows
    rows = start_rows(win.out[0], n * planes, PARTITIONS)
    plan = (forward_plan(win, pool.dtype, pool.op, PARTITIONS, rows, gather=pool.gather is not None)
            if pool.forward else
            Scatter.of(win, pool.dtype, pool.dtype, pool.init or 0.0).plan(PARTITIONS, rows))
    small = -(-SAMPLE_BANDS // (plan.bands * planes))   # (tiles of bands repeat per column block and channel chunk)
    images = n if n <= 2 * small else 3 * small
    windows = 1 if pool.forward else win.depth.lead + 1      # the gradient's depth windows a band
    ops = (math.prod(pool.size) * pool.depth.size * windows * plan.blocks
           * -(-images * planes * plan.bands // PARTITIONS) * -(-pool.shape[3] // plan.chunk))
    if ops > MAX_TAP_OPS:
        raise KernelError(f"a {pool.size} window over {pool.shape}: about {ops} tap instructions to trace",
                          where="compiler.poolgen", hint=f"the step keeps the analytic cost above {MAX_TAP_OPS}")
    if n <= 2 * small:
        return _timed(target, pool)
    fixed = replace(pool, rows=rows)
    a = _timed(target, fixed.with_images(small))
    b = _timed(target, fixed.with_images(2 * small))
    return extrapolate(a, b, linear_fit(small, 2 * small, n))


@lru_cache(maxsize=256)
def _timed(target: str, pool: Pool) -> TileTime:
    import trnsim
    from trnsim.kernels.pool import Window, pool_gather_kernel, pool_grad_kernel, pool_kernel

    n, h, w, c = pool.shape
    spec: Any = trnsim.TensorSpec((n * pool.depth.planes, h, w, c), pool.dtype)     # shapes, no data: timing only
    if pool.gather is not None:
        return time_kernel(pool_gather_kernel, spec, spec, target=target, size=pool.size, stride=pool.stride,
                           pad=pool.pad, dilation=pool.dilation, select=pool.select, init=pool.init,
                           tangent_init=pool.gather, rows=pool.rows, depth=pool.depth)
    if pool.select is None:
        return time_kernel(pool_kernel, spec, target=target, size=pool.size, stride=pool.stride, pad=pool.pad,
                           dilation=pool.dilation, op=pool.op, init=pool.init, rows=pool.rows, depth=pool.depth)
    oh, ow = Window(pool.shape, pool.size, pool.stride, pool.pad, pool.dilation).out
    source: Any = trnsim.TensorSpec((n * pool.depth.out, oh, ow, c), pool.dtype)
    return time_kernel(pool_grad_kernel, spec, source, target=target, size=pool.size, stride=pool.stride,
                       pad=pool.pad, select=pool.select, init=pool.init or 0.0, rows=pool.rows, depth=pool.depth)


def clear_memo() -> None:
    """Forget every timed pool kernel and its trace."""
    from trnsim.kernels.pool import pool_gather_kernel, pool_grad_kernel, pool_kernel

    _timed.cache_clear()
    for kernel in (pool_kernel, pool_grad_kernel, pool_gather_kernel):
        kernel.forget_traces()
