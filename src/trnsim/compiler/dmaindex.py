"""Generated DMA kernels for indexed access: dynamic slices and updates whose starts are data, and gathers
and scatter-adds, timed by the instruction-level model (the layout kernels and their shared entry point,
``layout_copy``, are ``dmagen``'s).

A ``dynamic_slice`` whose start indices are data is a row gather (``GatherPlan``): the starts are DMA'd to
the partitions, clamped and scaled into a table-row offset on VectorE, and indirect DMAs read the rows (whole
contiguous runs of the slice) at that offset plus an iota. A ``dynamic_update_slice`` whose starts are data is
its mirror (``ScatterPlan``): the operand is copied into the result over the queues, then indirect writes
(``DmaScatter``: the software DGE's scatter, ``reference/neuron.md`` §1.2–1.4) put the update's rows at the
clamped offset; with constant starts it is two copies, the operand and the update into its box. Either keeps
the analytic cost (counted in ``dma_fallbacks``) only for dtypes the DMA does not move (64-bit, complex),
more data starts than the kernel has inputs, or a table of ``EXACT`` rows or more, or more than
``MAX_PICK_TILES`` scatters. A 64-bit start is read as its two 32-bit words, whose clamp is exact
(``_data_offset``).

Gathers and scatter-adds have two DMA forms. Row lookups of a ``[V, D]`` table and their gradient are the
kernel library's embedding kernels (``Lookup``). One element per row along any axis (cross-entropy's
``take_along_axis`` of the label's logit, and its gradient) is a ``Pick``: the flat address of each row's
element is computed in SBUF and one indirect DMA per tile of 128 rows gathers, or scatter-adds, those
single elements of the tensor viewed as ``[n, 1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod
from typing import TYPE_CHECKING, Any

from trnsim.compiler.kernel_timing import OnDemand
from trnsim.ir.graph import Node, Value
from trnsim.ir.types import FLOATS, INTS, isa_dtypes
from trnsim.isa.dtypes import get_dtype

if TYPE_CHECKING:
    from trnsim.compiler.dmagen import Layout

QUEUES = 16
FILL_COLS = 4096          # the constant tile a pad fills from: [128, 4096] elements of the tensor's dtype
DSL_DTYPE: dict[str, str] = isa_dtypes(*FLOATS, *INTS)
EXACT = 2**24          # the ALU computes in fp32 (isa.ops): integer addresses below this are exact
MAX_PICK_TILES = 1024  # row tiles of one pick kernel; beyond this the step keeps the analytic cost
PICK_DEPTH = 8         # tiles whose addresses (and gathers) are issued ahead: the sync engine issues DMAs in order
GATHER_ROWS = 32       # rows of one gather of a dynamic slice whose rows exceed SMALL_ROW bytes (GatherPlan)
SMALL_ROW = 512        # bytes (reference/neuron.md §1.2: below 256 B a partition, DMA is overhead-bound)
INDEX_DTYPES: dict[str, str] = {k: DSL_DTYPE[k] for k in ("i32", "ui32", "i16", "ui16", "i8", "ui8")}
WIDE_INDEX_DTYPES: dict[str, str] = {"i64": "int32", "ui64": "uint32"}   # a start's two words, as the high one
START_DTYPES: dict[str, str] = {**INDEX_DTYPES, **WIDE_INDEX_DTYPES}      # the starts of a dynamic (update) slice
ACCUMULATE_DTYPES = ("fp32", "bf16")   # DMA read-add-write is BF16/FP32 (neuron.md §1.4), no ints (§1.5)


@dataclass(frozen=True)
class LayoutTime:
    """A generated kernel's time, as the layout, pick and lookup steps report it."""

    seconds: float
    dma_bytes: int
    instructions: int
    by_engine: dict[str, int] = field(default_factory=dict[str, int])    # instructions per engine ("dma")

    @staticmethod
    def of(result: Any) -> LayoutTime:
        """The time of a ``run_kernel(..., timing=True)`` result."""
        from trnsim.compiler.kernel_timing import engine_counts
        from trnsim.sim.profile import Profile

        profile = result.profile
        assert isinstance(profile, Profile)
        return LayoutTime(profile.total_seconds, profile.dma_bytes, profile.instructions, engine_counts(profile))


