"""Generated tile code for fused elementwise and row-reduction steps, timed by the instruction-level model.

A fused group whose inputs are full-size tensors or scalar constants, and whose ops all have a NeuronCore
instruction (ALU ops on VectorE, activation functions on ScalarE, casts, compares and selects), becomes a
kernel in the kernel language: the iteration space is laid out as ``[128 partitions, N / 128]``, processed
in column tiles of up to ``TILE_COLS``; each tile is loaded, every op of the group applied in SBUF (scalar
constants as instruction immediates, ``tensor_scalar``), and the group's outputs stored — intermediates
never leave SBUF. The kernel is traced once per *recipe* (the op sequence, element count and dtypes) and
timed in timing-only mode; the compiler uses that time for the step. Groups that reduce along the last axis
(norms, softmax, losses) use a row layout instead: 128 rows per tile, whole rows in the free dimension,
reductions on VectorE (``tensor_reduce``) into ``[rows, 1]`` columns that broadcast back as per-partition
scalars. Groups that fit neither form (other reductions, broadcasts along other axes, quantization) keep
the analytic cost of ``costs.fused_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trnsim.ir.graph import Node, Value

PARTITIONS = 128
TILE_COLS = 512           # 2 KiB of fp32 per partition per tile: efficient DMA (neuron.md §1.2), many in flight
PREFETCH = 4             # blocks loaded ahead of the one being computed
QUEUES = 16              # DMA queues per core (trn3 preset); loads and stores are spread over them
MAX_INPUTS = 8

# StableHLO op → ("alu", ISA ALU op) or ("act", ISA activation function)
ALU: dict[str, str] = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max",
                       "minimum": "min", "power": "pow"}
ACT: dict[str, str] = {"exponential": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt",
                       "rsqrt": "rsqrt", "abs": "abs", "negate": "neg"}
CMP: dict[str, str] = {"EQ": "eq", "NE": "ne", "GT": "gt", "GE": "ge", "LT": "lt", "LE": "le"}
DSL_DTYPE: dict[str, str] = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "i1": "fp32"}   # i1 masks as 0/1
VIEWS = frozenset({"reshape", "broadcast_in_dim", "convert"})

Ref = tuple[str, Any]          # ("in", index) | ("tmp", index) | ("imm", float)


@dataclass(frozen=True)
class Recipe:
    """What a generated kernel computes: hashable, so traced kernels and their times are cached.

    ``cols == 0``: the flat layout, ``[128, N / 128]`` in column tiles. ``cols > 0``: the row layout,
    ``[N / cols, cols]`` in tiles of 128 rows, for groups that reduce along (or broadcast back over) the
    last axis; a *row* value (one per row: a reduction's result) is a ``[rows, 1]`` column tile, used as
    the per-partition scalar of ``tensor_scalar`` instructions."""

    elements: int
    inputs: tuple[tuple[str, str], ...]                         # (DSL dtype, "full" | "row" | "scalar" | "vec")
    steps: tuple[tuple[str, str, tuple[Ref, ...], str], ...]    # (kind, op, operands, DSL out dtype)
    outputs: tuple[tuple[Ref, str], ...]                        # (what to store, DSL dtype)
    cols: int = 0
    output_kinds: tuple[str, ...] = ()                          # "full" | "row" per output (row layout)


REDUCE: dict[str, str] = {"add": "add", "maximum": "max", "minimum": "min"}
MAX_ROW = 4096            # the row layout keeps whole rows in a tile: at most 16 KiB of fp32 per partition


def _vector_broadcasts(nodes: list[Node]) -> dict[int, int]:
    """Value id → row length, for 1-D values broadcast along the free axis of rows (a bias or norm scale:
    ``broadcast_in_dim`` of ``[C]`` into ``[..., C]`` with ``dims = [rank - 1]``)."""
    found: dict[int, int] = {}
    for node in nodes:
        if node.op == "broadcast_in_dim" and node.inputs[0].type.rank == 1 and node.out.type.rank >= 2 and \
                tuple(node.attrs["broadcast_dimensions"]) == (node.out.type.rank - 1,) and \
                node.inputs[0].type.shape[0] == node.out.type.shape[-1] > 1:
            found[node.inputs[0].id] = node.out.type.shape[-1]
    return found


def _row_length(nodes: list[Node]) -> int | None:
    """The row length of a group that reduces its last axis or broadcasts a vector along it, 0 if it does
    neither, None if it reduces anything else."""
    from trnsim.ir.semantics.reduce import simple_combiner

    vectors = set(_vector_broadcasts(nodes).values())
    if len(vectors) > 1:
        return None
    cols = next(iter(vectors), 0)
    for node in nodes:
        if node.op != "reduce":
            continue
        x = node.inputs[0].type
        if len(node.inputs) != 2 or node.attrs["dimensions"] != (x.rank - 1,) or \
                simple_combiner(node.regions[0]) not in REDUCE:
            return None
        if cols and cols != x.shape[-1]:
            return None
        cols = x.shape[-1]
    return cols


def recipe_for(nodes: list[Node], external: list[Value], outputs: list[Value]) -> Recipe | None:
    """The recipe of a fused group, or None when it does not have the generated form."""
    if not nodes or not outputs:
        return None
    cols = _row_length(nodes)
    if cols is None or cols > MAX_ROW:
        return None
    n = max(max(v.type.size for v in outputs), max((x.type.size for nd in nodes for x in nd.inputs), default=0))
    if cols == 0 and (n < PARTITIONS or n % PARTITIONS or any(v.type.size != n for v in outputs)):
        return None
    if cols and n % cols:
        return None
    rows = n // cols if cols else 0

    def kind_of(v: Value) -> str | None:
        if v.type.size == n and (not cols or (v.type.rank and v.type.shape[-1] == cols)):
            return "full"
        if cols and v.type.size == rows and rows > 1:
            return "row"
        return "scalar" if v.type.size == 1 else None

    refs: dict[int, Ref] = {}
    kinds: dict[Ref, str] = {}                  # what each ref is: a whole tile, a row column, a scalar
    inputs: list[tuple[str, str]] = []
    vectors = _vector_broadcasts(nodes) if cols else {}
    for v in external:
        producer = v.producer
        k = "vec" if v.id in vectors and not _used_otherwise(v, nodes) else kind_of(v)
        if k == "vec" and v.type.dtype in DSL_DTYPE:
            refs[v.id] = ("in", len(inputs))      # loaded once as a [128, cols] tile (a broadcast DMA)
            kinds[refs[v.id]] = "full"
            inputs.append((DSL_DTYPE[v.type.dtype], "vec"))
        elif k == "scalar" and producer is not None and producer.op == "constant":
            refs[v.id] = ("imm", float(producer.attrs["value"].reshape(-1)[0]))
            kinds[refs[v.id]] = "imm"
        elif k is not None and v.type.dtype in DSL_DTYPE and v.type.dtype != "i1":
            refs[v.id] = ("in", len(inputs))
            kinds[refs[v.id]] = "col" if k in ("row", "scalar") else "full"
            inputs.append((DSL_DTYPE[v.type.dtype], k))
        else:
            return None
    if len(inputs) > MAX_INPUTS:
        return None
    steps: list[tuple[str, str, tuple[Ref, ...], str]] = []

    def push(step: tuple[str, str, tuple[Ref, ...], str], kind: str) -> Ref:
        steps.append(step)
        ref: Ref = ("tmp", len(steps) - 1)
        kinds[ref] = kind
        return ref

    for node in nodes:
        if len(node.outputs) != 1 or node.out.type.dtype not in DSL_DTYPE:
            return None
        args = [refs.get(v.id) or _immediate(v) for v in node.inputs]
        if any(a is None for a in args):
            return None
        operands: tuple[Ref, ...] = tuple(a for a in args if a is not None)
        for r in operands:
            kinds.setdefault(r, "imm")
        shapes = {kinds[r] for r in operands}
        out_kind = kind_of(node.out)
        out_dtype = DSL_DTYPE[node.out.type.dtype]
        if node.op == "broadcast_in_dim" and node.inputs[0].id in vectors:
            refs[node.out.id] = operands[0]
            continue
        is_vec = operands[0][0] == "in" and inputs[operands[0][1]][1] == "vec"
        if node.op in ("broadcast_in_dim", "reshape") and is_vec:
            refs[node.out.id] = operands[0]       # [C] → [1, C] → [..., C]: still the one broadcast tile
            continue
        if node.op in VIEWS and (operands[0][0] == "imm" or node.inputs[0].type.size in (1, rows or -1,
                                                                                        node.out.type.size)):
            if node.op != "convert" or operands[0][0] == "imm" or node.inputs[0].type.dtype == node.out.type.dtype:
                if node.op == "reshape" and out_kind != ("full" if kinds[operands[0]] == "full" else out_kind) \
                        and kinds[operands[0]] == "full":
                    return None                 # a reshape that moves the row boundary
                refs[node.out.id] = operands[0]
                continue
            refs[node.out.id] = push(("copy", "copy", operands, out_dtype), kinds[operands[0]])
            continue
        if out_kind is None:
            return None
        result = "full" if "full" in shapes else "col"
        if node.op == "reduce":
            if kinds[operands[0]] != "full" or operands[1][0] != "imm":
                return None
            op = REDUCE[node.regions[0].nodes[0].op]
            refs[node.out.id] = push(("reduce", op, operands[:1], out_dtype), "col")
            continue
        if shapes <= {"imm"}:
            return None
        if (result == "full") != (out_kind == "full"):
            return None
        if node.op in ALU:
            step = ("alu", ALU[node.op], operands, out_dtype)
        elif node.op in ACT:
            step = ("act", ACT[node.op], operands, out_dtype)
        elif node.op == "compare" and node.attrs.get("compare_type", "FLOAT") in ("FLOAT", "TOTALORDER", "SIGNED"):
            step = ("alu", CMP[node.attrs["comparison_direction"]], operands, "fp32")
        elif node.op == "select" and all(kinds[o] == result for o in operands):
            step = ("select", "select", operands, out_dtype)
        elif node.op == "clamp" and kinds[operands[1]] != "imm":
            lo = push(("alu", "max", (operands[1], operands[0]), out_dtype), result)
            step = ("alu", "min", (lo, operands[2]), out_dtype)
        else:
            return None
        refs[node.out.id] = push(step, result)
    stores: list[tuple[Ref, str]] = []
    store_kinds: list[str] = []
    for v in outputs:
        ref = refs.get(v.id)
        k = kind_of(v)
        if ref is None or ref[0] not in ("tmp", "in") or k not in ("full", "row"):
            return None
        if (k == "full") != (kinds.get(ref) == "full"):
            return None
        stores.append((ref, DSL_DTYPE[v.type.dtype]))
        store_kinds.append(k)
    if not steps:
        return None
    return Recipe(n, tuple(inputs), tuple(steps), tuple(stores), cols, tuple(store_kinds))


def _used_otherwise(v: Value, nodes: list[Node]) -> bool:
    """``v`` is read by something other than its free-axis broadcasts."""
    for node in nodes:
        reads = any(x.id == v.id for x in node.inputs)
        along_rows = node.op == "broadcast_in_dim" and \
            tuple(node.attrs["broadcast_dimensions"]) == (node.out.type.rank - 1,)
        if reads and not along_rows:
            return True
    return False


def _immediate(v: Value) -> Ref | None:
    """A scalar constant (the planner leaves those out of a step's inputs: they are immediates)."""
    producer = v.producer
    if v.type.size == 1 and producer is not None and producer.op == "constant":
        return ("imm", float(producer.attrs["value"].reshape(-1)[0]))
    return None


def _kernel() -> Any:
    from trnsim import dsl
    from trnsim.dsl import Tensor

    @dsl.kernel
    def fused_elementwise(a0: Tensor, a1: Tensor | None = None, a2: Tensor | None = None,
                          a3: Tensor | None = None, a4: Tensor | None = None, a5: Tensor | None = None,
                          a6: Tensor | None = None, a7: Tensor | None = None, *, recipe: Recipe) -> tuple[Tensor, ...]:
        """The group's ops over tiles of its inputs (module docstring and ``Recipe``)."""
        ins = [a for a in (a0, a1, a2, a3, a4, a5, a6, a7) if a is not None]
        row_layout = recipe.cols > 0
        rows, cols = (recipe.elements // recipe.cols, recipe.cols) if row_layout else \
            (PARTITIONS, recipe.elements // PARTITIONS)
        kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
        outs = [dsl.hbm_tensor((rows, cols if k == "full" else 1), dt, name=f"out{i}")
                for i, ((_, dt), k) in enumerate(zip(recipe.outputs, kinds, strict=True))]
        # computed scalars: loaded once, broadcast over the partitions as [128, 1] columns
        columns = {i: dsl.load(x[0:1, 0:1].broadcast_to((PARTITIONS, 1)))
                   for i, (x, (_, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)) if kind == "scalar"}
        # vectors along the rows (a bias, a norm scale): one [128, cols] tile by a broadcast DMA
        columns.update({i: dsl.load(x[0:1, :].broadcast_to((PARTITIONS, cols)))
                        for i, (x, (_, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)) if kind == "vec"})
        if row_layout:
            blocks = [(r0, min(PARTITIONS, rows - r0)) for r0 in range(0, rows, PARTITIONS)]
        else:
            blocks = [(c0, min(TILE_COLS, cols - c0)) for c0 in range(0, cols, TILE_COLS)]
        queue = 0

        def part(x: Tensor, kind: str, b0: int, bw: int) -> Tensor:
            if not row_layout:
                return x[:, b0:b0 + bw]
            return x[b0:b0 + bw, :]

        def load_block(b0: int, bw: int) -> list[Tensor]:
            nonlocal queue
            tiles = []
            for i, (x, (_, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)):
                if i in columns:
                    tiles.append(columns[i][:bw] if row_layout else columns[i])
                    continue
                tiles.append(dsl.load(part(x, kind, b0, bw), queue=queue % QUEUES))
                queue += 1
            return tiles

        # step index → intermediates read there for the last time (never the ones the group stores)
        stored = {r[1] for r, _ in recipe.outputs if r[0] == "tmp"}
        last: dict[int, int] = {}
        for index, (_, _, operands, _) in enumerate(recipe.steps):
            for r in operands:
                if r[0] == "tmp":
                    last[r[1]] = index
        last_read: dict[int, list[int]] = {}
        for j, index in last.items():
            if j not in stored:
                last_read.setdefault(index, []).append(j)

        # NOTE: software pipelining: DMAs issue in program order, so block i+PREFETCH's loads are emitted
        # before block i's stores (which wait for its compute), keeping the queues busy
        loaded = [load_block(*b) for b in blocks[:PREFETCH]]
        for i, (b0, bw) in enumerate(blocks):
            if i + PREFETCH < len(blocks):
                loaded.append(load_block(*blocks[i + PREFETCH]))
            tiles = loaded[i]
            tmps: list[Tensor | None] = []

            def get(ref: Ref, tiles: list[Tensor] = tiles, tmps: list[Tensor | None] = tmps) -> Any:
                kind, value = ref
                return tiles[value] if kind == "in" else tmps[value] if kind == "tmp" else value

            for index, (kind, op, operands, dt) in enumerate(recipe.steps):
                args = [get(r) for r in operands]
                if kind == "alu":
                    tmps.append(dsl.binary(op, args[0], args[1], dtype=dt))
                elif kind == "act":
                    tmps.append(dsl.activation(op, args[0], dtype=dt))
                elif kind == "copy":
                    tmps.append(dsl.copy(args[0], dtype=dt))
                elif kind == "reduce":
                    tmps.append(dsl.reduce(op, args[0], axis=-1, dtype=dt))
                else:
                    tmps.append(dsl.where(args[0], args[1], args[2], dtype=dt))
                # free the intermediates this step read for the last time: the working set stays small
                dead = [t for j in last_read.get(index, ()) if (t := tmps[j]) is not None]
                if dead:
                    dsl.release(*dead)
                    for j in last_read[index]:
                        tmps[j] = None
            for out, (ref, _), k in zip(outs, recipe.outputs, kinds, strict=True):
                dsl.store(part(out, k, b0, bw), get(ref), queue=queue % QUEUES)
                queue += 1
            dsl.release(*(t for j, t in enumerate(tiles) if j not in columns), *(t for t in tmps if t is not None))
            loaded[i] = []
        return tuple(outs)

    return fused_elementwise


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
    ``MAX_TIMED_BLOCKS`` tiles are timed on that many and scaled linearly (steady-state streaming)."""
    per_block = PARTITIONS * (recipe.cols or TILE_COLS)
    blocks = -(-recipe.elements // per_block)
    if blocks <= MAX_TIMED_BLOCKS:
        return _timed(target, recipe)
    sample = Recipe(MAX_TIMED_BLOCKS * per_block, recipe.inputs, recipe.steps, recipe.outputs, recipe.cols,
                    recipe.output_kinds)
    t = _timed(target, sample)
    f = blocks / MAX_TIMED_BLOCKS
    from trnsim.compiler.kernel_timing import scale_counts

    return TileTime(t.seconds * f, {e: b * f for e, b in t.busy.items()}, round(t.instructions * f),
                    scale_counts(t.by_engine, f))


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

    rows, cols = (recipe.elements // recipe.cols, recipe.cols) if recipe.cols else \
        (PARTITIONS, recipe.elements // PARTITIONS)
    shapes = {"full": (rows, cols), "row": (rows, 1), "scalar": (1, 1), "vec": (1, cols)}
    return [trnsim.TensorSpec(shapes[kind], dt) for dt, kind in recipe.inputs]


def clear_memo() -> None:
    _timed.cache_clear()
    for k in _KERNEL:
        k._cache.clear()  # pyright: ignore[reportPrivateUsage]
