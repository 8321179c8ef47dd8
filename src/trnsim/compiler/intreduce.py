"""Exact integer reductions: ``reduce`` and ``reduce_window`` along one axis whose body is ``multiply`` of 8-,
16- or 32-bit integers or ``add``/``maximum``/``minimum`` of 32-bit ones (``jnp.prod``, ``jnp.sum``/``max``/
``min`` of int32 and uint32, ``jnp.cumprod``, ``jnp.cumsum``, ``lax.cummax``/``cummin``), as one VectorE kernel
(``int_reduce``) that computes them bit for bit.

StableHLO wraps integer add and multiply modulo 2**N; VectorE computes in fp32 (``reference/neuron.md``
§1.5: "integer inputs are computed in FP32"), exact only below 2**24: a product of eight 8s already leaves
it, as does any sum or comparison of 32-bit values above it. So the tile recipes (``tilegen.recipe.PRODUCTS``;
32-bit sums and maxima only of values ``tilegen.ranges`` bounds) and the pool kernels (``poolgen``) leave these
forms to this kernel. This kernel combines with the exact
combiners of ``compiler.intmath`` (``ARITH``: 16-bit halves for 32-bit add/max/min, byte limbs for 16- and
32-bit products, int32 then a mask for 8-bit products), shared with the scatter kernel.

Integer add and multiply modulo 2**N, max and min are associative and commutative, so the order of
combination does not change a bit of the result; the kernel combines in trees of whole tiles:

- ``reduce``: the operand is loaded (strided DMA access patterns permute its axes) with one kept axis on the
  partitions, the other kept axes and then the reduced ones along the free dimension; each reduced axis,
  padded with the combiner's identity up to a power of two, is halved ``log2`` times
  (``t[:h] ⊕ t[h:2h]``), the last first. A reduced part larger than ``MAX_FREE`` elements a partition is
  cut into chunks along its first reduced axis, their results combined in turn. With no kept axis (a whole
  reduction), the reduced elements are split ``[a, b]`` over ``a ≤ 128`` partitions (``a`` the largest
  divisor of their count) and the partitions' results combined in a second pass through a scratch tensor
  (a DMA turns the column into a row). A non-identity init is folded into the result.
- ``reduce_window``: the windowed axis goes along the free dimension, padded with the init (the combiner's
  identity for add and multiply; any init for max and min, folded once more at the end), and out[j] =
  ⊕ xp[j·s .. j·s + W - 1] is made from a sparse table ``P_k[i] = ⊕ xp[i .. i + 2**k - 1]``
  (``P_{k+1}[i] = P_k[i] ⊕ P_k[i + 2**k]``): one combine of whole rows a level, then one more per set bit of
  ``W`` (two pieces for max and min, which may overlap).

The other kept axes are cut into chunks that keep a tile within ``MAX_FREE`` elements a partition (the
32-bit product's byte limbs keep about a dozen tiles of that size live). The step keeps the analytic cost
(``None``) for float and 64-bit types (no 64-bit datapath, §1.5), non-simple or variadic bodies, base or
window dilation, windows along more than one axis, negative padding, an add or multiply window from a
non-identity init, an init the fp32 memset cannot write exactly, more than ``MAX_GROUPS`` axes after merging
adjacent ones of one role, a windowed axis or innermost reduced axes longer than ``MAX_FREE``, and more than
``MAX_OPS`` estimated instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from trnsim.compiler.intmath import ARITH, KIND, PICKS
from trnsim.compiler.kernel_timing import OnDemand, TileTime, time_kernel
from trnsim.ir.graph import Node, Value
from trnsim.ir.types import INTS, isa_dtypes
from trnsim.isa.dtypes import get_dtype, int_range

DSL_DTYPE = isa_dtypes(*INTS)
COMBINERS = {"add": "add", "maximum": "max", "minimum": "min", "multiply": "mul"}
# the forms this kernel takes (the others have a kernel: tilegen's reduce, poolgen's pool for 8/16-bit windows)
WINDOW_OPS: dict[str, frozenset[str]] = {"mul": frozenset(KIND), "add": frozenset({"int32", "uint32"}),
                                         "max": frozenset({"int32", "uint32"}), "min": frozenset({"int32", "uint32"})}
REDUCE_OPS = WINDOW_OPS      # (reduce over dims: the same combiners and dtypes)
# instructions of one combine of two tiles (``intmath``: limbs, columns, bytes, ors, carries; halves; select)
COMBINE_OPS: dict[tuple[str, str], int] = {("mul", "word"): 28, ("mul", "short"): 11, ("mul", "byte"): 2,
                                           ("add", "word"): 7, ("max", "word"): 9, ("min", "word"): 9}
PARTITIONS = 128
# NOTE: elements a partition in one tile: a 32-bit product's limbs keep about a dozen tiles of the tree's
# widest level live (8 KiB each at 2048 int32), well inside the 192-256 KiB a partition of trn1-trn3 (neuron.md
# §0: 24-32 MiB of SBUF a core, 128 partitions)
MAX_FREE = 2048
MAX_GROUPS = 5           # merged axes: a partition axis and at most four free ones (an access pattern's limit)
MAX_OPS = 20_000         # estimated instructions to trace; above, the step keeps the analytic cost
MIN_SPLIT = 8            # a whole reduction is split over partitions when they are at least this many


def identity(op: str, dtype: str) -> int:
    """The value ``op`` leaves unchanged: 0, 1, the type's least value for max and largest for min."""
    lo, hi = int_range(get_dtype(dtype))
    return {"add": 0, "mul": 1, "max": lo, "min": hi}[op]