@dataclass(frozen=True)
class GatherPlan:
    """A dynamic slice as gathers of whole rows of ``x`` viewed as the table ``[prod(shape[:k+1]),
    prod(shape[k+1:])]``, ``k`` the last dim the slice does not cover whole (the dims after it are whole, so
    a row is one contiguous run). The result is ``[prod(sizes[:k+1]), row]``; result row ``(i_0 .. i_k)`` is
    table row ``Σ_d (start_d + i_d) · T_d`` (``T_d = prod(shape[d+1:k+1])``, ``T_k = 1``). The partitions of
    a tile run along ``i_m``, ``m`` the last of those dims the slice takes more than one index of (after it,
    every ``i`` is 0): ``tiles`` holds, per block of ≤ 128 consecutive ``i_m`` at one ``(i_0 .. i_m-1)``, its
    first result row, rows, and the table row of its first row without the starts that are data; rows
    within a tile are ``step = T_m`` apart.

    NOTE: tiles of ``GATHER_ROWS`` rather than 128 rows when rows exceed ``SMALL_ROW`` bytes: each gather is
    one DMA on one queue, and smaller ones spread over the queues (one of 128 rows of 4 KiB would take a
    queue alone for ~16 us); tiny rows (single elements) stay 128 a gather, whose cost is its descriptors."""

    table: tuple[int, int]
    out: tuple[int, int]
    row_strides: tuple[int, ...]                 # T_d for d ≤ k
    step: int                                    # table rows between a tile's partitions
    tiles: tuple[tuple[int, int, int], ...]

    @staticmethod
    def of(layout: Layout) -> GatherPlan:
        return GatherPlan(*_row_tiles(layout))


RowTiles = tuple[tuple[int, int], tuple[int, int], tuple[int, ...], int, tuple[tuple[int, int, int], ...]]


def _row_tiles(layout: Layout) -> RowTiles:
    """``GatherPlan``'s fields for ``layout``'s shape, sizes and starts (shared with ``ScatterPlan``). When
    the sizes cover every dim whole, ``k`` is 0 (each start then clamps to 0)."""
    shape, sizes = layout.shape, layout.sizes
    k = max((d for d in range(len(shape)) if sizes[d] < shape[d]), default=0)
    width = prod(shape[k + 1:])
    strides = tuple(prod(shape[d + 1 : k + 1]) for d in range(k + 1))
    fixed = sum(max(s, 0) * t for s, t in zip(layout.start, strides, strict=False))
    per = GATHER_ROWS if width * get_dtype(layout.dtype).itemsize > SMALL_ROW else 128
    m = max((d for d in range(k + 1) if sizes[d] > 1), default=k)   # the dim along the partitions
    tiles: list[tuple[int, int, int]] = []
    for outer in indices(sizes[:m]):
        row0 = sum(i * prod(sizes[d + 1 : k + 1]) for d, i in enumerate(outer))
        base = fixed + sum(i * t for i, t in zip(outer, strides, strict=False))
        tiles += [(row0 + c0, p, base + c0 * strides[m]) for c0, p in _blocks(sizes[m], per)]
    return (prod(shape[: k + 1]), width), (prod(sizes[: k + 1]), width), strides, strides[m], tuple(tiles)


