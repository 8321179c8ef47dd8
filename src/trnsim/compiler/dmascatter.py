"""The general scatter kernel: any single-operand ``stablehlo.scatter`` whose combiner the chip computes exactly
(replacement, add, max, min, multiply), with update windows, inserted and batching dims, any index vector dim,
permuted ``scatter_dims_to_operand_dims`` and 32- or 64-bit index tensors, as indirect DMA.

The forms ``dmaindex`` knows (embedding ``Lookup``, one-element ``Pick``) and the one-hot tile recipe come
first; this kernel takes the scatters none of them does (``WindowScatter``), which otherwise keep the analytic
cost. Its design follows ``pick_rows``:

- ``out`` is a copy of the operand over the DMA queues, viewed flat as ``[size, 1]`` (one element a "row").
- The update elements, in row-major order, are cut into tiles of at most 128 partitions. A partition's flat
  operand address is ``static + Σ_k clamp(idx_k, 0, dim_k - window_k) · stride_k``: ``static`` (the element's
  offset in its window plus the batching dims' offset) and the index vector's row are affine in the digits of
  the element's row-major position ``u``, computed once for every tile on VectorE from an iota of ``u``
  (mixed radix by ``mod``/``div``, exact integers in fp32); the index vectors are DMA'd per tile (a load when
  the tile's rows are an arithmetic run, else an indirect gather of rows). Addresses count from the start of the
  view of ``out`` the tile can reach, so they stay below ``EXACT`` (the fp32 ALU).
- A window is applied only when every index component is in range before the clamp (StableHLO skips the whole
  window otherwise); a 64-bit component is its two 32-bit words, low first (the chip has no 64-bit datapath,
  ``reference/neuron.md`` §1.5: "INT64 is always downcast"), valid when the high word is 0 and the low one, read
  as uint32, is at most the limit.
- add of fp32/bf16: ``dma_scatter_add`` of ``where(valid, update, -0.0)``: the DMA's read-add-write computes
  in fp32 and rounds per element (BF16/FP32 only, no integers, §1.4/§1.5), and adding -0.0 leaves every value,
  ±0 and NaN included. Repeats accumulate in partition order and the tiles in order, so tiles may mix windows.
- everything else: ``dma_gather`` the old values at the addresses, combine on VectorE, ``where(valid, new,
  old)``, ``dma_scatter`` back; an invalid window rewrites what it read. A read-modify-write tile must not hold
  two partitions of one address, so its tiles are runs of one window: the update's trailing window dims
  (``run`` elements), cut at 128.

Order: each tile's indirect DMAs address the whole view they can reach (``dma_gather`` reads its table's box,
``dma_scatter``/``dma_scatter_add`` write it, ``dsl.deps``), so the DSL makes a tile's gather wait for every
earlier scatter of an overlapping view on another queue (semaphores in the program), and DMAs on one queue
complete in order; updates are therefore applied in the interpreter's row-major order, duplicates included.

Indirect DMA runs on the software DGE (descriptors made at run time; the hardware DGE does no indirect
gather/scatter, §1.3), one descriptor per element: small payloads are overhead-bound (§1.2, §2.6), by design
here as for ``Pick``.

The combine (``COMBINE``, by combiner and ``KIND`` of dtype) is exact and wraps integers as StableHLO does,
though VectorE computes in fp32 (integers exact below 2**24; §1.5: "integer inputs are computed in FP32"):
the combiners of ``compiler.intmath`` (``ARITH``), shared with ``compiler.intreduce``: 8- and 16-bit integer
add and 8-bit multiply made exactly in int32, then their low bits kept (``intmath.wrapped``); 32-bit integers
split into two exact 16-bit halves, as the pool and top-k kernels split them, for add (a carry from the low
halves' sum, ``intmath.split_add``) and max/min (the difference of the high halves, signed or unsigned, times
2**16 plus that of the low ones, whose fp32 rounding keeps the sign of ``b - a``: ``intmath.split_pick``);
16- and 32-bit multiply schoolbook over byte limbs whose column sums stay below 2**19 (``intmath.limb_mul``).
The bitwise ops (``and``/``or``/``shl``/``shr``; NKI's bitwise operators, §2.4) act on exact integers
(``isa.ops.ALU_OPS``). The step keeps the analytic cost (``None``) for 64-bit operands (no
64-bit datapath), variadic or non-simple combiners, dtypes the DMA does not move, more than ``MAX_PICK_TILES``
tiles and operands of ``EXACT`` elements or more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from trnsim.compiler.dmaindex import (
    ACCUMULATE_DTYPES,
    DSL_DTYPE,
    EXACT,
    INDEX_DTYPES,
    MAX_PICK_TILES,
    PICK_DEPTH,
    QUEUES,
    WIDE_INDEX_DTYPES,
    LayoutTime,
)
from trnsim.compiler.intmath import ARITH, KIND, WORD32, Combine
from trnsim.compiler.kernel_timing import OnDemand
from trnsim.ir.graph import Node

COMBINERS: dict[str, str] = {"add": "add", "maximum": "max", "minimum": "min", "multiply": "mul"}


@dataclass(frozen=True)
class WindowScatter:
    """A scatter as per-element indirect DMA (module docstring). Update element ``u`` (row-major, digits
    ``u_j`` over ``update``) lands on the flat operand address

        static(u) + Σ_k clamp(idx[row(u), k], 0, limit_k) · stride_k,   static(u) = Σ_j u_j · terms[j][0]
                                                                      row(u)    = Σ_j u_j · terms[j][1]

    (``terms``: per update dim, its operand stride as a window or batching dim, and its index-row stride as a
    scatter dim) when every component of its index vector is in ``[0, limit_k]``. The index tensor is passed
    as ``layout = (pre, K, post, words)`` (the dims before the index vector dim, the vector, those after, and
    one or two 32-bit words); a vector dim that is not innermost is first copied to rows ``[rows, K, words]``.
    ``run``: update elements per tile chain, the update's trailing window dims (read-modify-write) or all of
    it (accumulate)."""

    combiner: str                              # "replace" | "add" | "max" | "min" | "mul"
    dtype: str                                 # DSL dtype of the operand and updates
    size: int                                  # operand elements
    update: tuple[int, ...]
    terms: tuple[tuple[int, int], ...]         # per update dim: (operand stride, index-row stride)
    index: tuple[tuple[int, int], ...]         # per component: (limit, operand stride)
    layout: tuple[int, int, int, int]          # (pre, K, post, words)
    index_dtype: str                           # DSL dtype of the index (of its words when wide)
    run: int

    @property
    def accumulate(self) -> bool:
        return self.combiner == "add" and self.dtype in ACCUMULATE_DTYPES

    @property
    def rows(self) -> int:
        pre, _, post, _ = self.layout
        return pre * post

    @property
    def reach(self) -> int:
        """The largest address offset the index components add."""
        return sum(limit * stride for limit, stride in self.index)

    def tiles(self) -> list[tuple[int, int, int, int]]:
        """``(first element u0, partitions, run a, block b)`` per tile, in order: ``u0 = a · run + 128 · b``."""
        blocks = -(-self.run // 128)
        return [(a * self.run + 128 * b, min(128, self.run - 128 * b), a, b)
                for a in range(prod(self.update) // self.run) for b in range(blocks)]

    def placement(self) -> tuple[np.ndarray, np.ndarray]:
        """``static(u)`` and ``row(u)`` for every update element (the kernel's views and load forms)."""
        digits = np.indices(self.update).reshape(len(self.update), prod(self.update))
        static = sum((digits[j] * s for j, (s, _) in enumerate(self.terms)), np.zeros(digits.shape[1], np.int64))
        row = sum((digits[j] * r for j, (_, r) in enumerate(self.terms)), np.zeros(digits.shape[1], np.int64))
        return np.asarray(static), np.asarray(row)


def window_scatter_for(node: Node) -> WindowScatter | None:
    """The ``WindowScatter`` of a scatter node, or None when the kernel cannot compute it exactly (module
    docstring) or it would take more than ``MAX_PICK_TILES`` tiles."""
    from trnsim.ir.semantics.indexing import is_replace
    from trnsim.ir.semantics.reduce import simple_combiner

    if node.op != "scatter" or len(node.inputs) != 3 or len(node.outputs) != 1:
        return None
    x, idx, upd = (v.type for v in node.inputs)
    dtype = DSL_DTYPE.get(x.dtype)
    index_dtype = INDEX_DTYPES.get(idx.dtype) or WIDE_INDEX_DTYPES.get(idx.dtype)
    if dtype is None or index_dtype is None or upd.dtype != x.dtype or x.size == 0 or upd.size == 0 or \
            x.size >= EXACT or upd.size >= EXACT:
        return None
    region = node.regions[0]
    combiner = "replace" if is_replace(region) else COMBINERS.get(simple_combiner(region) or "")
    if combiner is None or (combiner, KIND[dtype]) not in COMBINE:
        return None
    dn = node.attrs["scatter_dimension_numbers"]
    vec, to_operand = dn["index_vector_dim"], tuple(dn["scatter_dims_to_operand_dims"])
    window_dims = tuple(dn["update_window_dims"])
    batching = tuple(dn.get("input_batching_dims", ()))
    idx_batching = tuple(dn.get("scatter_indices_batching_dims", ()))
    skipped = set(dn["inserted_window_dims"]) | set(batching)
    window_operand = [d for d in range(x.rank) if d not in skipped]
    k = idx.shape[vec] if vec < idx.rank else 1
    if k == 0 or len(to_operand) != k or len(window_operand) != len(window_dims):
        return None
    strides = [prod(x.shape[d + 1:]) for d in range(x.rank)]
    window = [1] * x.rank
    for j, d in zip(window_dims, window_operand, strict=True):
        window[d] = upd.shape[j]
    scatter_dims = [j for j in range(upd.rank) if j not in window_dims]
    idx_dims = [d for d in range(idx.rank) if d != vec]
    if len(scatter_dims) != len(idx_dims):
        return None
    row_strides = [prod(idx.shape[d] for d in idx_dims[i + 1:]) for i in range(len(idx_dims))]
    terms = [(0, 0)] * upd.rank
    for j, d in zip(window_dims, window_operand, strict=True):
        terms[j] = (strides[d], 0)
    for i, j in enumerate(scatter_dims):
        terms[j] = (0, row_strides[i])
    for op_dim, ind_dim in zip(batching, idx_batching, strict=True):
        j = scatter_dims[idx_dims.index(ind_dim)]
        terms[j] = (strides[op_dim], terms[j][1])
    index = tuple((x.shape[d] - window[d], strides[d]) for d in to_operand)
    if any(limit < 0 for limit, _ in index):
        return None
    words = 2 if idx.dtype in WIDE_INDEX_DTYPES else 1
    pre, post = prod(idx.shape[:vec]), prod(idx.shape[vec + 1:])
    suffix = upd.rank
    while suffix > 0 and suffix - 1 in window_dims:
        suffix -= 1
    run = upd.size if combiner == "add" and dtype in ACCUMULATE_DTYPES else prod(upd.shape[suffix:])
    plan = WindowScatter(combiner, dtype, x.size, tuple(upd.shape), tuple(terms), index, (pre, k, post, words),
                         index_dtype, run)
    if len(plan.tiles()) > MAX_PICK_TILES or pre * post * k * words >= EXACT:
        return None
    return plan


def _affine(values: np.ndarray) -> tuple[int, int] | None:
    """``(first, step)`` when ``values`` is an arithmetic run with step ≥ 0, else None."""
    step = int(values[1] - values[0]) if len(values) > 1 else 0
    if step < 0 or np.any(values != values[0] + step * np.arange(len(values))):
        return None
    return int(values[0]), step


def _scatter_kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor
    from trnsim.kernels.layout import prefetch

    @dsl.kernel
    def window_scatter(x: Tensor, idx: Tensor, upd: Tensor, *, plan: WindowScatter) -> Tensor:
        """``plan``'s scatter (``WindowScatter``): ``x`` and the output flat ``[size, 1]``, ``idx`` as ``(pre,
        K, post, words)``, ``upd`` flat ``[U, 1]``.

        NOTE: the addresses' static parts and index rows of every tile are made at once over ``[128, runs,
        blocks]`` (an iota of ``u`` split into digits); per tile, VectorE clamps the index components and
        checks them, and the tile's DMAs go to the view of ``out`` its addresses can reach. Index vectors,
        updates and addresses are made ``PICK_DEPTH`` tiles ahead: the sync engine issues DMAs in program
        order, and a read-modify-write tile's gather waits for the previous tile's scatter."""
        pre, k, post, words = plan.layout
        dt, accumulate = plan.dtype, plan.accumulate
        out = dsl.hbm_tensor((plan.size, 1), dt, name="scattered")
        for a, n in _pieces(plan.size):
            dsl.dma_copy(out[a : a + n], x[a : a + n])
        if post == 1:
            table = idx[:, :, 0, :]
        else:       # the index vector dim is not innermost: its vectors copied to rows first
            table = dsl.hbm_tensor((pre * post, k, words), idx.dtype, name="index_rows")
            dsl.dma_copy(table, idx.permute(0, 2, 1, 3))
        tiles = plan.tiles()
        runs, blocks = prod(plan.update) // plan.run, -(-plan.run // 128)
        static, row = _placement_tiles(plan, runs, blocks)
        rows = dsl.tensor_scalar(row, "add", 0.0, dtype="int32")
        static_all, row_all = plan.placement()
        drop = dsl.full((128, 1), -0.0, dt) if accumulate else None

        def prepare(tile: tuple[int, int, int, int]) -> Callable[[], tuple[Tensor, Tensor, Tensor]]:
            u0, p, a, b = tile

            def make() -> tuple[Tensor, Tensor, Tensor]:
                values = dsl.load(upd[u0 : u0 + p])
                rows_of = _affine(row_all[u0 : u0 + p])
                if rows_of is None:
                    ids = dsl.dma_gather(dsl.sbuf((p, k, words), idx.dtype), table, rows[:p, a, b : b + 1])
                elif rows_of[1] == 0:
                    ids = dsl.load(table[rows_of[0] : rows_of[0] + 1].broadcast_to((p, k, words)))
                else:
                    r0, step = rows_of
                    ids = dsl.load(table[r0 : r0 + step * (p - 1) + 1 : step])
                flat, valid = static[:p, a, b : b + 1], None
                for c, (limit, stride) in enumerate(plan.index):
                    clamped, ok = _component(ids, c, words, limit, valid)
                    flat = dsl.tensor_scalar(clamped, "mul", float(stride), "add", flat, dtype="fp32")
                    valid = ok
                assert valid is not None
                lo = int(static_all[u0 : u0 + p].min())
                address = dsl.tensor_scalar(flat, "add", float(-lo), dtype="int32")
                if drop is not None:
                    values = dsl.where(valid, values, drop[:p])
                return address, valid, values
            return make

        def view(tile: tuple[int, int, int, int]) -> Tensor:
            u0, p, _, _ = tile
            part = static_all[u0 : u0 + p]
            lo, hi = int(part.min()), int(part.max()) + plan.reach
            return out[lo : hi + 1]

        for tile, (address, valid, values) in zip(tiles, prefetch([prepare(t) for t in tiles], PICK_DEPTH),
                                                  strict=True):
            target = view(tile)
            if accumulate:
                dsl.dma_scatter_add(target, values, address)
                continue
            old = dsl.dma_gather(dsl.sbuf((tile[1], 1), dt), target, address)
            dsl.dma_scatter(target, _apply(plan, old, values, valid), address)
        return out

    return window_scatter


def _pieces(n: int) -> list[tuple[int, int]]:
    """``[0, n)`` in at most ``QUEUES`` pieces: the operand's copy into the output over the queues."""
    size = -(-n // QUEUES)
    return [(a, min(size, n - a)) for a in range(0, n, size)]


def _placement_tiles(plan: WindowScatter, runs: int, blocks: int) -> tuple[Any, Any]:
    """``static(u)`` and ``row(u)`` as fp32 tiles ``[128, runs, blocks]`` (partition ``p`` of tile ``(a, b)``
    is ``u = a · run + 128 · b + p``): an iota of ``u`` split into its digits over the update shape, last dim
    first (``digit = q mod n``, ``q = (q - digit) / n``: exact integers below 2**24 in fp32)."""
    from trnsim import dsl

    shape = (128, runs, blocks)
    q = dsl.iota(shape, "fp32", channel_multiplier=1, steps=[plan.run, 128])
    static = dsl.zeros(shape, "fp32")
    row = dsl.zeros(shape, "fp32")
    for j in range(len(plan.update) - 1, -1, -1):
        n, (s, r) = plan.update[j], plan.terms[j]
        if n == 1:
            continue
        digit = q if j == 0 else dsl.tensor_scalar(q, "mod", float(n))
        for acc, stride in ((static, s), (row, r)):
            if stride:
                dsl.tensor_tensor(acc, dsl.tensor_scalar(digit, "mul", float(stride)), "add", out=acc)
        if j > 0:
            q = dsl.tensor_scalar(dsl.tensor_tensor(q, digit, "sub"), "div", float(n))
    return static, row


def _component(ids: Any, c: int, words: int, limit: int, valid: Any) -> tuple[Any, Any]:
    """Index component ``c`` of a tile's vectors clamped to ``[0, limit]`` (fp32) and the validity so far
    times its own (1.0 when in range before the clamp). A 64-bit component is its low word, read as uint32,
    and its high word: ``clamp(high · 2**24 + min(low, limit))`` is exact (``dmaindex._data_offset``), and it
    is in range when ``high == 0`` and ``low ≤ limit`` (the fp32 rounding of a large low word is monotone and
    ``limit + 1`` is exact, so the comparison is too)."""
    from trnsim import dsl

    if words == 1:
        one = ids[:, c, 0:1]
        clamped = dsl.tensor_scalar(one, "max", 0.0, "min", float(limit), dtype="fp32")
        if valid is None:
            return clamped, dsl.tensor_scalar(clamped, "eq", one, dtype="fp32")
        return clamped, dsl.tensor_scalar(clamped, "eq", one, "mul", valid, dtype="fp32")
    low, high = ids[:, c, 0:1].bitcast("uint32"), ids[:, c, 1:2]
    least = dsl.tensor_scalar(low, "min", float(limit), dtype="fp32")
    wide = dsl.tensor_scalar(high, "mul", float(EXACT), "add", least, dtype="fp32")
    clamped = dsl.tensor_scalar(wide, "max", 0.0, "min", float(limit), dtype="fp32")
    below = dsl.tensor_scalar(low, "le", float(limit), dtype="fp32")
    ok = dsl.tensor_scalar(high, "eq", 0.0, "mul", below, dtype="fp32")
    return clamped, ok if valid is None else dsl.tensor_tensor(ok, valid, "mul")


def _apply(plan: WindowScatter, old: Any, values: Any, valid: Any) -> Any:
    """What a read-modify-write tile writes back: ``combiner(old, update)`` where the window is valid, else
    ``old``, in the operand's dtype (``COMBINE``; one rounding: the interpreter's per-application rounding).
    32-bit integers are selected by bits (``old ^ ((new ^ old) & mask)``), as the fp32 select would round them."""
    from trnsim import dsl

    dt = plan.dtype
    new, valid = COMBINE[plan.combiner, KIND[dt]](old, values, valid, plan.combiner, dt)
    if dt in WORD32:
        mask = dsl.tensor_scalar(valid, "mul", -1.0, dtype="int32")
        return dsl.tensor_scalar(dsl.tensor_tensor(new, old, "xor"), "and", mask, "xor", old)
    return dsl.where(valid, new, old)


def _replace(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """The updates themselves (selected by bits for 32-bit integers: ``_apply``)."""
    return values, valid


# (combiner, KIND) → how a read-modify-write tile combines its updates with the old values, ``(new, valid)``
# (``valid``: where ``new`` is written; ``intmath.ARITH``'s exact combiners); a pair not here keeps the analytic cost
COMBINE: dict[tuple[str, str], Combine] = {
    **{("replace", kind): _replace for kind in ("float", "byte", "short", "word")}, **ARITH,
}


scatter_kernel = OnDemand(lambda: _scatter_kernel())   # the general scatter kernel, for timing and tests


def scatter_specs(plan: WindowScatter) -> list[Any]:
    """The kernel's arguments as shape descriptions: ``x``, ``idx``, ``upd``."""
    import trnsim

    spec: Any = trnsim.TensorSpec
    return [spec((plan.size, 1), plan.dtype), spec(plan.layout, plan.index_dtype),
            spec((prod(plan.update), 1), plan.dtype)]


@lru_cache(maxsize=256)
def window_scatter_time(target: str, plan: WindowScatter) -> LayoutTime:
    import trnsim

    return LayoutTime.of(trnsim.run_kernel(scatter_kernel(), *scatter_specs(plan), target=target, timing=True,
                                           plan=plan))


def clear_memo() -> None:
    """Forget the timed scatter kernels."""
    window_scatter_time.cache_clear()
    scatter_kernel.forget()
