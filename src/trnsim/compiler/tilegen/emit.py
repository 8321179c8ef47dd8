"""The kernel emitter: one kernel in the kernel language, parameterised by its ``Recipe``, that loads the
iteration space tile by tile (software-pipelined), applies the recipe's steps in SBUF, accumulates
leading-axis sums on TensorE and stores the outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trnsim.compiler.kernel_timing import OnDemand
from trnsim.compiler.tilegen import chunked
from trnsim.compiler.tilegen.leading import Leading, finish
from trnsim.compiler.tilegen.recipe import (
    MX_BLOCK,
    PARTITIONS,
    QUEUES,
    REPEATED,
    TILE_COLS,
    Recipe,
    Ref,
    input_shapes,
    output_shapes,
    pieces,
    pipeline,
    repeat_runs,
    space,
)

kernel = OnDemand(lambda: _kernel())   # the generated-kernel function (made once: traces cached per recipe)


def forget_traces() -> None:
    kernel.forget()



def _kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor

    @dsl.kernel
    def fused_elementwise(a0: Tensor | None = None, a1: Tensor | None = None, a2: Tensor | None = None,
                          a3: Tensor | None = None, a4: Tensor | None = None, a5: Tensor | None = None,
                          a6: Tensor | None = None, a7: Tensor | None = None, a8: Tensor | None = None,
                          a9: Tensor | None = None, a10: Tensor | None = None, a11: Tensor | None = None,
                          a12: Tensor | None = None, a13: Tensor | None = None, a14: Tensor | None = None,
                          a15: Tensor | None = None, *, recipe: Recipe) -> tuple[Tensor, ...]:
        """The group's ops over tiles of its inputs (module docstring and ``Recipe``; ``MAX_INPUTS`` of them)."""
        ins = [a for a in (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) if a is not None]
        if recipe.chunk:
            return chunked.emit(dsl, ins, recipe)
        row_layout = recipe.cols > 0
        rows, cols = space(recipe)
        lanes = min(PARTITIONS, rows)                    # partitions of a full tile
        width = cols if row_layout else min(TILE_COLS, cols)
        phases = recipe.phases or ("block",) * len(recipe.steps)
        kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
        outs = [dsl.hbm_tensor(shape, dt, name=f"out{i}")
                for i, ((_, dt), shape) in enumerate(zip(recipe.outputs, output_shapes(recipe), strict=True))]
        shapes = input_shapes(recipe)
        # loaded once: computed scalars as [128, 1] columns; tables repeated down the rows as [lanes, cols]
        columns: dict[int, Tensor] = broadcast_inputs(dsl, ins, recipe, cols)
        for i, (x, (dt, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)):
            if kind == "per" and PARTITIONS % shapes[i][0] == 0:
                period = shapes[i][0]
                tile = dsl.sbuf((lanes, cols), dt)
                for r0 in range(0, lanes, period):
                    dsl.load(tile[r0:r0 + period], x[0:period, :], queue=(r0 // period) % QUEUES)
                columns[i] = tile
        pre: dict[int, Tensor] = {}
        sums: dict[int, Tensor] = {}                      # actsum step → its fused sum, until its summed step
        leading = Leading(dsl, recipe)
        for index, (kind, op, operands, dt) in enumerate(recipe.steps):
            if phases[index] != "pre":
                continue
            args = [pre[r[1]] if r[0] == "tmp" else columns[r[1]] if r[0] == "in" else r[1] for r in operands]
            pre[index] = compute(dsl, kind, op, args, dt, (lanes, width), 0, cols, recipe.elements)
        blocks = [(r0, min(PARTITIONS, rows - r0)) for r0 in range(0, rows, PARTITIONS)] if row_layout else \
            [(c0, min(TILE_COLS, cols - c0)) for c0 in range(0, cols, TILE_COLS)]
        queue = 0

        def part(x: Tensor, b0: int, bw: int) -> Tensor:
            return x[b0:b0 + bw, :] if row_layout else x[:, b0:b0 + bw]

        def cut(t: Tensor, bw: int) -> Tensor:
            """A tile made once (before the loop), as this block sees it."""
            if row_layout:
                return t[:bw]
            return t if t.shape[1] == 1 else t[:, :bw]

        def load_block(b0: int, bw: int) -> list[Tensor | None]:
            nonlocal queue
            tiles: list[Tensor | None] = []
            for i, (x, (dt, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)):
                if i in columns or kind == "red":
                    tiles.append(None)
                elif kind == "per":                      # a table whose period does not divide a tile
                    period = shapes[i][0]
                    tile = dsl.sbuf((bw, cols), dt)
                    r = 0
                    while r < bw:
                        src = (b0 + r) % period
                        run = min(bw - r, period - src)
                        dsl.load(tile[r:r + run], x[src:src + run, :], queue=queue % QUEUES)
                        queue += 1
                        r += run
                    tiles.append(tile)
                elif kind in REPEATED:                   # a table broadcast along middle axes
                    tiles.append(spread(i, x, kind, recipe.repeats[i], b0, bw, dt))
                else:
                    tiles.append(transfer(None, part(x, b0, bw), dt))
            return tiles

        def spread(i: int, x: Tensor, kind: str, repeats: int, b0: int, bw: int, dt: str) -> Tensor:
            """Rows ``b0 … b0 + bw`` of a ``rep`` / ``rep_row`` table's broadcast: DMAs reading its rows
            repeatedly through a stride-0 source dimension (``recipe.repeat_runs``). A block whose DMAs would be
            the previous block's (an attention mask's row repeated over 128 rows and more) reuses its tile."""
            nonlocal queue
            w = cols if kind == "rep" else 1
            runs = repeat_runs(b0, bw, repeats, x.shape[1] // w, w, pieces(bw * w * _itemsize(dt), split))
            if i in spreads and spreads[i][0] == runs and not late:
                return spreads[i][1]
            tile = dsl.sbuf((bw, w), dt)
            for row, o, k_o, k_m, c0, c1 in runs:
                src = x[o:o + k_o, c0:c1][:, None, :].broadcast_to((k_o, k_m, c1 - c0))
                dsl.dma_copy(tile[row:row + k_o * k_m * (c1 - c0) // w], src, queue=queue % QUEUES)
                queue += 1
            spreads[i] = (runs, tile)
            return tile

        def transfer(dst: Tensor | None, src: Tensor, dt: str) -> Tensor:
            """A block's load (``dst`` None: into a new tile) or store, in pieces of partitions (``pipeline``)."""
            nonlocal queue
            target = dsl.sbuf(src.shape, dt) if dst is None else dst
            queue = dma_pieces(dsl, target, src, dst is None, pieces(src.size * _itemsize(dt), split), queue)
            return target

        # step index → block intermediates read there for the last time (never the ones the group stores)
        # per-tensor scaled steps (phase ``late``) run after the loop on their source tiles, kept in SBUF
        late = [i for i, ph in enumerate(phases) if ph == "late"]
        sources = list(dict.fromkeys(recipe.steps[i][2][0] for i in late))
        retained: dict[Ref, list[Tensor]] = {r: [] for r in sources}
        peaks: dict[Ref, Tensor] = {r: dsl.full((PARTITIONS, 1), 0.0, "fp32") for r in sources}
        stored = {r[1] for r, _ in recipe.outputs if r[0] == "tmp"} | {r[1] for r in sources if r[0] == "tmp"}
        last: dict[int, int] = {}
        for index, (_, _, operands, _) in enumerate(recipe.steps):
            for r in operands:
                if r[0] == "tmp" and phases[r[1]] == "block" and phases[index] == "block":
                    last[r[1]] = index
        last_read: dict[int, list[int]] = {}
        for j, index in last.items():
            if j not in stored and recipe.steps[j][0] != "lead":
                last_read.setdefault(index, []).append(j)

        spreads: dict[int, tuple[list[tuple[int, int, int, int, int, int]], Tensor]] = {}   # input → last runs, tile
        # NOTE: software pipelining: DMAs issue in program order, so block i+ahead's loads are emitted
        # before block i's stores (which wait for its compute), keeping the queues busy
        ahead, split = pipeline(recipe)
        loaded = [load_block(*b) for b in blocks[:ahead]]
        for i, (b0, bw) in enumerate(blocks):
            if i + ahead < len(blocks):
                loaded.append(load_block(*blocks[i + ahead]))
            tiles = loaded[i]
            tmps: dict[int, Tensor] = {}

            def get(ref: Ref, tiles: list[Tensor | None] = tiles, tmps: dict[int, Tensor] = tmps,
                    bw: int = bw) -> Any:
                kind, value = ref
                if kind == "in":
                    t = tiles[value]
                    return cut(columns[value], bw) if t is None else t
                if kind == "tmp":
                    return cut(pre[value], bw) if phases[value] == "pre" else tmps[value]
                return value

            for index, (kind, op, operands, dt) in enumerate(recipe.steps):
                if phases[index] != "block":
                    continue
                args = [get(r) for r in operands]
                if kind == "lead":
                    leading.add(index, args[0], b0, 0, args[0].shape[1], i == 0)
                    continue
                shape = (bw, width) if row_layout else (PARTITIONS, bw)
                if kind == "actsum":                # an activation with its sum along the rows, fused
                    bias = args[1] if len(args) > 1 else None
                    tmps[index], sums[index] = dsl.activation_reduce(op, args[0], bias=bias, dtype=dt)
                elif kind == "summed":
                    total = sums.pop(operands[0][1])
                    tmps[index] = total if dt == "fp32" else dsl.copy(total, dtype=dt)
                    if dt != "fp32":
                        dsl.release(total)
                else:
                    tmps[index] = compute(dsl, kind, op, args, dt, shape, b0 * cols if row_layout else b0, cols,
                                          recipe.elements)
                # free the intermediates this step read for the last time: the working set stays small
                dead = [tmps.pop(j) for j in last_read.get(index, ()) if j in tmps]
                if dead:
                    dsl.release(*dead)
            for out, (ref, _), k in zip(outs, recipe.outputs, kinds, strict=True):
                if k in ("full", "row", "mid") and not (ref[0] == "tmp" and phases[ref[1]] == "late"):
                    transfer(part(out, b0, bw), get(ref), out.dtype)
                elif k == "sc" and i == 0:
                    dsl.store(out, get(ref)[0:out.shape[0]], queue=queue % QUEUES)
                    queue += 1
            kept: set[int] = set()
            for r in sources:
                t = get(r)
                fold_peak(dsl, t, peaks[r])
                retained[r].append(t)
                kept.add(id(t))
            kept |= {id(t) for later in loaded[i + 1:] for t in later if t is not None}   # a reused spread tile
            dsl.release(*(t for t in [*tiles, *tmps.values()] if t is not None and id(t) not in kept))
            loaded[i] = []
        # after the loop: leading-axis results leave PSUM, and the ops that read them run once
        queue = finish(dsl, recipe, ins, outs, leading, columns, queue, pre)
        # per-tensor scaling: the amax over the partitions (GpSimd), then a second pass over the kept tiles
        scales = tensor_scales(dsl, recipe, peaks)
        for i, (b0, bw) in enumerate(blocks):
            for out, (ref, _) in zip(outs, recipe.outputs, strict=True):
                if ref[0] != "tmp" or phases[ref[1]] != "late":
                    continue
                _, element, (r,), dt = recipe.steps[ref[1]]
                value = scaled_value(dsl, retained[r][i], scales[r, element], element, dt)
                dsl.store(part(out, b0, bw), value, queue=queue % QUEUES)
                queue += 1
                dsl.release(value)
            dsl.release(*{id(retained[r][i]): retained[r][i] for r in sources}.values())
        return tuple(outs)

    return fused_elementwise


def dma_pieces(dsl: Any, target: Any, src: Any, load: bool, ways: int, queue: int) -> int:
    """``target[...] = src`` by DMA (a load, or a store when not ``load``) as ``ways`` transfers of
    consecutive blocks of partitions on consecutive queues from ``queue`` (``dsl.load``'s ``split``); returns
    the next queue."""
    (dsl.load if load else dsl.store)(target, src, queue=queue % QUEUES, split=ways)
    rows = src.shape[0]
    return queue + -(-rows // -(-rows // min(ways, rows)))      # the pieces the split made


def broadcast_inputs(dsl: Any, ins: Any, recipe: Recipe, cols: int) -> dict[int, Any]:
    """The inputs loaded once, before the tile loop, by index: a scalar as a ``[128, 1]`` column, a vector
    along the rows as a ``[128, cols]`` tile (one broadcast DMA each)."""
    columns: dict[int, Any] = {}
    for i, (x, (_, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)):
        if kind == "scalar":
            columns[i] = dsl.load(x[0:1, 0:1].broadcast_to((PARTITIONS, 1)))
        elif kind == "vec":
            columns[i] = dsl.load(x[0:1, :].broadcast_to((PARTITIONS, cols)))
    return columns


def _itemsize(dt: str) -> int:
    from trnsim.isa.dtypes import DTYPES

    return DTYPES[dt].itemsize


def fold_peak(dsl: Any, t: Any, whole: Any) -> None:
    """``whole[p] = max(whole[p], max |t[p, :]|)``: ScalarE's abs with a fused max, then VectorE."""
    peak = dsl.sbuf((t.shape[0], 1), "fp32")
    magnitude = dsl.activation("abs", t, dtype="fp32", reduce_op="max", reduce_res=peak)
    part = whole[:t.shape[0]]
    dsl.binary("max", part, peak, out=part)
    dsl.release(peak, magnitude)


def tensor_scales(dsl: Any, recipe: Recipe, peaks: dict[Ref, Any]) -> dict[tuple[Ref, str], Any]:
    """Per (source, element format) of the recipe's per-tensor scaled steps: the ``[128, 1]`` scale
    ``max(amax, 2^-100) / format max``, the amax over the partitions of the source's running column by GpSimd
    (an all-zero tensor stays 0)."""
    scales: dict[tuple[Ref, str], Any] = {}
    for kind, element, (r, *_), _ in recipe.steps:
        if kind != "scaled" or (r, element) in scales:
            continue
        amax = dsl.partition_reduce(peaks[r], "max", dtype="fp32")
        guarded = dsl.binary("max", amax, 2.0 ** -100, dtype="fp32")
        scale = dsl.tensor_scalar(guarded, "div", _format_max(element), reverse0=True, dtype="fp32")
        scales[r, element] = dsl.partition_broadcast(scale, PARTITIONS)
        dsl.release(amax, guarded, scale)
    return scales


def scaled_value(dsl: Any, x: Any, scale: Any, element: str, dt: str) -> Any:
    """``round(x * scale, element) / scale`` in ``dt``: a per-tensor scaled quantize-dequantize of a kept tile
    (the rounding a dtype-converting copy)."""
    column = scale[:x.shape[0]]
    scaled = dsl.binary("mul", x, column, dtype="fp32")
    codes = dsl.copy(scaled, dtype=element, engine="scalar")
    value = dsl.binary("div", codes, column, dtype=dt)
    dsl.release(scaled, codes)
    return value


def compute(dsl: Any, kind: str, op: str, args: list[Any], dt: str, shape: tuple[int, int], base: int,
             multiplier: int, elements: int) -> Any:
    """One step on tiles. Constants and iotas are made as ``shape``; an iota's flat element index at
    partition ``p``, position ``j`` is ``base + multiplier * p + j``."""
    if kind == "alu":
        return dsl.binary(op, args[0], args[1], dtype=dt)
    if kind == "act":
        return dsl.activation(op, args[0], bias=args[1] if len(args) > 1 else None, dtype=dt)
    if kind == "copy":
        return dsl.copy(args[0], dtype=dt)
    if kind == "reduce":
        return dsl.reduce(op, args[0], axis=-1, dtype=dt)
    if kind == "middle":
        return _middle(dsl, op, args[0], int(args[1]), dt)
    if kind == "select":
        return dsl.where(args[0], args[1], args[2], dtype=dt)
    if kind == "wrap":                   # op: dt's unsigned twin; the low bits, read as dt (recipe.WRAP)
        from trnsim.isa.dtypes import DTYPES

        low = dsl.binary("and", args[0], float((1 << DTYPES[op].bits) - 1), dtype=op)
        return low if op == dt else low.bitcast(dt)
    if kind == "bitcast":                # op: the unsigned type of the width; its bits copied (build.bitcast)
        source = args[0].bitcast(op)
        bits = dsl.binary("or", source, 0.0, dtype=op) if op == "uint32" else dsl.copy(source, dtype=op)
        return bits if op == dt else bits.bitcast(dt)
    if kind == "word":                   # 32-bit integer arithmetic exact beyond 2**24 (build.word)
        from trnsim.compiler.intmath import word

        return word(op, args, dt)
    if kind == "const":
        size = (shape[0], 1) if op == "col" else shape
        if dt in ("int32", "uint32") and abs(args[0]) >= 2**24:     # a memset would round it through fp32
            from trnsim.compiler.intmath import word_tile

            return word_tile(args[0], size, dt)
        return dsl.full(size, args[0], dt)
    if kind in _GROUPED:
        return _grouped(dsl, _GROUPED[kind], args[0], op, int(args[1]), dt)
    assert kind == "iota", kind
    return _iota(dsl, op, int(args[0]), int(args[1]), dt, shape, base, multiplier, elements)


def _iota(dsl: Any, form: str, stride: int, size: int, dt: str, shape: tuple[int, int], base: int,
          multiplier: int, elements: int) -> Any:
    """The index along an axis of ``stride`` and ``size`` elements for a tile whose element ``(p, j)`` has the
    flat index ``e = base + multiplier * p + j``: ``(e mod (stride * size)) div stride``, computed as
    ``form`` says (``recipe.iota_form``; VectorE's mod and div run in fp32, exact below 2**24).

    NOTE: the instructions are the same in every tile and for any size of the space, so a sample of the tile
    loop times like the whole kernel, except for the ``flat`` form's mod (needed when the period is shorter
    than the space: ``timing`` times such kernels whole)."""
    period = stride * size
    if form == "rows":                   # whole rows of ``multiplier`` in the tile: the row index
        # tiles start at multiples of 128 rows: none crosses the period when 128 divides it
        rows = period // multiplier
        index = dsl.iota(shape, "int32", base=(base // multiplier) % rows, channel_multiplier=1, steps=[0])
        stride, period, wraps = stride // multiplier, rows, rows % PARTITIONS > 0
    elif form == "cols":                 # rows holding whole periods: the column index
        index = dsl.iota(shape, "int32", base=0, channel_multiplier=0, steps=[1])
        wraps = shape[1] > period
    else:
        index = dsl.iota(shape, "int32", base=base % period, channel_multiplier=multiplier, steps=[1])
        wraps = period < elements
    if wraps:
        index = dsl.binary("mod", index, float(period), dtype="int32")
    if stride > 1:
        low = dsl.binary("mod", index, float(stride), dtype="int32")
        index = dsl.binary("sub", index, low, dtype="int32")
        return dsl.binary("div", index, float(stride), dtype=dt)
    return index if dt == "int32" else dsl.copy(index, dtype=dt)


# VectorE cycles of an instruction (neuron.md §1.2): about 100 static, about N per input of N elements (per
# partition), and a free-dimension stride over 16 bytes halves the bandwidth (twice the cycles)
_STATIC_CYCLES = 100
_STRIDE_BYTES = 16


def _middle(dsl: Any, op: str, x: Any, count: int, dt: str) -> Any:
    """``op`` over the middle axis of ``x[rows, count · inner]`` viewed ``[rows, count, inner]``: a
    ``[rows, inner]`` tile.

    NOTE: two forms, both VectorE, the one with fewer cycles by neuron.md §1.2's rule. ``count - 1``
    tensor_tensor ops fold the ``[rows, inner]`` slices in order (in fp32, rounded to ``dt`` by the last):
    ``(count - 1) · (100 + 2 · inner)`` cycles. Or the tile is copied into a ``[rows, count, inner]`` tile
    (the kernel language has no reshaping view of a tile) and one tensor_reduce reduces its middle free axis
    (the ISA's TensorReduce reduces any free axes, accumulating in fp32): ``200 + count · inner · (1 + s)``,
    ``s`` 2 when the stride of ``inner`` elements exceeds 16 bytes. Folding wins unless ``inner`` is narrow
    (GQA's head dimension folds; a sum over 16 groups of 2 reduces)."""
    from trnsim.isa.dtypes import DTYPES

    rows = x.shape[0]
    inner = x.shape[1] // count
    folds = (count - 1) * (_STATIC_CYCLES + 2 * inner)
    strided = 2 if inner * DTYPES[x.dtype].itemsize > _STRIDE_BYTES else 1
    reduced = 2 * _STATIC_CYCLES + count * inner * (1 + strided)
    if folds > reduced:
        grouped = dsl.sbuf((rows, count, inner), x.dtype)
        dsl.copy(x, out=grouped)
        out = dsl.sbuf((rows, inner), dt)
        dsl.reduce(op, grouped, axis=1, out=out)
        dsl.release(grouped)
        return out
    if count == 2:
        return dsl.binary(op, x[:, :inner], x[:, inner:], dtype=dt)
    acc = dsl.binary(op, x[:, :inner], x[:, inner:2 * inner], dtype="fp32")
    for j in range(2, count - 1):
        dsl.binary(op, acc, x[:, j * inner:(j + 1) * inner], out=acc)
    out = dsl.binary(op, acc, x[:, (count - 1) * inner:], dtype=dt)
    dsl.release(acc)
    return out


def _grouped(dsl: Any, rows_qdq: Callable[[Any, Any, str, str], Any], x: Any, element: str, down: int,
             dt: str) -> Any:
    """A quantize-dequantize of a ``[rows, cols]`` tile with one scale per group of 32 elements along each
    row (``down`` 0) or down 32 consecutive rows (1); ``rows_qdq`` does it along the rows of a tile.

    NOTE: groups down the rows span 32 partitions. TensorE transposes the tile (bit-exact, up to 128 columns
    at a time), the groups run along its rows there, and it transposes the result back: two identity
    matmuls per chunk instead of a GpSimd partition reduce and broadcast per group (8 per 128-row tile, on
    the engine slowest per element): 22.7 vs 30.7 us for a [1024, 128] MX qdq alone."""
    if not down:
        return rows_qdq(dsl, x, element, dt)
    rows, cols = x.shape
    result = dsl.sbuf((rows, cols), dt)
    for c0 in range(0, cols, PARTITIONS):
        c1 = min(cols, c0 + PARTITIONS)
        flipped = dsl.transpose(x[:, c0:c1])
        chunk = rows_qdq(dsl, flipped, element, "fp32")
        back = dsl.transpose(chunk)
        dsl.copy(back, out=result[:, c0:c1])
        dsl.release(flipped, chunk, back)
    return result


def _mx_rows(dsl: Any, x: Any, element: str, dt: str) -> Any:
    """MX quantize-dequantize of ``x[P, F]`` in blocks of 32 along each row (F a multiple of 32), as
    ``numerics.mx`` computes it (the floor scale rule, RNE, saturating):

        amax   = max |x| over the block                                      # the tile as [P, F / 32, 32]
        scale  = bitcast(bitcast(amax, int32) & 0x7F800000, fp32) / 2^emax   # 2^(floor(log2 amax) - emax)
        q      = round(clamp(x / scale, -max, max), element)                 # a dtype-converting copy
        result = q * scale
    """
    from trnsim.numerics.formats import FloatFormat, get_format

    fmt = get_format(element)
    assert isinstance(fmt, FloatFormat)
    rows, cols = x.shape
    shape = (rows, cols // MX_BLOCK, MX_BLOCK)
    magnitude = dsl.sbuf(shape, "fp32")
    dsl.activation("abs", x, out=magnitude)
    amax = dsl.reduce("max", magnitude, axis=-1, dtype="fp32")
    bits = dsl.binary("and", amax.bitcast("int32"), float(0x7F800000), dtype="int32")
    # NOTE: an all-zero (or subnormal) block gets a tiny scale instead of 0: its elements stay 0
    scale = dsl.tensor_scalar(bits.bitcast("fp32"), "max", 2.0 ** -100, "mul", 2.0 ** -fmt.emax, dtype="fp32")
    inverse = dsl.activation("reciprocal", scale, dtype="fp32")
    scaled = dsl.binary("mul", x, inverse.broadcast_to(shape), dtype="fp32")
    clamped = dsl.tensor_scalar(scaled, "min", fmt.max, "max", -fmt.max, dtype="fp32")
    codes = dsl.copy(clamped, dtype=fmt.name, engine="scalar")
    result = dsl.binary("mul", codes, scale.broadcast_to(shape), dtype=dt)
    dsl.release(magnitude, amax, bits, scale, inverse, scaled, clamped, codes)
    return result


def _int_rows(dsl: Any, x: Any, element: str, dt: str) -> Any:
    """Symmetric integer quantize-dequantize of ``x[P, F]`` in groups of 32 along each row (F a multiple of
    32), as ``numerics.intq`` computes it for ``granularity="group"`` (int4: ``qmax`` 7):

        amax   = max |x| over the group                 # the tile as [P, F / 32, 32]
        scale  = max(amax / qmax, 2^-149)               # fp32; intq's scale 1 of an all-zero group alike: q = 0
        q      = x / scale                              # written as int4 codes: RNE, |q| <= qmax
        result = q * scale

    NOTE: the division and the write's rounding are intq's own float32 ``rint(x / scale)``: the same
    correctly rounded fp32 quotient, rounded half to even. No clamp is needed: ``scale`` is ``amax / qmax``
    rounded, at least ``amax / qmax * (1 - 2^-24)``, so ``|x / scale|`` rounds to at most ``qmax``."""
    from trnsim.ir.semantics.quant import GROUP
    from trnsim.numerics.formats import IntFormat, get_format

    fmt = get_format(element)
    assert isinstance(fmt, IntFormat)
    rows, cols = x.shape
    shape = (rows, cols // GROUP, GROUP)
    magnitude = dsl.sbuf(shape, "fp32")
    dsl.activation("abs", x, out=magnitude)
    amax = dsl.reduce("max", magnitude, axis=-1, dtype="fp32")
    scale = dsl.tensor_scalar(amax, "div", float(fmt.max), "max", 2.0 ** -149, dtype="fp32")
    codes = dsl.binary("div", x, scale.broadcast_to(shape), dtype=fmt.name)
    result = dsl.binary("mul", codes, scale.broadcast_to(shape), dtype=dt)
    dsl.release(magnitude, amax, scale, codes)
    return result


# grouped quantize-dequantize step kind → its computation along the rows of a tile
_GROUPED: dict[str, Callable[[Any, Any, str, str], Any]] = {"mx": _mx_rows, "group": _int_rows}


def _format_max(element: str) -> float:
    from trnsim.numerics.formats import FloatFormat, get_format

    fmt = get_format(element)
    assert isinstance(fmt, FloatFormat)
    return fmt.max