@dataclass(frozen=True)
class ScatterPlan:
    """A dynamic update slice as ``out = x`` (``x`` viewed as the same table as ``GatherPlan``'s, copied over
    the queues) then scatters of whole rows of the update, ``[prod(sizes[:k+1]), row]``, into ``out``: update
    row ``(i_0 .. i_k)`` lands on table row ``Σ_d (start_d + i_d) · T_d``, exactly the rows the dynamic slice
    of the same starts and sizes reads; ``tiles`` are the gather's, with ``out`` for the update.

    NOTE: each tile scatters into the view of ``out`` it can reach, ``reach + (p - 1) · step + 1`` rows from
    its ``base`` (``reach``: the largest offset the data starts add, ``Σ (n_d - z_d) · T_d``), with indices
    counted from that view's start: the DSL orders a write of data-dependent rows after every earlier access
    of its view, so tiles whose views are disjoint (the batch rows of a KV-cache update) scatter in parallel
    instead of one after another."""

    table: tuple[int, int]
    update: tuple[int, int]
    row_strides: tuple[int, ...]
    step: int
    tiles: tuple[tuple[int, int, int], ...]
    reach: int

    @staticmethod
    def of(layout: Layout) -> ScatterPlan:
        table, update, strides, step, tiles = _row_tiles(layout)
        reach = sum((n - z) * t for s, n, z, t in zip(layout.start, layout.shape, layout.sizes, strides, strict=False)
                    if s < 0)
        return ScatterPlan(table, update, strides, step, tiles, reach)

    def span(self, p: int) -> int:
        """Table rows a tile of ``p`` rows may write."""
        return self.reach + (p - 1) * self.step + 1


def gather_slice(layout: Layout, table: Any, starts: list[Any]) -> Any:
    """``layout``'s dynamic slice of ``table`` (``GatherPlan``). The starts that are data are DMA'd to every
    partition, clamped and scaled on VectorE into one table-row offset (fp32: exact below ``EXACT``); per
    tile, an iota of its rows plus that offset is the index of one ``dma_gather`` per block of columns,
    issued ``PICK_DEPTH`` ahead of the stores (the sync engine issues DMAs in program order)."""
    from trnsim import dsl
    from trnsim.kernels.layout import prefetch

    plan = GatherPlan.of(layout)
    out = dsl.hbm_tensor(plan.out, table.dtype, name="out")
    offset = _data_offset(layout, plan.row_strides, starts)
    if offset is None:
        offset = dsl.zeros((128, 1), "fp32")
    rows = dsl.iota((128, 1), "fp32", channel_multiplier=plan.step)
    columns = _blocks(plan.table[1], FILL_COLS)
    work = [(tile, c0, w) for tile in plan.tiles for c0, w in columns]

    def gather(item: tuple[tuple[int, int, int], int, int]) -> Callable[[], Any]:
        (_, p, base), c0, w = item

        def issue() -> Any:
            index = dsl.tensor_scalar(rows[:p], "add", offset[:p], "add", float(base), dtype="int32")
            return dsl.dma_gather(dsl.sbuf((p, w), table.dtype), table[:, c0 : c0 + w], index)
        return issue

    for ((r0, p, _), c0, w), got in zip(work, prefetch([gather(item) for item in work], PICK_DEPTH), strict=True):
        dsl.store(out[r0 : r0 + p, c0 : c0 + w], got)
    return out


def scatter_update(layout: Layout, x: Any, update: Any, starts: list[Any]) -> Any:
    """``layout``'s dynamic update slice of ``x`` (``ScatterPlan``): ``x`` copied into the output over the
    queues, then per tile the update's rows loaded (``PICK_DEPTH`` ahead) and written by one ``dma_scatter``
    per block of columns at an iota of the tile's rows plus the offset of the starts that are data (clamped
    and scaled on VectorE as ``gather_slice`` does). With constant starts alone: the update copied into its
    box of the output (``x`` and ``update`` then keep their shapes)."""
    from trnsim import dsl
    from trnsim.kernels.layout import prefetch

    out = dsl.hbm_tensor(x.shape, x.dtype, name="out")
    for q, (i0, i1) in enumerate(chunks(x.shape[0])):
        dsl.dma_copy(out[i0:i1], x[i0:i1], queue=q % QUEUES)
    if not starts:
        box = tuple(slice(s, s + z) for s, z in zip(layout.start, layout.sizes, strict=True))
        for q, (i0, i1) in enumerate(chunks(update.shape[0])):
            dsl.dma_copy(out[box][i0:i1], update[i0:i1], queue=q % QUEUES)
        return out
    plan = ScatterPlan.of(layout)
    offset = _data_offset(layout, plan.row_strides, starts)
    rows = dsl.iota((128, 1), "fp32", channel_multiplier=plan.step)
    index = dsl.tensor_scalar(rows, "add", 0.0 if offset is None else offset, dtype="int32")
    work = [(tile, c0, w) for tile in plan.tiles for c0, w in _blocks(plan.table[1], FILL_COLS)]

    def load(item: tuple[tuple[int, int, int], int, int]) -> Callable[[], Any]:
        (r0, p, _), c0, w = item
        return lambda: dsl.load(update[r0 : r0 + p, c0 : c0 + w])

    for ((_, p, base), c0, w), rows_in in zip(work, prefetch([load(item) for item in work], PICK_DEPTH),
                                               strict=True):
        dsl.dma_scatter(out[base : base + plan.span(p), c0 : c0 + w], rows_in, index[:p])
    return out


