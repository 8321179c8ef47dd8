"""The recipe builder: what a fused group becomes. Values get refs in the iteration space as they are
needed, broadcasts materialise their operands where they are used, reductions run along rows (VectorE) or
over the leading axes (TensorE); a group that fits none of it has no recipe (package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from trnsim.compiler.tilegen.ranges import Ranges, exact
from trnsim.compiler.tilegen.recipe import (
    ACT,
    ALU,
    BITS,
    BITWISE,
    CMP,
    DSL_DTYPE,
    EXACT_INDEX,
    FLOAT_BITS,
    FLOATS,
    IDENTITY,
    INT_RANGE,
    KEEP_BYTES,
    MAX_INPUTS,
    MAX_ROW,
    MAX_RUN,
    MX_BLOCK,
    PARTITIONS,
    PRODUCTS,
    REDUCE,
    REPEATED,
    UNSIGNED,
    WRAP,
    WRAPPING,
    ZERO_SIGNED,
    Recipe,
    Ref,
    Step,
    iota_form,
    iota_largest,
    lead_strips,
)
from trnsim.ir.graph import Node, Value


def _nonunit(shape: tuple[int, ...]) -> list[int]:
    return [i for i, d in enumerate(shape) if d != 1]


def _unit_reduce(node: Node) -> bool:
    """A reduce over axes of size 1 only: a view when its init is the combiner's identity."""
    from trnsim.ir.semantics.reduce import simple_combiner

    if node.op != "reduce" or len(node.inputs) != 2:
        return False
    x = node.inputs[0].type
    op = simple_combiner(node.regions[0])
    init = _immediate(node.inputs[1])
    return all(x.shape[d] == 1 for d in node.attrs["dimensions"]) and op in IDENTITY and init is not None and \
        init[1] == _identity(op, x.dtype)


def _identity(op: str, dtype: str) -> float:
    """The init that leaves a reduction unchanged: an integer type's own extremes for its maxima and minima."""
    if dtype in INT_RANGE and op in ("maximum", "minimum"):
        return float(INT_RANGE[dtype][0 if op == "maximum" else 1])
    return IDENTITY[op]


def _immediate(v: Value) -> Ref | None:
    """A scalar constant (the planner leaves those out of a step's inputs: they are immediates), or a splat
    constant (one value repeated: a chlo decomposition's polynomial coefficients ``dense<c> : tensor<20x20xf32>``),
    which an instruction's immediate broadcasts as well instead of a load."""
    producer = v.producer
    if producer is None or producer.op != "constant" or v.type.size > _SPLAT_CHECK:
        return None
    flat = producer.attrs["value"].reshape(-1)
    first = flat[0]
    if v.type.size == 1 or bool((flat == first).all()) or bool(np.isnan(first) and np.isnan(flat).all()):
        return ("imm", float(first))
    return None


_SPLAT_CHECK = 1 << 16    # elements of a constant compared with its first to find a splat (larger: a load)


def _middle(node: Node) -> tuple[int, int, int] | None:
    """``(outer, R, inner)`` of a reduce over a block of middle axes (its operand viewed ``[outer, R, inner]``,
    reducing ``R``, ``outer`` and ``inner`` both over 1: the gradient of a GQA key/value head repeat), else
    None."""
    if node.op != "reduce" or _unit_reduce(node):
        return None
    shape = node.inputs[0].type.shape
    dims = {d for d in node.attrs["dimensions"] if shape[d] != 1}
    if not dims:
        return None
    lo, hi = min(dims), max(dims)
    if any(d not in dims and shape[d] != 1 for d in range(lo, hi + 1)):
        return None                      # two separate blocks of reduced axes
    outer, inner = prod(shape[:lo]), prod(shape[hi + 1:])
    if outer == 1 or inner == 1:
        return None
    return outer, prod(shape[d] for d in dims), inner


def _layout(nodes: list[Node], n: int) -> tuple[int, tuple[int, ...]] | None:
    """``(cols, shape)`` of the iteration space: cols 0 for the flat layout; None if neither fits."""
    full = [v for nd in nodes for v in (*nd.inputs, *nd.outputs) if v.type.size == n and v.type.rank]
    if not full:
        # a group of scalars (a compare of two 0-d values): one row of one column, each value a [1, 1] column
        return (1, (1,)) if n == 1 else None
    middles = {m for nd in nodes if (m := _middle(nd)) is not None}
    if middles:
        # NOTE: a middle-axis reduction makes the rows: [outer, R · inner] with its results [outer, inner];
        # every other op working along rows would need rows of its own, so such a group keeps no layout
        (outer, r, inner), *others = middles
        if others or any(_along_rows(nd) and (_middle(nd) is None or nd.inputs[0].type.size != n) for nd in nodes):
            return None
        return r * inner, (outer, r * inner)
    rows_needed = False
    for node in nodes:
        if node.op == "reduce" and not _unit_reduce(node):
            x = node.inputs[0].type
            rows_needed |= tuple(node.attrs["dimensions"]) != tuple(range(x.rank)) or x.size != n
        elif node.op == "broadcast_in_dim" and node.inputs[0].type.size not in (1, node.out.type.size):
            rows_needed = True
        elif node.op == "qdq" and _scaling(node) in ("block", "group"):
            rows_needed = True           # MX blocks and int4 groups run along a row or down 32 rows
    if not rows_needed:
        if n >= PARTITIONS and n % PARTITIONS == 0:
            return 0, full[0].type.shape
        # too few elements, or a count 128 does not divide, for the flat layout: the rows of a full value (any
        # will do: elementwise ops see one row-major order), e.g. an SGD update of a [32, 10] weight
        shape = full[0].type.shape
        return (shape[-1], shape) if shape[-1] <= MAX_ROW else None
    # NOTE: elementwise ops see the same row-major order whatever a full value's shape; only the ops that
    # work along rows (reductions, broadcasts, iotas, MX blocks) need their values' rows to be the space's
    along = [v for nd in nodes if _along_rows(nd) for v in (*nd.inputs, *nd.outputs) if v.type.size == n and
             v.type.rank]                # (not a 0-d init value of a one-element space)
    shape = next((nd.inputs[0].type.shape for nd in nodes if nd.op == "reduce" and nd.inputs[0].type.size == n),
                 (along or full)[0].type.shape)
    cols = shape[-1]
    if any(v.type.shape[-1] != cols for v in along or full):
        return None                      # a reshape that moves the row boundary
    return cols, shape


def _along_rows(node: Node) -> bool:
    if node.op == "broadcast_in_dim":
        return node.inputs[0].type.size not in (1, node.out.type.size)
    if node.op == "qdq":
        return _scaling(node) in ("block", "group")
    return node.op == "iota" or (node.op == "reduce" and not _unit_reduce(node))


# op → (the immediate that leaves the other operand unchanged, whether it may come first): x - 0, x * 1,
# x / 1, max(x, -inf), min(x, +inf) exactly (signed zeros and NaNs too); x + 0 only on integers (-0 + 0 = +0)
_NEUTRAL: dict[str, tuple[float, bool]] = {"subtract": (0.0, False), "multiply": (1.0, True),
                                           "divide": (1.0, False), "maximum": (float("-inf"), True),
                                           "minimum": (float("inf"), True)}


def _unchanged(op: str, operands: tuple[Ref, ...], dtype: str) -> Ref | None:
    """The operand an op returns unchanged (an identity a JAX program keeps: a causal mask's ``+ 0`` and
    ``select(mask, True, False)``, softmax's ``max(m, -inf)``), or None: one VectorE pass a tile fewer."""
    neutral = _NEUTRAL.get(op) or ((0.0, True) if op == "add" and dtype in INT_RANGE else None)
    if neutral is not None and len(operands) == 2:
        value, either = neutral

        def same(r: Ref) -> bool:              # the immediate, its sign too (x - (-0.0) is x + 0: -0 → +0)
            return r[0] == "imm" and r[1] == value and bool(np.signbit(r[1])) == bool(np.signbit(value))

        if same(operands[1]):
            return operands[0]
        if either and same(operands[0]):
            return operands[1]
    if op == "select" and dtype == "i1" and operands[1:] == (("imm", 1.0), ("imm", 0.0)):
        return operands[0]               # the mask itself (0/1 bytes)
    return None


# integer ops exact on any values: bitwise, or moving values unchanged (a unit reduce is a view)
_BIT_EXACT = frozenset({"and", "or", "xor", "not", "shift_left", "shift_right_logical", "shift_right_arithmetic",
                        "bitcast_convert", "iota", "sign", "reshape", "broadcast_in_dim", "reduce"})
# step kinds that compute element by element (a scalar column of them can be made before the tile loop)
_ELEMENTWISE_STEPS = frozenset({"alu", "act", "copy", "select", "wrap", "bitcast", "const", "word"})
# StableHLO op → its ``word`` step's op (``intmath.word``)
_WORD: dict[str, str] = {"add": "add", "subtract": "sub", "multiply": "mul", "maximum": "max", "minimum": "min",
                         "divide": "div", "remainder": "rem"}

