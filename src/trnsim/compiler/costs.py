"""Cost rules of compiled steps on one NeuronCore, one rule per step kind (STYLE.md rule 2).

The rules use the same constants as the instruction-level timing model (``trnsim.sim.timing.costs``,
``reference/neuron.md`` §1.2–1.4) at the granularity of a whole kernel:

* **matmul** — the operands are tiled to TensorE's stationary ``[K ≤ rows, M ≤ cols]`` and moving
  ``[K ≤ rows, N ≤ 512]`` tiles (the orientation with fewer cycles is chosen); each tile costs
  ``max(N, 64 · max(r, 1)) / r`` cycles at the TensorE clock, ``r`` the rate of the operand format; a
  LoadStationary (``max(M, 64) / 4 / min(r, 1)``) hides behind the previous matmul unless it is longer.
  PSUM is evacuated by ScalarE, which also applies the fused epilogue; operands stream from HBM once when
  the smaller fits in half of SBUF, else the larger is re-read per SBUF-sized panel of the smaller.
* **fused** — every op of the group runs over all its elements on its engine (ScalarE for transcendental
  functions, VectorE otherwise, GpSimd for iota), ``elements / (elements per cycle)`` cycles plus the
  engine's static overhead per instruction, one instruction per tile of ``128 × F`` elements; converts
  and layout views fused into their producer's write cost nothing. Only the group's external inputs and
  the outputs used elsewhere move through DMA.
* **data movement** (transpose, slice, pad, concatenate, ...) — DMA at the core's bandwidth (transposes at
  the DMA-transpose efficiency), one descriptor per contiguous run.
* **index** (gather/scatter) — DMA with one descriptor per gathered row; scatter combiners on GpSimd.
* **sort** — a bitonic network on GpSimd: n·log²n/2 compare-exchanges per row.

A step takes ``latency + max(busy of each engine, DMA time)``: its DMA and compute overlap by double
buffering. HBM bandwidth per core is the smaller of its DMA queues and its share of the chip's HBM.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from trnsim.hw import ChipSpec
from trnsim.hw.core import CoreSpec
from trnsim.ir.graph import Node, Value
from trnsim.sim.timing.costs import (
    DMA_DESCRIPTOR_OVERHEAD_BYTES,
    DMA_TRANSPOSE_EFFICIENCY,
    FAST_LS_SPEEDUP,
    MM_INIT_LATENCY,
    STATIC_OVERHEAD,
)

TILE_F_MAX = 2048            # free elements per partition per tile (≥ 2 KiB per partition keeps DMA efficient)
SBUF_BUDGET = 0.75           # fraction of SBUF a step's tiles may use; the rest is the compiler's headroom
TRANSCENDENTAL = frozenset({"exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh",
                            "sine", "cosine", "tan", "sqrt", "rsqrt", "cbrt", "power", "atan2"})
FREE_VIEWS = frozenset({"reshape", "broadcast_in_dim", "bitcast_convert"})
ALIASES = frozenset({"reshape", "bitcast_convert", "optimization_barrier"})   # steps of these alone move nothing

# IR element type / autocast format → the preset's TensorE rate and engine dtype names
RATE_NAME: dict[str, str] = {
    "f32": "fp32", "bf16": "bf16", "f16": "fp16", "f8E4M3FN": "fp8_e4m3", "f8E5M2": "fp8_e5m2",
    "i8": "int8", "ui8": "int8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "mxfp8": "mxfp8_e4m3",
    "mxfp6": "mxfp6_e2m3", "mxfp4": "mxfp4_e2m1", "int4": "int4",
}
ENGINE_DTYPE: dict[str, str] = {"bf16": "bf16", "f16": "fp16", "f8E4M3FN": "fp8_e4m3", "f8E5M2": "fp8_e5m2"}


@dataclass
class StepCost:
    busy: dict[str, float] = field(default_factory=dict[str, float])   # engine → seconds
    dma_bytes: float = 0.0
    dma_seconds: float = 0.0
    flops: float = 0.0
    operand_dtype: str = ""
    sbuf_bytes: int = 0
    spilled: int = 0
    instructions: dict[str, int] = field(default_factory=dict[str, int])
    min_seconds: float = 0.0        # a kernel's own simulated time, when the step is one library kernel

    def add(self, engine: str, seconds: float, instructions: int = 1) -> None:
        if seconds > 0:
            self.busy[engine] = self.busy.get(engine, 0.0) + seconds
            self.instructions[engine] = self.instructions.get(engine, 0) + instructions


@dataclass(frozen=True)
class Machine:
    """What the cost rules need of one NeuronCore of a chip."""

    core: CoreSpec
    dma_bandwidth: float
    dma_latency: float
    target: str = ""

    @staticmethod
    def of(spec: ChipSpec) -> Machine:
        core = spec.core
        assert core is not None
        cores = spec.cores or 1
        bw = min(core.dma.queues * core.dma.queue_bandwidth, spec.hbm_bandwidth / cores)
        return Machine(core, bw, core.dma.latency, spec.name)

    def rate(self, dtype: str) -> float:
        return self.core.tensor.rate.get(RATE_NAME.get(dtype, "fp32"), self.core.tensor.rate.get("fp32", 0.25))

    def throughput(self, engine: str, dtype: str) -> float:
        eng = {"vector": self.core.vector, "scalar": self.core.scalar, "gpsimd": self.core.gpsimd}[engine]
        name = ENGINE_DTYPE.get(dtype)
        width = eng.dtype_elements_per_cycle.get(name, eng.elements_per_cycle) if name else eng.elements_per_cycle
        return width * eng.clock

    def clock(self, engine: str) -> float:
        return {"vector": self.core.vector, "scalar": self.core.scalar, "gpsimd": self.core.gpsimd}[engine].clock

    @property
    def sbuf_partition_bytes(self) -> int:
        return self.core.sbuf.bytes_per_partition

    @property
    def partitions(self) -> int:
        return self.core.sbuf.partitions


def tile_instructions(m: Machine, elements: int, f: int) -> int:
    return max(1, math.ceil(elements / (m.partitions * f)))


def engine_op_seconds(m: Machine, engine: str, elements: int, dtype: str, f: int) -> float:
    """One op over ``elements`` on ``engine``: streaming cycles plus static overhead per tile-instruction."""
    if elements <= 0:
        return 0.0
    instructions = math.ceil(elements / (m.partitions * f))
    cycles = instructions * STATIC_OVERHEAD[engine]
    return cycles / m.clock(engine) + elements / m.throughput(engine, dtype)


def dma_seconds(m: Machine, nbytes: float, *, run_bytes: float | None = None, transpose: bool = False) -> float:
    """Moving ``nbytes`` through the core's DMA: descriptor overhead per contiguous run; transposes slower."""
    if nbytes <= 0:
        return 0.0
    runs = nbytes / run_bytes if run_bytes else nbytes / (TILE_F_MAX * 4)
    eff = DMA_TRANSPOSE_EFFICIENCY["hbm"] if transpose else 1.0
    return (nbytes + runs * DMA_DESCRIPTOR_OVERHEAD_BYTES) / (m.dma_bandwidth * eff)