def start_words(dtype: str) -> tuple[int, ...]:
    """The kernel input a start that is data of StableHLO ``dtype`` becomes: a scalar, or the 8 bytes of a
    64-bit one as two 32-bit words, low first (little-endian), of ``WIDE_INDEX_DTYPES[dtype]``."""
    return (2,) if dtype in WIDE_INDEX_DTYPES else (1,)


def _data_offset(layout: Layout, row_strides: tuple[int, ...], starts: list[Any]) -> Any:
    """The table-row offset the starts that are data add, a ``[128, 1]`` fp32 tile (None: no data start
    moves a row): each start DMA'd to every partition, clamped to ``[0, n - size]`` and scaled by its row
    stride on VectorE (fp32: exact below ``EXACT``). A constant start is in the tiles' bases, and a whole
    dim's clamps to 0.

    A 64-bit start is two 32-bit words, low first (``start_words``): the chip has no 64-bit datapath. The
    low word, read as uint32 through a bitcast view, is clamped to ``n - size``; the high word (its sign
    with ``int64``), times ``EXACT``, is added before the clamp to ``[0, n - size]``. A high word of 0 leaves
    the low word's clamp, which is then exact; any other saturates, to 0 when negative and to ``n - size``
    when the start is 2**32 or more, as the low word's clamp is below ``EXACT``::

        clamp(start) = clamp(high · 2**24 + min(low, n - size), 0, n - size)"""
    from trnsim import dsl

    offset = None
    data = iter(starts)
    for d, (s, n, z) in enumerate(zip(layout.start, layout.shape, layout.sizes, strict=True)):
        start = next(data) if s < 0 else None
        if start is None or d >= len(row_strides):
            continue
        words = start.shape[-1]
        one = dsl.sbuf((128, words), layout.index_dtype)
        dsl.load(one, start.broadcast_to((128, words)))
        if words == 1:
            clamped = dsl.tensor_scalar(one, "max", 0.0, "min", float(n - z), dtype="fp32")
        else:
            low = dsl.tensor_scalar(one[:, :1].bitcast("uint32"), "min", float(n - z), dtype="fp32")
            wide = dsl.tensor_scalar(one[:, 1:2], "mul", float(EXACT), "add", low, dtype="fp32")
            clamped = dsl.tensor_scalar(wide, "max", 0.0, "min", float(n - z), dtype="fp32")
        offset = dsl.tensor_scalar(clamped, "mul", float(row_strides[d]), "add",
                                   0.0 if offset is None else offset, dtype="fp32")
    return offset


# ---- embedding-form gather and scatter-add: the kernel library's embedding kernels ----------------------

@dataclass(frozen=True)
class Lookup:
    """A row lookup ``table[ids]`` (``op="gather"``) or its gradient ``table[ids] += rows``
    (``op="scatter_add"``), for ``embedding_kernel`` / ``embedding_backward_kernel``."""

    op: str
    vocab: int
    width: int
    ids: tuple[int, ...]
    dtype: str