# compare types whose order is the values' numeric order, as VectorE compares them in fp32 (integers exactly below
# 2**24); TOTALORDER is that order on integers only (on floats it also orders -0 < +0 and the NaNs)
_COMPARE_TYPES = frozenset({"FLOAT", "SIGNED", "UNSIGNED"})


def _scaling(node: Node) -> str:
    from trnsim.ir.semantics.quant import QDQ_FORMATS

    return QDQ_FORMATS.get(node.attrs["format"], ("", ""))[1]


class _Builder:
    """Builds a recipe from a group: values get refs as they are needed, broadcasts materialise their
    operands into the iteration space (module docstring)."""

    def __init__(self, nodes: list[Node], external: list[Value], n: int, cols: int, shape: tuple[int, ...]) -> None:
        self.nodes, self.n, self.cols, self.shape = nodes, n, cols, shape
        self.rows = n // cols if cols else PARTITIONS
        self.external = {v.id for v in external}
        self.produced = {v.id: nd for nd in nodes for v in nd.outputs}
        self.refs: dict[int, Ref] = {}                  # eager values: their ref in the iteration space
        self.kinds: dict[Ref, str] = {}                 # imm | full | vec | col | sc | red
        self.red_shape: dict[Ref, tuple[int, int]] = {}
        self.inputs: list[tuple[str, str]] = []
        self.sources: list[Value] = []                  # the group's value behind each input
        self.input_shapes: list[tuple[int, int]] = []
        self.repeats: list[int] = []                    # per input: R of a table broadcast along middle axes
        self.steps: list[Step] = []
        self.phases: list[str] = []
        self.memo: dict[tuple[Any, ...], Ref | None] = {}
        self.along: dict[int, bool] = {}
        self.kept: dict[Ref, int] = {}                  # bytes of the tiles kept for a per-tensor scale
        self.inner = 0                                  # the width of a middle-axis reduction's results
        self.ranges = Ranges(nodes)                     # the integer values each value can hold

    def ir_dtype(self, v: Value) -> str:
        """``v``'s element type as the kernel computes it: a 64-bit integer whose values all fit an int32
        (``ranges``: JAX's u64 counter iotas, i64 index arithmetic on i32 indices) is an i32, computed as one:
        no op that makes such a value wraps, so its i32 result is the i64 one; the rest their own type."""
        r = self.ranges.of(v)
        if v.type.dtype in ("i64", "ui64") and r is not None and INT_RANGE["i32"][0] <= r[0] and \
                r[1] <= INT_RANGE["i32"][1]:
            return "i32"
        return v.type.dtype

    def along_rows(self, v: Value) -> bool:
        """Whether ``v`` is made in the group by an op that works along rows, directly or through others."""
        if v.id not in self.along:
            node = self.produced.get(v.id)
            self.along[v.id] = node is not None and (_along_rows(node) or any(self.along_rows(u) for u in node.inputs))
        return self.along[v.id]

    # ---- refs ------------------------------------------------------------------------------------------
    def kind(self, ref: Ref) -> str:
        return "imm" if ref[0] == "imm" else self.kinds[ref]

    def dtype_of(self, ref: Ref) -> str:
        """The DSL dtype a loaded input or a step's result holds."""
        return self.inputs[ref[1]][0] if ref[0] == "in" else self.steps[ref[1]][3]

    def push(self, step: Step, kind: str, phase: str | None = None) -> Ref:
        self.steps.append(step)
        self.phases.append(phase or {"vec": "pre", "red": "post"}.get(kind, "block"))
        ref: Ref = ("tmp", len(self.steps) - 1)
        self.kinds[ref] = kind
        return ref

    def load(self, v: Value, kind: str, shape: tuple[int, int], ref_kind: str, repeats: int = 0) -> Ref | None:
        key = ("load", v.id, kind, shape, repeats)
        if key in self.memo:
            return self.memo[key]
        if v.type.dtype not in DSL_DTYPE or len(self.inputs) >= MAX_INPUTS:
            return None
        ref: Ref = ("in", len(self.inputs))
        self.inputs.append((DSL_DTYPE[v.type.dtype], kind))
        self.sources.append(v)
        self.input_shapes.append(shape)
        self.repeats.append(repeats)
        self.kinds[ref] = ref_kind
        self.memo[key] = ref
        return ref

    def const(self, value: float, dtype: str, column: bool = False) -> Ref:
        """A constant tile made once before the loop: as wide as a block, or a ``[rows, 1]`` column."""
        key = ("const", value, bool(np.signbit(value)), dtype, column)    # (-0.0 == 0.0 in Python)
        ref = self.memo.get(key)
        if ref is None:
            ref = self.push(("const", "col" if column else "", (("imm", value),), dtype), "sc" if column else "vec")
            self.memo[key] = ref
        return ref

    # ---- materialising values into the iteration space ---------------------------------------------
    def row_dims(self, v: Value) -> tuple[int | None, ...] | None:
        """How a value per row (its shape, unit axes aside, the leading axes of the space) maps into it."""
        lead = _nonunit(self.shape[:-1])
        mine = _nonunit(v.type.shape)
        if not self.cols or [v.type.shape[i] for i in mine] != [self.shape[i] for i in lead]:
            return None
        dims: list[int | None] = [None] * v.type.rank
        for i, j in zip(mine, lead, strict=True):
            dims[i] = j
        return tuple(dims)

    def value(self, v: Value, target: tuple[int, ...], dims: tuple[int | None, ...]) -> Ref | None:
        """``v`` broadcast into ``target`` (``dims[i]``: the target axis of ``v``'s axis ``i``, None for a
        unit axis): an immediate, a tile of the space, a column, or None."""
        imm = _immediate(v)
        if imm is not None:
            return imm
        if all(d is None for d in dims):
            target = ()                  # a scalar broadcast: the same column whatever the target
        key = ("value", v.id, target, dims)
        if key not in self.memo:
            self.memo[key] = self._value(v, target, dims)
        return self.memo[key]

    def _value(self, v: Value, target: tuple[int, ...], dims: tuple[int | None, ...]) -> Ref | None:
        mapped = [(d, v.type.shape[i]) for i, d in enumerate(dims) if d is not None and v.type.shape[i] != 1]
        axes = [d for d, _ in mapped]
        size = prod(s for _, s in mapped)
        in_order = axes == sorted(axes) and len(set(axes)) == len(axes)
        r = len(target)
        eager = self.refs.get(v.id)
        if eager is not None:
            k = self.kind(eager)
            if k in ("imm", "sc"):
                return eager
            if k in ("full", "vec") and in_order and size == self.n:
                return eager
            if k == "col" and in_order and size == self.rows and (not axes or axes[-1] < r - 1):
                return eager
            return None
        if v.id in self.external:
            return self._external(v, target, mapped, in_order, size)
        node = self.produced.get(v.id)
        if node is None or len(node.outputs) != 1:
            return None
        if node.op == "iota":
            return self._iota(node, target, dims)
        if node.op == "broadcast_in_dim":
            bd = node.attrs["broadcast_dimensions"]
            u = node.inputs[0]
            return self.value(u, target, tuple(None if u.type.shape[i] == 1 else dims[b] for i, b in enumerate(bd)))
        if node.op == "reshape" or (node.op == "reduce" and _unit_reduce(node)):
            u = node.inputs[0]
            if u.type.size == self.n and dims == tuple(range(v.type.rank)) and \
                    (not self.cols or (u.type.rank and v.type.rank and u.type.shape[-1] == v.type.shape[-1])
                     or not self.along_rows(u)):
                return self.value(u, u.type.shape, tuple(range(u.type.rank)))   # same element order
            if [u.type.shape[i] for i in _nonunit(u.type.shape)] != [v.type.shape[i] for i in _nonunit(v.type.shape)]:
                return None
            sub: list[int | None] = [None] * u.type.rank
            for i, j in zip(_nonunit(u.type.shape), _nonunit(v.type.shape), strict=True):
                sub[i] = dims[j]
            return self.value(u, target, tuple(sub))
        operands: list[Ref] = []
        for u in node.inputs:
            ref = self.value(u, target, dims if u.type.rank == v.type.rank else (None,) * u.type.rank)
            if ref is None:
                return None
            operands.append(ref)
        return self.apply(node, tuple(operands))

    def _external(self, v: Value, target: tuple[int, ...], mapped: list[tuple[int, int]], in_order: bool,
                  size: int) -> Ref | None:
        r = len(target)
        if size == 1:
            return self.load(v, "scalar", (1, 1), "sc")
        if not in_order:
            return None
        axes = [d for d, _ in mapped]
        if size == self.n:
            return self.load(v, "full", (self.rows, self.cols or self.n // PARTITIONS), "full")
        if not self.cols:
            return None
        if axes and axes[-1] == r - 1:
            # a table along the trailing axes, repeated down the leading ones: period P rows
            k = axes[0]
            if axes != list(range(k, r)) or prod(target[k:]) != size:
                return self.repeated(v, target, axes)
            period = size // self.cols
            if period == 1:
                return self.load(v, "vec", (1, self.cols), "vec")
            invariant = PARTITIONS % period == 0
            return self.load(v, "per", (period, self.cols), "vec" if invariant else "full")
        if size == self.rows and prod(target[:-1]) == self.rows:
            return self.load(v, "row", (self.rows, 1), "col")
        return self.repeated(v, target, axes)

    def repeated(self, v: Value, target: tuple[int, ...], axes: list[int]) -> Ref | None:
        """A group input broadcast along middle axes: its axes the space's outer and inner ones with new (or
        size-1) axes between them, ``[B, S] → [B, H, S]`` (an attention mask over heads), ``[B, T, kv, d] →
        [B, T, kv, rep, d]`` (a GQA head repeat), ``[N, C] → [N, H, W, C]``; or the outer ones and inner ones
        but the last, ``[B, S] → [B, H, S, D]`` (a value per row). Viewed ``[O, I]`` (outer, inner), each row
        repeated ``R`` times (the middle): a ``rep`` tile per block (``I`` whole rows of the space), or a
        ``rep_row`` column, loaded by DMAs through a stride-0 source (``recipe.repeat_runs``), or None."""
        # the target's non-unit axes, each covered by the operand or broadcast; runs of them: outer, middle,
        # inner and (for a value per row) the row
        runs: list[tuple[bool, int]] = []
        for t, d in enumerate(target):
            if d != 1:
                covered = t in axes
                if runs and runs[-1][0] == covered:
                    runs[-1] = (covered, runs[-1][1] * d)
                else:
                    runs.append((covered, d))
        pattern = [c for c, _ in runs]
        sizes = [d for _, d in runs]
        if not runs:
            return None
        if pattern[-1]:
            # inner axes of whole rows: a tile per block (no outer axes: a table with a period of rows)
            if pattern not in ([True, False, True], [False, True]) or sizes[-1] % self.cols:
                return None
            outer, middle, inner = sizes if pattern[0] else [1, *sizes]
            kind, ref_kind = "rep", "full"
        else:
            # a value per row (the last run broadcast: the rows of the space): a column per block
            per_row, rest = divmod(sizes[-1], self.cols)
            if rest or (per_row > 1 and pattern != [True, False]):
                return None
            if pattern == [True, False]:
                outer, middle, inner = sizes[0], per_row, 1
            elif pattern in ([True, False, True, False], [False, True, False]):
                outer, middle, inner = sizes[:3] if pattern[0] else [1, *sizes[:2]]
            else:
                return None
            kind, ref_kind = "rep_row", "col"
        if outer * middle * inner * (self.cols if kind == "rep_row" else 1) != self.n or inner > MAX_RUN:
            return None
        return self.load(v, kind, (outer, inner), ref_kind, middle)

    def _iota(self, node: Node, target: tuple[int, ...], dims: tuple[int | None, ...]) -> Ref | None:
        axis = dims[node.attrs["iota_dimension"]]
        dtype = DSL_DTYPE.get(self.ir_dtype(node.out))
        if axis is None:
            return ("imm", 0.0)
        stride = prod(target[axis + 1:])
        period = stride * target[axis]
        if dtype is None or iota_largest(stride, target[axis], self.cols, self.n) >= EXACT_INDEX:
            return None
        invariant = self.cols > 0 and ((PARTITIONS * self.cols) % period == 0 or self.rows <= PARTITIONS)
        form = iota_form(stride, target[axis], self.cols)
        out = self.ir_dtype(node.out)
        wraps = out in INT_RANGE and target[axis] - 1 > INT_RANGE[out][1]   # an int8 iota of 200: 128 → -128
        kind = "vec" if invariant else "full"
        ref = self.push(("iota", form, (("imm", float(stride)), ("imm", float(target[axis]))),
                         "int32" if wraps else dtype), kind)
        return self.push(("wrap", WRAP[out], (ref,), dtype), kind) if wraps else ref

    # ---- ops -------------------------------------------------------------------------------------------
    def apply(self, node: Node, operands: tuple[Ref, ...]) -> Ref | None:
        """The step computing elementwise ``node`` on ``operands`` (or an alias), or None."""
        out_t, out = node.out.type, self.ir_dtype(node.out)
        if out not in DSL_DTYPE or any(u.type.dtype in ("i64", "ui64") and self.ir_dtype(u) != "i32"
                                       for u in node.inputs):
            return None                  # (a 64-bit value outside int32's range: no 64-bit datapath)
        dt = DSL_DTYPE[out]
        kinds = [self.kind(o) for o in operands]
        tiles = {k for k in kinds if k != "imm"}
        if "late" in tiles:
            return None                  # a per-tensor scaled value is made after the loop: only stored
        if kinds[0] in ("red", "mid") and node.op in ("convert", "reshape", "broadcast_in_dim", "reduce") and \
                node.inputs[0].type.size != out_t.size:
            return None                  # a reduced result broadcast back (a leading-axis one is ready only after
                                         # the loop; a middle-axis one has rows of another width)
        if node.op == "bitcast_convert":
            return self.bitcast(node, operands[0], kinds[0], dt)
        form = self.integer_form(node, out)
        if form is None:
            return None
        if node.op == "convert":
            src = self.ir_dtype(node.inputs[0])
            if kinds[0] == "imm" or src == out:
                return operands[0]
            how = _conversion(src, out)
            if how == "truncate":
                return None if kinds[0] in ("red", "mid") else self.truncated(operands[0], out, dt, kinds[0])
            step: Step = {"ne": ("alu", "ne", (operands[0], ("imm", 0.0)), dt),
                          "wrap": ("wrap", WRAP.get(out, ""), operands, dt),
                          "copy": ("copy", "copy", operands, dt)}[how]
            ref = self.push(step, kinds[0])
            if kinds[0] == "red":
                self.red_shape[ref] = self.red_shape[operands[0]]
            return ref
        if node.op in ("reshape", "broadcast_in_dim") or (node.op == "reduce" and _unit_reduce(node)):
            return operands[0]
        if not tiles:
            return _fold_constant(node, operands)
        same = _unchanged(node.op, operands, out_t.dtype)
        if same is not None and self.kind(same) != "imm":
            return same
        if "red" in tiles:
            reds = [o for o, k in zip(operands, kinds, strict=True) if k == "red"]
            if not tiles <= {"red", "sc"} or node.op == "select" or len({self.red_shape[o] for o in reds}) != 1 or \
                    not all(self.before_loop(o) for o, k in zip(operands, kinds, strict=True) if k == "sc"):
                return None              # (a leading-axis result meets only others of its shape, or immediates,
                                         # or scalars made before the loop: a while loop's ``i < n and any(x)``)
            result = "red"
        elif "mid" in tiles:
            if not tiles <= {"mid", "col", "sc"}:
                return None              # a [rows, inner] tile meets only others of its width, or columns
            result = "mid"
        else:
            result = _combine(tiles)
        if form == "word":
            return self.word(node, operands, dt, result)
        composed = _COMPOSED.get((node.op, out in FLOATS))
        if composed is not None:
            if result not in ("full", "vec", "col", "sc"):
                return None
            return composed(self, operands, out, result)
        if node.op in ("maximum", "minimum") and out in FLOATS and result in ("full", "vec", "col", "sc"):
            return self.float_extreme(ALU[node.op], operands, dt, result)
        wraps = out in WRAPPING.get(node.op, ())
        if wraps and result not in ("full", "vec", "col", "sc"):
            return None
        if wraps and out == "ui32":
            # NOTE: ui32 operands are read as int32 (a bitcast); ``integer_form`` chose this form only for
            # operands and an unwrapped result within ±2**24 (``ranges``), where that reading is exact and a
            # negative difference (3 - 5 = -2) wraps to its ui32 bits (2**32 - 2) in the ``wrap`` step
            operands = tuple(self.push(("wrap", "uint32", (o,), "int32"), self.kind(o)) if o[0] != "imm" else
                             ("imm", o[1] - 2.0 ** 32 if o[1] >= 2.0 ** 31 else o[1]) for o in operands)
        work = "int32" if wraps else dt     # made exactly in int32, then its low bits kept (recipe.WRAP)
        if node.op in ALU:
            step: Step = ("alu", ALU[node.op], operands, work)
        elif node.op in BITWISE and out in INT_RANGE:
            step = ("alu", BITWISE[node.op], operands, dt)
        elif node.op in ACT:
            step = ("act", ACT[node.op], (*operands, *_zero_bias(ACT[node.op])), work)
        elif node.op == "compare" and (node.attrs.get("compare_type", "FLOAT") in _COMPARE_TYPES or
                                       node.inputs[0].type.dtype not in ("f32", "bf16", "f16")):
            step = ("alu", CMP[node.attrs["comparison_direction"]], operands, dt)
        elif node.op == "select":
            if kinds[0] == "imm" or (any(k in ("col", "sc") for k in kinds) and result == "mid"):
                return None
            if any(k in ("col", "sc") for k in kinds) and result in ("full", "vec"):
                # a scalar predicate or value (``select_n`` of a 0-d i1) spread over a tile: ``1 * x``, exact
                operands = tuple(self.push(("alu", "mul", (self.const(1.0, d), o), d), "full")
                                 if k in ("col", "sc") else o
                                 for o, k, d in zip(operands, kinds, ("uint8", dt, dt), strict=True))
                kinds, result = [self.kind(o) for o in operands], "full"
            if result == "mid" and "imm" in kinds:
                return None
            column = result in ("col", "sc")
            picked = tuple(self.const(o[1], dt, column) if o[0] == "imm" else o for o in operands[1:])
            step = ("select", "select", (operands[0], *picked), dt)
        elif node.op == "qdq" and _scaling(node) == "tensor":
            # NOTE: per-tensor scaling needs the amax of the whole tensor before any element: the step runs
            # after the loop on its source tiles, kept in SBUF (phase ``late``); nothing in the group reads it
            from trnsim.ir.semantics.quant import QDQ_FORMATS
            from trnsim.isa.dtypes import DTYPES

            if kinds[0] != "full" or operands[0][0] == "imm":
                return None
            if operands[0] not in self.kept:
                self.kept[operands[0]] = self.n * DTYPES[DSL_DTYPE[node.inputs[0].type.dtype]].itemsize
                if sum(self.kept.values()) > KEEP_BYTES:
                    return None          # the kept tiles would not fit in SBUF

            return self.push(("scaled", QDQ_FORMATS[node.attrs["format"]][0], (operands[0],), dt), "late", "late")
        elif node.op == "qdq":
            grouped = self.grouped(node)
            if grouped is None or kinds[0] != "full":
                return None
            step = (grouped[0], grouped[1], (operands[0], ("imm", float(grouped[2]))), dt)
        elif node.op == "clamp" and kinds[1] != "imm":
            inner = {kinds[0], kinds[1]} - {"imm"}
            lo = self.push(("alu", "max", (operands[1], operands[0]), dt),
                           _combine(inner) if result in ("full", "vec", "col", "sc") else result)
            if result == "red":
                self.red_shape[lo] = self.red_shape[operands[1]]
            step = ("alu", "min", (lo, operands[2]), dt)
        elif node.op == "reduce_precision" and _wider(node.attrs["exponent_bits"], node.attrs["mantissa_bits"], out):
            step = ("copy", "copy", operands, dt)  # to a format at least as wide: every value kept (a copy)
        elif node.op == "is_finite":
            # |x| < inf: false for ±inf and for NaN (every comparison with NaN is false)
            magnitude = self.push(("act", "abs", operands, "fp32"), result)
            if result == "red":
                self.red_shape[magnitude] = self.red_shape[operands[0]]
            step = ("alu", "lt", (magnitude, ("imm", float("inf"))), dt)
        else:
            return None
        if sum(k in ("col", "sc") for k in kinds) and result in ("full", "vec", "mid") and step[0] == "alu" and \
                len([k for k in kinds if k in ("full", "vec", "mid")]) != 1 and node.op != "clamp":
            return None                  # tensor_scalar: one tile and one column (or immediate)
        ref = self.push(step, result)
        if result == "red":
            self.red_shape[ref] = next(self.red_shape[o] for o in operands if o[0] != "imm" and self.kind(o) == "red")
        return self.push(("wrap", WRAP[out], (ref,), dt), result) if wraps else ref

    def float_extreme(self, op: str, operands: tuple[Ref, ...], dt: str, result: str) -> Ref:
        """IEEE-754 ``max`` / ``min`` of floats, as the interpreter has them: ``max(+0, -0) = +0``, ``min(+0, -0)
        = -0``. The ALU returns its second operand on ties (isa.ops: numpy's), so an immediate zero goes second
        when it is the one that wins the tie (+0 for max, -0 for min) and first otherwise; two tiles are taken in
        both orders where the result is a zero: ``max`` adds the two (+0 unless both are -0), ``min`` negates the
        sum of their negations (``intmath.ieee``'s rule). NaN propagates in every form."""
        a, b = operands
        if a[0] == "imm":
            a, b = b, a
        if b[0] == "imm":
            winner = float(np.copysign(0.0, 1.0 if op == "max" else -1.0))
            if b[1] != 0.0 or np.signbit(b[1]) == np.signbit(winner):
                return self.push(("alu", op, (a, b), dt), result)
            return self.push(("alu", op, (b, a), dt), result)
        first = self.push(("alu", op, (a, b), "fp32"), result)
        second = self.push(("alu", op, (b, a), "fp32"), result)
        if op == "max":
            zero = self.push(("alu", "add", (first, second), "fp32"), result)
        else:
            negated = self.push(("alu", "sub", (self.alu("mul", first, -1.0, "fp32", result), second), "fp32"), result)
            zero = self.alu("mul", negated, -1.0, "fp32", result)
        return self.push(("select", "select", (self.alu("eq", first, 0.0, "uint8", result), zero, first), dt), result)

    def integer_form(self, node: Node, out: str) -> str | None:
        """How elementwise ``node`` computes its integers exactly (``ranges``): ``fp32`` (its ALU instructions:
        every value they round is exact in fp32, or the op is bitwise), ``word`` (``intmath``'s exact word
        forms: 32-bit add, subtract, negate, multiply, divide, remainder, max, min, clamp, abs, compare and select
        beyond 2**24, and 16-bit products), or None (no exact form: a 32-bit power of such values, or one
        converted to bf16 / f16, which an fp32 intermediate would round twice)."""
        ins = [self.ranges.of(u) for u in node.inputs]
        op = node.op
        if op == "compare" and ins[0] is not None:
            return "fp32" if exact(ins[0]) or exact(ins[1]) else "word"   # fp32 rounding keeps the order
        if op == "convert":
            # a float truncated (exact), an integer's low bits (``wrap``), ``!= 0``, or a copy through fp32: an
            # integer's f32 rounding is convert's own, a narrower float's would round twice
            how = _conversion(self.ir_dtype(node.inputs[0]), out)
            return "fp32" if how != "copy" or out == "f32" or ins[0] is None or exact(ins[0]) else None
        if out not in INT_RANGE or out == "i1" or op in _BIT_EXACT:
            return "fp32"
        if op == "select":
            return "fp32" if exact(ins[1]) and exact(ins[2]) else "word"
        if all(exact(r) for r in ins if r is not None) and exact(self.ranges.unwrapped(node)):
            return "fp32"
        bits = (INT_RANGE[out][1] - INT_RANGE[out][0]).bit_length()
        if op == "multiply":
            return "fp32" if bits <= 8 else "word"
        if op in ("add", "subtract", "negate", "maximum", "minimum", "clamp", "abs", "divide", "remainder"):
            return "fp32" if bits <= 16 else "word"
        return "fp32" if bits <= 16 else None

    def word(self, node: Node, operands: tuple[Ref, ...], dt: str, result: str) -> Ref | None:
        """A ``word`` step (``intmath.word``): 32-bit integer arithmetic exact beyond 2**24."""
        if result not in ("full", "vec", "col", "sc"):
            return None
        if node.op == "negate":
            op, operands = "sub", (("imm", 0.0), operands[0])
        elif node.op == "clamp":                         # min(max(x, lo), hi)
            lo, x, hi = operands
            low = ("imm", max(x[1], lo[1])) if x[0] == lo[0] == "imm" else \
                self.push(("word", "max", (x, lo), dt), _combine({self.kind(r) for r in (x, lo) if r[0] != "imm"}))
            op, operands = "min", (low, hi)
        elif node.op == "abs":                           # x < 0 ? 0 - x : x (the compare with 0 exact in fp32)
            (x,) = operands
            negative = self.push(("alu", "lt", (x, ("imm", 0.0)), "uint8"), result)
            negated = self.push(("word", "sub", (("imm", 0.0), x), dt), result)
            op, operands = "select", (negative, negated, x)
        elif node.op == "compare":
            op = CMP[node.attrs["comparison_direction"]]
        elif node.op == "select":
            if operands[0][0] == "imm":
                return None
            op = "select"
        else:
            op = _WORD[node.op]
        return self.push(("word", op, operands, dt), result)

    def bitcast(self, node: Node, x: Ref, kind: str, dt: str) -> Ref | None:
        """``bitcast_convert`` between element types of one width, or None: the bits copied as the unsigned
        integers of that width (``BITS``), exactly, and read as the result's type. A copy of the bits, not of
        the values, so NaN payloads stay as they were. Integer arithmetic on 32-bit patterns that follows
        (``nextafter``'s ±1, the mantissa bits of ``jax.random``'s uniform floats) takes the exact word forms
        (``integer_form``: a bitcast's result may be any value of its type)."""
        src, out = node.inputs[0].type.dtype, node.out.type.dtype
        if x[0] == "imm" or src not in BITS or BITS.get(out) != BITS[src]:
            return None
        ref = self.push(("bitcast", BITS[src], (x,), dt), kind)
        if kind == "red":
            self.red_shape[ref] = self.red_shape[x]
        return ref

    def before_loop(self, ref: Ref) -> bool:
        """Make a scalar column (kind ``sc``) once, before the tile loop (phase ``pre``), so that the ops after the
        loop may read it; False if it is not made of immediates and scalar inputs alone."""
        if ref[0] == "in":
            return self.inputs[ref[1]][1] == "scalar"
        if ref[0] == "imm":
            return True
        kind, _, operands, _ = self.steps[ref[1]]
        if self.kinds[ref] != "sc" or kind not in _ELEMENTWISE_STEPS or not all(self.before_loop(o) for o in operands):
            return False
        self.phases[ref[1]] = "pre"
        return True

    # ---- ops made of several instructions (``_COMPOSED``) -----------------------------------------------
    def alu(self, op: str, a: Ref, b: Ref | float, dt: str, result: str) -> Ref:
        return self.push(("alu", op, (a, ("imm", float(b)) if isinstance(b, (int, float)) else b), dt), result)

    def truncated(self, x: Ref, out: str, dt: str, result: str) -> Ref:
        """A float converted to an integer type: toward zero, saturating, NaN to 0 (``convert``). Clamped
        just outside the type's range (infinities become finite), ``x - fmod(x, 1)`` is the integer part
        exactly (fmod is exact, and so is the difference); the write saturates and maps NaN to 0."""
        lo, hi = INT_RANGE[out]
        clamped = self.alu("min", self.alu("max", x, lo - 1.0, "fp32", result), hi + 1.0, "fp32", result)
        return self.alu("sub", clamped, self.alu("mod", clamped, 1.0, "fp32", result), dt, result)

    def floored(self, x: Ref, dt: str, result: str) -> Ref:
        """``floor(x) = x - g``, ``g = f + (f < 0)`` for ``f = fmod(x, 1)`` of ``x`` clamped to ±2**24 (where
        every float is an integer: infinities keep ``f = 0``). ``x - f`` is exact; for ``f < 0``, ``|x| <
        2**23`` and ``g`` in (0, 1] is off by at most 2**-25, under half an ulp of the result (|floor| >= 1).
        Signs: ``-0 - (+0) = -0``, and ``x - x = +0`` for ``x`` in [0, 1)."""
        clamped = self.alu("min", self.alu("max", x, -2.0 ** 24, "fp32", result), 2.0 ** 24, "fp32", result)
        f = self.alu("mod", clamped, 1.0, "fp32", result)
        g = self.alu("add", f, self.alu("lt", f, 0.0, "fp32", result), "fp32", result)
        return self.alu("sub", x, g, dt, result)


    def grouped(self, node: Node) -> tuple[str, str, int] | None:
        """(step kind, element format, 0 for groups along a row | 1 for groups down 32 rows) of a ``qdq`` with
        a scale per 32 elements in the row layout: ``mx`` for MX blocks (an E8M0 scale), ``group`` for int4
        groups (an fp32 scale); None for other scalings, or groups that do not tile the rows."""
        from trnsim.ir.semantics.quant import GROUP, QDQ_FORMATS
        from trnsim.isa.dtypes import DTYPES

        fmt, scaling = QDQ_FORMATS.get(node.attrs["format"], ("", ""))
        shape = node.inputs[0].type.shape
        if scaling not in ("block", "group") or not self.cols or len(shape) < 2 or \
                node.inputs[0].type.size != self.n or shape[-1] != self.cols:
            return None
        if scaling == "block":
            kind, size, element = "mx", MX_BLOCK, DTYPES[fmt].element
        else:
            kind, size, element = "group", GROUP, fmt
        assert element is not None
        axis = int(node.attrs.get("axis", -1)) % len(shape)
        if axis == len(shape) - 1 and self.cols % size == 0:
            return kind, element, 0
        if axis == len(shape) - 2 and shape[axis] % size == 0:
            return kind, element, 1      # whole groups of consecutive rows, 32-aligned in every tile
        return None

    def reduce(self, node: Node) -> Ref | None:
        """A reduction: along the last axis on VectorE (a column), over middle axes on VectorE (``middle``, a
        ``[rows, inner]`` tile), over leading axes on TensorE for sums and VectorE for maxima (``lead``)."""
        from trnsim.ir.semantics.reduce import simple_combiner

        x = node.inputs[0]
        op = simple_combiner(node.regions[0])
        if x.type.dtype == "i1" and op is not None:
            op = _LOGICAL.get(op, op)    # all / any of 0/1 masks: their min / max
        init = _immediate(node.inputs[1])
        if op not in REDUCE or init is None or node.out.type.dtype not in DSL_DTYPE or \
                (op == "multiply" and x.type.dtype not in PRODUCTS):
            return None
        if x.type.dtype in INT_RANGE and x.type.dtype != "i1" and not \
                exact(self.ranges.unwrapped(node) if op == "add" else self.ranges.of(x)):
            return None                  # fp32 sums (PSUM, VectorE) and maxima round integers beyond 2**24
        if init[1] == _identity(op, x.type.dtype):
            return self.from_identity(node, op)
        if x.type.dtype not in INT_RANGE and op == "add":
            return None                  # a float sum from another start would round once more than the IR's
        # NOTE: from another start (``reduce_int8_4_6_int32_4_6``'s init 3), the reduction and then the start
        # folded in, exactly: integers, or a float max/min
        ref = self.from_identity(node, op)
        if ref is None:
            return None
        kind, out = self.kind(ref), node.out.type.dtype
        wraps = out in WRAPPING.get(op, ())
        started = self.push(("alu", ALU[op], (ref, init), "int32" if wraps else DSL_DTYPE[out]), kind)
        if wraps:
            if kind == "red":
                self.red_shape[started] = self.red_shape[ref]
            started = self.push(("wrap", WRAP[out], (started,), DSL_DTYPE[out]), kind)
        if kind == "red":
            self.red_shape[started] = self.red_shape[ref]
        return started

    def from_identity(self, node: Node, op: str) -> Ref | None:
        """``reduce``'s reduction from its combiner's identity."""
        x = node.inputs[0]
        dt = DSL_DTYPE[node.out.type.dtype]
        dims = set(node.attrs["dimensions"])
        r = x.type.rank
        if x.type.size == self.n:
            src = self.value(x, x.type.shape, tuple(range(r)))
            if src is None or self.kind(src) != "full":
                return None
            middle = _middle(node)
            if middle is not None:
                outer, count, inner = middle
                if (outer, count * inner) != (self.rows, self.cols) or \
                        (op == "multiply" and node.out.type.dtype in WRAPPING["multiply"]):
                    return None          # (its folds write the narrow type: a product would saturate, not wrap)
                self.inner = inner
                if op == "add" and node.out.type.dtype in WRAPPING["add"]:
                    # a narrow sum folds in int32 (exact: ``ranges`` bounds it) and wraps once (a fuzzer found
                    # 8-bit folds saturating at 127)
                    summed = self.push(("middle", "add", (src, ("imm", float(count))), "int32"), "mid")
                    return self.push(("wrap", WRAP[node.out.type.dtype], (summed,), dt), "mid")
                return self.push(("middle", REDUCE[op], (src, ("imm", float(count))), dt), "mid")
            last = (r - 1) in dims or not self.cols
            if last:
                wraps = dims == {r - 1} and node.out.type.dtype in WRAPPING.get(op, ())
                src = self.push(("reduce", REDUCE[op], (src,), "fp32" if dims != {r - 1} else
                                 "int32" if wraps else dt), "col")
                if dims == {r - 1}:
                    return self.push(("wrap", WRAP[node.out.type.dtype], (src,), dt), "col") if wraps else src
            lead = sorted(dims - {r - 1})
            k = (lead[-1] + 1) if lead else 0
            if not self.cols and len(dims) != r:
                return None
            if any(i not in dims and x.type.shape[i] != 1 for i in range(k)):
                return None              # a reduction over middle axes
            period, width = prod(x.type.shape[k:r - 1]) if self.cols else 1, 1 if last else self.cols
        else:
            rd = self.row_dims(x)
            src = self.value(x, self.shape, rd) if rd is not None else None
            if src is None or self.kind(src) != "col" or any(x.type.shape[i] != 1 for i in range(r) if i not in dims):
                return None
            period, width = 1, 1
        if period > PARTITIONS or node.out.type.size != period * width or \
                (x.type.dtype not in FLOATS and x.type.dtype not in INT_RANGE):
            return None
        wraps = op in ("add", "multiply") and node.out.type.dtype in WRAPPING[op]
        if op in ("add", "multiply") and x.type.dtype in INT_RANGE:
            # NOTE: integers reach TensorE as fp32 (a copy; exact), whose PSUM sums are exact below 2**24; a
            # narrow type's sum leaves PSUM as int32 and wraps after the loop. A product's running tile is fp32
            # too (VectorE), so it neither saturates nor wraps in the narrow type before the end: exact, and
            # wrapped once, while its magnitude stays below 2**24
            if src[0] != "tmp" or self.steps[src[1]][3] != "fp32":
                src = self.push(("copy", "copy", (src,), "fp32"), self.kind(src))
            if wraps:
                dt = "int32"
        # NOTE: a leading-axis max or min keeps a running [128, width] tile (VectorE, exact in the operand's
        # dtype) whose rows are the result's rows modulo ``period`` only when ``period`` divides a tile
        if op != "add" and (PARTITIONS % period or width > MAX_ROW):
            return None
        # NOTE: the leading-axis sum runs on TensorE, as a kernel author would write it: nc_matmul with a 0/1
        # stationary accumulates ``S.T @ x`` into PSUM across all row tiles for free (neuron.md §2.3
        # ``accumulate``), on an engine an elementwise kernel leaves idle, reading the row tiles already in
        # SBUF. GpSimd's tensor_partition_reduce runs at 128 elements/cycle (§1.4), a quarter of VectorE's
        # bf16 rate, on the engine that also builds masks; a transposed-view load (dma_transpose, §2.3) would
        # bring the data in a second time when the group also works along rows (a norm's backward does
        # both). fp32 operands cost TensorE 4× (§1.4: 20 vs 79 TFLOPS), still one pass per tile.
        ref = self.push(("lead", REDUCE[op], (src, ("imm", float(period))), dt), "red", "block")
        self.red_shape[ref] = (period, width)
        if wraps:
            ref = self.push(("wrap", WRAP[node.out.type.dtype], (ref,), DSL_DTYPE[node.out.type.dtype]), "red")
            self.red_shape[ref] = (period, width)
        return ref

    def fold_sums(self) -> bool:
        """Give the leading-axis sums their PSUM strips (``recipe.lead_strips``): a sum folded onto partitions
        gets its strip's columns as a third operand. False when they do not fit, or when a folded result would
        meet a leading-axis max or min of its shape (whose ``[P, W]`` tile is not folded)."""
        sums = [k for k, (kind, op, _, _) in enumerate(self.steps) if (kind, op) == ("lead", "add")]
        strips = lead_strips([self.red_shape["tmp", k] for k in sums])
        if strips is None:
            return False
        folded = set[tuple[int, int]]()
        for k, strip in zip(sums, strips, strict=True):
            kind, op, operands, dt = self.steps[k]
            if strip < self.red_shape["tmp", k][1]:
                self.steps[k] = (kind, op, (*operands, ("imm", float(strip))), dt)
                folded.add(self.red_shape["tmp", k])
        return not any(kind == "lead" and op != "add" and self.red_shape["tmp", k] in folded
                       for k, (kind, op, _, _) in enumerate(self.steps))

    def scalar(self, u: Value) -> Ref | None:
        """A lazy value that is a broadcast (or reshape, convert) of a scalar: that scalar's ref."""
        while u.type.size != 1:
            p = self.produced.get(u.id)
            if p is None or p.op not in ("broadcast_in_dim", "reshape", "convert") or u.id in self.refs:
                return None
            u = p.inputs[0]
        return self.value(u, (), (None,) * u.type.rank)

    def reduced(self, u: Value, shapes: set[tuple[int, int]]) -> Ref | None:
        """A group input of a leading-axis result's size, next to that result (a gradient accumulated into):
        loaded once, after the loop."""
        if len(shapes) != 1 or u.id not in self.external:
            return None
        (shape,) = shapes
        if u.type.size != prod(shape):
            return None
        ref = self.load(u, "red", shape, "red")
        if ref is not None:
            self.red_shape[ref] = shape
        return ref

    def narrow(self, u: Value) -> Ref | None:
        """A value of a middle-axis reduction's result size that has no ref yet: a group input (a ``[rows,
        inner]`` tile per block), or elementwise ops of such values and scalars."""
        if not self.inner or u.type.size != self.rows * self.inner:
            return None
        key = ("narrow", u.id)
        if key not in self.memo:
            ref: Ref | None = None
            node = self.produced.get(u.id)
            if u.id in self.external:
                ref = self.load(u, "mid", (self.rows, self.inner), "mid")
            elif node is not None and len(node.outputs) == 1 and node.op not in ("reduce", "iota"):
                operands = [self.refs.get(w.id) or self.scalar(w) or self.narrow(w) for w in node.inputs]
                if all(o is not None for o in operands):
                    ref = self.apply(node, tuple(o for o in operands if o is not None))
            self.memo[key] = ref
        return self.memo[key]

    def node(self, node: Node) -> bool:
        """Give ``node``'s result a ref now if it is needed as a tile; False if the group cannot be lowered."""
        v = node.out
        if len(node.outputs) != 1:
            return False
        if node.op == "reduce" and not _unit_reduce(node):
            ref = self.reduce(node)
        elif any(self.kind(self.refs[u.id]) in ("red", "mid") for u in node.inputs if u.id in self.refs):
            shapes = {self.red_shape[self.refs[u.id]] for u in node.inputs
                      if u.id in self.refs and self.kind(self.refs[u.id]) == "red"}
            operands = [self.refs.get(u.id) or self.scalar(u) or self.narrow(u) or self.reduced(u, shapes)
                        for u in node.inputs]
            if any(o is None for o in operands):
                return False
            ref = self.apply(node, tuple(o for o in operands if o is not None))
        elif v.type.size == self.n:
            ref = self.value(v, v.type.shape, tuple(range(v.type.rank)))
        elif v.type.size == 1 and any(u.id in self.refs for u in node.inputs):
            ref = self.value(v, self.shape, (None,) * v.type.rank)
        elif any(u.id in self.refs and self.kind(self.refs[u.id]) == "col" for u in node.inputs):
            rd = self.row_dims(v)
            ref = self.value(v, self.shape, rd) if rd is not None else None
        else:
            return True                  # small: materialised where it is broadcast into the space
        if ref is None:
            return False
        self.refs[v.id] = ref
        return True

    def fuse_activations(self, stored: set[int]) -> None:
        """Fold into a ScalarE activation what its instruction does anyway: a column subtracted first
        (``exp(x - m)``: the bias ``-m``, a ``[rows, 1]`` negation instead of a pass over the tile) and a sum
        of its result along the rows (the fused accumulate, ``actsum`` / ``summed`` steps) — a softmax's
        three passes in one. Only in fp32, where the fused forms round as the separate ones do: ``x + (-m)``
        is ``x - m``, and the accumulate sums the fp32 results the reduce would read back."""
        readers: dict[int, list[int]] = {}
        for k, (_, _, operands, _) in enumerate(self.steps):
            for r in operands:
                if r[0] == "tmp":
                    readers.setdefault(r[1], []).append(k)
        kept = stored | {r[1] for r in self.kept if r[0] == "tmp"}
        for k, (kind, op, operands, dt) in enumerate(self.steps):
            if kind != "act" or self.phases[k] != "block" or dt != "fp32":
                continue
            x = operands[0]              # and ``_zero_bias``'s -0, which the subtracted column replaces
            if x[0] == "tmp" and readers.get(x[1]) == [k] and x[1] not in kept and self.phases[x[1]] == "block":
                skind, sop, (a, *rest), sdt = self.steps[x[1]]
                c = rest[0] if rest else ("imm", 0.0)
                if (skind, sop, sdt) == ("alu", "sub", "fp32") and self.kind(a) == "full" and \
                        c[0] != "imm" and self.kind(c) in ("col", "sc"):
                    self.steps[x[1]] = ("act", "neg", (c,), "fp32")         # the bias: a column, negated
                    operands = (a, ("tmp", x[1]))
            sums = [r for r in readers.get(k, ()) if self.steps[r][:3] == ("reduce", "add", (("tmp", k),)) and
                    self.phases[r] == "block"]
            if sums:
                self.steps[sums[0]] = ("summed", "add", (("tmp", k),), self.steps[sums[0]][3])
            self.steps[k] = ("actsum" if sums else "act", op, operands, dt)

    def store(self, v: Value) -> tuple[Ref, str, str, tuple[int, int]] | None:
        """(ref, dtype, output kind, HBM shape) for an output of the group."""
        if v.type.dtype not in DSL_DTYPE:
            return None
        dt = DSL_DTYPE[v.type.dtype]
        ref = self.refs.get(v.id)
        if ref is None:
            if v.type.size == self.n:
                ref = self.value(v, v.type.shape, tuple(range(v.type.rank)))
            elif v.type.size == 1:
                ref = self.value(v, self.shape, (None,) * v.type.rank)
            elif (rd := self.row_dims(v)) is not None:
                ref = self.value(v, self.shape, rd)
            else:
                ref = self.scalar(v)
        if ref is not None and ref[0] == "imm" and v.type.size == self.n and \
                (v.type.dtype in ("f32", "bf16", "f16") or float(ref[1]).is_integer()):
            # a constant stored whole (a fill converted to another dtype): memset rounds it as convert does
            ref = self.const(ref[1], dt)
        if ref is None or ref[0] == "imm":
            return None
        k = self.kind(ref)
        width = self.cols or self.n // PARTITIONS
        if v.type.size == self.n and k in ("col", "sc"):
            # a broadcast column stored whole: combined with a zero tile, one tensor_scalar per tile (an integer
            # column by ``or``, exact on every bit, where an fp32 ``add`` rounds beyond 2**24)
            from trnsim.isa.dtypes import DTYPES

            op = "or" if DTYPES[dt].kind == "int" and DTYPES[self.dtype_of(ref)].kind == "int" else "add"
            ref = self.push(("alu", op, (self.const(0.0, dt), ref), dt), "full")
            k = "full"
        if v.type.size == self.n and k in ("full", "vec"):
            return ref, dt, "full", (self.rows, width)
        if k == "col" and self.cols and v.type.size == self.rows:
            return ref, dt, "row", (self.rows, 1)
        if k == "sc" and v.type.size <= min(PARTITIONS, self.rows):
            return ref, dt, "sc", (v.type.size, 1)
        if k == "late" and v.type.size == self.n:
            return ref, dt, "full", (self.rows, width)
        if k == "red" and v.type.size == prod(self.red_shape[ref]):
            return ref, dt, "red", self.red_shape[ref]
        if k == "mid" and v.type.size == self.rows * self.inner:
            return ref, dt, "mid", (self.rows, self.inner)
        return None


_LOGICAL: dict[str, str] = {"and": "minimum", "or": "maximum", "multiply": "minimum"}
_SPREAD = ("vec", "per", *REPEATED)     # input kinds a kernel spreads over the space by its DMAs alone


def _combine(tiles: set[str]) -> str:
    """The kind of an elementwise result of operands of these kinds (neither ``red`` nor ``mid``)."""
    if "full" in tiles or ("vec" in tiles and tiles & {"col", "sc"}):
        return "full"
    if "vec" in tiles:
        return "vec"
    return "col" if "col" in tiles else "sc"


def _fold_constant(node: Node, operands: tuple[Ref, ...]) -> Ref | None:
    """An ALU op or compare of immediates (a chlo decomposition's ``1 / eps``), folded by the reference
    interpreter (the spec) into an immediate, or None."""
    from trnsim.ir.interp import Env, Interpreter

    if node.op not in ALU and node.op != "compare":
        return None
    args = [np.full(u.type.shape, o[1], u.type.np_dtype) for u, o in zip(node.inputs, operands, strict=True)]
    (value,) = Interpreter().run_node(node, args, Env())
    flat = np.asarray(value, np.float64).reshape(-1)
    return ("imm", float(flat[0])) if flat.size and bool((flat == flat[0]).all()) else None


def _wider(exponent_bits: int, mantissa_bits: int, dtype: str) -> bool:
    """Whether ``reduce_precision`` to a float format of these bits keeps every value of ``dtype``: an exponent
    and a mantissa at least as wide as the type's (the op flushes only where the format's exponent is narrower,
    ``ir.semantics.elementwise._reduce_precision``, so the type's own subnormals stay)."""
    if dtype not in FLOAT_BITS:
        return False
    exponent, mantissa = FLOAT_BITS[dtype]
    return exponent_bits >= exponent and mantissa_bits >= mantissa


def _conversion(src: str, out: str) -> str:
    """How ``convert`` from element type ``src`` to ``out`` is made, as ``ir.semantics`` has it: ``ne`` (anything
    to i1 is ``x != 0``), ``truncate`` (a float to an integer: toward zero, saturating, NaN to 0; ``truncated``),
    ``wrap`` (an integer to a type without all its values: the low bits), else ``copy`` (to a float, rounding to
    nearest even, or an integer into a type holding all its values: exact)."""
    if out == "i1":
        return "ne"
    if src in FLOATS:
        return "copy" if out in FLOATS else "truncate"
    if src in INT_RANGE and out in INT_RANGE and not _contains(out, src):
        return "wrap"
    return "copy"


def _contains(wide: str, narrow: str) -> bool:
    """Whether every value of integer type ``narrow`` is one of ``wide``."""
    return INT_RANGE[wide][0] <= INT_RANGE[narrow][0] and INT_RANGE[narrow][1] <= INT_RANGE[wide][1]


def _floor(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    return b.floored(operands[0], DSL_DTYPE[out], result)


def _ceil(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    """``ceil(x) = -floor(-x)``: negations are exact and keep signed zeros (``ceil(-0.5) = -0``)."""
    negated = b.alu("mul", operands[0], -1.0, "fp32", result)
    return b.alu("mul", b.floored(negated, "fp32", result), -1.0, DSL_DTYPE[out], result)


def _round_even(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    """Round half to even: a write to int32 rounds so (sim.values), and the integer back in fp32 is exact for
    ``|x| < 2**23``; larger floats are integers already (kept by a select, as are NaN and the infinities the
    write would map to 0 or saturate). A zero result has lost its sign (``-0.3 -> +0``): where the result is 0
    it is ``x * 0``, signed as ``x``."""
    (x,) = operands
    integer = b.push(("copy", "copy", (x,), "int32"), result)
    rounded = b.push(("copy", "copy", (integer,), "fp32"), result)
    large = b.alu("ge", b.alu("abs_max", x, 0.0, "fp32", result), 2.0 ** 23, "uint8", result)
    kept = b.push(("select", "select", (large, x, rounded), "fp32"), result)
    zero = b.alu("eq", kept, 0.0, "uint8", result)
    return b.push(("select", "select", (zero, b.alu("mul", x, 0.0, "fp32", result), kept), DSL_DTYPE[out]), result)


def _round_away(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    """Round half away from zero: ``trunc(x) + trunc(2 f)`` for ``f = fmod(x, 1)`` of ``x`` clamped to ±2**24
    (``trunc(x) = x - f``; ``2 f`` in (-2, 2) is exact and its integer part -1, 0 or 1 is ``2 f - fmod(2 f, 1)``):
    every step exact, 0.49999997 included. A zero result is signed as ``x`` (``x * 0``), as in ``_round_even``."""
    (x,) = operands
    clamped = b.alu("min", b.alu("max", x, -2.0 ** 24, "fp32", result), 2.0 ** 24, "fp32", result)
    f = b.alu("mod", clamped, 1.0, "fp32", result)
    twice = b.alu("mul", f, 2.0, "fp32", result)
    half = b.alu("sub", twice, b.alu("mod", twice, 1.0, "fp32", result), "fp32", result)
    rounded = b.alu("add", b.alu("sub", x, f, "fp32", result), half, "fp32", result)
    zero = b.alu("eq", rounded, 0.0, "uint8", result)
    return b.push(("select", "select", (zero, b.alu("mul", x, 0.0, "fp32", result), rounded), DSL_DTYPE[out]),
                  result)


def _float_sign(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    """-1, ±0 (the operand's own zero) or 1, NaN for NaN: ``x * 2**200`` (in two exact-or-overflowing
    multiplies: the smallest subnormal, 2**-149, becomes >= 1) clamped to [-1, 1]; ``max``/``min`` pass NaN."""
    big = b.alu("mul", b.alu("mul", operands[0], 2.0 ** 100, "fp32", result), 2.0 ** 100, "fp32", result)
    return b.alu("min", b.alu("max", big, -1.0, "fp32", result), 1.0, DSL_DTYPE[out], result)


def _int_sign(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    dt = DSL_DTYPE[out]
    return b.alu("min", b.alu("max", operands[0], -1.0, dt, result), 1.0, dt, result)


def _int_not(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref:
    """``~x``: ``x xor`` all ones (-1 read signed; an i1 mask's 1)."""
    lo, hi = INT_RANGE[out]
    return b.alu("xor", operands[0], -1.0 if lo < 0 else float(hi), DSL_DTYPE[out], result)


def _zero_divisor(b: _Builder, divisor: Ref, result: str) -> Ref | None:
    """The mask of ``divisor == 0`` for a select in ``result``'s kind, or None if none is needed or possible."""
    if divisor[0] == "imm" or b.kind(divisor) != result:
        return None
    return b.alu("eq", divisor, 0.0, "uint8", result)


def _int_divide(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref | None:
    """Division truncating toward zero: ``(a - fmod(a, b)) / b``, an exact quotient of integers below 2**24;
    ``x / 0 = -1`` (all bits set: the largest unsigned) and ``INT_MIN / -1 = INT_MIN`` wrap as
    ``ir.semantics`` has them."""
    a, d = operands
    if d == ("imm", 0.0) or (d[0] != "imm" and b.kind(d) != result):
        return None
    dt = DSL_DTYPE[out]
    work = dt if out == "i32" else "int32"
    rem = b.alu("mod", a, d, "fp32", result)
    quotient = b.alu("div", b.push(("alu", "sub", (a, rem), "fp32"), result), d, work, result)
    zero = _zero_divisor(b, d, result)
    if zero is not None:
        quotient = b.push(("select", "select", (zero, b.const(-1.0, work, result in ("col", "sc")), quotient),
                           work), result)
    return quotient if work == dt else b.push(("wrap", WRAP[out], (quotient,), dt), result)


def _int_remainder(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref | None:
    """``fmod(a, b)``, exact (the sign of ``a``; ``INT_MIN % -1 = 0``); ``x % 0 = x``."""
    a, d = operands
    dt = DSL_DTYPE[out]
    if d == ("imm", 0.0) or (d[0] != "imm" and b.kind(d) != result) or (a[0] != "imm" and b.kind(a) != result):
        return None
    rem = b.alu("mod", a, d, dt, result)
    zero = _zero_divisor(b, d, result)
    if zero is None:
        return rem
    kept = b.const(a[1], dt, result in ("col", "sc")) if a[0] == "imm" else a
    return b.push(("select", "select", (zero, kept, rem), dt), result)


# an unsigned DSL dtype → the signed one of its width (a bitcast reads the same bits)
SIGNED: dict[str, str] = {"uint8": "int8", "uint16": "int16", "uint32": "int32"}


def _shift(kind: str) -> Callable[[_Builder, tuple[Ref, ...], str, str], Ref | None]:
    """StableHLO's shifts of integers on the ISA's int64 ``shl`` / ``shr`` (arithmetic) of the operands' values:
    the amount read unsigned and capped at the width (``bits - 1`` for an arithmetic shift, whose larger shifts
    leave the sign), so shifts by the width or more give 0 (the sign) as ``ir.semantics`` has them. A left shift
    first keeps the bits that stay (``x and (2**bits - 1) >> s``), so its result fits the unsigned twin; a
    logical one shifts the bits read unsigned; an arithmetic one the value read signed. Results in the
    unsigned twin are read back as a signed type by a ``wrap``; every value is exact in int64."""

    def build(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref | None:
        x, amount = operands
        lo, hi = INT_RANGE[out]
        bits, twin, dt = (hi - lo).bit_length(), WRAP[out], DSL_DTYPE[out]
        ones = float((1 << bits) - 1)
        cap = float(bits - 1 if kind == "arithmetic" else bits)
        if x[0] == "imm":
            return None
        if amount[0] == "imm":
            s: Ref = ("imm", min(float(int(amount[1]) & ((1 << bits) - 1)), cap))
        else:
            k = b.kind(amount)
            unsigned = amount if out in UNSIGNED else b.push(("wrap", twin, (amount,), twin), k)
            s = b.alu("min", unsigned, cap, "int32", k)
        step = _combine({b.kind(x)} | ({b.kind(s)} if s[0] != "imm" else set()))
        if kind == "left":
            mask = ("imm", float(int(ones) >> int(s[1]))) if s[0] == "imm" else \
                b.push(("alu", "shr", (("imm", ones), s), twin), b.kind(s))
            shifted = b.push(("alu", "shl", (b.push(("alu", "and", (x, mask), twin), step), s), twin), step)
        elif kind == "logical":
            shifted = b.push(("alu", "shr", (b.alu("and", x, ones, twin, b.kind(x)), s), twin), step)
        else:
            signed = x if out not in UNSIGNED else b.push(("wrap", twin, (x,), SIGNED[twin]), b.kind(x))
            shifted = b.push(("alu", "shr", (signed, s), SIGNED[twin]), step)
            if out not in UNSIGNED:
                return shifted
            return b.push(("wrap", twin, (shifted,), dt), step)        # its bits read unsigned
        return shifted if twin == dt else b.push(("wrap", twin, (shifted,), dt), step)

    return build


def _zero_bias(func: str) -> tuple[Ref, ...]:
    """The bias operand of an activation of ``func``: -0.0 where f(-0) ≠ f(+0) (``recipe.ZERO_SIGNED``), else none."""
    return (("imm", -0.0),) if func in ZERO_SIGNED else ()


_PI = float(np.float32(np.pi))          # fl(π): 0.73 · 2**-23 above π


def _atan2(b: _Builder, operands: tuple[Ref, ...], out: str, result: str) -> Ref | None:
    """``atan2(y, x)`` with IEEE's signed zeros, infinities and NaN (``ir.semantics``: f64 ``arctan2``, rounded
    once): ScalarE's ``arctan`` of ``q = y / x``, plus ``copysign(π, y)`` where ``x``'s sign bit is set (``min(x,
    1 / x) < 0`` finds -0 and -inf too). ``y / x`` is NaN for two zeros or two infinities, where ``clamp(y · x,
    -1, 1)`` stands in (±0 or ±1, signed as the quotient: ``atan2(±0, ±0)`` is ``atan2(±0, ±1)``, ``atan2(±inf,
    ±inf)`` is ``atan2(±1, ±1)``). Where ``x`` is negative, ``q`` and so ``t = arctan(q)`` have ``y``'s opposite
    sign, so ``copysign(π, y) = -fl(π) · clamp(2 / t, -1, 1)`` (``|t| ≤ π/2``: ±1, a zero's sign included).

    Error bound, from the method: ``fl(y / x)`` is within 2**-24 relative of ``y / x``, which arctan carries to
    ``t`` damped (``|q / ((1 + q²) atan q)| ≤ 1``): under 1 ulp of ``t``, plus ½ for ``arctan``'s own rounding.
    For ``x > 0`` that is the result: under 1.5 ulp from ``atan2``, so at most 1 ulp from the correctly rounded
    fp32 value (0 for an immediate ``x = 1``, ``chlo.atan``: one rounding). For ``x < 0``, ``|r| ≥ π/2`` (ulp at
    least 2**-23, ``t``'s at most): ``t``'s 1.5 ulp, ``fl(π)``'s 0.73 and the sum's rounding ½ keep ``r`` under
    2.75 ulp from ``atan2``: at most 3 ulp from the correctly rounded value. A narrower result rounds that fp32
    value once more: at most 1 ulp from the correctly rounded bf16 / f16 value."""
    y, x = (b.alu("mul", b.const(1.0, "fp32"), o, "fp32", "full")
            if result == "full" and o[0] != "imm" and b.kind(o) in ("col", "sc") else o for o in operands)
    dt = DSL_DTYPE[out]

    def step(kind: str, op: str, args: tuple[Ref, ...], dtype: str = "fp32") -> Ref:
        return b.push((kind, op, args, dtype), _combine({b.kind(r) for r in args if r[0] != "imm"}))

    fixed = x[0] == "imm" and np.isfinite(x[1]) and x[1] != 0.0     # y / x NaN only for a NaN y
    q = y if x == ("imm", 1.0) else step("alu", "div", (y, x))
    if not fixed:
        product = step("alu", "mul", (y, x))
        clamped = step("alu", "min", (step("alu", "max", (product, ("imm", -1.0))), ("imm", 1.0)))
        q = step("select", "select", (step("alu", "ne", (q, q), "uint8"), clamped, q))
    negative = bool(np.signbit(x[1])) if x[0] == "imm" else None
    if negative is False:
        return step("act", "arctan", (q, *_zero_bias("arctan")), dt)
    t = step("act", "arctan", (q, *_zero_bias("arctan")))
    sign = step("alu", "min", (step("alu", "max", (step("alu", "div", (("imm", 2.0), t)), ("imm", -1.0))),
                               ("imm", 1.0)))
    turned = step("alu", "sub", (t, step("alu", "mul", (sign, ("imm", _PI)))), dt if negative else "fp32")
    if negative:
        return turned
    reciprocal = step("alu", "div", (("imm", 1.0), x))
    below = step("alu", "lt", (step("alu", "min", (x, reciprocal)), ("imm", 0.0)), "uint8")
    return step("select", "select", (below, turned, t), dt)


# (StableHLO op, on floats) → the steps of an op without one instruction of its own
_COMPOSED: dict[tuple[str, bool], Callable[[_Builder, tuple[Ref, ...], str, str], Ref | None]] = {
    ("floor", True): _floor, ("ceil", True): _ceil, ("round_nearest_even", True): _round_even,
    ("sign", True): _float_sign, ("sign", False): _int_sign, ("not", False): _int_not,
    ("divide", False): _int_divide, ("remainder", False): _int_remainder, ("round_nearest_afz", True): _round_away,
    ("shift_left", False): _shift("left"), ("shift_right_logical", False): _shift("logical"),
    ("shift_right_arithmetic", False): _shift("arithmetic"), ("atan2", True): _atan2,
}


def recipe_for(nodes: list[Node], external: list[Value], outputs: list[Value]) -> Recipe | None:
    """The recipe of a fused group, or None when it does not have the generated form."""
    built = lowered(nodes, external, outputs)
    return None if built is None else built[0]


def lowered(nodes: list[Node], external: list[Value], outputs: list[Value]) -> tuple[Recipe, list[Value]] | None:
    """The recipe of a fused group and the value each kernel input holds (row-major, reshaped to the
    input's 2-D shape), or None."""
    if not nodes or not outputs or any(v.type.size == 0 for nd in nodes for v in (*nd.inputs, *nd.outputs)):
        return None                      # (an empty operand: a reduction of it is its init value, no tile loop)
    n = max(v.type.size for nd in nodes for v in (*nd.inputs, *nd.outputs))
    layout = _layout(nodes, n)
    if layout is None:
        return None
    cols, shape = layout
    if cols and n % cols:
        return None
    b = _Builder(nodes, external, n, cols, shape)
    for node in nodes:
        if not b.node(node):
            return None
    stores = [b.store(v) for v in outputs]
    if any(s is None for s in stores) or not (b.steps or any(k in _SPREAD for _, k in b.inputs)):
        return None                      # (no steps: a broadcast stored, the DMAs that spread it)
    chunk = (MAX_ROW // b.inner) * b.inner if b.inner else MAX_ROW   # a middle-axis one's chunks: whole slices
    chunk = chunk if cols > MAX_ROW else 0
    if cols > MAX_ROW and (not chunk or any(s[0] == "iota" for s in b.steps) or
                           any(k in ("per", *REPEATED) for _, k in b.inputs)):
        return None                      # rows in chunks: no index arithmetic, no tables loaded per block
    if not b.fold_sums():
        return None
    done = [s for s in stores if s is not None]
    if not chunk:
        b.fuse_activations({r[1] for r, *_ in done if r[0] == "tmp"})
    recipe = Recipe(n, tuple(b.inputs), tuple(b.steps), tuple((s[0], s[1]) for s in done), cols,
                    tuple(s[2] for s in done), tuple(b.phases), tuple(b.input_shapes), tuple(s[3] for s in done),
                    chunk, tuple(b.repeats) if any(b.repeats) else ())
    return recipe, b.sources