# ---- matmul --------------------------------------------------------------------------------------------

def matmul_dims(node: Node) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of a dot_general (M, N: the free sizes of lhs and rhs)."""
    lhs, rhs = node.inputs[0].type.shape, node.inputs[1].type.shape
    d = node.attrs["dot_dimension_numbers"]
    batch = math.prod(lhs[i] for i in d["lhs_batching_dimensions"])
    k = math.prod(lhs[i] for i in d["lhs_contracting_dimensions"])
    m = math.prod(s for i, s in enumerate(lhs) if i not in d["lhs_batching_dimensions"]
                  and i not in d["lhs_contracting_dimensions"])
    n = math.prod(s for i, s in enumerate(rhs) if i not in d["rhs_batching_dimensions"]
                  and i not in d["rhs_contracting_dimensions"])
    return batch, m, k, n


def conv_dims(node: Node) -> tuple[int, int, int, int]:
    dn = node.attrs["dimension_numbers"]
    out = node.out.type.shape
    kernel = node.inputs[1].type.shape
    n_out = out[dn["output_feature_dimension"]]
    m = math.prod(s for i, s in enumerate(out) if i != dn["output_feature_dimension"])
    k = math.prod(s for i, s in enumerate(kernel) if i != dn["kernel_output_feature_dimension"])
    return 1, m, k, n_out


def tensor_engine_seconds(m: Machine, batch: int, rows_m: int, k: int, n: int, rate: float,
                          sparse: float = 1.0) -> float:
    """TensorE time of a batch of [M, K] × [K, N] products, in the cheaper orientation."""
    te = m.core.tensor
    r = rate * sparse
    psum_free = m.core.psum.fp32_per_bank

    def cycles(stat: int, mov: int) -> float:
        kt = math.ceil(k / te.rows)
        st = math.ceil(stat / te.cols)
        total = 0.0
        for mt in range(math.ceil(mov / psum_free)):
            width = min(psum_free, mov - mt * psum_free)
            mm = max(width, MM_INIT_LATENCY * max(r, 1)) / r
            total += mm
        ls = max(min(stat, te.cols), MM_INIT_LATENCY) / FAST_LS_SPEEDUP / min(r, 1)
        per_pass = max(total / max(math.ceil(mov / psum_free), 1), ls)
        return kt * st * math.ceil(mov / psum_free) * per_pass

    best = min(cycles(rows_m, n), cycles(n, rows_m))
    return batch * best / te.clock


OUT_NAME = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def matmul_cost(m: Machine, node: Node, prologue: list[Node], epilogue: list[Node], cost: StepCost,
                external: list[Value], outputs: list[Value]) -> None:
    """A dot_general/convolution as ``matmul_kernel`` (timed by the instruction-level model, see
    ``kernel_timing``) when TensorE takes its operand format; otherwise the analytic tile model. The prologue
    (casts, quantization, pruning of an operand) runs on VectorE as the operand's tiles load; the epilogue on
    ScalarE/VectorE as PSUM is evacuated. HBM traffic: the kernel's, with the operands read in their source
    type, plus other inputs of the epilogue and the outputs used outside the step."""
    from trnsim.compiler.kernel_timing import matmul_time

    batch, rows_m, k, n = conv_dims(node) if node.op == "convolution" else matmul_dims(node)
    fmt = node.attrs.get("operand_format") or node.inputs[0].type.dtype
    if node.inputs[0].type.dtype != node.inputs[1].type.dtype and "operand_format" not in node.attrs:
        fmt = min((v.type.dtype for v in node.inputs), key=m.rate)      # mixed operands: the slower rate
    name = RATE_NAME.get(fmt)
    sparsity = node.attrs.get("sparse")
    cost.flops += 2.0 * batch * rows_m * k * n
    cost.operand_dtype = name or fmt
    produced_here = {v.id for p in prologue for v in p.outputs}
    operands = [v for v in node.inputs if v.id not in produced_here]
    sources = [v for p in prologue for v in p.inputs if v.id not in produced_here]
    # bytes the kernel's operand reads would move in the operands' own types, and what they really are
    operand_bytes_kernel = sum(v.type.nbytes for v in node.inputs[:2])
    operand_bytes_real = sum(v.type.nbytes for v in (*operands, *sources))
    other = sum(v.type.nbytes for v in external if v not in node.inputs and v not in sources)
    out_bytes = sum(v.type.nbytes for v in outputs if v is not node.out)
    kernel_out = node.out.type.nbytes if any(v is node.out for v in outputs) or not epilogue else 0
    for p in prologue:
        if p.op in FREE_VIEWS:
            continue
        cost.add("vector", engine_op_seconds(m, "vector", p.out.type.size, p.out.type.dtype, TILE_F_MAX),
                 tile_instructions(m, p.out.type.size, TILE_F_MAX))
    kt = None
    if name is not None and name in m.core.tensor.rate and min(rows_m, k, n) > 0:
        from trnsim.dsl.errors import KernelError

        try:
            kt = matmul_time(m.target, batch * rows_m, k, n, name, sparsity,
                             OUT_NAME.get(node.out.type.dtype, "fp32"))
        except KernelError:
            kt = None           # a shape or format the library kernel cannot tile: the analytic model below
    if kt is not None:
        for engine, seconds in kt.busy.items():
            cost.add(engine, seconds, 0)
        for engine, count in kt.by_engine.items():
            cost.instructions[engine] = cost.instructions.get(engine, 0) + count
        cost.min_seconds = kt.seconds
        kernel_io = kt.hbm_bytes - operand_bytes_kernel - node.out.type.nbytes    # scales, indices
        cost.dma_bytes += max(kernel_io, 0) + operand_bytes_real + kernel_out + other + out_bytes
    else:
        rate = m.rate(fmt)
        sparse = m.core.tensor.sparse_multiplier.get(name or "bf16", 1.0) if sparsity else 1.0
        te = m.core.tensor
        tiles = batch * math.ceil(k / te.rows) * math.ceil(min(rows_m, n) / te.cols) * \
            math.ceil(max(rows_m, n) / m.core.psum.fp32_per_bank)
        cost.add("tensor", tensor_engine_seconds(m, batch, rows_m, k, n, rate, sparse), tiles)
        out_elems = node.out.type.size
        cost.add("scalar", engine_op_seconds(m, "scalar", out_elems, "f32", TILE_F_MAX),   # PSUM evacuation
                 tile_instructions(m, out_elems, TILE_F_MAX))
        a, b = (v.type.nbytes for v in node.inputs[:2])
        half_sbuf = m.core.sbuf.bytes / 2
        small, large = min(a, b), max(a, b)
        cost.dma_bytes += small + large * max(1, math.ceil(small / half_sbuf)) + other + kernel_out + out_bytes
    for e in epilogue:
        if e.op in FREE_VIEWS or e.op == "convert":
            continue
        engine = "scalar" if e.op in TRANSCENDENTAL else "vector"
        cost.add(engine, engine_op_seconds(m, engine, e.out.type.size, e.out.type.dtype, TILE_F_MAX),
                 tile_instructions(m, e.out.type.size, TILE_F_MAX))
    cost.sbuf_bytes = int(min(node.inputs[1].type.nbytes, m.core.sbuf.bytes / 2) + 2 * te_tile_bytes(m))


def te_tile_bytes(m: Machine) -> int:
    return m.partitions * m.core.psum.fp32_per_bank * 4


# ---- fused elementwise -------------------------------------------------------------------------------

def fused_cost(m: Machine, nodes: list[Node], cost: StepCost, external: list[Value], outputs: list[Value]) -> None:
    in_group = {v.id for n in nodes for v in n.outputs}
    io = len(external) + len(outputs)
    live = len(nodes)
    budget = m.sbuf_partition_bytes * SBUF_BUDGET
    f = TILE_F_MAX
    while f > 64 and (2 * io + live) * f * 4 > budget:
        f //= 2
    if (2 * io + live) * f * 4 > budget:
        # NOTE: too many live intermediates even at the smallest tile: spill the excess to HBM
        spilled = live - int(budget // (f * 4)) + 2 * io
        cost.spilled = max(spilled, 0)
    cost.sbuf_bytes = int(min((2 * io + live) * f * 4, budget) * m.partitions)
    for node in nodes:
        if node.op in FREE_VIEWS:
            continue
        if node.op == "convert" and node.inputs[0].id in in_group:
            continue            # folded into the producing instruction's output type
        elements = node.inputs[0].type.size if node.op == "reduce" else node.out.type.size
        engine = "scalar" if node.op in TRANSCENDENTAL else ("gpsimd" if node.op == "iota" else "vector")
        dtype = node.out.type.dtype
        cost.add(engine, engine_op_seconds(m, engine, elements, dtype, f), tile_instructions(m, elements, f))
    spill_bytes = cost.spilled * m.partitions * f * 4 * 2
    cost.dma_bytes += sum(v.type.nbytes for v in external) + sum(v.type.nbytes for v in outputs) + spill_bytes


# ---- data movement, indexing, sort, others -----------------------------------------------------------

def _minor_moves(node: Node) -> bool:
    perm = node.attrs.get("permutation", ())
    return bool(perm) and perm[-1] != len(perm) - 1


def data_cost(m: Machine, node: Node, cost: StepCost) -> None:
    if node.op in FREE_VIEWS:
        return
    out = sum(v.type.nbytes for v in node.outputs)
    if node.op == "dynamic_update_slice":
        moved = 2 * node.inputs[1].type.nbytes
    else:
        moved = out + min(out, sum(v.type.nbytes for v in node.inputs))
    row = node.out.type.shape[-1] * node.out.type.np_dtype.itemsize if node.out.type.rank else 4
    cost.dma_bytes += moved
    cost.dma_seconds += dma_seconds(m, moved, run_bytes=max(row, 1), transpose=node.op == "transpose"
                                    and _minor_moves(node))


def index_cost(m: Machine, node: Node, cost: StepCost) -> None:
    out = node.out.type
    if node.op == "gather":
        sizes = node.attrs["slice_sizes"]
        row = max(sizes[-1], 1) * out.np_dtype.itemsize
        moved = out.nbytes + node.inputs[1].type.nbytes
    else:
        upd = node.inputs[-1].type
        row = max(upd.shape[-1] if upd.rank else 1, 1) * upd.np_dtype.itemsize
        moved = 3 * upd.nbytes + node.inputs[1].type.nbytes      # read updates, read-modify-write targets
        cost.add("gpsimd", engine_op_seconds(m, "gpsimd", upd.size, upd.dtype, TILE_F_MAX))
    cost.dma_bytes += moved
    cost.dma_seconds += dma_seconds(m, moved, run_bytes=row)


def sort_cost(m: Machine, node: Node, cost: StepCost) -> None:
    t = node.inputs[0].type
    dim = node.attrs.get("dimension", -1)
    n = max(t.shape[dim], 2) if t.rank else 2
    exchanges = t.size * math.log2(n) ** 2 / 2 * len(node.inputs)
    cost.add("gpsimd", engine_op_seconds(m, "gpsimd", int(exchanges), t.dtype, TILE_F_MAX))
    cost.dma_bytes += 2 * sum(v.type.nbytes for v in node.inputs)


def elementwise_cost(m: Machine, node: Node, cost: StepCost) -> None:
    """A lone op that did not fuse (window reductions, rng, multi-operand reduce): VectorE/GpSimd streaming."""
    elements = sum(v.type.size for v in node.inputs) or node.out.type.size
    steps = max(1, sum(len(r.nodes) for r in node.regions))
    engine = "gpsimd" if node.op in ("rng_bit_generator", "select_and_scatter") else "vector"
    cost.add(engine, steps * engine_op_seconds(m, engine, elements, node.out.type.dtype, TILE_F_MAX))
    cost.dma_bytes += sum(v.type.nbytes for v in node.inputs) + sum(v.type.nbytes for v in node.outputs)


SINGLE_RULES: dict[str, Callable[[Machine, Node, StepCost], None]] = {
    "data": data_cost, "index": index_cost, "sort": sort_cost, "reduce": elementwise_cost,
    "random": elementwise_cost, "source": elementwise_cost, "elementwise": elementwise_cost,
}
