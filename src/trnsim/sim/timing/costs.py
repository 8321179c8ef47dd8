"""Cost rules of the timing model: how long an instruction holds its engine or DMA queue.

Every constant is either the preset's (``spec.core.*``) or defined here with its source. One rule per
instruction kind, in the tables ``TENSOR_SHAPES``, ``STREAMS`` and ``DMA_SIDES`` (STYLE rule 2).

**TensorE** (``reference/neuron.md`` §1.2–1.4). An instruction is a product of stationary ``[K, M]`` and
moving ``[K, N]`` (a transpose of ``src[P, F]`` is ``src`` as stationary times an identity ``[P, P]``)::

    r      = min(rate[stationary dtype], rate[moving dtype])   × sparse_multiplier[dtype] if 2:4/4:8
    MM     = max(N, MM_INIT_LATENCY · max(r, 1)) / r            cycles at the TensorE clock
    LS     = max(M, MM_INIT_LATENCY) / FAST_LS_SPEEDUP / min(r, 1)      only when the stationary changes
    drain  = (rows − 1) + (cols − 1)                           cycles until the result is in PSUM

bf16 gives the documented ``max(N, 64)``; fp32 (rate ¼) costs 4× all of it; fp8/MX/int4 (rate 4) stream
N/4 cycles but never start faster than MM_INIT_LATENCY. LoadStationary runs in the background: it may
start when the previous matmul starts, so it is hidden unless it outlasts that matmul (scheduler). The
drain is SCALE-Sim's per-fold skew + drain (``reference/peers.md`` §1); the engine is free after MM, only
the consumers of the result (semaphore signals) see the drain.

**VectorE / ScalarE / GpSimd** (neuron.md §1.2, §1.4 tables)::

    cycles = STATIC_OVERHEAD[engine] + ceil(P / lanes) · Σ_inputs F · lanes / epc · stride_penalty
             (+ ACT_READ_ACCUMULATOR for an activation that reduces)

F is the input's free size, ``epc`` the engine's elements per cycle for the slower of input and output
dtype (``dtype_elements_per_cycle``), ``stride_penalty`` 2 when a free stride exceeds 16 bytes. Fewer
partitions than lanes cost the same. An instruction without tensor inputs (memset, iota) streams its output.

**DMA** (neuron.md §1.2–1.3; ARCHITECTURE.md "Timing")::

    queue time = latency + (bytes + descriptors · DMA_DESCRIPTOR_OVERHEAD_BYTES) / queue_bandwidth

``bytes`` = elements moved × the wider element size; ``descriptors`` = elements / the longest contiguous run
both sides share (a run never crosses an on-chip partition, nor a gathered row). A 2- or 4-byte copy
through a transposed HBM pattern (``isa.transposed``) uses the DMA-transpose path instead, at
``DMA_TRANSPOSE_EFFICIENCY`` of the queue bandwidth. When transfers overlap, the scheduler shares HBM and
chip DMA bandwidth among them (``dma.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trnsim.errors import SimError
from trnsim.hw import ChipSpec
from trnsim.hw.core import CoreSpec, EngineSpec
from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction
from trnsim.isa.dma import DmaCopy, DmaGather, DmaScatter, DmaScatterAdd
from trnsim.isa.dtypes import DTYPES
from trnsim.isa.elementwise import (
    Activation,
    AffineSelect,
    Iota,
    Memset,
    Select,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.isa.reduction import (
    BnAggr,
    BnStats,
    FindIndex8,
    MatchReplace8,
    Max8,
    PartitionBroadcast,
    PartitionReduce,
    TensorReduce,
    Transpose32,
)
from trnsim.isa.tensor_engine import SPARSE_PATTERNS, Matmul, TensorTranspose

MM_INIT_LATENCY = 64  # neuron.md §1.2 [DOC trainium_inferentia2_arch]: back-to-back MM ≈ max(N, 64) cycles
FAST_LS_SPEEDUP = 4  # neuron.md §1.2: "Fast LoadStationary runs up to 4× faster than an MM of the same free size"
TRANSPOSE_FP32_SPEEDUP = 2  # neuron.md §1.3 [DOC trainium2_arch]: transpose mode is 2× faster for FP32
STATIC_OVERHEAD = {  # cycles per instruction
    "vector": 100,  # neuron.md §1.2: VectorE "about 100 cycles of static overhead"
    "scalar": 100,  # assumption: as VectorE (§1.2 gives ~60 cycles per tensor access, ≈ 120 for in + out)
    "gpsimd": 100,  # assumption: as VectorE
}
ACT_READ_ACCUMULATOR = 64  # neuron.md §1.2: ScalarE's ActReadAccumulator step costs about 64 cycles
STRIDE_PENALTY_BYTES = 16  # neuron.md §1.2: a free-dimension stride above 16 B halves SBUF/PSUM bandwidth
STRIDE_PENALTY = 2  # neuron.md §1.2: ... halves, so twice the cycles
# NOTE: neuron.md §1.2 says ≥ 2 KiB per partition is efficient and < 256 B "severely overhead-bound". One
# descriptor costing as much queue time as 256 payload bytes gives 256 B → 50 %, 2 KiB → 89 %, 4 KiB → 94 %.
DMA_DESCRIPTOR_OVERHEAD_BYTES = 256  # [DERIVED] from the two thresholds above
DMA_TRANSPOSE_EFFICIENCY = {  # by source memory, fraction of the queue bandwidth
    "hbm": 0.9,  # neuron.md §1.3 [DOC trainium2_arch]: DMA transpose HBM→SBUF "up to 90%"
    "sbuf": 0.5,  # neuron.md §1.3: SBUF→SBUF "up to 50%"
    "psum": 0.5,  # assumption: as SBUF
}
DMA_TRANSPOSE_ITEMSIZES = (2, 4)  # neuron.md §1.3: DMA transpose works for 2- and 4-byte types


@dataclass(frozen=True, slots=True)
class TensorWork:
    """A TensorE instruction as a product ``[K, M]ᵀ × [K, N]`` (K dense), its dtype and speed."""

    k: int
    m: int
    n: int
    dtype: str  # the slower operand's dtype: the one whose peak the instruction is measured against
    rate: float  # multiplier on the bf16 rate, sparsity included
    sparse: bool
    transpose: bool


@dataclass(frozen=True, slots=True)
class EngineCost:
    """Seconds an engine is held (``busy``), of background LoadStationary (``load``), and from the end
    until the results are visible to other engines (``latency``)."""

    busy: float
    load: float = 0.0
    latency: float = 0.0


@dataclass(frozen=True, slots=True)
class DmaCost:
    """One transfer: its queue, fixed latency, payload and queue-time-equivalent bytes, HBM traffic."""

    queue: int
    latency: float
    nbytes: int  # payload: the larger of the bytes read and written
    work: float  # bytes of queue time at the queue bandwidth (payload / efficiency)
    hbm_bytes: int  # bytes read from and written to HBM
    descriptors: int
    transpose: bool

    @property
    def efficiency(self) -> float:
        return self.nbytes / self.work if self.work else 1.0


def _free(ap: AccessPattern) -> int:
    free = ap.free
    return free[0][1] if len(free) == 1 else math.prod([c for _, c in free])


def _size(ap: AccessPattern) -> int:
    return ap.partitions * _free(ap)


def signature(ap: AccessPattern | None) -> tuple[object, ...] | None:
    """What a cost can depend on: everything but where the pattern starts."""
    return None if ap is None else (ap.memory, ap.dtype, ap.partitions, ap.free, ap.partition_stride)


def _matmul(ins: Matmul, core: CoreSpec) -> TensorWork:
    te = core.tensor
    rs, rm = te.rate.get(ins.stationary.dtype, 1.0), te.rate.get(ins.moving.dtype, 1.0)
    dtype = ins.stationary.dtype if rs <= rm else ins.moving.dtype
    rate = min(rs, rm)
    sparse = ins.sparsity is not None
    if sparse:
        rate *= te.sparse_multiplier.get(dtype, 1.0)
        n_keep, m_group = SPARSE_PATTERNS[ins.sparsity or ""]
        k = ins.stationary.partitions * m_group // n_keep
    else:
        k = ins.stationary.partitions
    return TensorWork(k, _free(ins.stationary), _free(ins.moving), dtype, rate, sparse, False)


def _transpose(ins: TensorTranspose, core: CoreSpec) -> TensorWork:
    te, src = core.tensor, ins.src
    wide = DTYPES[src.dtype].itemsize == 4
    base = te.rate.get(src.dtype, te.rate.get("fp32", 1.0) if wide else 1.0)
    rate = base * (TRANSPOSE_FP32_SPEEDUP if wide else 1)
    return TensorWork(src.partitions, _free(src), src.partitions, src.dtype, rate, False, True)


# TensorE instruction kind → its product shape and speed, and the operand held in the array.
TENSOR_SHAPES: dict[type[Instruction], Callable[[Any, CoreSpec], TensorWork]] = {
    Matmul: _matmul,
    TensorTranspose: _transpose,
}
STATIONARY: dict[type[Instruction], Callable[[Any], AccessPattern]] = {
    Matmul: lambda i: i.stationary,
    TensorTranspose: lambda i: i.src,
}
# ... and everything its cost depends on (the key of a cost cache: shapes, dtypes, sparsity; no addresses).
TENSOR_KEY: dict[type[Instruction], Callable[[Any], tuple[object, ...]]] = {
    Matmul: lambda i: (Matmul, i.stationary.dtype, i.stationary.partitions, i.stationary.free, i.moving.dtype,
                       i.moving.free, i.sparsity),
    TensorTranspose: lambda i: (TensorTranspose, i.src.dtype, i.src.partitions, i.src.free),
}


def tensor_cost(work: TensorWork, core: CoreSpec, stationary_changed: bool) -> EngineCost:
    """MM, LoadStationary and drain of one TensorE instruction, in seconds (module docstring)."""
    te = core.tensor
    r = work.rate
    mm = max(work.n, MM_INIT_LATENCY * max(r, 1.0)) / r
    ls = max(work.m, MM_INIT_LATENCY) / FAST_LS_SPEEDUP / min(r, 1.0) if stationary_changed else 0.0
    drain = (te.rows - 1) + (te.cols - 1)
    return EngineCost(mm / te.clock, ls / te.clock, drain / te.clock)


# Engine instruction kind → the access patterns its data path streams (tensor inputs; the output when none).
STREAMS: dict[type[Instruction], Callable[[Any], tuple[AccessPattern, ...]]] = {
    TensorTensor: lambda i: (i.in0, i.in1),
    TensorScalar: lambda i: (i.src,),
    TensorCopy: lambda i: (i.src,),
    Select: lambda i: (i.predicate, i.on_true, i.on_false),
    Memset: lambda i: (i.dst,),
    Iota: lambda i: (i.dst,),
    Activation: lambda i: (i.src,),
    AffineSelect: lambda i: (i.src,),
    TensorReduce: lambda i: (i.src,),
    # assumption (reference/neuron.md §2.3 names them only): one streaming pass over the row, like a reduce
    Max8: lambda i: (i.src,),
    FindIndex8: lambda i: (i.data,),
    MatchReplace8: lambda i: (i.data,),
    BnStats: lambda i: (i.src,),
    BnAggr: lambda i: (i.src,),
    Transpose32: lambda i: (i.src,),
    PartitionReduce: lambda i: (i.src,),
    PartitionBroadcast: lambda i: (i.dst,),
}
# Fixed extra cycles of some kinds (beyond the static overhead).
EXTRA_CYCLES: dict[type[Instruction], Callable[[Any], int]] = {
    Activation: lambda i: ACT_READ_ACCUMULATOR if i.accumulate is not None else 0,
}


def _strided(ap: AccessPattern) -> bool:
    """The engine reads ``ap`` at a stride above ``STRIDE_PENALTY_BYTES``: its innermost dimension that moves
    (dimensions that continue each other merged, so a contiguous [P, 4, 512] view is one run) steps over
    more bytes than that, or its contiguous runs are shorter than that and an outer dimension jumps."""
    size = DTYPES[ap.dtype].itemsize
    dims = [(stride, count) for stride, count in ap.free if count > 1]
    merged: list[tuple[int, int]] = []
    for stride, count in reversed(dims):  # innermost first
        if merged and stride == merged[-1][0] * merged[-1][1] and merged[-1][0] == 1:
            merged[-1] = (1, merged[-1][1] * count)
        else:
            merged.append((stride, count))
    if not merged:
        return False
    inner_stride, inner_count = merged[0]
    if abs(inner_stride) * size > STRIDE_PENALTY_BYTES:
        return True
    run = inner_count * size if inner_stride == 1 else size
    return run < STRIDE_PENALTY_BYTES and any(abs(st) * size > STRIDE_PENALTY_BYTES for st, _ in merged[1:])


def engine_cost(ins: Instruction, engine: str, eng: EngineSpec) -> EngineCost:
    """Cycles of a VectorE/ScalarE/GpSimd instruction (module docstring), in seconds."""
    dst: AccessPattern | None = getattr(ins, "dst", None)
    out_epc = eng.dtype_elements_per_cycle.get(dst.dtype, eng.elements_per_cycle) if dst else eng.elements_per_cycle
    out_penalty = STRIDE_PENALTY if dst is not None and _strided(dst) else 1
    cycles = 0.0
    passes = 1
    for ap in STREAMS[type(ins)](ins):
        epc = min(eng.dtype_elements_per_cycle.get(ap.dtype, eng.elements_per_cycle), out_epc)
        penalty = max(STRIDE_PENALTY if _strided(ap) else 1, out_penalty)
        cycles += _free(ap) * eng.lanes / epc * penalty
        passes = max(passes, -(-ap.partitions // eng.lanes))
    extra = EXTRA_CYCLES.get(type(ins))
    total = STATIC_OVERHEAD[engine] + passes * cycles + (extra(ins) if extra else 0)
    return EngineCost(total / eng.clock)


def contiguous_run(ap: AccessPattern, across_rows: bool = True) -> int:
    """Elements in the longest contiguous run of ``ap`` in index order (whole HBM rows join up when
    ``across_rows`` and the rows are adjacent; on-chip partitions never do)."""
    run = 1
    for stride, count in reversed(ap.free):
        if count == 1:
            continue
        if stride != run:
            return run
        run *= count
    if across_rows and not ap.on_chip and ap.partition_stride == run:
        run *= ap.partitions
    return run


def _transposing(ap: AccessPattern) -> bool:
    """An HBM side read or written transposed (``isa.transposed``): adjacent partitions are adjacent
    elements and the free dimension strides over rows."""
    inner = next((stride for stride, count in reversed(ap.free) if count > 1), 1)
    return not ap.on_chip and ap.partitions > 1 and ap.partition_stride == 1 and inner != 1


# DMA kind → (source, destination, the side whose size is the elements moved, whether rows move one by one
# (gather/scatter: runs never join across rows), HBM passes over the destination (2: read-add-write)).
DMA_SIDES: dict[type[Instruction], Callable[[Any], tuple[AccessPattern, AccessPattern, AccessPattern, bool, int]]] = {
    DmaCopy: lambda i: (i.src, i.dst, i.dst, False, 1),
    DmaGather: lambda i: (i.src, i.dst, i.dst, True, 1),  # src is the whole table: only dst's rows move
    DmaScatter: lambda i: (i.src, i.dst, i.src, True, 1),  # dst is the whole table: only src's rows move
    DmaScatterAdd: lambda i: (i.src, i.dst, i.src, True, 2),  # read-add-write of table rows (neuron.md §1.4)
}


def dma_cost(ins: Instruction, core: CoreSpec) -> DmaCost:
    """Queue time of one transfer (module docstring)."""
    src, dst, moved, rowwise, dst_passes = DMA_SIDES[type(ins)](ins)
    elements = _size(moved)
    src_size, dst_size = DTYPES[src.dtype].itemsize, DTYPES[dst.dtype].itemsize
    nbytes = elements * max(src_size, dst_size)
    hbm = (0 if src.on_chip else elements * src_size) + (0 if dst.on_chip else dst_passes * elements * dst_size)
    queue = getattr(ins, "queue", 0)
    if src_size == dst_size in DMA_TRANSPOSE_ITEMSIZES and (_transposing(src) or _transposing(dst)):
        work = nbytes / DMA_TRANSPOSE_EFFICIENCY[src.memory]
        return DmaCost(queue, core.dma.latency, nbytes, work, hbm, 1, True)
    run = min(contiguous_run(src, not rowwise), contiguous_run(dst, not rowwise))
    descriptors = -(-elements // run)
    work = nbytes + descriptors * DMA_DESCRIPTOR_OVERHEAD_BYTES
    return DmaCost(queue, core.dma.latency, nbytes, work, hbm, descriptors, False)


def core_of(spec: ChipSpec) -> CoreSpec:
    """The NeuronCore of ``spec``; ``SimError`` for chips without one."""
    if spec.core is None:
        raise SimError(f"{spec.name} has no NeuronCore to time", hint="use a Trainium preset, e.g. trn3")
    return spec.core


__all__ = [
    "ACT_READ_ACCUMULATOR", "DMA_DESCRIPTOR_OVERHEAD_BYTES", "DMA_TRANSPOSE_EFFICIENCY", "FAST_LS_SPEEDUP",
    "MM_INIT_LATENCY", "STATIC_OVERHEAD", "STATIONARY", "STRIDE_PENALTY", "TENSOR_KEY", "TENSOR_SHAPES", "DmaCost",
    "EngineCost", "TensorWork", "contiguous_run", "dma_cost", "engine_cost", "signature", "tensor_cost",
]
