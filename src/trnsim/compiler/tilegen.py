"""Generated tile code for fused elementwise and reduction steps, timed by the instruction-level model.

A fused group whose ops all have a NeuronCore instruction (ALU ops on VectorE, activation functions on
ScalarE, casts, compares, selects, iotas) becomes a kernel in the kernel language. The iteration space is
the group's largest tensor, laid out either *flat* (``[128 partitions, N / 128]`` in column tiles of up to
``TILE_COLS``, for pure elementwise groups) or in *rows* (``[N / cols, cols]`` in tiles of 128 rows, whole
rows in the free dimension, for groups that reduce or broadcast). Each tile is loaded, every op applied in
SBUF (scalar constants as instruction immediates, ``tensor_scalar``) and the group's outputs stored —
intermediates never leave SBUF. The kernel is traced once per *recipe* (op sequence, sizes, dtypes) and
timed in timing-only mode; the compiler uses that time for the step.

Values that are not the iteration space's size are *materialised* where they are broadcast into it:

- a scalar (computed, or a scalar input) is a ``[rows, 1]`` column, the per-partition scalar of
  ``tensor_scalar``; a value per row (a last-axis ``tensor_reduce``) is such a column too;
- a tensor broadcast along the leading axes (a bias ``[C]``, a position table ``[T, C]`` over the batch) is
  loaded once as a ``[128, cols]`` tile (``128 / T`` DMAs) when its period divides a tile, else per tile;
- an ``iota`` is GpSimd's ``iota`` of the flat element index, turned into the index along its axis by
  ``mod`` / ``sub`` / ``div`` (exact integers in fp32 below 2**24), and a compare/select of it a mask:
  causal and one-hot masks;
- a constant operand of ``select`` is a constant tile (``memset``).

Steps whose operands are all block-invariant (constants, broadcast tables, masks whose period divides a
tile) run once before the tile loop (phase ``pre``). Reductions over the *leading* axes (bias and
norm-scale gradients ``[B·T, C] → [C]``, the mean of a loss) accumulate on TensorE: each row tile
``x[rows, C]`` is the moving operand of a matmul against a 0/1 selection matrix ``S[rows, P]`` (a ones
column when everything reduces to ``P = 1``), ``acc[P, C] += S.T @ x`` in PSUM across all tiles; the
result and the ops that follow it (phase ``post``) run once after the loop. Groups that fit none of this
(reductions over middle axes, max over the leading axes, quantization) keep the analytic cost of
``costs.fused_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import prod
from typing import Any

from trnsim.ir.graph import Node, Value

PARTITIONS = 128
TILE_COLS = 512           # 2 KiB of fp32 per partition per tile: efficient DMA (neuron.md §1.2), many in flight
PREFETCH = 4             # blocks loaded ahead of the one being computed
QUEUES = 16              # DMA queues per core (trn3 preset); loads and stores are spread over them
MAX_INPUTS = 12
PSUM_COLS = 512          # fp32 per partition in one PSUM bank: one matmul's moving free size (neuron.md §2.2 TC#2)
MAX_LEAD_COLS = 2048     # a leading-axis reduction accumulates in at most 4 of the 8 PSUM banks
EXACT_INDEX = 1 << 24    # iota arithmetic runs in fp32: element indices are exact below this

# StableHLO op → ("alu", ISA ALU op) or ("act", ISA activation function)
ALU: dict[str, str] = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max",
                       "minimum": "min", "power": "pow"}
BITWISE: dict[str, str] = {"and": "and", "or": "or", "xor": "xor"}   # on i1 (uint8 masks) and integers
ACT: dict[str, str] = {"exponential": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt",
                       "rsqrt": "rsqrt", "abs": "abs", "negate": "neg"}
CMP: dict[str, str] = {"EQ": "eq", "NE": "ne", "GT": "gt", "GE": "ge", "LT": "lt", "LE": "le"}
# i1 masks are 0/1 bytes; integers compute exactly through VectorE's fp32 below 2**24
DSL_DTYPE: dict[str, str] = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "i1": "uint8", "i32": "int32"}
REDUCE: dict[str, str] = {"add": "add", "maximum": "max", "minimum": "min"}
IDENTITY: dict[str, float] = {"add": 0.0, "multiply": 1.0, "maximum": float("-inf"), "minimum": float("inf"),
                              "and": 1.0, "or": 0.0}
MAX_ROW = 4096            # the row layout keeps whole rows in a tile: at most 16 KiB of fp32 per partition

Ref = tuple[str, Any]          # ("in", index) | ("tmp", index) | ("imm", float)
Step = tuple[str, str, tuple[Ref, ...], str]    # (kind, op, operands, DSL out dtype)


@dataclass(frozen=True)
class Recipe:
    """What a generated kernel computes: hashable, so traced kernels and their times are cached.

    ``cols == 0``: the flat layout, ``[128, N / 128]`` in column tiles. ``cols > 0``: the row layout,
    ``[N / cols, cols]`` in tiles of 128 rows. Input kinds: ``full`` (a tile per block), ``row`` (a
    ``[rows, 1]`` column per block), ``scalar`` (one ``[128, 1]`` column), ``vec`` / ``per`` (a ``[1, cols]`` /
    ``[P, cols]`` table repeated down the rows). Step kinds: ``alu``, ``act``, ``copy``, ``select``,
    ``reduce`` (free axis), ``const`` (a memset tile), ``iota`` (operands: the axis's stride and size in
    elements), ``lead`` (operands: the value and ``P``; the ``[P, W]`` leading-axis sum, on TensorE).
    ``phases`` says when each step runs: ``pre`` (once, before the tile loop), ``block``, ``post`` (once,
    after it). Output kinds: ``full``, ``row``, ``sc`` (a scalar, or a vector of one repeated scalar, from a
    column), ``red`` (a leading-axis result)."""

    elements: int
    inputs: tuple[tuple[str, str], ...]                         # (DSL dtype, kind)
    steps: tuple[Step, ...]
    outputs: tuple[tuple[Ref, str], ...]                        # (what to store, DSL dtype)
    cols: int = 0
    output_kinds: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()                                # per step; () = all "block"
    input_shapes: tuple[tuple[int, int], ...] = ()              # HBM shapes; () = from the kinds
    output_shapes: tuple[tuple[int, int], ...] = ()


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
        init[1] == IDENTITY[op]


def _immediate(v: Value) -> Ref | None:
    """A scalar constant (the planner leaves those out of a step's inputs: they are immediates)."""
    producer = v.producer
    if v.type.size == 1 and producer is not None and producer.op == "constant":
        return ("imm", float(producer.attrs["value"].reshape(-1)[0]))
    return None


def _layout(nodes: list[Node], n: int) -> tuple[int, tuple[int, ...]] | None:
    """``(cols, shape)`` of the iteration space: cols 0 for the flat layout; None if neither fits."""
    full = [v for nd in nodes for v in (*nd.inputs, *nd.outputs) if v.type.size == n and v.type.rank]
    if not full:
        return None
    rows_needed = False
    for node in nodes:
        if node.op == "reduce" and not _unit_reduce(node):
            x = node.inputs[0].type
            rows_needed |= tuple(node.attrs["dimensions"]) != tuple(range(x.rank)) or x.size != n
        elif node.op == "broadcast_in_dim" and node.inputs[0].type.size not in (1, node.out.type.size):
            rows_needed = True
    if not rows_needed:
        return (0, full[0].type.shape) if n >= PARTITIONS and n % PARTITIONS == 0 else None
    shape = next((nd.inputs[0].type.shape for nd in nodes if nd.op == "reduce" and nd.inputs[0].type.size == n),
                 full[0].type.shape)
    cols = shape[-1]
    if cols > MAX_ROW or any(v.type.shape[-1] != cols for v in full):
        return None                      # a reshape that moves the row boundary
    return cols, shape


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
        self.steps: list[Step] = []
        self.phases: list[str] = []
        self.memo: dict[tuple[Any, ...], Ref | None] = {}

    # ---- refs ------------------------------------------------------------------------------------------
    def kind(self, ref: Ref) -> str:
        return "imm" if ref[0] == "imm" else self.kinds[ref]

    def push(self, step: Step, kind: str, phase: str | None = None) -> Ref:
        self.steps.append(step)
        self.phases.append(phase or {"vec": "pre", "red": "post"}.get(kind, "block"))
        ref: Ref = ("tmp", len(self.steps) - 1)
        self.kinds[ref] = kind
        return ref

    def load(self, v: Value, kind: str, shape: tuple[int, int], ref_kind: str) -> Ref | None:
        key = ("load", v.id, kind, shape)
        if key in self.memo:
            return self.memo[key]
        if v.type.dtype not in DSL_DTYPE or len(self.inputs) >= MAX_INPUTS:
            return None
        ref: Ref = ("in", len(self.inputs))
        self.inputs.append((DSL_DTYPE[v.type.dtype], kind))
        self.sources.append(v)
        self.input_shapes.append(shape)
        self.kinds[ref] = ref_kind
        self.memo[key] = ref
        return ref

    def const(self, value: float, dtype: str) -> Ref:
        key = ("const", value, dtype)
        ref = self.memo.get(key)
        if ref is None:
            ref = self.memo[key] = self.push(("const", "", (("imm", value),), dtype), "vec")
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
                    (not self.cols or u.type.shape[-1] == v.type.shape[-1]):
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
                return None
            period = size // self.cols
            if period == 1:
                return self.load(v, "vec", (1, self.cols), "vec")
            invariant = PARTITIONS % period == 0
            return self.load(v, "per", (period, self.cols), "vec" if invariant else "full")
        if size == self.rows and prod(target[:-1]) == self.rows:
            return self.load(v, "row", (self.rows, 1), "col")
        return None

    def _iota(self, node: Node, target: tuple[int, ...], dims: tuple[int | None, ...]) -> Ref | None:
        axis = dims[node.attrs["iota_dimension"]]
        dtype = DSL_DTYPE.get(node.out.type.dtype)
        if axis is None:
            return ("imm", 0.0)
        if dtype is None or self.n >= EXACT_INDEX:
            return None
        stride = prod(target[axis + 1:])
        period = stride * target[axis]
        invariant = self.cols > 0 and ((PARTITIONS * self.cols) % period == 0 or self.rows <= PARTITIONS)
        return self.push(("iota", "", (("imm", float(stride)), ("imm", float(target[axis]))), dtype),
                         "vec" if invariant else "full")

    # ---- ops -------------------------------------------------------------------------------------------
    def apply(self, node: Node, operands: tuple[Ref, ...]) -> Ref | None:
        """The step computing elementwise ``node`` on ``operands`` (or an alias), or None."""
        out_t = node.out.type
        if out_t.dtype not in DSL_DTYPE:
            return None
        dt = DSL_DTYPE[out_t.dtype]
        kinds = [self.kind(o) for o in operands]
        tiles = {k for k in kinds if k != "imm"}
        if kinds[0] == "red" and node.op in ("convert", "reshape", "broadcast_in_dim", "reduce") and \
                node.inputs[0].type.size != out_t.size:
            return None                  # a leading-axis result broadcast back: it is ready only after the loop
        if node.op == "convert":
            if kinds[0] == "imm" or node.inputs[0].type.dtype == out_t.dtype:
                return operands[0]
            ref = self.push(("copy", "copy", operands, dt), kinds[0])
            if kinds[0] == "red":
                self.red_shape[ref] = self.red_shape[operands[0]]
            return ref
        if node.op in ("reshape", "broadcast_in_dim") or (node.op == "reduce" and _unit_reduce(node)):
            return operands[0]
        if not tiles:
            return None
        if "red" in tiles:
            shapes = {self.red_shape[o] for o in operands if o[0] != "imm"}
            if tiles != {"red"} or len(shapes) != 1 or node.op == "select":
                return None
            result = "red"
        elif "full" in tiles or ("vec" in tiles and tiles & {"col", "sc"}):
            result = "full"
        elif "vec" in tiles:
            result = "vec"
        else:
            result = "col" if "col" in tiles else "sc"
        if node.op in ALU:
            step: Step = ("alu", ALU[node.op], operands, dt)
        elif node.op in BITWISE and out_t.dtype in ("i1", "i32"):
            step = ("alu", BITWISE[node.op], operands, dt)
        elif node.op in ACT:
            step = ("act", ACT[node.op], operands, dt)
        elif node.op == "compare" and node.attrs.get("compare_type", "FLOAT") in ("FLOAT", "TOTALORDER", "SIGNED"):
            step = ("alu", CMP[node.attrs["comparison_direction"]], operands, dt)
        elif node.op == "select":
            if kinds[0] == "imm" or (any(k in ("col", "sc") for k in kinds) and result in ("full", "vec")):
                return None
            if result in ("col", "sc") and "imm" in kinds:
                return None
            picked = tuple(self.const(o[1], dt) if o[0] == "imm" else o for o in operands[1:])
            step = ("select", "select", (operands[0], *picked), dt)
        elif node.op == "clamp" and kinds[1] != "imm":
            lo = self.push(("alu", "max", (operands[1], operands[0]), dt), result)
            if result == "red":
                self.red_shape[lo] = self.red_shape[operands[1]]
            step = ("alu", "min", (lo, operands[2]), dt)
        else:
            return None
        if sum(k in ("col", "sc") for k in kinds) and result in ("full", "vec") and step[0] == "alu" and \
                len([k for k in kinds if k in ("full", "vec")]) != 1:
            return None                  # tensor_scalar: one tile and one column (or immediate)
        ref = self.push(step, result)
        if result == "red":
            self.red_shape[ref] = next(self.red_shape[o] for o in operands if o[0] != "imm")
        return ref

    def reduce(self, node: Node) -> Ref | None:
        """A reduction: along the last axis on VectorE (a column), over leading axes on TensorE (``lead``)."""
        from trnsim.ir.semantics.reduce import simple_combiner

        x = node.inputs[0]
        op = simple_combiner(node.regions[0])
        init = _immediate(node.inputs[1])
        if op not in REDUCE or init is None or init[1] != IDENTITY[op] or node.out.type.dtype not in DSL_DTYPE:
            return None
        dt = DSL_DTYPE[node.out.type.dtype]
        dims = set(node.attrs["dimensions"])
        r = x.type.rank
        if x.type.size == self.n:
            src = self.value(x, x.type.shape, tuple(range(r)))
            if src is None or self.kind(src) != "full":
                return None
            last = (r - 1) in dims or not self.cols
            if last:
                src = self.push(("reduce", REDUCE[op], (src,), dt if dims == {r - 1} else "fp32"), "col")
                if dims == {r - 1}:
                    return src
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
        if op != "add" or period > PARTITIONS or width > MAX_LEAD_COLS or node.out.type.size != period * width or \
                DSL_DTYPE.get(x.type.dtype) not in ("fp32", "bf16", "fp16"):
            return None
        # NOTE: the leading-axis sum runs on TensorE, as a kernel author would write it: nc_matmul with a 0/1
        # stationary accumulates ``S.T @ x`` into PSUM across all row tiles for free (neuron.md §2.3
        # ``accumulate``), on an engine an elementwise kernel leaves idle, reading the row tiles already in
        # SBUF. GpSimd's tensor_partition_reduce runs at 128 elements/cycle (§1.4), a quarter of VectorE's
        # bf16 rate, on the engine that also builds masks; a transposed-view load (dma_transpose, §2.3) would
        # bring the data in a second time when the group also works along rows (a norm's backward does
        # both). fp32 operands cost TensorE 4× (§1.4: 20 vs 79 TFLOPS), still one pass per tile.
        ref = self.push(("lead", "add", (src, ("imm", float(period))), dt), "red", "block")
        self.red_shape[ref] = (period, width)
        return ref

    def scalar(self, u: Value) -> Ref | None:
        """A lazy value that is a broadcast (or reshape, convert) of a scalar: that scalar's ref."""
        while u.type.size != 1:
            p = self.produced.get(u.id)
            if p is None or p.op not in ("broadcast_in_dim", "reshape", "convert") or u.id in self.refs:
                return None
            u = p.inputs[0]
        return self.value(u, (), (None,) * u.type.rank)

    def node(self, node: Node) -> bool:
        """Give ``node``'s result a ref now if it is needed as a tile; False if the group cannot be lowered."""
        v = node.out
        if len(node.outputs) != 1:
            return False
        if node.op == "reduce" and not _unit_reduce(node):
            ref = self.reduce(node)
        elif any(self.kind(self.refs[u.id]) == "red" for u in node.inputs if u.id in self.refs):
            operands = [self.refs.get(u.id) or self.scalar(u) for u in node.inputs]
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
        if ref is None or ref[0] == "imm":
            return None
        k = self.kind(ref)
        width = self.cols or self.n // PARTITIONS
        if v.type.size == self.n and k in ("col", "sc"):
            # a broadcast column stored whole: added to a zero tile, one tensor_scalar per tile
            ref = self.push(("alu", "add", (self.const(0.0, dt), ref), dt), "full")
            k = "full"
        if v.type.size == self.n and k in ("full", "vec"):
            return ref, dt, "full", (self.rows, width)
        if k == "col" and self.cols and v.type.size == self.rows:
            return ref, dt, "row", (self.rows, 1)
        if k == "sc" and v.type.size <= min(PARTITIONS, self.rows):
            return ref, dt, "sc", (v.type.size, 1)
        if k == "red" and v.type.size == prod(self.red_shape[ref]):
            return ref, dt, "red", self.red_shape[ref]
        return None


def recipe_for(nodes: list[Node], external: list[Value], outputs: list[Value]) -> Recipe | None:
    """The recipe of a fused group, or None when it does not have the generated form."""
    built = lowered(nodes, external, outputs)
    return None if built is None else built[0]


def lowered(nodes: list[Node], external: list[Value], outputs: list[Value]) -> tuple[Recipe, list[Value]] | None:
    """The recipe of a fused group and the value each kernel input holds (row-major, reshaped to the
    input's 2-D shape), or None."""
    if not nodes or not outputs:
        return None
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
    if any(s is None for s in stores) or not b.steps or not b.inputs:
        return None                      # (a group that reads nothing, an iota alone: a fill)
    done = [s for s in stores if s is not None]
    recipe = Recipe(n, tuple(b.inputs), tuple(b.steps), tuple((s[0], s[1]) for s in done), cols,
                    tuple(s[2] for s in done), tuple(b.phases), tuple(b.input_shapes), tuple(s[3] for s in done))
    return recipe, b.sources


def index_recipe(node: Node) -> Recipe | None:
    """A gather or scatter-add of one element per row along the last axis (cross-entropy's
    ``take_along_axis`` of the label's logit, and its gradient) as a one-hot select on VectorE, or None.

    NOTE: a vocabulary-sized last axis is in SBUF already in the row layout, and an indirect DMA of 4-byte
    elements (one descriptor per row, neuron.md §2.6: DMAs want ≥ 2 KiB contiguous) would be slower than
    three VectorE passes: ``mask = (iota_j == index[p])`` (``tensor_scalar``), ``select``, then the row sum
    (gather) or ``select(mask, x + update[p], x)`` (scatter-add). Rows index one element each (batching
    dims are all the leading axes), so the one-hot form is exact for indices in ``[0, V)``; one outside
    selects nothing where StableHLO clamps it (a cross-entropy's labels are wrapped into range first)."""
    from trnsim.ir.semantics.reduce import simple_combiner

    if node.op not in ("gather", "scatter") or len(node.outputs) != 1:
        return None
    x, idx = node.inputs[0].type, node.inputs[1].type
    r = x.rank
    lead = tuple(range(r - 1))
    if r < 2 or x.dtype not in ("f32", "bf16", "f16") or idx.dtype not in ("i32", "ui32") or x.shape[-1] > MAX_ROW:
        return None
    rows, cols = x.size // x.shape[-1], x.shape[-1]
    if idx.size != rows:
        return None
    dt = DSL_DTYPE[x.dtype]
    iota: Step = ("iota", "", (("imm", 1.0), ("imm", float(cols))), "int32")
    if node.op == "gather":
        dn = node.attrs["dimension_numbers"]
        if dn["collapsed_slice_dims"] != (r - 1,) or dn["start_index_map"] != (r - 1,) or \
                tuple(dn["operand_batching_dims"]) != lead or tuple(dn["start_indices_batching_dims"]) != lead or \
                dn["offset_dims"] or tuple(node.attrs["slice_sizes"]) != (1,) * r or node.out.type.size != rows:
            return None
        steps: tuple[Step, ...] = (iota, ("alu", "eq", (("tmp", 0), ("in", 1)), "uint8"),
                                   ("const", "", (("imm", 0.0),), dt),
                                   ("select", "select", (("tmp", 1), ("in", 0), ("tmp", 2)), dt),
                                   ("reduce", "add", (("tmp", 3),), DSL_DTYPE[node.out.type.dtype]))
        return Recipe(x.size, ((dt, "full"), ("int32", "row")), steps, ((("tmp", 4), dt),), cols, ("row",),
                      ("pre", "block", "pre", "block", "block"))
    dn = node.attrs["scatter_dimension_numbers"]
    if len(node.inputs) != 3 or simple_combiner(node.regions[0]) != "add" or dn["update_window_dims"] or \
            dn["inserted_window_dims"] != (r - 1,) or dn["scatter_dims_to_operand_dims"] != (r - 1,) or \
            tuple(dn["input_batching_dims"]) != lead or tuple(dn["scatter_indices_batching_dims"]) != lead or \
            node.inputs[2].type.size != rows or node.inputs[2].type.dtype != x.dtype:
        return None
    steps = (iota, ("alu", "eq", (("tmp", 0), ("in", 1)), "uint8"),
             ("alu", "add", (("in", 0), ("in", 2)), dt),
             ("select", "select", (("tmp", 1), ("tmp", 2), ("in", 0)), dt))
    return Recipe(x.size, ((dt, "full"), ("int32", "row"), (dt, "row")), steps, ((("tmp", 3), dt),), cols,
                  ("full",), ("pre", "block", "block", "block"))


def _kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor

    @dsl.kernel
    def fused_elementwise(a0: Tensor, a1: Tensor | None = None, a2: Tensor | None = None,
                          a3: Tensor | None = None, a4: Tensor | None = None, a5: Tensor | None = None,
                          a6: Tensor | None = None, a7: Tensor | None = None, a8: Tensor | None = None,
                          a9: Tensor | None = None, a10: Tensor | None = None, a11: Tensor | None = None, *,
                          recipe: Recipe) -> tuple[Tensor, ...]:
        """The group's ops over tiles of its inputs (module docstring and ``Recipe``)."""
        ins = [a for a in (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) if a is not None]
        row_layout = recipe.cols > 0
        rows, cols = _space(recipe)
        lanes = min(PARTITIONS, rows)                    # partitions of a full tile
        width = cols if row_layout else min(TILE_COLS, cols)
        phases = recipe.phases or ("block",) * len(recipe.steps)
        kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
        outs = [dsl.hbm_tensor(shape, dt, name=f"out{i}")
                for i, ((_, dt), shape) in enumerate(zip(recipe.outputs, _output_shapes(recipe), strict=True))]
        shapes = _input_shapes(recipe)
        # loaded once: computed scalars as [128, 1] columns; tables repeated down the rows as [lanes, cols]
        columns: dict[int, Tensor] = {}
        for i, (x, (dt, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)):
            if kind == "scalar":
                columns[i] = dsl.load(x[0:1, 0:1].broadcast_to((PARTITIONS, 1)))
            elif kind == "vec":
                columns[i] = dsl.load(x[0:1, :].broadcast_to((PARTITIONS, cols)))
            elif kind == "per" and PARTITIONS % shapes[i][0] == 0:
                period = shapes[i][0]
                tile = dsl.sbuf((lanes, cols), dt)
                for r0 in range(0, lanes, period):
                    dsl.load(tile[r0:r0 + period], x[0:period, :], queue=(r0 // period) % QUEUES)
                columns[i] = tile
        pre: dict[int, Tensor] = {}
        post: dict[int, Tensor] = {}
        selections: dict[tuple[int, str], Tensor] = {}
        accumulators: dict[int, list[Tensor]] = {}

        def selection(period: int, dt: str, base: int, k: int) -> Tensor:
            """``S[p, j] = ((base + p) mod period == j)``: which leading-axis result row each tile row adds to."""
            if period == 1:
                return dsl.full((k, 1), 1.0, dt)
            index = dsl.iota((k, period), "int32", base=base, channel_multiplier=1, steps=[-1])
            phase = dsl.binary("mod", index, float(period), dtype="fp32")
            return dsl.binary("eq", phase, 0.0, dtype=dt)

        for index, (kind, op, operands, dt) in enumerate(recipe.steps):
            if kind == "lead":
                accumulators[index] = []
            if phases[index] != "pre":
                continue
            args = [pre[r[1]] if r[0] == "tmp" else columns[r[1]] if r[0] == "in" else r[1] for r in operands]
            pre[index] = _compute(dsl, kind, op, args, dt, (lanes, width), 0, cols, recipe.elements)
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
                if i in columns:
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
                else:
                    tiles.append(dsl.load(part(x, b0, bw), queue=queue % QUEUES))
                    queue += 1
            return tiles

        # step index → block intermediates read there for the last time (never the ones the group stores)
        stored = {r[1] for r, _ in recipe.outputs if r[0] == "tmp"}
        last: dict[int, int] = {}
        for index, (_, _, operands, _) in enumerate(recipe.steps):
            for r in operands:
                if r[0] == "tmp" and phases[r[1]] == "block" and phases[index] == "block":
                    last[r[1]] = index
        last_read: dict[int, list[int]] = {}
        for j, index in last.items():
            if j not in stored and recipe.steps[j][0] != "lead":
                last_read.setdefault(index, []).append(j)

        # NOTE: software pipelining: DMAs issue in program order, so block i+PREFETCH's loads are emitted
        # before block i's stores (which wait for its compute), keeping the queues busy
        loaded = [load_block(*b) for b in blocks[:PREFETCH]]
        for i, (b0, bw) in enumerate(blocks):
            if i + PREFETCH < len(blocks):
                loaded.append(load_block(*blocks[i + PREFETCH]))
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
                    x: Tensor = args[0]
                    period = int(operands[1][1])
                    k = x.shape[0]
                    key = (period, x.dtype)
                    if PARTITIONS % period == 0:
                        if key not in selections:
                            selections[key] = selection(period, x.dtype, 0, PARTITIONS)
                        s = selections[key][:k]
                    else:
                        s = selection(period, x.dtype, b0, k)
                    acc = accumulators[index]
                    for c, c0 in enumerate(range(0, x.shape[1], PSUM_COLS)):
                        c1 = min(x.shape[1], c0 + PSUM_COLS)
                        if len(acc) <= c:
                            acc.append(dsl.psum((period, c1 - c0)))
                        dsl.matmul(acc[c], s, x[:, c0:c1], accumulate=i > 0)
                    continue
                shape = (bw, width) if row_layout else (PARTITIONS, bw)
                tmps[index] = _compute(dsl, kind, op, args, dt, shape, b0 * cols if row_layout else b0, cols,
                                       recipe.elements)
                # free the intermediates this step read for the last time: the working set stays small
                dead = [tmps.pop(j) for j in last_read.get(index, ()) if j in tmps]
                if dead:
                    dsl.release(*dead)
            for out, (ref, _), k in zip(outs, recipe.outputs, kinds, strict=True):
                if k in ("full", "row"):
                    dsl.store(part(out, b0, bw), get(ref), queue=queue % QUEUES)
                    queue += 1
                elif k == "sc" and i == 0:
                    dsl.store(out, get(ref)[0:out.shape[0]], queue=queue % QUEUES)
                    queue += 1
            dsl.release(*(t for t in tiles if t is not None), *tmps.values())
            loaded[i] = []
        # after the loop: leading-axis results leave PSUM, and the ops that read them run once
        for index, (kind, op, operands, dt) in enumerate(recipe.steps):
            if kind == "lead":
                acc = accumulators[index]
                period = int(operands[1][1])
                total = sum(a.shape[1] for a in acc)
                result = dsl.sbuf((period, total), dt)
                for c, a in enumerate(acc):
                    dsl.copy(a, out=result[:, c * PSUM_COLS:c * PSUM_COLS + a.shape[1]])
                post[index] = result
            elif phases[index] == "post":
                args = [post[r[1]] if r[0] == "tmp" else r[1] for r in operands]
                post[index] = _compute(dsl, kind, op, args, dt, (1, 1), 0, cols, recipe.elements)
        for out, (ref, _), k in zip(outs, recipe.outputs, kinds, strict=True):
            if k == "red":
                dsl.store(out, post[ref[1]], queue=queue % QUEUES)
                queue += 1
        return tuple(outs)

    return fused_elementwise


def _compute(dsl: Any, kind: str, op: str, args: list[Any], dt: str, shape: tuple[int, int], base: int,
             multiplier: int, elements: int) -> Any:
    """One step on tiles. Constants and iotas are made as ``shape``; an iota's flat element index at
    partition ``p``, position ``j`` is ``base + multiplier * p + j``."""
    if kind == "alu":
        return dsl.binary(op, args[0], args[1], dtype=dt)
    if kind == "act":
        return dsl.activation(op, args[0], dtype=dt)
    if kind == "copy":
        return dsl.copy(args[0], dtype=dt)
    if kind == "reduce":
        return dsl.reduce(op, args[0], axis=-1, dtype=dt)
    if kind == "select":
        return dsl.where(args[0], args[1], args[2], dtype=dt)
    if kind == "const":
        return dsl.full(shape, args[0], dt)
    assert kind == "iota", kind
    # the index along one axis from the flat element index e: (e mod (stride * size)) div stride
    stride, size = int(args[0]), int(args[1])
    index = dsl.iota(shape, "int32", base=base, channel_multiplier=multiplier, steps=[1])
    if stride * size < elements:
        index = dsl.binary("mod", index, float(stride * size), dtype="int32")
    if stride > 1:
        low = dsl.binary("mod", index, float(stride), dtype="int32")
        index = dsl.binary("sub", index, low, dtype="int32")
        return dsl.binary("div", index, float(stride), dtype=dt)
    return index if dt == "int32" else dsl.copy(index, dtype=dt)


def _space(recipe: Recipe) -> tuple[int, int]:
    """(rows, cols) of the iteration space in HBM: the row layout's rows, or the flat ``[128, N / 128]``."""
    if recipe.cols:
        return recipe.elements // recipe.cols, recipe.cols
    return PARTITIONS, recipe.elements // PARTITIONS


def _input_shapes(recipe: Recipe) -> tuple[tuple[int, int], ...]:
    if recipe.input_shapes:
        return recipe.input_shapes
    rows, cols = _space(recipe)
    shapes = {"full": (rows, cols), "row": (rows, 1), "scalar": (1, 1), "vec": (1, cols)}
    return tuple(shapes[kind] for _, kind in recipe.inputs)


def _output_shapes(recipe: Recipe) -> tuple[tuple[int, int], ...]:
    if recipe.output_shapes:
        return recipe.output_shapes
    rows, cols = _space(recipe)
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    return tuple((rows, cols if k == "full" else 1) for k in kinds)


_KERNEL: list[Any] = []


@dataclass(frozen=True)
class TileTime:
    seconds: float
    busy: dict[str, float]
    instructions: int
    by_engine: dict[str, int] = field(default_factory=dict[str, int])    # instructions per engine ("dma")


MAX_TIMED_BLOCKS = 64     # larger groups are timed on 64 blocks and scaled: a streaming kernel is linear


def fused_time(target: str, recipe: Recipe) -> TileTime:
    """The generated kernel's time for ``recipe`` (timing-only, no data); groups of more than
    ``MAX_TIMED_BLOCKS`` tiles are timed on that many and scaled linearly (steady-state streaming; the
    once-per-kernel work before and after the loop is scaled with it, a small overestimate)."""
    per_block = PARTITIONS * (recipe.cols or TILE_COLS)
    blocks = -(-recipe.elements // per_block)
    if blocks <= MAX_TIMED_BLOCKS:
        return _timed(target, recipe)
    sample = _sample(recipe, MAX_TIMED_BLOCKS * per_block)
    t = _timed(target, sample)
    f = blocks / MAX_TIMED_BLOCKS
    from trnsim.compiler.kernel_timing import scale_counts

    return TileTime(t.seconds * f, {e: b * f for e, b in t.busy.items()}, round(t.instructions * f),
                    scale_counts(t.by_engine, f))


def _sample(recipe: Recipe, elements: int) -> Recipe:
    """``recipe`` over the first ``elements`` of its iteration space (tables and results keep their shapes)."""
    sample = replace(recipe, elements=elements)
    rows, cols = _space(sample)
    fit = {"full": (rows, cols), "row": (rows, 1)}
    inputs = tuple(fit.get(k, shape) for shape, (_, k) in zip(_input_shapes(recipe), recipe.inputs, strict=True))
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    outputs = tuple(fit.get(k, shape) for shape, k in zip(_output_shapes(recipe), kinds, strict=True))
    return replace(sample, input_shapes=inputs, output_shapes=outputs)


@lru_cache(maxsize=1024)
def _timed(target: str, recipe: Recipe) -> TileTime:
    """Trace the generated kernel for ``recipe`` and time it (timing-only, no data)."""
    import trnsim
    from trnsim.sim.profile import Profile

    if not _KERNEL:
        _KERNEL.append(_kernel())
    specs = _specs(recipe)
    result = trnsim.run_kernel(_KERNEL[0], *specs, target=target, timing=True, recipe=recipe)
    profile = result.profile
    assert isinstance(profile, Profile)
    busy = {e: t for e, t in profile.engine_busy.items() if e in ("tensor", "vector", "scalar", "gpsimd") and t > 0}
    from trnsim.compiler.kernel_timing import engine_counts

    return TileTime(profile.total_seconds, busy, profile.instructions, engine_counts(profile))


def kernel_program(target: str, recipe: Recipe) -> Any:
    """The traced, verifiable NeuronCore ``Program`` of a recipe (for inspection and tests)."""
    if not _KERNEL:
        _KERNEL.append(_kernel())
    specs = _specs(recipe)
    return _KERNEL[0].compile_specs([(s.shape, s.dtype) for s in specs], target, {"recipe": recipe}).program


def _specs(recipe: Recipe) -> list[Any]:
    import trnsim

    return [trnsim.TensorSpec(shape, dt) for shape, (dt, _) in zip(_input_shapes(recipe), recipe.inputs, strict=True)]


def clear_memo() -> None:
    _timed.cache_clear()
    for k in _KERNEL:
        k._cache.clear()  # pyright: ignore[reportPrivateUsage]