def lookup_for(node: Node) -> Lookup | None:
    """The embedding form of a gather or scatter-add (rows of a [V, D] table by an index vector of size
    1, no batching dims), or None."""
    if node.op not in ("gather", "scatter") or not node.inputs:
        return None
    table, indices = node.inputs[0].type, node.inputs[1].type
    if table.rank != 2 or table.dtype not in DSL_DTYPE or indices.dtype not in ("i32", "ui32"):
        return None
    ids = indices.shape
    if node.op == "gather":
        dn = node.attrs["dimension_numbers"]
        vec = dn["index_vector_dim"]
        ok = (dn["collapsed_slice_dims"] == (0,) and dn["start_index_map"] == (0,) and not
              dn.get("operand_batching_dims") and tuple(node.attrs["slice_sizes"]) == (1, table.shape[1]))
    else:
        from trnsim.ir.semantics.reduce import simple_combiner

        dn = node.attrs["scatter_dimension_numbers"]
        vec = dn["index_vector_dim"]
        ok = (len(node.inputs) == 3 and dn["inserted_window_dims"] == (0,) and
              dn["scatter_dims_to_operand_dims"] == (0,) and not dn.get("input_batching_dims") and
              simple_combiner(node.regions[0]) == "add" and node.inputs[2].type.shape[-1] == table.shape[1] and
              is_zero_fill(node.inputs[0]))      # the kernel adds into a zero table of its own
    if not ok:
        return None
    if vec < len(ids):
        if ids[vec] != 1:
            return None
        ids = ids[:vec] + ids[vec + 1:]
    if not ids:
        return None
    return Lookup("gather" if node.op == "gather" else "scatter_add", table.shape[0], table.shape[1], ids,
                  DSL_DTYPE[table.dtype])


@lru_cache(maxsize=256)
def lookup_time(target: str, lookup: Lookup) -> LayoutTime:
    import trnsim
    from trnsim.kernels.embeddings import embedding_backward_kernel, embedding_kernel

    spec: Any = trnsim.TensorSpec
    ids = spec(lookup.ids, "int32")
    if lookup.op == "gather":
        result = trnsim.run_kernel(embedding_kernel, spec((lookup.vocab, lookup.width), lookup.dtype), ids,
                                   target=target, timing=True)
    else:
        result = trnsim.run_kernel(embedding_backward_kernel, spec((*lookup.ids, lookup.width), lookup.dtype), ids,
                                   target=target, timing=True, vocab=lookup.vocab, dtype=lookup.dtype)
    return LayoutTime.of(result)


# ---- one element per row: indirect DMA of single elements by flat address -------------------------------

@dataclass(frozen=True)
class Pick:
    """A gather of single elements of ``x``, or a scatter-add of single elements into it, one per row.

    Row ``r`` sits at ``base(r) + Σ_c clamp(idx[r, c], 0, size_c - 1) · stride_c`` of ``x`` flat, where
    ``index`` gives each index component's ``(size_c, stride_c)`` and ``base`` comes from the batching dims:
    rows are ``[outer, inner]`` and ``base(o, j) = o · outer_stride + j`` (``take_along_axis`` on ``x``
    viewed as ``[outer, width, inner]``: one component ``(width, inner)``, ``outer_stride = width · inner``).
    Without batching dims (``x[i, j]`` point lookups) ``inner = 1`` and ``outer_stride = 0``.

        gather:       out[r] = x[address(r)]                        # StableHLO clamps start indices
        scatter_add:  out = x;  out[address(r)] += upd[r]           # rows out of range: dropped

    ``zero``: the scatter's ``x`` is a broadcast +0.0, so the kernel fills its output instead of copying."""

    op: str                                   # "gather" | "scatter_add"
    size: int                                 # elements of x
    outer: int
    inner: int
    outer_stride: int
    index: tuple[tuple[int, int], ...]        # (size, stride) per index component
    dtype: str                                # DSL dtype of x (and of upd)
    index_dtype: str = "int32"
    zero: bool = False

    @staticmethod
    def along(op: str, outer: int, width: int, inner: int, dtype: str, index_dtype: str = "int32",
              zero: bool = False) -> Pick:
        """One element per row along the middle axis of ``x`` as ``[outer, width, inner]``."""
        return Pick(op, outer * width * inner, outer, inner, width * inner, ((width, inner),), dtype, index_dtype,
                    zero)

    @property
    def rows(self) -> int:
        return self.outer * self.inner

    @property
    def reach(self) -> int:
        """The largest address offset the index components give."""
        return sum((n - 1) * stride for n, stride in self.index)

    @property
    def step(self) -> int:
        """Flat elements between consecutive rows (partitions) of a tile."""
        return self.outer_stride if self.inner == 1 else 1

    @property
    def tile_rows(self) -> int:
        """Rows per tile: at most 128, and few enough that every address of a tile, counted from its view's
        start, is below ``EXACT``; 0 when not even one row's are."""
        room = EXACT - 1 - self.reach
        if room < 0:
            return 0
        if self.inner == 1:
            return min(128, room // self.step + 1) if self.step else 128
        return min(128, self.inner, room + 1)

    def tiles(self) -> list[tuple[int, int, int]]:
        """``(first row, rows, first element of the tile's view of x)`` per tile; a tile's rows are
        consecutive and their addresses ``p · step + Σ_c clamp(idx_c) · stride_c`` from the view's start."""
        if self.inner == 1:
            return [(r0, p, r0 * self.outer_stride) for r0, p in _blocks(self.outer, self.tile_rows)]
        return [(o * self.inner + j0, p, o * self.outer_stride + j0)
                for o in range(self.outer) for j0, p in _blocks(self.inner, self.tile_rows)]

    def span(self, p: int) -> int:
        """Elements of the view a tile of ``p`` rows addresses."""
        return (p - 1) * self.step + self.reach + 1


def _blocks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(size, n - i)) for i in range(0, n, size)]


