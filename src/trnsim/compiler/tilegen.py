"""Generated tile code for fused elementwise steps, timed by the instruction-level model.

A fused group whose inputs are full-size tensors or scalar constants, and whose ops all have a NeuronCore
instruction (ALU ops on VectorE, activation functions on ScalarE, casts, compares and selects), becomes a
kernel in the kernel language: the iteration space is laid out as ``[128 partitions, N / 128]``, processed
in column tiles of up to ``TILE_COLS``; each tile is loaded, every op of the group applied in SBUF (scalar
constants as instruction immediates, ``tensor_scalar``), and the group's outputs stored — intermediates
never leave SBUF. The kernel is traced once per *recipe* (the op sequence, element count and dtypes) and
timed in timing-only mode; the compiler uses that time for the step. Groups that do not fit this form
(reductions, broadcasts of non-scalars, quantization) keep the analytic cost of ``costs.fused_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    """What a generated kernel computes: hashable, so traced kernels and their times are cached."""

    elements: int
    inputs: tuple[tuple[str, str], ...]                         # (DSL dtype, "full" | "scalar") per input
    steps: tuple[tuple[str, str, tuple[Ref, ...], str], ...]    # (kind, op, operands, DSL out dtype)
    outputs: tuple[tuple[Ref, str], ...]                        # (what to store, DSL dtype)


def recipe_for(nodes: list[Node], external: list[Value], outputs: list[Value]) -> Recipe | None:
    """The recipe of a fused group, or None when it does not have the generated form."""
    if not nodes or not outputs:
        return None
    n = max(v.type.size for v in outputs)
    if n < PARTITIONS or n % PARTITIONS or any(v.type.size != n for v in outputs):
        return None
    refs: dict[int, Ref] = {}
    full: set[Ref] = set()                      # refs that are whole tiles (not scalar columns/immediates)
    inputs: list[tuple[str, str]] = []
    for v in external:
        producer = v.producer
        if v.type.size == n and v.type.dtype in DSL_DTYPE and v.type.dtype != "i1":
            refs[v.id] = ("in", len(inputs))
            full.add(refs[v.id])
            inputs.append((DSL_DTYPE[v.type.dtype], "full"))
        elif v.type.size == 1 and producer is not None and producer.op == "constant":
            refs[v.id] = ("imm", float(producer.attrs["value"].reshape(-1)[0]))
        elif v.type.size == 1 and v.type.dtype in DSL_DTYPE and v.type.dtype != "i1":
            refs[v.id] = ("in", len(inputs))              # a computed scalar: one [128, 1] column
            inputs.append((DSL_DTYPE[v.type.dtype], "scalar"))
        else:
            return None
    if len(inputs) > MAX_INPUTS:
        return None
    steps: list[tuple[str, str, tuple[Ref, ...], str]] = []
    for node in nodes:
        if len(node.outputs) != 1 or node.out.type.dtype not in DSL_DTYPE:
            return None
        args = [refs.get(v.id) or _immediate(v) for v in node.inputs]
        if any(a is None for a in args):
            return None
        operands: tuple[Ref, ...] = tuple(a for a in args if a is not None)
        out_dtype = DSL_DTYPE[node.out.type.dtype]
        if node.op in VIEWS and (operands[0][0] == "imm" or node.inputs[0].type.size in (1, node.out.type.size)):
            if node.op != "convert" or operands[0][0] == "imm" or node.inputs[0].type.dtype == node.out.type.dtype:
                refs[node.out.id] = operands[0]
                continue
            step = ("copy", "copy", operands, out_dtype)
        elif node.out.type.size != n:
            return None
        elif node.op in ALU:
            if all(o[0] == "imm" for o in operands):
                return None
            step = ("alu", ALU[node.op], operands, out_dtype)
        elif node.op in ACT:
            step = ("act", ACT[node.op], operands, out_dtype)
        elif node.op == "compare" and node.attrs.get("compare_type", "FLOAT") in ("FLOAT", "TOTALORDER", "SIGNED"):
            if all(o[0] == "imm" for o in operands):
                return None
            step = ("alu", CMP[node.attrs["comparison_direction"]], operands, "fp32")
        elif node.op == "select" and all(o[0] != "imm" for o in operands):
            step = ("select", "select", operands, out_dtype)
        elif node.op == "clamp" and operands[1][0] != "imm":
            lo = ("alu", "max", (operands[1], operands[0]), out_dtype)
            steps.append(lo)
            step = ("alu", "min", (("tmp", len(steps) - 1), operands[2]), out_dtype)
        else:
            return None
        if not any(o in full for o in step[2]):
            return None                         # all-scalar arithmetic: not a tile op
        steps.append(step)
        refs[node.out.id] = ("tmp", len(steps) - 1)
        full.add(refs[node.out.id])
    stores: list[tuple[Ref, str]] = []
    for v in outputs:
        ref = refs.get(v.id)
        if ref is None or ref not in full:
            return None
        stores.append((ref, DSL_DTYPE[v.type.dtype]))
    if not steps:
        return None
    return Recipe(n, tuple(inputs), tuple(steps), tuple(stores))


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
        """The group's ops over ``[128, N/128]`` tiles of its inputs (module docstring)."""
        ins = [a for a in (a0, a1, a2, a3, a4, a5, a6, a7) if a is not None]
        cols = recipe.elements // PARTITIONS
        # computed scalars: loaded once, broadcast over the partitions as [128, 1] columns
        columns = {i: dsl.load(x[0:1, 0:1].broadcast_to((PARTITIONS, 1)))
                   for i, (x, (_, kind)) in enumerate(zip(ins, recipe.inputs, strict=True)) if kind == "scalar"}
        outs = [dsl.hbm_tensor((PARTITIONS, cols), dt, name=f"out{i}") for i, (_, dt) in enumerate(recipe.outputs)]
        blocks = [(c0, min(TILE_COLS, cols - c0)) for c0 in range(0, cols, TILE_COLS)]
        queue = 0

        def load_block(c0: int, cw: int) -> list[Tensor]:
            nonlocal queue
            tiles = []
            for i, x in enumerate(ins):
                if i in columns:
                    tiles.append(columns[i])
                    continue
                tiles.append(dsl.load(x[:, c0:c0 + cw], queue=queue % QUEUES))
                queue += 1
            return tiles

        # NOTE: software pipelining: DMAs issue in program order, so block i+PREFETCH's loads are emitted
        # before block i's stores (which wait for its compute), keeping the queues busy
        loaded = [load_block(*b) for b in blocks[:PREFETCH]]
        for i, (c0, cw) in enumerate(blocks):
            if i + PREFETCH < len(blocks):
                loaded.append(load_block(*blocks[i + PREFETCH]))
            tiles = loaded[i]
            tmps: list[Tensor] = []

            def get(ref: Ref, tiles: list[Tensor] = tiles, tmps: list[Tensor] = tmps) -> Any:
                kind, value = ref
                return tiles[value] if kind == "in" else tmps[value] if kind == "tmp" else value

            for kind, op, operands, dt in recipe.steps:
                args = [get(r) for r in operands]
                if kind == "alu":
                    tmps.append(dsl.binary(op, args[0], args[1], dtype=dt))
                elif kind == "act":
                    tmps.append(dsl.activation(op, args[0], dtype=dt))
                elif kind == "copy":
                    tmps.append(dsl.copy(args[0], dtype=dt))
                else:
                    tmps.append(dsl.where(args[0], args[1], args[2], dtype=dt))
            for out, (ref, _) in zip(outs, recipe.outputs, strict=True):
                dsl.store(out[:, c0:c0 + cw], get(ref), queue=queue % QUEUES)
                queue += 1
            dsl.release(*(t for j, t in enumerate(tiles) if j not in columns), *tmps)
            loaded[i] = []
        return tuple(outs)

    return fused_elementwise


