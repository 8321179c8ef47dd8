"""What a generated tile kernel computes: the ``Recipe``, the tables that map StableHLO ops to NeuronCore
instructions, and the iteration space's shapes in HBM (the package docstring describes the layouts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trnsim.ir import types as ir_types

PARTITIONS = 128
TILE_COLS = 512           # 2 KiB of fp32 per partition per tile: efficient DMA (neuron.md §1.2), many in flight
PREFETCH = 4             # blocks loaded ahead of the one being computed (rows in chunks; else ``pipeline``)
PREFETCH_BYTES = 64 << 10  # per partition: the loads of the blocks ahead (a quarter of trn3's 256 KiB SBUF)
MIN_PIECE = 64 << 10     # bytes of a DMA piece: ~2 us at a queue's 33 GB/s, its fixed cost (``pipeline``)
QUEUES = 16              # DMA queues per core (trn3 preset); loads and stores are spread over them
MAX_INPUTS = 16          # the generated kernel's tensor parameters (a chlo.igamma loop body reads 13)
PSUM_COLS = 512          # fp32 per partition in one PSUM bank: one matmul's moving free size (neuron.md §2.2 TC#2)
PSUM_BANKS = 8           # the leading-axis sums of a group accumulate in PSUM's 8 banks of PSUM_COLS fp32
                         # (neuron.md §0: 2 MiB per core, 16 KiB per partition); a kernel that also
                         # transposes on TensorE then runs out of PSUM and keeps the analytic cost
EXACT_INDEX = 1 << 24    # iota arithmetic runs in fp32: element indices are exact below this
REPEATED = ("rep", "rep_row")  # input kinds of tables broadcast along middle axes, loaded per block (``repeat_runs``)
MAX_RUN = 65535          # elements in one free dimension of an access pattern (neuron.md §1.2: sizes are uint16)

# StableHLO op → ("alu", ISA ALU op) or ("act", ISA activation function)
ALU: dict[str, str] = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max",
                       "minimum": "min", "power": "pow", "remainder": "mod"}   # mod: fmod, exact
BITWISE: dict[str, str] = {"and": "and", "or": "or", "xor": "xor"}   # on i1 (uint8 masks) and integers
ACT: dict[str, str] = {"exponential": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt",
                       "rsqrt": "rsqrt", "abs": "abs", "negate": "neg", "sine": "sin", "cosine": "cos", "tan": "tan",
                       "log_plus_one": "log1p", "exponential_minus_one": "expm1", "cbrt": "cbrt"}
# (atan2 is composed from ScalarE's ``arctan``: ``build._atan2``)
# NOTE: ScalarE computes ``func(x * scale + bias)`` (isa.Activation), and the default bias +0 turns -0 into +0;
# functions with f(-0) ≠ f(+0) get the bias -0.0 instead, which keeps every input (x + (-0) = x, -0 + (-0) = -0):
# f(-0) = -0 (sin, tan, arctan, log1p, expm1, cbrt, tanh, sqrt), neg(-0) = +0, rsqrt(-0) = -inf
ZERO_SIGNED: frozenset[str] = frozenset({"sin", "tan", "arctan", "log1p", "expm1", "cbrt", "tanh", "sqrt", "neg",
                                         "rsqrt"})
CMP: dict[str, str] = {"EQ": "eq", "NE": "ne", "GT": "gt", "GE": "ge", "LT": "lt", "LE": "le"}
# i1 masks are 0/1 bytes; integers compute exactly through VectorE's fp32 below 2**24
DSL_DTYPE: dict[str, str] = {**ir_types.isa_dtypes(*ir_types.FLOATS, *ir_types.INTS), "i1": "uint8"}
# integer element type → the DSL dtype of its bits read unsigned. StableHLO integers wrap modulo 2**bits where an
# ISA write saturates (sim.values), so a result that may leave its type's range is made in int32 and its low
# bits kept by an integer ``and`` into this twin (a ``wrap`` step, bitcast back to a signed type): exact while
# the int32 value is, |x| <= 2**24 through VectorE's fp32 (every 8-bit op and 16-bit sum; other ops only where
# ``ranges`` bounds them so, else ``word`` steps: ``build.integer_form``)
WRAP: dict[str, str] = {"i8": "uint8", "i16": "uint16", "i32": "uint32", "ui8": "uint8", "ui16": "uint16",
                        "ui32": "uint32"}
# element type → the DSL unsigned integer type of its width, for the bitcasts a recipe makes (``build.bitcast``):
# 8- and 16-bit patterns are copied through VectorE's fp32 (exact), 32-bit ones by an integer ``or 0`` (exact:
# bitwise ops act on the integers, isa.ops)
BITS: dict[str, str] = {"bf16": "uint16", "f16": "uint16", "i16": "uint16", "ui16": "uint16", "i8": "uint8",
                        "ui8": "uint8", "f32": "uint32", "i32": "uint32", "ui32": "uint32"}
_NARROW = frozenset({"i8", "i16", "ui8", "ui16"})
UNSIGNED = frozenset({"ui8", "ui16", "ui32"})
# op → the integer types whose results it may take out of range when made in int32 (ui32's from its operands read
# as int32: ``build``; an i32 result of this form is within ±2**24: ``build.integer_form``)
WRAPPING: dict[str, frozenset[str]] = {"add": _NARROW | {"ui32"}, "multiply": _NARROW | {"ui32"}, "abs": _NARROW,
                                       "subtract": _NARROW | {"ui32"}, "negate": _NARROW | {"ui32"}}
INT_RANGE: dict[str, tuple[int, int]] = {"i8": (-1 << 7, (1 << 7) - 1), "i16": (-1 << 15, (1 << 15) - 1),
                                         "i32": (-1 << 31, (1 << 31) - 1), "ui8": (0, (1 << 8) - 1),
                                         "ui16": (0, (1 << 16) - 1), "ui32": (0, (1 << 32) - 1), "i1": (0, 1)}
FLOATS = frozenset({"f32", "bf16", "f16"})
FLOAT_BITS: dict[str, tuple[int, int]] = {"f32": (8, 23), "bf16": (8, 7), "f16": (5, 10)}   # (exponent, mantissa)
REDUCE: dict[str, str] = {"add": "add", "maximum": "max", "minimum": "min", "multiply": "mul"}
# element types whose products ``reduce`` generates (VectorE multiplies in fp32, rounding as the interpreter's
# product in the dtype does, in another order; i1's product is an ``and``). NOTE: integer products keep the
# analytic cost: StableHLO wraps them in their type, which an fp32 product gives only while its magnitude stays
# below 2**24 (a product of eight 8s already reaches it), so the kernel would not compute the program
PRODUCTS = frozenset({"f32", "bf16", "f16", "i1"})
IDENTITY: dict[str, float] = {"add": 0.0, "multiply": 1.0, "maximum": float("-inf"), "minimum": float("inf"),
                              "and": 1.0, "or": 0.0}
KEEP_BYTES = 16 << 20    # tiles kept for a per-tensor scaled second pass: half of trn3's 32 MiB SBUF
MX_BLOCK = 32             # elements sharing one E8M0 scale (numerics.mx)
MAX_ROW = 4096            # the row layout keeps whole rows in a tile: at most 16 KiB of fp32 per partition
# a longer row's tile passes over chunks of MAX_ROW columns; the chunks of its inputs read in more than one pass
# stay in SBUF (trn3: 32 MiB, 256 KiB per partition; neuron.md §0) up to this many bytes per
# partition, enough for two row tiles in flight next to the chunks' intermediates; above it they are reloaded
KEEP_ROW_BYTES = 64 << 10

Ref = tuple[str, Any]          # ("in", index) | ("tmp", index) | ("imm", float)
Step = tuple[str, str, tuple[Ref, ...], str]    # (kind, op, operands, DSL out dtype)


@dataclass(frozen=True)
class Recipe:
    """What a generated kernel computes: hashable, so traced kernels and their times are cached.

    ``cols == 0``: the flat layout, ``[128, N / 128]`` in column tiles. ``cols > 0``: the row layout, ``[N / cols,
    cols]`` in tiles of 128 rows, each in passes over chunks of ``chunk`` columns when ``chunk > 0`` (rows longer
    than ``MAX_ROW``; ``chunked``). Input kinds: ``full`` (a tile per block), ``row`` (a ``[rows, 1]`` column per
    block), ``mid`` (a ``[rows, inner]`` tile per block: a middle-axis reduction's width), ``red`` (a ``[P, W]``
    tile loaded after the loop, next to a leading-axis result), ``scalar`` (one ``[128, 1]`` column), ``vec`` /
    ``per`` (a ``[1, cols]`` / ``[P, cols]`` table repeated down the rows), ``rep`` / ``rep_row`` (an ``[O, I]``
    table broadcast along middle axes: each of its rows, ``I / w`` rows of the space of ``w = cols`` elements
    (``rep``: a tile per block) or of one (``rep_row``: a column per block), repeated ``repeats[i]`` times;
    ``repeat_runs``). Step kinds: ``alu``, ``act``, ``copy``, ``select``, ``wrap`` (op: the unsigned twin of the
    result's width, ``WRAP``: the operand's low bits read as the result's dtype), ``bitcast`` (op: the unsigned type
    of the width, ``BITS``), ``word`` (exact integer arithmetic beyond 2**24, op: ``intmath.word``'s), ``reduce``
    (free axis), ``middle`` (op over the middle axis of each row viewed ``[count, inner]``; operands: the value and
    ``count``), ``mx`` (an MX quantize-dequantize; op: the element format, operands: the value and 0 for blocks
    along a row, 1 for blocks down 32 rows), ``group`` (an int4 quantize-dequantize with an fp32 scale per 32
    elements, operands as ``mx``), ``scaled`` (a per-tensor scaled quantize-dequantize, op: the element format;
    phase ``late``), ``const`` (a memset tile), ``iota`` (op: its ``iota_form``; operands: the axis's stride and
    size in elements), ``lead`` (operands: the value, ``P`` and, for a sum folded onto PSUM partitions, its strips'
    columns (``lead_strips``); the ``[P, W]`` leading-axis reduction: sums on TensorE, maxima and minima in a
    running VectorE tile). ``phases`` says when each step runs: ``pre`` (once, before the tile loop), ``block``,
    ``post`` (once, after it), ``late`` (per tile again, after it). Output kinds: ``full``, ``row``, ``mid``, ``sc``
    (a scalar, or a vector of one repeated scalar, from a column), ``red`` (a leading-axis result)."""

    elements: int
    inputs: tuple[tuple[str, str], ...]                         # (DSL dtype, kind)
    steps: tuple[Step, ...]
    outputs: tuple[tuple[Ref, str], ...]                        # (what to store, DSL dtype)
    cols: int = 0
    output_kinds: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()                                # per step; () = all "block"
    input_shapes: tuple[tuple[int, int], ...] = ()              # HBM shapes; () = from the kinds
    output_shapes: tuple[tuple[int, int], ...] = ()
    chunk: int = 0                                              # > 0: rows longer than MAX_ROW, in chunks
    repeats: tuple[int, ...] = ()                               # per input: R of a ``rep`` / ``rep_row`` table


def space(recipe: Recipe) -> tuple[int, int]:
    """(rows, cols) of the iteration space in HBM: the row layout's rows, or the flat ``[128, N / 128]``."""
    if recipe.cols:
        return recipe.elements // recipe.cols, recipe.cols
    return PARTITIONS, recipe.elements // PARTITIONS


def block_dmas(recipe: Recipe) -> tuple[list[int], list[int]]:
    """Bytes of each load and each store of one block of the tile loop (a full block of ``min(128, rows)``
    rows; tables and columns loaded once aside)."""
    from trnsim.isa.dtypes import DTYPES

    rows, cols = space(recipe)
    lanes = min(PARTITIONS, rows)
    width = cols if recipe.cols else min(TILE_COLS, cols)
    shapes = input_shapes(recipe)
    loads = [lanes * (1 if kind in ("row", "rep_row") else shape[1] if kind == "mid" else width) * DTYPES[dt].itemsize
             for (dt, kind), shape in zip(recipe.inputs, shapes, strict=True)
             if kind in ("full", "row", "mid", *REPEATED) or (kind == "per" and PARTITIONS % shape[0])]
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    stores = [lanes * (1 if kind == "row" else shape[1] if kind == "mid" else width) * DTYPES[dt].itemsize
              for (_, dt), kind, shape in zip(recipe.outputs, kinds, output_shapes(recipe), strict=True)
              if kind in ("full", "row", "mid")]
    return loads, stores


def pipeline(recipe: Recipe) -> tuple[int, int]:
    """(blocks loaded ahead, pieces a block's DMA may be split into) of the tile loop (``emit``).

    NOTE: a DMA queue moves one transfer at a time, at 33 GB/s after a fixed ~2 us (neuron.md §1.3: 16
    queues, 528 GB/s per core; the trn3 preset's ``dma.latency``), so the loop keeps HBM busy only with
    about ``QUEUES`` transfers in flight. Blocks are loaded ahead up to ``PREFETCH_BYTES`` per partition (one
    block at least, ``QUEUES`` at most: small blocks far ahead, and five [128, 4096] fp32 inputs still fit in
    SBUF); then each DMA is split by partitions into up to 4 pieces (of 32 partitions or more) until about
    ``QUEUES`` loads are in flight, none smaller than ``MIN_PIECE`` (``pieces``). A [2048, 512] bf16
    ``x * 2``: 35.6 -> 17.0 us (the queues' bound: 12 us)."""
    loads, _ = block_dmas(recipe)
    if not loads:
        return PREFETCH, 1
    rows, cols = space(recipe)
    lanes = min(PARTITIONS, rows)
    blocks = -(-rows // PARTITIONS) if recipe.cols else -(-cols // TILE_COLS)   # as emit's tile loop
    # a kernel of fewer blocks has only those in flight, so their DMAs split further: a one-block AdamW
    # update of a [256, 256] parameter 24.6 -> 19.1 us, a [512, 2048] fp32 softmax 52.0 -> 35.6 us
    ahead = max(1, min(QUEUES, blocks, PREFETCH_BYTES * lanes // sum(loads)))
    return ahead, max(1, min(PARTITIONS // 32, -(-QUEUES // (ahead * len(loads)))))


def lead_strips(sums: list[tuple[int, int]]) -> list[int] | None:
    """Per leading-axis sum ``(P, W)`` of a kernel: the columns of each strip its ``[P, W]`` accumulator folds
    into (``leading``), ``W`` itself when the sums fit in the ``PSUM_BANKS`` side by side; None when they do
    not fit even folded (more sums than banks, or more than 128 partitions).

    NOTE: folded, every sum gets an even share of the banks (a 70B model's norm-scale gradient, [4096, 8192]
    → [8192], all 8: two strips of 4096 columns on partitions 0 and 1) and its strips the same number of them
    (4608 + 100 columns: two strips of 5 banks, 2560 columns, rather than 8 banks and 2 of them)."""
    need = [-(-width // PSUM_COLS) for _, width in sums]
    if sum(need) <= PSUM_BANKS:
        return [width for _, width in sums]
    share = PSUM_BANKS // len(sums)
    strips: list[int] = []
    for (period, width), banks in zip(sums, need, strict=True):
        if not share:
            return None
        count = -(-banks // share)
        strip = -(-banks // count) * PSUM_COLS
        if period * -(-width // strip) > PARTITIONS:
            return None
        strips.append(min(strip, width))
    return strips


def repeat_runs(r0: int, n: int, repeats: int, q: int, width: int,
                ways: int = 1) -> list[tuple[int, int, int, int, int, int]]:
    """The DMAs that fill rows ``r0 … r0 + n`` of the space from a table ``x[O, q · width]`` broadcast along
    middle axes: row ``r = (o · repeats + m) · q + i`` of the space is ``x[o, i · width : (i + 1) · width]``.
    Each is ``(row, o, k_o, k_m, c0, c1)``: the block's rows from ``row`` on are ``x[o : o + k_o, c0 : c1]``
    with each row repeated ``k_m`` times (a stride-0 source dimension), read in index order, so one DMA covers
    whole repeats, whole table rows, or a part of a repeat (at most five per block, those of whole repeats or
    table rows each in up to ``ways`` DMAs).

    NOTE: the natural NeuronCore form of a broadcast along a middle axis ([B, S] → [B, H, S], a GQA head
    repeat): the DMA engine reads the same HBM rows ``k_m`` times through a stride-0 access pattern, so the
    tile arrives as the space's rows with no engine work and one or two DMAs per block where a DMA per
    repeated row would cost its fixed ~2 us each."""
    runs: list[tuple[int, int, int, int, int, int]] = []
    period = repeats * q
    r, end = r0, r0 + n
    while r < end:
        o, rest = divmod(r, period)
        m, i = divmod(rest, q)
        if i or end - r < q:                             # a part of one repeat: consecutive table rows
            count = min(q - i, end - r)
            runs.append((r - r0, o, 1, 1, i * width, (i + count) * width))
            r += count
        elif m or end - r < period:                      # whole repeats of one table row
            k = min(repeats - m, (end - r) // q)
            for part in _split(k, ways):
                runs.append((r - r0, o, 1, part, 0, q * width))
                r += part * q
        else:                                            # whole table rows, each repeated
            k = (end - r) // period
            for part in _split(k, ways):
                runs.append((r - r0, o, part, repeats, 0, q * width))
                r += part * period
                o += part
    return runs


def _split(count: int, ways: int) -> list[int]:
    """``count`` in up to ``ways`` near-equal parts, as ``dsl.load``'s ``split`` cuts partitions."""
    step = -(-count // max(1, min(ways, count)))
    return [min(step, count - start) for start in range(0, count, step)]


def pieces(nbytes: int, split: int) -> int:
    """Pieces of a DMA of ``nbytes`` split ``split`` ways at most (``pipeline``): each at least ``MIN_PIECE``."""
    return max(1, min(split, nbytes // MIN_PIECE))


def iota_form(stride: int, size: int, cols: int) -> str:
    """How ``emit`` indexes an axis of ``stride`` and ``size`` elements in a space with rows of ``cols`` (0:
    the flat layout, whose partitions span the whole space): ``rows`` (coarser than a row: a tile's
    partition is the row), ``cols`` (within rows that hold whole periods: the tile's column), else ``flat``
    (the flat element index, from the tile's first modulo the period)."""
    if cols and stride % cols == 0:
        return "rows"
    if cols and cols % (stride * size) == 0:
        return "cols"
    return "flat"


def iota_largest(stride: int, size: int, cols: int, elements: int) -> int:
    """A bound on the integers ``emit`` computes an iota with (``iota_form``): a row index below the period in
    rows plus a tile of 128, a column index, the flat index below the period plus a tile (row layout) or
    the space (flat layout). A row index stays small whatever the space's size (a causal mask over 64 heads
    of [4096, 4096])."""
    period = stride * size
    form = iota_form(stride, size, cols)
    if form == "rows":
        return period // cols + PARTITIONS
    if form == "cols":
        return cols
    return period + PARTITIONS * cols if cols else elements


def input_shapes(recipe: Recipe) -> tuple[tuple[int, int], ...]:
    if recipe.input_shapes:
        return recipe.input_shapes
    rows, cols = space(recipe)
    shapes = {"full": (rows, cols), "row": (rows, 1), "scalar": (1, 1), "vec": (1, cols)}
    return tuple(shapes[kind] for _, kind in recipe.inputs)


def output_shapes(recipe: Recipe) -> tuple[tuple[int, int], ...]:
    if recipe.output_shapes:
        return recipe.output_shapes
    rows, cols = space(recipe)
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    return tuple((rows, cols if k == "full" else 1) for k in kinds)