def is_zero_fill(value: Value) -> bool:
    """``value`` is a broadcast of the constant +0.0 (all bits zero: a zero fill)."""
    import numpy as np

    node = value.producer
    if node is None or node.op != "broadcast_in_dim":
        return False
    source = node.inputs[0].producer
    if source is None or source.op != "constant" or node.inputs[0].type.size != 1:
        return False
    c = np.asarray(source.attrs["value"]).reshape(-1)
    return bool(c[0] == 0 and not np.signbit(c[0]))


def pick_for(node: Node) -> Pick | None:
    """The ``Pick`` form of a gather or add-scatter of single elements (all slice sizes 1, no window dims),
    or None. The index vector is the index tensor's innermost dim (or one component); the rows are the
    index tensor's other dims in order, and either
      - the operand's batching dims are its leading and trailing dims, paired in order with the index
        tensor's leading dims, the collapsed dims between them, one index vector per row; or
      - there are no batching dims (point lookups ``x[i, j]``).
    None also for dtypes the DMA cannot add (a scatter-add into integers), addresses the fp32 ALU cannot
    hold exactly, and more than ``MAX_PICK_TILES`` tiles: the step then keeps the analytic cost."""
    from trnsim.ir.semantics.reduce import simple_combiner

    if node.op not in ("gather", "scatter") or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    x, idx = node.inputs[0].type, node.inputs[1].type
    if x.rank == 0 or x.size == 0 or x.dtype not in DSL_DTYPE or idx.dtype not in INDEX_DTYPES:
        return None
    if node.op == "gather":
        dn = node.attrs["dimension_numbers"]
        collapsed, to_operand, vec = dn["collapsed_slice_dims"], dn["start_index_map"], dn["index_vector_dim"]
        batching, idx_batching = dn["operand_batching_dims"], dn["start_indices_batching_dims"]
        ok = not dn["offset_dims"] and tuple(node.attrs["slice_sizes"]) == (1,) * x.rank
    else:
        dn = node.attrs["scatter_dimension_numbers"]
        collapsed, to_operand = dn["inserted_window_dims"], dn["scatter_dims_to_operand_dims"]
        vec = dn["index_vector_dim"]
        batching, idx_batching = dn["input_batching_dims"], dn["scatter_indices_batching_dims"]
        ok = len(node.inputs) == 3 and not dn["update_window_dims"] and simple_combiner(node.regions[0]) == "add" \
            and node.inputs[2].type.dtype == x.dtype and DSL_DTYPE[x.dtype] in ACCUMULATE_DTYPES
    m = idx.shape[vec] if vec < idx.rank else 1
    rest = [d for d in range(idx.rank) if d != vec]
    if not ok or sorted((*collapsed, *batching)) != list(range(x.rank)) or len(to_operand) != m or \
            len(set(to_operand)) != m or not set(to_operand) <= set(collapsed) or (m > 1 and vec != idx.rank - 1) or \
            tuple(batching) != tuple(sorted(batching)) or tuple(idx_batching) != tuple(rest[: len(batching)]):
        return None
    strides = [prod(x.shape[d + 1:]) for d in range(x.rank)]
    index = tuple((x.shape[d], strides[d]) for d in to_operand)
    if batching:
        a, e = min(collapsed), max(collapsed) + 1
        if sorted(collapsed) != list(range(a, e)) or prod(idx.shape[d] for d in rest[len(batching):]) != 1:
            return None
        outer, inner, outer_stride = prod(x.shape[:a]), prod(x.shape[e:]), prod(x.shape[a:])
    else:
        outer, inner, outer_stride = idx.size // m, 1, 0
    rows = outer * inner
    if node.out.type.size != (x.size if node.op == "scatter" else rows) or \
            (node.op == "scatter" and node.inputs[2].type.size != rows):
        return None
    pick = Pick("gather" if node.op == "gather" else "scatter_add", x.size, outer, inner, outer_stride, index,
                DSL_DTYPE[x.dtype], INDEX_DTYPES[idx.dtype], node.op == "scatter" and is_zero_fill(node.inputs[0]))
    if pick.tile_rows < 1 or len(pick.tiles()) > MAX_PICK_TILES:
        return None
    return pick


