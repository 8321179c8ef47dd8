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

``layout_copy`` is also the entry point of dynamic slices and updates whose starts are data; their plans and
kernels, and the gather and scatter-add forms, are ``dmaindex``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

from trnsim.compiler import dmaindex
from trnsim.compiler.dmaindex import (
    DSL_DTYPE,
    EXACT,
    FILL_COLS,
    MAX_PICK_TILES,
    QUEUES,
    START_DTYPES,
    GatherPlan,
    LayoutTime,
    ScatterPlan,
    chunks,
    gather_slice,
    indices,
    scatter_update,
    start_words,
)
from trnsim.compiler.kernel_timing import OnDemand
from trnsim.ir.graph import Node, Value
from trnsim.isa.dtypes import get_dtype

MAX_INPUTS = 8
FILL_SPLIT = 64 * 1024    # bytes: a fill region beyond this goes in pieces over the queues (one DMA a queue)
MAX_DMAS = 512            # batched 2-D transposes beyond this many are timed on a sample and scaled
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
                                              # of ``index_dtype`` (a 64-bit start: its two words, ``(2,)``)


def layout_for(node: Node) -> Layout | None:
    """The generated form of a transpose, slice, reverse, pad or concatenate node, or None (other ops, dtypes
    or 0-d tensors)."""
    if node.op == "concatenate":   # of its non-empty inputs (an empty one adds nothing: JAX emits such)
        parts = [v.type for v in node.inputs if v.type.size]
        first = parts[0] if parts else None
        if first is None or first.rank == 0 or first.dtype not in LAYOUT_DTYPE or len(parts) > MAX_INPUTS or \
                any(p.dtype != first.dtype for p in parts):
            return None
        return Layout("concatenate", first.shape, LAYOUT_DTYPE[first.dtype],
                      others=tuple(p.shape for p in parts[1:]), axis=int(node.attrs["dimension"]))
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
    return None


def _dynamic_slice_for(node: Node) -> Layout | None:
    """A ``dynamic_slice`` with start indices that are data as a row gather (``GatherPlan``); with constant
    starts alone it is a slice (StableHLO clamps each start to ``[0, n - size]``). None when the starts are
    not integers the DMA gather's address computation takes, or the gather would need more than
    ``MAX_PICK_TILES`` DMAs or a table of ``EXACT`` rows or more."""
    x, starts = node.inputs[0].type, node.inputs[1:]
    sizes = tuple(int(z) for z in node.attrs["slice_sizes"])
    if len(starts) != x.rank or len(starts) >= MAX_INPUTS or any(v.type.dtype not in START_DTYPES for v in starts) \
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
                    others=tuple(start_words(v.type.dtype) for c, v in zip(const, starts, strict=True) if c is None),
                    index_dtype=START_DTYPES[starts[0].type.dtype])
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
    if len(starts) != x.rank or any(v.type.dtype not in START_DTYPES for v in starts) or update.dtype != x.dtype:
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
    layout = Layout("dynamic_update_slice", x.shape, dtype, start=start, sizes=sizes,
                    others=tuple(start_words(v.type.dtype) for c, v in zip(const, starts, strict=True) if c is None),
                    index_dtype=START_DTYPES[starts[0].type.dtype])
    plan = ScatterPlan.of(layout)
    return layout if plan.table[0] < EXACT and len(plan.tiles) <= MAX_PICK_TILES else None


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
            for i0, i1 in chunks(dst.shape[0]):
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
            return gather_slice(layout, x, [v for v in (x1, x2, x3, x4, x5, x6, x7) if v is not None])
        if layout.op == "dynamic_update_slice":
            assert x1 is not None
            return scatter_update(layout, x, x1, [v for v in (x2, x3, x4, x5, x6, x7) if v is not None])
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
            for i0, i1 in chunks(view.shape[0]):
                copy(out[i0:i1], view[i0:i1])
            return out
        perm = layout.perm
        rank = len(perm)
        out = dsl.hbm_tensor(tuple(x.shape[a] for a in perm), x.dtype, name="out")
        if perm[-1] == rank - 1 or rank == 1:
            view = x.permute(*perm)
            for i0, i1 in chunks(out.shape[0]):
                copy(out[i0:i1], view[i0:i1])
        elif rank >= 2 and tuple(perm[:-2]) == tuple(range(rank - 2)) and perm[-2:] == (rank - 1, rank - 2):
            for lead in indices(x.shape[:-2]):
                copy(out[lead], x[lead].T)
        elif _slabs(layout) <= MAX_DMAS:
            # out's innermost axis is x's axis a, x's innermost lands at out's axis q: for each index of the
            # other axes, the [n_a, n_last] slab of x goes transposed to out's [n_last, n_a] slab
            a, q = perm[-1], perm.index(rank - 1)
            others = [d for d in range(rank) if d not in (a, rank - 1)]
            for idx in indices(tuple(x.shape[d] for d in others)):
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
        for i0, i1 in chunks(view.shape[0]):
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



_KERNEL = OnDemand(lambda: _kernel())



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

    return LayoutTime.of(trnsim.run_kernel(_KERNEL(), *layout_specs(layout), target=target, timing=True,
                                           layout=layout))


def clear_memo() -> None:
    _timed.cache_clear()
    _KERNEL.forget()
    dmaindex.clear_memo()