@dataclass(frozen=True)
class IntReduce:
    """The kernel's arguments: ``op`` (add/max/min/mul) over the DSL integer ``dtype``; the operand's
    ``shape`` with adjacent axes of one role merged (reduced or kept; windowed or not) and size-1 axes
    dropped; ``axes`` the reduced axes (``reduce``) or the windowed one (``reduce_window``: ``window`` its
    ``(size, stride, pad low, pad high)``); ``init`` the start (the padding of a window)."""

    op: str
    dtype: str
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    init: int
    window: tuple[int, int, int, int] | None = None

    @property
    def identity(self) -> int:
        return identity(self.op, self.dtype)

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.shape)) if i not in self.axes)

    @property
    def split(self) -> bool:
        """A whole reduction, its elements split over partitions (``shape`` is then ``(a, b)``, both reduced)."""
        return self.window is None and len(self.shape) == 2 and not self.kept

    @property
    def part(self) -> int | None:
        """The axis on the partitions: the longest kept one (the last of equals), the split's first."""
        if self.split:
            return 0
        kept = self.kept
        return max(kept, key=lambda i: (self.shape[i], i)) if kept else None

    @property
    def free(self) -> tuple[int, ...]:
        """The kept axes along the free dimension, in order."""
        return tuple(i for i in self.kept if i != self.part)

    @property
    def out_len(self) -> int:
        assert self.window is not None
        size, stride, lo, hi = self.window
        return (self.shape[self.axes[0]] + lo + hi - size) // stride + 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The kernel's output: the kept axes (``(1,)`` if none), or the operand's with the window applied."""
        if self.window is not None:
            return tuple(self.out_len if i == self.axes[0] else n for i, n in enumerate(self.shape))
        return tuple(self.shape[i] for i in self.kept) or (1,)

    def reduced(self, chunk: int | None = None) -> list[int]:
        """The padded lengths of the reduced axes in a tile (powers of two; the first cut to ``chunk``), or
        the windowed axis's padded length."""
        if self.window is not None:
            _, _, lo, hi = self.window
            return [self.shape[self.axes[0]] + lo + hi]
        axes = [i for i in self.axes if i != self.part]
        lengths = [self.shape[i] for i in axes]
        if chunk is not None and lengths:
            lengths[0] = chunk
        return [1 << (n - 1).bit_length() for n in lengths]

    def chunks(self) -> tuple[int, int]:
        """``(first reduced axis chunk, first free kept axis chunk)`` that keep a tile within ``MAX_FREE``
        elements a partition (0 when no such chunk exists)."""
        axes = [i for i in self.axes if i != self.part] if self.window is None else list(self.axes)
        r0 = self.shape[axes[0]] if axes else 1
        if self.window is None and axes:            # (powers of two: chunks of MAX_FREE // inner need no padding)
            r0 = max(1, min(r0, MAX_FREE // prod(self.reduced()[1:])))
        width = prod(self.reduced(r0 if self.window is None else None))
        free = [self.shape[i] for i in self.free]
        f0 = free[0] if free else 1
        rest = prod(free[1:]) * width
        while f0 > 1 and f0 * rest > MAX_FREE:
            f0 = -(-f0 // 2)
        return (r0, f0) if f0 * rest <= MAX_FREE else (0, 0)

    def estimate(self) -> int:
        """About how many instructions the kernel traces."""
        r0, f0 = self.chunks()
        part = self.part
        blocks = -(-self.shape[part] // PARTITIONS) if part is not None else 1
        free = [self.shape[i] for i in self.free]
        tiles = blocks * (-(-free[0] // f0) if free else 1)
        per = COMBINE_OPS.get((self.op, KIND[self.dtype]), 1)
        if self.window is not None:
            size = self.window[0]
            combines = size.bit_length() - 1 + size.bit_count()
            return tiles * (combines * per + 3)
        axes = [i for i in self.axes if i != part]
        cut = -(-self.shape[axes[0]] // r0) if axes else 1
        levels = sum(n.bit_length() - 1 for n in self.reduced(r0))
        second = (PARTITIONS - 1).bit_length() * per if self.split else 0
        return tiles * cut * ((levels + 1) * per + 3) + second


def _scalar_int(v: Value) -> int | None:
    """The value of a one-element constant (through reshapes and broadcasts of one element: jax's init)."""
    src = v.producer
    while src is not None and src.op in ("broadcast_in_dim", "reshape") and src.inputs[0].type.size == 1:
        src = src.inputs[0].producer
    value = np.asarray(src.attrs["value"]) if src is not None and src.op == "constant" else None
    if value is None or value.dtype.kind not in "iu" or v.type.size != 1:
        return None
    return int(value.reshape(-1)[0])


def _writable(value: int, dtype: str) -> bool:
    """The fp32 memset writes ``value`` exactly: fp32-exact, or a type limit (the write saturates to it)."""
    lo, hi = int_range(get_dtype(dtype))
    return lo <= value <= hi and (float(np.float32(value)) == value or value in (lo, hi))


def _merged(shape: tuple[int, ...], roles: list[bool]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``shape`` without size-1 axes, adjacent axes of one role merged, and the positions of the ``True``
    ones (a reshape of the row-major operand: free in HBM)."""
    dims: list[int] = []
    flags: list[bool] = []
    for n, role in zip(shape, roles, strict=True):
        if n == 1:
            continue
        if flags and flags[-1] == role:
            dims[-1] *= n
        else:
            dims.append(n)
            flags.append(role)
    return tuple(dims), tuple(i for i, f in enumerate(flags) if f)


def _reduce(node: Node) -> IntReduce | None:
    from trnsim.ir.semantics.reduce import simple_combiner

    x, init_v = node.inputs
    dtype = DSL_DTYPE.get(x.type.dtype)
    op = COMBINERS.get(simple_combiner(node.regions[0]) or "")
    init = _scalar_int(init_v)
    if dtype is None or op is None or dtype not in REDUCE_OPS[op] or init is None or not _writable(init, dtype) or \
            node.out.type.dtype != x.type.dtype:
        return None
    dims = set(node.attrs["dimensions"])
    shape, axes = _merged(tuple(x.type.shape), [d in dims for d in range(x.type.rank)])
    if not axes:
        return None                     # nothing reduced: a copy (or a reduction over size-1 axes)
    if len(axes) == len(shape):         # a whole reduction: its elements split over partitions
        (n,) = shape
        a = max(d for d in range(1, PARTITIONS + 1) if n % d == 0)
        if a >= MIN_SPLIT:
            shape, axes = (a, n // a), (0, 1)
    return IntReduce(op, dtype, shape, axes, init)


def _reduce_window(node: Node) -> IntReduce | None:
    from trnsim.ir.semantics.reduce import simple_combiner

    x, init_v = node.inputs
    dtype = DSL_DTYPE.get(x.type.dtype)
    op = COMBINERS.get(simple_combiner(node.regions[0]) or "")
    init = _scalar_int(init_v)
    if dtype is None or op is None or dtype not in WINDOW_OPS[op] or init is None or \
            not _writable(init, dtype) or node.out.type.dtype != x.type.dtype:
        return None
    a, rank = node.attrs, x.type.rank
    size = [int(s) for s in a["window_dimensions"]]
    stride = [int(s) for s in a.get("window_strides") or [1] * rank]
    pads = a.get("padding")
    pad = [(0, 0)] * rank if pads is None else [(int(lo), int(hi)) for lo, hi in np.asarray(pads).reshape(rank, 2)]
    dilations = [*(a.get("base_dilations") or []), *(a.get("window_dilations") or [])]
    windowed = [d for d in range(rank) if (size[d], stride[d], pad[d]) != (1, 1, (0, 0))]
    if any(int(d) != 1 for d in dilations) or len(windowed) != 1 or any(p < 0 for lr in pad for p in lr):
        return None
    (d,) = windowed
    lo, hi = pad[d]
    if op in ("add", "mul") and init != identity(op, dtype):
        return None                     # (each padding element would be the init: counted once per window)
    if x.type.shape[d] + lo + hi < size[d] or x.type.size == 0:
        return None
    shape, axes = _merged(tuple(x.type.shape), [i == d for i in range(rank)])
    if not axes:                        # the windowed axis has size 1 (padding makes the window): kept where it
        before, after = prod(x.type.shape[:d]), prod(x.type.shape[d + 1:])   # is, between the axes around it
        shape = (*((before,) if before > 1 else ()), 1, *((after,) if after > 1 else ()))
        axes = (int(before > 1),)
    return IntReduce(op, dtype, shape, axes, init, (size[d], stride[d], lo, hi))


def int_reduce_for(node: Node) -> IntReduce | None:
    """The kernel's arguments if it computes ``node`` (module docstring); else None."""
    form = {("reduce", 2): _reduce, ("reduce_window", 2): _reduce_window}.get((node.op, len(node.inputs)))
    plan = form(node) if form is not None and len(node.regions) == 1 and len(node.outputs) == 1 else None
    if plan is None or len(plan.shape) > MAX_GROUPS or plan.chunks() == (0, 0) or \
            (plan.window is not None and plan.reduced()[0] > MAX_FREE) or plan.estimate() > MAX_OPS:
        return None
    return plan


def combine(a: Any, b: Any, op: str, dt: str) -> Any:
    """``a ⊕ b`` exactly (``intmath.ARITH``), a max/min of 32-bit integers selected by bits."""
    from trnsim.compiler.intmath import select_bits

    fn = ARITH[op, KIND[dt]]
    new, pick = fn(a, b, 1.0, op, dt)
    return select_bits(a, new, pick) if fn in PICKS else new


def _at(t: Any, axis: int, index: slice) -> Any:
    """``t`` sliced along its (tile) ``axis``."""
    key: list[slice] = [slice(None)] * len(t.shape)
    key[axis] = index
    return t[tuple(key)]


def _tree(t: Any, axes: range, op: str, dt: str) -> Any:
    """Each of ``axes`` (power-of-two lengths) halved to 1, the last first: ``t[:h] ⊕ t[h:2h]``."""
    for axis in reversed(axes):
        while t.shape[axis] > 1:
            h = t.shape[axis] // 2
            t = combine(_at(t, axis, slice(0, h)), _at(t, axis, slice(h, 2 * h)), op, dt)
    return t


def _windowed(t: Any, plan: IntReduce) -> Any:
    """out[j] = ⊕ t[.., j·s .. j·s + W - 1] along the last axis, from a sparse table (module docstring)."""
    assert plan.window is not None
    size, stride, _, _ = plan.window
    axis, top, n = len(t.shape) - 1, size.bit_length() - 1, plan.out_len
    idempotent = plan.op in ("max", "min")
    wanted = {top} if idempotent else {b for b in range(top + 1) if size >> b & 1}
    table: dict[int, Any] = {0: t}
    level = t
    for k in range(1, top + 1):
        width = level.shape[axis] - (1 << (k - 1))
        level = combine(_at(level, axis, slice(0, width)), _at(level, axis, slice(1 << (k - 1), None)), plan.op,
                        plan.dtype)
        if k in wanted:
            table[k] = level
    pieces: list[tuple[int, int]] = []          # (level, offset)
    if idempotent:
        pieces = [(top, 0)] + ([(top, size - (1 << top))] if size != 1 << top else [])
    else:
        offset = 0
        for b in sorted(wanted, reverse=True):
            pieces.append((b, offset))
            offset += 1 << b
    acc = None
    for b, offset in pieces:
        piece = _at(table[b], axis, slice(offset, offset + stride * (n - 1) + 1, stride))
        acc = piece if acc is None else combine(acc, piece, plan.op, plan.dtype)
    return acc


def _pass(xv: Any, ov: Any, plan: IntReduce, nfree: int, fold: bool) -> None:
    """One pass of the kernel: ``xv`` ``[P, F.., R..]`` (``R``: the reduced axes, or the windowed one) into
    ``ov`` ``[P, F.., 1..]`` (a window's: ``[P, F.., n_out]``), in blocks of 128 partitions, chunks of the
    first free axis and (a reduction's) of the first reduced one (``IntReduce.chunks``)."""
    from trnsim import dsl

    op, dt = plan.op, plan.dtype
    r0, f0 = plan.chunks()
    rows, free, red = xv.shape[0], list(xv.shape[1 : 1 + nfree]), list(xv.shape[1 + nfree :])
    for p0 in range(0, rows, PARTITIONS):
        p = min(PARTITIONS, rows - p0)
        for c0 in range(0, free[0] if free else 1, f0):
            span = [slice(c0, min(c0 + f0, free[0]))] if free else []
            shape = [min(f0, free[0] - c0), *free[1:]] if free else []
            block = (slice(p0, p0 + p), *span)
            acc = None
            if plan.window is not None:
                lo, (length,), (n,) = plan.window[2], plan.reduced(), red
                t = dsl.sbuf((p, *shape, length), dt)
                if length != n:
                    dsl.memset(t, float(plan.init))             # the padding: the init
                dsl.load(t[..., lo : lo + n], xv[block])
                acc = _windowed(t, plan)
            for q0 in range(0, red[0], r0) if plan.window is None else ():
                qc = min(r0, red[0] - q0)
                real = [qc, *red[1:]]
                lengths = [1 << (n - 1).bit_length() for n in real]
                t = dsl.sbuf((p, *shape, *lengths), dt)
                if real != lengths:
                    dsl.memset(t, float(plan.identity))         # up to powers of two: the identity
                inside = tuple(slice(0, n) for n in real)
                dsl.load(t[(slice(None),) * (1 + nfree) + inside],
                         xv[(*block, *([slice(None)] * (nfree - len(span))), slice(q0, q0 + qc))])
                part = _tree(t, range(1 + nfree, len(t.shape)), op, dt)
                acc = part if acc is None else combine(acc, part, op, dt)
            assert acc is not None
            if fold:
                acc = combine(acc, dsl.full(acc.shape, float(plan.init), dt), op, dt)
            dsl.store(ov[block], acc)


def _kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor

    @dsl.kernel
    def int_reduce(x: Tensor, *, plan: IntReduce) -> Tensor:
        """``plan``'s reduction (``IntReduce``) of ``x`` (of ``plan.shape``) into ``plan.out_shape``: the
        operand permuted to ``[part, free.., reduced..]`` (``_pass``); a split whole reduction in two passes,
        the partitions' results through a scratch tensor turned into a row."""
        out = dsl.hbm_tensor(plan.out_shape, plan.dtype, name="reduced")
        part, free = plan.part, list(plan.free)
        fold = plan.init != plan.identity
        axes = [i for i in plan.axes if i != part]
        order = ([part] if part is not None else []) + free + axes
        xv = x.permute(*order) if part is not None else x.permute(*order)[None]
        if plan.window is not None:
            ov = out.permute(*order) if part is not None else out.permute(*order)[None]
            _pass(xv, ov, plan, len(free), fold)
        elif plan.split:
            partial = dsl.hbm_tensor((plan.shape[0], 1), plan.dtype, name="partials")
            _pass(xv, partial, plan, 0, False)
            whole = IntReduce(plan.op, plan.dtype, (plan.shape[0],), (0,), plan.init)
            _pass(partial.T, out[:, None], whole, 0, fold)      # [1, a]: the partitions' results along a row
        else:
            kept = plan.kept
            ov = out.permute(*[kept.index(i) for i in [part, *free]]) if part is not None else out
            _pass(xv, ov[(..., *([None] * len(axes)))], plan, len(free), fold)
        return out

    return int_reduce


int_reduce_kernel = OnDemand(lambda: _kernel())   # the kernel (``int_reduce``), shared by timing and tests


def int_reduce_spec(plan: IntReduce) -> Any:
    """The kernel's argument as a shape description: ``x`` of ``plan.shape`` (the operand reshaped)."""
    import trnsim

    spec: Any = trnsim.TensorSpec
    return spec(plan.shape, plan.dtype)


@lru_cache(maxsize=256)
def int_reduce_time(target: str, plan: IntReduce) -> TileTime:
    """The kernel's time (timing-only: no data)."""
    return time_kernel(int_reduce_kernel(), int_reduce_spec(plan), target=target, plan=plan)


def clear_memo() -> None:
    """Forget the timed kernels and their traces."""
    int_reduce_time.cache_clear()
    int_reduce_kernel.forget()