def _pick_kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor
    from trnsim.kernels.layout import prefetch

    @dsl.kernel
    def pick_rows(idx: Tensor, x: Tensor | None = None, upd: Tensor | None = None, *, pick: Pick) -> Tensor:
        """``pick``'s gather or scatter-add (``Pick``) by indirect DMA of single elements: ``x`` (and the
        output of a scatter) viewed flat as ``[size, 1]``, one element a "row"; ``idx`` as ``[rows,
        components]``, ``upd`` as ``[rows, 1]``.

        NOTE: per tile of ≤ 128 rows, VectorE makes the flat addresses from the loaded index vectors (per
        component a ``tensor_scalar`` clamping it to its axis, and one ``· stride + the address so far``,
        starting from an iota of the rows' bases made once on GpSimd), then one ``dma_gather`` or
        ``dma_scatter_add`` moves the tile's elements. The tile's view of ``x`` starts at its first row's
        base, so addresses stay below 2**24 (exact in the fp32 ALU) whatever the number of rows. The
        alternative for rows along the last axis, a one-hot select over whole rows (``tilegen.onehot``),
        reads every element of ``x``; this reads one per row, at one DMA descriptor each (neuron.md §2.6:
        small payloads are overhead-bound, here by design). A scatter first fills its output (zeros from a
        constant tile, or a copy of ``x``); rows out of range add -0.0 at a clamped address, which leaves
        every value (±0 and NaN included) as it was, as StableHLO's scatter drops them."""
        tiles = pick.tiles()
        n = max(p for _, p, _ in tiles)
        iota = dsl.iota((n, 1), "int32", channel_multiplier=pick.step)
        drop = dsl.full((n, 1), -0.0, pick.dtype) if pick.op == "scatter_add" else None
        if pick.op == "gather":
            out = dsl.hbm_tensor((pick.rows, 1), pick.dtype, name="picked")
        else:
            out = dsl.hbm_tensor((pick.size, 1), pick.dtype, name="scattered")
            if pick.zero:
                _fill_flat(out, dsl.zeros((128, FILL_COLS), pick.dtype), pick.size)
            else:
                assert x is not None
                for a, k in _blocks(pick.size, -(-pick.size // QUEUES)):
                    dsl.dma_copy(out[a : a + k], x[a : a + k])

        def address(tile: tuple[int, int, int]) -> Callable[[], tuple[Tensor, Tensor | None]]:
            r0, p, _ = tile

            def make() -> tuple[Tensor, Tensor | None]:
                ids = dsl.load(idx[r0 : r0 + p])
                values = dsl.load(upd[r0 : r0 + p]) if upd is not None else None
                flat, inside = iota[:p], None
                for c, (size, stride) in enumerate(pick.index):
                    one = ids[:, c : c + 1]
                    clamped = dsl.tensor_scalar(one, "max", 0.0, "min", float(size - 1), dtype="int32")
                    flat = dsl.tensor_scalar(clamped, "mul", float(stride), "add", flat, dtype="int32")
                    if values is not None:
                        kept = dsl.tensor_tensor(clamped, one, "eq", dtype="uint8")
                        inside = kept if inside is None else dsl.tensor_tensor(inside, kept, "mul")
                if values is None:
                    return flat, None
                assert drop is not None and inside is not None
                return flat, dsl.where(inside, values, drop[:p])
            return make

        def view(tile: tuple[int, int, int], t: Tensor) -> Tensor:
            _, p, t0 = tile
            return t[t0 : t0 + pick.span(p)]

        addresses = prefetch([address(tile) for tile in tiles], PICK_DEPTH)
        if pick.op == "scatter_add":
            for tile, (flat, kept) in zip(tiles, addresses, strict=True):
                assert kept is not None
                dsl.dma_scatter_add(view(tile, out), kept, flat)
            return out
        assert x is not None

        def gather(tile: tuple[int, int, int]) -> Callable[[], Tensor]:
            return lambda: dsl.dma_gather(dsl.sbuf((tile[1], 1), pick.dtype), view(tile, x), next(addresses)[0])

        for (r0, p, _), got in zip(tiles, prefetch([gather(tile) for tile in tiles], PICK_DEPTH), strict=True):
            dsl.store(out[r0 : r0 + p], got)
        return out

    return pick_rows


def _fill_flat(out: Any, constant: Any, total: int) -> None:
    """DMA the constant ``[128, FILL_COLS]`` tile over the flat ``[total, 1]`` HBM tensor ``out``, in at least
    ``QUEUES`` pieces of whole 128-element columns when there are that many, then the few elements left."""
    from trnsim import dsl

    cols = min(FILL_COLS, max(1, -(-total // (128 * QUEUES))))
    at = 0
    while total - at >= 128:
        c = min(cols, (total - at) // 128)
        dsl.dma_copy(out[at : at + 128 * c], constant[:, :c])
        at += 128 * c
    if at < total:
        dsl.dma_copy(out[at:total], constant[: total - at, :1])


pick_kernel = OnDemand(lambda: _pick_kernel())   # the pick kernel (``pick_rows``), shared by timing and tests


def pick_specs(pick: Pick) -> list[Any]:
    """The kernel's arguments as shape descriptions: ``idx``, ``x`` (None for a zero-filled scatter), ``upd``."""
    import trnsim

    spec: Any = trnsim.TensorSpec
    x = None if pick.zero else spec((pick.size, 1), pick.dtype)
    upd = spec((pick.rows, 1), pick.dtype) if pick.op == "scatter_add" else None
    return [spec((pick.rows, len(pick.index)), pick.index_dtype), x, upd]


@lru_cache(maxsize=256)
def pick_time(target: str, pick: Pick) -> LayoutTime:
    import trnsim

    specs = pick_specs(pick)
    while specs and specs[-1] is None:
        specs.pop()
    return LayoutTime.of(trnsim.run_kernel(pick_kernel(), *specs, target=target, timing=True, pick=pick))


def chunks(n: int) -> list[tuple[int, int]]:
    """``[0, n)`` in at most ``QUEUES`` consecutive pieces (one DMA a queue)."""
    size = -(-n // min(n, QUEUES))
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def indices(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every index of ``shape``, in row-major order."""
    out: list[tuple[int, ...]] = [()]
    for n in shape:
        out = [(*o, i) for o in out for i in range(n)]
    return out


def clear_memo() -> None:
    """Forget the timed pick and lookup kernels (``dmagen.clear_memo`` calls this)."""
    lookup_time.cache_clear()
    pick_time.cache_clear()
    pick_kernel.forget()
