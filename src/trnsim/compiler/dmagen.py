"""Generated DMA kernels for layout steps: transposes, slices, reverses, pads and concatenations, timed by the
instruction-level model.

A transpose that keeps the innermost dimension in place is a copy through a permuted HBM view, split along
its first dimension over the DMA queues. One that swaps the two innermost dimensions (leading ones in
order) is a batch of 2-D transposes through ``.T`` views, which take the DMA-transpose path for 2- and
4-byte types (``reference/neuron.md`` §1.3), round-robin over the queues; so is one that moves the innermost
axis elsewhere (``[s, h, d] → [h, d, s]``): a 2-D transpose per index of the other axes. Any other
permutation is one copy through the permuted view (element-sized descriptors: slow, as it would be on the
chip). A slice is a copy through a strided view, split the same way, and a reverse one through a view with
negative strides; a concatenation copies each input into its slab of the result; a pad copies the input's
kept elements through a strided view of the result (interior padding: a step of ``interior + 1``; negative
edge padding: a slice of the input) and fills the rest, disjoint boxes and strided holes, from a constant
SBUF tile (memset, or a padding value that is data: DMA'd to every partition and widened by an engine copy
that gives every code back), and a constant broadcast into a tensor is such a fill alone. Bools move as
their bytes. The kernels are traced once per shape and timed in timing-only mode; on the functional
simulator they move the data exactly (tested).

A ``dynamic_slice`` whose start indices are data is a row gather (``GatherPlan``): the starts are DMA'd to
the partitions, clamped and scaled into a table-row offset on VectorE, and indirect DMAs read the rows (whole
contiguous runs of the slice) at that offset plus an iota. A ``dynamic_update_slice`` whose starts are data is
its mirror (``ScatterPlan``): the operand is copied into the result over the queues, then indirect writes
(``DmaScatter``: the software DGE's scatter, ``reference/neuron.md`` §1.2–1.4) put the update's rows at the
clamped offset; with constant starts it is two copies, the operand and the update into its box. Either keeps
the analytic cost (counted in ``dma_fallbacks``) only for dtypes the DMA does not move (64-bit, complex),
start indices of a type the address computation does not take (64-bit), more data starts than the kernel has
inputs, or a table of ``EXACT`` rows or more, or more than ``MAX_PICK_TILES`` scatters.

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
from typing import Any

from trnsim.ir.graph import Node, Value
from trnsim.isa.dtypes import get_dtype

QUEUES = 16
MAX_INPUTS = 8
FILL_COLS = 4096          # the constant tile a pad fills from: [128, 4096] elements of the tensor's dtype
FILL_SPLIT = 64 * 1024    # bytes: a fill region beyond this goes in pieces over the queues (one DMA a queue)
MAX_DMAS = 512            # batched 2-D transposes beyond this many are timed on a sample and scaled
DSL_DTYPE: dict[str, str] = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "i32": "int32", "ui32": "uint32",
                             "i16": "int16", "ui16": "uint16", "i8": "int8", "ui8": "uint8"}
LAYOUT_DTYPE: dict[str, str] = {**DSL_DTYPE, "i1": "uint8"}   # moving data: a bool is its byte (0 or 1)
COPY_AS: dict[int, str] = {4: "fp32", 2: "bf16", 1: "uint8"}   # engine copies that give every code back, by size


@dataclass(frozen=True)
class Layout:
    """What a generated layout kernel does (hashable: kernels and their times are cached)."""

    op: str                                   # "transpose" | "slice" | "pad" | "concatenate" | "fill" | "reverse"
                                              # | "dynamic_slice" | "dynamic_update_slice"
    shape: tuple[int, ...]                    # the input's shape
    dtype: str                                # DSL dtype
    perm: tuple[int, ...] = ()                # transpose
    start: tuple[int, ...] = ()               # slice
    limit: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    low: tuple[int, ...] = ()                 # pad: edge padding (negative: cut), interior padding, fill value
    high: tuple[int, ...] = ()
    interior: tuple[int, ...] = ()
    value: float = 0.0
    others: tuple[tuple[int, ...], ...] = ()  # concatenate: the shapes of the inputs after the first; pad: ((1,),)
                                              # when the fill value is the kernel's second input (data)
    axis: int = 0
    dims: tuple[int, ...] = ()                # reverse: the reversed dimensions
    sizes: tuple[int, ...] = ()               # dynamic_slice: the slice sizes (dynamic_update_slice: the update's);
    index_dtype: str = ""                     # ``start`` holds each constant start (clamped), -1 where it is
                                              # data: the inputs after x (and the update), ``others``, scalars
                                              # of ``index_dtype``


def layout_for(node: Node) -> Layout | None:
    """The generated form of a transpose, slice, reverse, pad or concatenate node, or None (other ops, dtypes
    or 0-d tensors)."""
    x = node.inputs[0].type if node.inputs else None
    if x is None or x.rank == 0 or x.dtype not in LAYOUT_DTYPE or x.size == 0:
        return None
    if node.op == "transpose":
        return Layout("transpose", x.shape, LAYOUT_DTYPE[x.dtype], perm=tuple(node.attrs["permutation"]))
    if node.op == "reverse":
        return Layout("reverse", x.shape, LAYOUT_DTYPE[x.dtype], dims=tuple(sorted(node.attrs["dimensions"])))
    if node.op == "slice":
        a = node.attrs
        return Layout("slice", x.shape, LAYOUT_DTYPE[x.dtype], start=tuple(a["start_indices"]),
                      limit=tuple(a["limit_indices"]), stride=tuple(a["strides"]))
    if node.op == "pad":
        a = node.attrs
        dtype = LAYOUT_DTYPE[x.dtype]
        fill = node.inputs[1].producer
        value = _fill_value(fill) if fill is not None and fill.op == "constant" else None
        if node.out.type.size == 0 or (fill is not None and fill.op == "constant" and value is None):
            return None
        return Layout("pad", x.shape, dtype, low=tuple(a["edge_padding_low"]), high=tuple(a["edge_padding_high"]),
                      interior=tuple(a["interior_padding"]), value=value or 0.0,
                      others=((1,),) if value is None else ())
    if node.op == "dynamic_slice":
        return _dynamic_slice_for(node)
    if node.op == "dynamic_update_slice":
        return _dynamic_update_slice_for(node)
    if node.op == "concatenate" and 1 < len(node.inputs) <= MAX_INPUTS and \
            all(v.type.dtype == x.dtype for v in node.inputs):
        return Layout("concatenate", x.shape, LAYOUT_DTYPE[x.dtype],
                      others=tuple(v.type.shape for v in node.inputs[1:]), axis=int(node.attrs["dimension"]))
    return None


def _dynamic_slice_for(node: Node) -> Layout | None:
    """A ``dynamic_slice`` with start indices that are data as a row gather (``GatherPlan``); with constant
    starts alone it is a slice (StableHLO clamps each start to ``[0, n - size]``). None when the starts are
    not integers the DMA gather's address computation takes, or the gather would need more than
    ``MAX_PICK_TILES`` DMAs or a table of ``EXACT`` rows or more."""
    x, starts = node.inputs[0].type, node.inputs[1:]
    sizes = tuple(int(z) for z in node.attrs["slice_sizes"])
    if len(starts) != x.rank or len(starts) >= MAX_INPUTS or any(v.type.dtype not in INDEX_DTYPES for v in starts) \
            or node.out.type.size == 0:
        return None
    const = [_constant_int(v) for v in starts]
    start = tuple(-1 if c is None else min(max(c, 0), n - z) for c, n, z in zip(const, x.shape, sizes, strict=True))
    dtype = LAYOUT_DTYPE[x.dtype]
    if all(c is not None for c in const) or sizes == x.shape:
        begin = tuple(max(c, 0) for c in start)
        limit = tuple(b + z for b, z in zip(begin, sizes, strict=True))
        return Layout("slice", x.shape, dtype, start=begin, limit=limit, stride=(1,) * x.rank)
    layout = Layout("dynamic_slice", x.shape, dtype, start=start, sizes=sizes,
                    others=tuple((1,) for c in const if c is None), index_dtype=INDEX_DTYPES[starts[0].type.dtype])
    plan = GatherPlan.of(layout)
    return layout if plan.table[0] < EXACT and len(plan.tiles) <= MAX_PICK_TILES else None


def _constant_int(value: Value) -> int | None:
    node = value.producer
    if node is None or node.op != "constant" or value.type.size != 1:
        return None
    return int(node.attrs["value"].reshape(-1)[0])


def _dynamic_update_slice_for(node: Node) -> Layout | None:
    """A ``dynamic_update_slice`` as a copy of the operand and a scatter of the update's rows at the starts
    that are data (``ScatterPlan``), or, with constant starts alone, a copy of the update into its box
    (StableHLO clamps each start to ``[0, n - update size]``). None when the starts are not integers the
    address computation takes, more than ``MAX_INPUTS - 2`` are data, or the scatter would need a table of
    ``EXACT`` rows or more, or more than ``MAX_PICK_TILES`` DMAs."""
    x, update, starts = node.inputs[0].type, node.inputs[1].type, node.inputs[2:]
    if len(starts) != x.rank or any(v.type.dtype not in INDEX_DTYPES for v in starts) or update.dtype != x.dtype:
        return None
    dtype = LAYOUT_DTYPE[x.dtype]
    if update.size == 0:     # the result is the operand
        return Layout("slice", x.shape, dtype, start=(0,) * x.rank, limit=x.shape, stride=(1,) * x.rank)
    sizes = update.shape
    const = [_constant_int(v) for v in starts]
    start = tuple(-1 if c is None else min(max(c, 0), n - z) for c, n, z in zip(const, x.shape, sizes, strict=True))
    data = sum(c is None for c in const)
    if data == 0:
        return Layout("dynamic_update_slice", x.shape, dtype, start=start, sizes=sizes)
    if data > MAX_INPUTS - 2:
        return None
    layout = Layout("dynamic_update_slice", x.shape, dtype, start=start, sizes=sizes, others=((1,),) * data,
                    index_dtype=INDEX_DTYPES[starts[0].type.dtype])
    plan = ScatterPlan.of(layout)
    return layout if plan.table[0] < EXACT and len(plan.tiles) <= MAX_PICK_TILES else None


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
    for outer in _indices(sizes[:m]):
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


def _gather_slice(layout: Layout, table: Any, starts: list[Any]) -> Any:
    """``layout``'s dynamic slice of ``table`` (``GatherPlan``). The starts that are data are DMA'd to every
    partition, clamped and scaled on VectorE into one table-row offset (fp32: exact below ``EXACT``); per
    tile, an iota of its rows plus that offset is the index of one ``dma_gather`` per block of columns,
    issued ``PICK_DEPTH`` ahead of the stores (the sync engine issues DMAs in program order)."""
    from trnsim import dsl
    from trnsim.kernels.layout import prefetch

    plan = GatherPlan.of(layout)
    out = dsl.hbm_tensor(plan.out, table.dtype, name="out")
    offset = None
    data = iter(starts)
    for d, (s, n, z) in enumerate(zip(layout.start, layout.shape, layout.sizes, strict=True)):
        start = next(data) if s < 0 else None
        if start is None or d >= len(plan.row_strides):
            continue            # a constant start (in the tiles' offsets), or a whole dim's (clamped to 0)
        one = dsl.sbuf((128, 1), layout.index_dtype)
        dsl.load(one, start.broadcast_to((128, 1)))
        clamped = dsl.tensor_scalar(one, "max", 0.0, "min", float(n - z), dtype="fp32")
        offset = dsl.tensor_scalar(clamped, "mul", float(plan.row_strides[d]), "add",
                                   0.0 if offset is None else offset, dtype="fp32")
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


def _scatter_update(layout: Layout, x: Any, update: Any, starts: list[Any]) -> Any:
    """``layout``'s dynamic update slice of ``x`` (``ScatterPlan``): ``x`` copied into the output over the
    queues, then per tile the update's rows loaded (``PICK_DEPTH`` ahead) and written by one ``dma_scatter``
    per block of columns at an iota of the tile's rows plus the offset of the starts that are data (clamped
    and scaled on VectorE as ``_gather_slice`` does). With constant starts alone: the update copied into its
    box of the output (``x`` and ``update`` then keep their shapes)."""
    from trnsim import dsl
    from trnsim.kernels.layout import prefetch

    out = dsl.hbm_tensor(x.shape, x.dtype, name="out")
    for q, (i0, i1) in enumerate(_chunks(x.shape[0])):
        dsl.dma_copy(out[i0:i1], x[i0:i1], queue=q % QUEUES)
    if not starts:
        box = tuple(slice(s, s + z) for s, z in zip(layout.start, layout.sizes, strict=True))
        for q, (i0, i1) in enumerate(_chunks(update.shape[0])):
            dsl.dma_copy(out[box][i0:i1], update[i0:i1], queue=q % QUEUES)
        return out
    plan = ScatterPlan.of(layout)
    offset = None
    data = iter(starts)
    for d, (s, n, z) in enumerate(zip(layout.start, layout.shape, layout.sizes, strict=True)):
        start = next(data) if s < 0 else None
        if start is None or d >= len(plan.row_strides):
            continue            # a constant start (in the tiles' bases), or a whole dim's (clamped to 0)
        one = dsl.sbuf((128, 1), layout.index_dtype)
        dsl.load(one, start.broadcast_to((128, 1)))
        clamped = dsl.tensor_scalar(one, "max", 0.0, "min", float(n - z), dtype="fp32")
        offset = dsl.tensor_scalar(clamped, "mul", float(plan.row_strides[d]), "add",
                                   0.0 if offset is None else offset, dtype="fp32")
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


def fill_for(nodes: list[Node]) -> Layout | None:
    """A group that only materialises a scalar constant into a tensor (``broadcast_in_dim`` of a constant):
    a fill, or None."""
    if len(nodes) != 1 or nodes[0].op != "broadcast_in_dim":
        return None
    node = nodes[0]
    source = node.inputs[0].producer
    out = node.out.type
    if source is None or source.op != "constant" or node.inputs[0].type.size != 1 or out.rank == 0 or \
            out.dtype not in LAYOUT_DTYPE or out.size == 0:
        return None
    value = _fill_value(source)
    return Layout("fill", out.shape, LAYOUT_DTYPE[out.dtype], value=value) if value is not None else None


def _fill_value(constant: Node) -> float | None:
    """The scalar ``constant`` as the float a memset takes, or None when the memset would not give its bits
    back (memset rounds through fp32: a NaN with another payload; a 4-byte integer whose bits are an fp32
    NaN's, ``_memset``)."""
    import numpy as np

    raw = np.asarray(constant.attrs["value"]).reshape(-1)[:1]
    value = float(raw[0])
    if raw.dtype.kind in "iub":   # beyond 2**24, a 4-byte integer is memset as the fp32 of its bits
        return value if abs(value) <= 2**24 or (raw.dtype.itemsize == 4 and not np.isnan(_as_fp32(value))) else None
    if np.isnan(value):
        canonical = np.asarray([np.float32("nan")]).astype(raw.dtype)
        return value if raw.tobytes() == canonical.tobytes() else None
    return value


def _kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor

    @dsl.kernel
    def layout_copy(x: Tensor, x1: Tensor | None = None, x2: Tensor | None = None, x3: Tensor | None = None,
                    x4: Tensor | None = None, x5: Tensor | None = None, x6: Tensor | None = None,
                    x7: Tensor | None = None, *, layout: Layout) -> Tensor:
        """``x`` transposed, sliced or padded, or ``x, x1, ...`` concatenated, into a new HBM tensor by DMA
        (module docstring)."""
        queue = 0

        def copy(dst: Tensor, src: Tensor) -> None:
            nonlocal queue
            dsl.dma_copy(dst, src, queue=queue % QUEUES)
            queue += 1

        def spread(dst: Tensor, src: Tensor) -> None:
            for i0, i1 in _chunks(dst.shape[0]):
                copy(dst[i0:i1], src[i0:i1])

        if layout.op == "concatenate":
            parts = [p for p in (x, x1, x2, x3, x4, x5, x6, x7) if p is not None]
            shape = list(x.shape)
            shape[layout.axis] = sum(p.shape[layout.axis] for p in parts)
            out = dsl.hbm_tensor(tuple(shape), x.dtype, name="out")
            at = 0
            for part in parts:
                n = part.shape[layout.axis]
                box = tuple(slice(at, at + n) if d == layout.axis else slice(None) for d in range(len(shape)))
                spread(out[box], part)
                at += n
            return out
        if layout.op == "dynamic_slice":
            return _gather_slice(layout, x, [v for v in (x1, x2, x3, x4, x5, x6, x7) if v is not None])
        if layout.op == "dynamic_update_slice":
            assert x1 is not None
            return _scatter_update(layout, x, x1, [v for v in (x2, x3, x4, x5, x6, x7) if v is not None])
        if layout.op == "fill":
            out = dsl.hbm_tensor(layout.shape, x.dtype, name="out")
            _fill(out, _memset(dsl.sbuf((128, FILL_COLS), x.dtype), layout.value), copy)
            return out
        if layout.op == "pad":
            plan = _pad_plan(layout)
            out = dsl.hbm_tensor(plan.shape, x.dtype, name="out")
            if plan.dst is not None:
                spread(out[plan.dst], x[plan.src])
            if x1 is None:
                constant = _memset(dsl.sbuf((128, FILL_COLS), x.dtype), layout.value)
            else:   # the value is data: DMA it to every partition, then an exact copy along the free axis
                one = dsl.sbuf((128, 1), x.dtype)
                dsl.load(one, x1.broadcast_to((128, 1)))
                constant = dsl.sbuf((128, FILL_COLS), x.dtype)
                exact = COPY_AS[get_dtype(x.dtype).itemsize]
                dsl.copy(one.bitcast(exact).broadcast_to((128, FILL_COLS)), out=constant.bitcast(exact))
            for region in plan.regions:
                _fill(out[region], constant, copy)
            return out

        if layout.op in ("slice", "reverse"):  # a copy through a strided (or negatively strided) view
            if layout.op == "reverse":
                view = x[tuple(slice(None, None, -1) if d in layout.dims else slice(None) for d in range(len(x.shape)))]
            else:
                view = x[tuple(slice(s, e, st) for s, e, st in zip(layout.start, layout.limit, layout.stride,
                                                                     strict=True))]
            out = dsl.hbm_tensor(view.shape, x.dtype, name="out")
            for i0, i1 in _chunks(view.shape[0]):
                copy(out[i0:i1], view[i0:i1])
            return out
        perm = layout.perm
        rank = len(perm)
        out = dsl.hbm_tensor(tuple(x.shape[a] for a in perm), x.dtype, name="out")
        if perm[-1] == rank - 1 or rank == 1:
            view = x.permute(*perm)
            for i0, i1 in _chunks(out.shape[0]):
                copy(out[i0:i1], view[i0:i1])
        elif rank >= 2 and tuple(perm[:-2]) == tuple(range(rank - 2)) and perm[-2:] == (rank - 1, rank - 2):
            for lead in _indices(x.shape[:-2]):
                copy(out[lead], x[lead].T)
        elif _slabs(layout) <= MAX_DMAS:
            # out's innermost axis is x's axis a, x's innermost lands at out's axis q: for each index of the
            # other axes, the [n_a, n_last] slab of x goes transposed to out's [n_last, n_a] slab
            a, q = perm[-1], perm.index(rank - 1)
            others = [d for d in range(rank) if d not in (a, rank - 1)]
            for idx in _indices(tuple(x.shape[d] for d in others)):
                src: list[int | slice] = [slice(None)] * rank
                dst: list[int | slice] = [slice(None)] * rank
                for d, i in zip(others, idx, strict=True):
                    src[d], dst[perm.index(d)] = i, i
                assert q < rank - 1
                copy(out[tuple(dst)], x[tuple(src)].T)
        else:
            copy(out, x.permute(*perm))
        return out

    return layout_copy


def _slabs(layout: Layout) -> int:
    """2-D transposes a transpose moving x's innermost axis splits into (``layout_copy``): the product of the
    dims other than x's innermost and out's innermost."""
    rank = len(layout.perm)
    return prod(n for d, n in enumerate(layout.shape) if d not in (layout.perm[-1], rank - 1))


def _as_fp32(value: float) -> float:
    """The fp32 whose 4 bytes are the 32-bit integer ``value`` (two's complement when negative)."""
    import numpy as np

    return float(np.array([int(value) % 2**32], np.uint32).view(np.float32)[0])


def _memset(tile: Any, value: float) -> Any:
    """``tile`` filled with ``value``: memset rounds through fp32, so a 4-byte integer beyond 2**24 is set as
    the fp32 of its bits on the tile viewed as fp32 (``_fill_value`` keeps NaN bit patterns out)."""
    from trnsim import dsl

    if tile.dtype in ("int32", "uint32") and abs(value) > 2**24:
        dsl.memset(tile.bitcast("fp32"), _as_fp32(value))
    else:
        dsl.memset(tile, value)
    return tile


@dataclass(frozen=True)
class PadPlan:
    """How a pad kernel writes its output: ``out[dst] = x[src]`` (None: no element of x is kept), then the
    padding value into ``regions``, disjoint boxes (strided where interior padding leaves holes)."""

    shape: tuple[int, ...]
    src: tuple[slice, ...]
    dst: tuple[slice, ...] | None
    regions: list[tuple[slice, ...]]


def _pad_plan(layout: Layout) -> PadPlan:
    """StableHLO ``pad``: along each dim, element ``k`` of x lands at ``low + k · (interior + 1)`` of an
    output of ``low + (n - 1) · (interior + 1) + 1 + high``; negative ``low``/``high`` cut elements off.
    The padding is, for each dim d, the positions of d outside the kept elements' progression (before it,
    after it, and the holes of each interior offset) with the earlier dims on their progressions."""
    interior = layout.interior or (0,) * len(layout.shape)
    shape: list[int] = []
    kept: list[tuple[int, int, int]] = []      # per dim: (first output position, count, step)
    src: list[slice] = []
    for lo, n, hi, it in zip(layout.low, layout.shape, layout.high, interior, strict=True):
        step = it + 1
        size = lo + (n - 1) * step + 1 + hi
        first = max(0, -(lo // step))          # the first k whose position lo + k·step is ≥ 0
        last = min(n - 1, (size - 1 - lo) // step)
        shape.append(size)
        kept.append((lo + first * step, last - first + 1, step))
        src.append(slice(first, last + 1))
    if any(count <= 0 for _, count, _ in kept):
        return PadPlan(tuple(shape), tuple(src), None, [tuple(slice(0, n) for n in shape)])
    on = [slice(p, p + (count - 1) * step + 1, step) for p, count, step in kept]
    regions: list[tuple[slice, ...]] = []
    for d, ((p, count, step), size) in enumerate(zip(kept, shape, strict=True)):
        end = p + (count - 1) * step + 1
        pieces = [slice(0, p)] if p else []
        pieces += [slice(end, size)] if end < size else []
        pieces += [slice(p + j, p + j + (count - 2) * step + 1, step) for j in range(1, step)] if count > 1 else []
        rest = [slice(None)] * (len(shape) - d - 1)
        regions += [(*on[:d], piece, *rest) for piece in pieces]
    return PadPlan(tuple(shape), tuple(src), tuple(on), regions)


def _fill(view: Any, constant: Any, copy: Any, spread: bool = True) -> None:
    """DMA the constant tile into ``view``: a [p, f] block of it with p·f elements, split as needed (also
    where the view's contiguous inner run exceeds an access pattern's 65535 elements per free dimension,
    ``reference/neuron.md`` §1.2: sizes are uint16). ``spread``: a view of more than ``FILL_SPLIT`` bytes
    goes in up to ``QUEUES`` pieces along its first dim, one a queue."""
    from math import gcd

    from trnsim.isa.verify import MAX_COUNT

    while len(view.shape) > 1 and view.shape[0] == 1:
        view = view[0]            # a unit leading dim would make the rest one free dimension of the HBM side
    size = prod(view.shape)
    if spread and view.shape[0] > 1 and size * get_dtype(view.dtype).itemsize > FILL_SPLIT:
        for i0, i1 in _chunks(view.shape[0]):
            _fill(view[i0:i1], constant, copy, spread=False)
        return
    p = gcd(size, 128)
    if size // p <= FILL_COLS and all(count <= MAX_COUNT for _, count in view.ap().free):
        copy(view, constant[:p, : size // p])
        return
    d = next(i for i, n in enumerate(view.shape) if n > 1)
    n = view.shape[d]
    half = n // 2
    lead = (slice(None),) * d
    _fill(view[(*lead, slice(0, half))], constant, copy, spread=False)
    _fill(view[(*lead, slice(half, n))], constant, copy, spread=False)


def _chunks(n: int) -> list[tuple[int, int]]:
    size = -(-n // min(n, QUEUES))
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def _indices(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in shape:
        out = [(*o, i) for o in out for i in range(n)]
    return out


_KERNEL: list[Any] = []


@dataclass(frozen=True)
class LayoutTime:
    seconds: float
    dma_bytes: int
    instructions: int
    by_engine: dict[str, int] = field(default_factory=dict[str, int])    # instructions per engine ("dma")


def layout_time(target: str, layout: Layout) -> LayoutTime:
    """The generated kernel's time; batched 2-D transposes of more than ``MAX_DMAS`` matrices are timed on
    that many and scaled (each is an independent DMA, round-robin over the queues)."""
    batch = prod(layout.shape[:-2]) if layout.op == "transpose" and len(layout.shape) > 2 else 1
    if batch > MAX_DMAS and layout.perm[-2:] == (len(layout.perm) - 1, len(layout.perm) - 2):
        sample = Layout(layout.op, (MAX_DMAS, *layout.shape[-2:]), layout.dtype,
                        perm=(0, 2, 1))
        t = _timed(target, sample)
        f = batch / MAX_DMAS
        from trnsim.compiler.kernel_timing import scale_counts

        return LayoutTime(t.seconds * f, round(t.dma_bytes * f), round(t.instructions * f),
                          scale_counts(t.by_engine, f))
    return _timed(target, layout)


def layout_specs(layout: Layout) -> list[Any]:
    """The layout kernel's arguments as shape descriptions: ``x`` (a dynamic slice's as its ``GatherPlan``
    table), a dynamic update slice's update (as the ``ScatterPlan``'s rows when a start is data), then
    ``others`` (of ``index_dtype`` when given)."""
    import trnsim

    spec: Any = trnsim.TensorSpec
    shape = GatherPlan.of(layout).table if layout.op == "dynamic_slice" else layout.shape
    update: list[Any] = []
    if layout.op == "dynamic_update_slice":
        plan = ScatterPlan.of(layout)
        shape, rows = (plan.table, plan.update) if layout.others else (layout.shape, layout.sizes)
        update = [spec(rows, layout.dtype)]
    return [spec(shape, layout.dtype), *update,
            *(spec(s, layout.index_dtype or layout.dtype) for s in layout.others)]


@lru_cache(maxsize=1024)
def _timed(target: str, layout: Layout) -> LayoutTime:
    import trnsim
    from trnsim.sim.profile import Profile

    if not _KERNEL:
        _KERNEL.append(_kernel())
    result = trnsim.run_kernel(_KERNEL[0], *layout_specs(layout), target=target, timing=True, layout=layout)
    profile = result.profile
    assert isinstance(profile, Profile)
    from trnsim.compiler.kernel_timing import engine_counts

    return LayoutTime(profile.total_seconds, profile.dma_bytes, profile.instructions, engine_counts(profile))


def clear_memo() -> None:
    _timed.cache_clear()
    lookup_time.cache_clear()
    pick_time.cache_clear()
    for k in (*_KERNEL, *_PICK):
        k._cache.clear()  # pyright: ignore[reportPrivateUsage]


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
    from trnsim.sim.profile import Profile

    spec: Any = trnsim.TensorSpec
    ids = spec(lookup.ids, "int32")
    if lookup.op == "gather":
        result = trnsim.run_kernel(embedding_kernel, spec((lookup.vocab, lookup.width), lookup.dtype), ids,
                                   target=target, timing=True)
    else:
        result = trnsim.run_kernel(embedding_backward_kernel, spec((*lookup.ids, lookup.width), lookup.dtype), ids,
                                   target=target, timing=True, vocab=lookup.vocab, dtype=lookup.dtype)
    profile = result.profile
    assert isinstance(profile, Profile)
    from trnsim.compiler.kernel_timing import engine_counts

    return LayoutTime(profile.total_seconds, profile.dma_bytes, profile.instructions, engine_counts(profile))


# ---- one element per row: indirect DMA of single elements by flat address -------------------------------

EXACT = 2**24          # the ALU computes in fp32 (isa.ops): integer addresses below this are exact
MAX_PICK_TILES = 1024  # row tiles of one pick kernel; beyond this the step keeps the analytic cost
PICK_DEPTH = 8         # tiles whose addresses (and gathers) are issued ahead: the sync engine issues DMAs in order
GATHER_ROWS = 32       # rows of one gather of a dynamic slice whose rows exceed SMALL_ROW bytes (GatherPlan)
SMALL_ROW = 512        # bytes (reference/neuron.md §1.2: below 256 B a partition, DMA is overhead-bound)
INDEX_DTYPES: dict[str, str] = {k: DSL_DTYPE[k] for k in ("i32", "ui32", "i16", "ui16", "i8", "ui8")}
ACCUMULATE_DTYPES = ("fp32", "bf16")   # DMA read-add-write is BF16/FP32 (neuron.md §1.4), no ints (§1.5)


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


_PICK: list[Any] = []


def pick_kernel() -> Any:
    """The traced-on-demand pick kernel (``pick_rows``), shared by timing and tests."""
    if not _PICK:
        _PICK.append(_pick_kernel())
    return _PICK[0]


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
    from trnsim.compiler.kernel_timing import engine_counts
    from trnsim.sim.profile import Profile

    specs = pick_specs(pick)
    while specs and specs[-1] is None:
        specs.pop()
    result = trnsim.run_kernel(pick_kernel(), *specs, target=target, timing=True, pick=pick)
    profile = result.profile
    assert isinstance(profile, Profile)
    return LayoutTime(profile.total_seconds, profile.dma_bytes, profile.instructions, engine_counts(profile))