_KERNEL: list[Any] = []


@dataclass(frozen=True)
class TileTime:
    seconds: float
    busy: dict[str, float]
    instructions: int


MAX_TIMED_BLOCKS = 64     # larger groups are timed on 64 blocks and scaled: a streaming kernel is linear


def fused_time(target: str, recipe: Recipe) -> TileTime:
    """The generated kernel's time for ``recipe`` (timing-only, no data); groups of more than
    ``MAX_TIMED_BLOCKS`` column tiles are timed on that many and scaled linearly (steady-state streaming)."""
    blocks = -(-(recipe.elements // PARTITIONS) // TILE_COLS)
    if blocks <= MAX_TIMED_BLOCKS:
        return _timed(target, recipe)
    sample = Recipe(MAX_TIMED_BLOCKS * TILE_COLS * PARTITIONS, recipe.inputs, recipe.steps, recipe.outputs)
    t = _timed(target, sample)
    f = blocks / MAX_TIMED_BLOCKS
    return TileTime(t.seconds * f, {e: b * f for e, b in t.busy.items()}, round(t.instructions * f))


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
    return TileTime(profile.total_seconds, busy, profile.instructions)


def kernel_program(target: str, recipe: Recipe) -> Any:
    """The traced, verifiable NeuronCore ``Program`` of a recipe (for inspection and tests)."""
    if not _KERNEL:
        _KERNEL.append(_kernel())
    specs = _specs(recipe)
    return _KERNEL[0].compile_specs([(s.shape, s.dtype) for s in specs], target, {"recipe": recipe}).program


def _specs(recipe: Recipe) -> list[Any]:
    import trnsim

    cols = recipe.elements // PARTITIONS
    return [trnsim.TensorSpec((PARTITIONS, cols) if kind == "full" else (1, 1), dt) for dt, kind in recipe.inputs]


def clear_memo() -> None:
    _timed.cache_clear()
    for k in _KERNEL:
        k._cache.clear()  # pyright: ignore[reportPrivateUsage]
