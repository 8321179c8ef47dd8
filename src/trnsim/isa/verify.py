"""Static checks of a program against a chip spec: raise ``VerifyError`` naming the instruction and the fix.

Checks, in order, for every instruction: it runs on an engine that has it; every access pattern is
well-formed, in bounds, aligned, and (for compute engines) on chip and at a legal partition start
(``reference/neuron.md`` §1.2: > 64 partitions start at 0; 33–64 at 0 or 64; ≤ 32 at a multiple of 32);
then the instruction's own rule from ``RULES`` (tile limits, dtypes, shapes). Last, the semaphore protocol
is executed abstractly: a wait whose count the program can never reach is *dangling*; waits that could be
reached but block each other are *circular* (deadlock). Because semaphores only count up and streams are
in order, one abstract run decides this for every interleaving.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from trnsim.hw import ChipSpec
from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction, Nop
from trnsim.isa.dma import DmaCopy, DmaGather, DmaScatter, DmaScatterAdd
from trnsim.isa.dtypes import DTYPES, VerifyError, get_dtype
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
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, COMPARES, REDUCE_OPS
from trnsim.isa.program import Program, where
from trnsim.isa.reduction import (
    BN_STATS_FMAX,
    BN_STATS_WIDTH,
    SELECT_WIDTH,
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
from trnsim.isa.tensor_engine import MX_BLOCK, SPARSE_PATTERNS, Matmul, TensorTranspose

MAX_COUNT = 65535  # free-dimension sizes are uint16
STRIDE_RANGE = (-32768, 32767)  # on-chip strides are int16
FREE_MAX = {"sbuf": 65536, "psum": 4096}  # elements per partition an engine instruction may touch
DMA_TYPES: tuple[type[Instruction], ...] = (DmaCopy, DmaGather, DmaScatter, DmaScatterAdd, Nop)


class Issue(Exception):
    """One rule broken by one instruction; ``verify`` adds where it is."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def require(ok: bool, message: str, hint: str) -> None:
    if not ok:
        raise Issue(message, hint)


def memory_geometry(spec: ChipSpec, memory: str) -> tuple[int, int]:
    """(partitions, bytes per partition) of an on-chip memory."""
    core = spec.core
    assert core is not None
    if memory == "sbuf":
        return core.sbuf.partitions, core.sbuf.bytes_per_partition
    return core.psum.partitions, core.psum.banks * core.psum.bank_bytes


def check_ap(name: str, ap: AccessPattern, program: Program, spec: ChipSpec, engine_op: bool) -> None:
    require(ap.dtype in DTYPES, f"{name}: unknown dtype {ap.dtype!r}", f"use one of: {', '.join(DTYPES)}")
    require(ap.partitions >= 1, f"{name}: {ap.partitions} partitions", "an access covers at least one partition")
    require(1 <= len(ap.free) <= 4, f"{name}: {len(ap.free)} free dimensions", "use 1 to 4 (stride, count) dims")
    for _, count in ap.free:
        require(1 <= count <= MAX_COUNT, f"{name}: free size {count}", f"sizes are 1..{MAX_COUNT}")
    require(ap.offset % ap.itemsize == 0, f"{name}: byte offset {ap.offset} is not aligned to {ap.itemsize}-byte "
            f"{ap.dtype}", f"use an offset that is a multiple of {ap.itemsize}")
    lo, hi = ap.byte_span()
    if ap.on_chip:
        parts, row_bytes = memory_geometry(spec, ap.memory)
        require(ap.tensor is None and ap.partition_stride == 0, f"{name}: {ap.memory} partitions are not strided",
                "drop the tensor name and partition stride from on-chip patterns")
        require(ap.partition_start >= 0 and ap.partition_start + ap.partitions <= parts,
                f"{name}: partitions {ap.partition_start}..{ap.partition_start + ap.partitions - 1} outside "
                f"{ap.memory}'s {parts}", f"use at most {parts} partitions")
        require(lo >= 0 and hi <= row_bytes, f"{name}: bytes {lo}..{hi} of each partition outside {ap.memory} "
                f"({row_bytes} bytes per partition)", "shrink the tile or move its offset")
        for stride, _ in ap.free:
            require(STRIDE_RANGE[0] <= stride <= STRIDE_RANGE[1], f"{name}: stride {stride} does not fit int16",
                    "split the access into several instructions")
        if engine_op:
            check_partition_start(name, ap, parts)
            require(ap.free_size <= FREE_MAX[ap.memory], f"{name}: {ap.free_size} elements per partition",
                    f"engines touch at most {FREE_MAX[ap.memory]} per partition in {ap.memory}; tile the free axis")
        return
    require(not engine_op, f"{name}: compute engines cannot access HBM", "load the tile into SBUF by DMA first")
    if ap.tensor is None:
        require(lo >= 0 and hi <= spec.hbm_bytes, f"{name}: HBM bytes {lo}..{hi} outside {spec.hbm_bytes}",
                "address inside HBM, or name a declared tensor")
        return
    decl = {t.name: t for t in program.tensors}.get(ap.tensor)
    require(decl is not None, f"{name}: HBM tensor {ap.tensor!r} is not declared", "declare it in the program")
    assert decl is not None
    require(ap.partition_start >= 0 and lo >= 0 and hi <= decl.nbytes,
            f"{name}: bytes {lo}..{hi} outside tensor {decl.name} ({decl.nbytes} bytes, {decl.shape} {decl.dtype})",
            "check the rows, offset and strides against the tensor's shape")


def check_partition_start(name: str, ap: AccessPattern, partitions: int) -> None:
    quarter = partitions // 4
    n, s = ap.partitions, ap.partition_start
    legal = (0,) if n > 2 * quarter else (0, 2 * quarter) if n > quarter else tuple(range(0, partitions, quarter))
    require(s in legal, f"{name}: {n} partitions may not start at partition {s}",
            f"a tile of {n} partitions starts at one of {legal} (reference/neuron.md §1.2)")


def same_shape(a: AccessPattern, b: AccessPattern, what: str) -> None:
    require(a.partitions == b.partitions and a.free_size == b.free_size,
            f"{what}: shapes {a.shape} and {b.shape} differ", "give both the same partitions and elements each")


def scalar_ap(name: str, s: object, ref: AccessPattern) -> None:
    if isinstance(s, AccessPattern):
        require(s.partitions == ref.partitions and s.free_size == 1, f"{name}: per-partition scalar has shape "
                f"{s.shape}", f"use a [{ref.partitions}, 1] pattern")


def alu(name: str, op: str, *aps: AccessPattern) -> None:
    alu_op = ALU_OPS.get(op)
    require(alu_op is not None, f"unknown ALU op {op!r}", f"use one of: {', '.join(ALU_OPS)}")
    assert alu_op is not None
    if alu_op.kind == "bitwise":
        require(all(get_dtype(a.dtype).kind == "int" for a in aps), f"{name}: bitwise op {op} on float data",
                "bitwise ops take integer dtypes; bit-cast with AccessPattern.with_dtype")


def _matmul(ins: Matmul, spec: ChipSpec) -> None:
    core = spec.core
    assert core is not None
    te, psum = core.tensor, core.psum
    require(ins.dst.memory == "psum" and ins.dst.dtype == "fp32", f"matmul writes fp32 PSUM, not {ins.dst.memory} "
            f"{ins.dst.dtype}", "point dst at a psum fp32 tile")
    for name, ap in (("stationary", ins.stationary), ("moving", ins.moving)):
        require(ap.memory == "sbuf", f"{name} is in {ap.memory}", "TensorE reads its operands from SBUF")
        require(ap.dtype in te.rate, f"{name} dtype {ap.dtype} is not a TensorE input on {spec.name}",
                f"cast to one of: {', '.join(te.rate)}")
    k, m, n = ins.contraction, ins.stationary.free_size, ins.moving.free_size
    require(ins.moving.partitions == k, f"contraction mismatch: stationary K={k}, moving K={ins.moving.partitions}",
            "both operands hold K on their partitions")
    require(k <= te.rows and m <= te.cols, f"stationary [{k}, {m}] exceeds the {te.rows}x{te.cols} array",
            f"tile K ≤ {te.rows} and M ≤ {te.cols}")
    require(n <= psum.fp32_per_bank, f"moving free size {n} > {psum.fp32_per_bank}", "tile N to one PSUM bank")
    require(ins.dst.partitions == m and ins.dst.free_size == n, f"dst shape {ins.dst.shape} is not [{m}, {n}]",
            "dst is [M, N]")
    lo, hi = ins.dst.byte_span()
    require(lo // psum.bank_bytes == (hi - 1) // psum.bank_bytes, f"dst bytes {lo}..{hi} cross a PSUM bank "
            f"boundary ({psum.bank_bytes} B)", "place the matmul output inside one bank")
    for name, op, scale, cols in (("stationary", ins.stationary, ins.stationary_scale, m),
                                  ("moving", ins.moving, ins.moving_scale, n)):
        is_mx = get_dtype(op.dtype).kind == "mx"
        require(is_mx == (scale is not None), f"{name} {op.dtype} {'needs' if is_mx else 'takes no'} scale",
                "MX operands (mxfp*) come with an e8m0 scale AP, other dtypes without")
        if scale is not None:
            require(scale.memory == "sbuf" and scale.dtype in ("e8m0", "uint8"), f"{name}_scale is "
                    f"{scale.memory} {scale.dtype}", "scales are e8m0/uint8 in SBUF")
            want = (-(-k // MX_BLOCK), cols)
            require((scale.partitions, scale.free_size) == want, f"{name}_scale shape {scale.shape}, want {want}",
                    "one scale per 32 elements along K")
    if ins.sparsity is None:
        require(ins.stationary_index is None, "stationary_index without sparsity", "set sparsity='2:4' or '4:8'")
        return
    pattern = SPARSE_PATTERNS.get(ins.sparsity)
    require(pattern is not None and (not te.sparse_patterns or ins.sparsity in te.sparse_patterns),
            f"sparsity {ins.sparsity!r} not supported",
            f"use one of: {', '.join(te.sparse_patterns or SPARSE_PATTERNS)}")
    idx = ins.stationary_index
    require(idx is not None and idx.dtype == "uint8" and idx.shape == ins.stationary.shape,
            "sparse stationary needs stationary_index: uint8, the shape of stationary", "pass the kept positions")
    assert pattern is not None
    require(ins.stationary.partitions % pattern[0] == 0, f"{ins.stationary.partitions} kept rows is not a multiple "
            f"of {pattern[0]}", "compress whole groups along K")


def _transpose(ins: TensorTranspose, spec: ChipSpec) -> None:
    require(ins.src.memory == "sbuf" and ins.dst.memory == "psum", "tensor_transpose reads SBUF, writes PSUM",
            "move the operands")
    require(ins.src.dtype == ins.dst.dtype, f"dtypes differ ({ins.src.dtype} → {ins.dst.dtype})",
            "the transpose is bit-exact: cast separately")
    p, f = ins.src.partitions, ins.src.free_size
    require(ins.dst.partitions == f and ins.dst.free_size == p, f"dst {ins.dst.shape} is not [{f}, {p}]",
            "dst is the transposed shape")


def _gather(ins: DmaGather | DmaScatter | DmaScatterAdd, spec: ChipSpec) -> None:
    table, rows = (ins.src, ins.dst) if isinstance(ins, DmaGather) else (ins.dst, ins.src)
    require(ins.index.dtype in ("int32", "uint32") and ins.index.shape[0] == rows.partitions
            and ins.index.free_size == 1, f"index is {ins.index.shape} {ins.index.dtype}",
            f"use a [{rows.partitions}, 1] int32 pattern")
    require(table.free_size == rows.free_size, f"row sizes differ: table {table.free_size}, tile {rows.free_size}",
            "a gathered row fills one partition")


def _reduce(ins: TensorReduce, spec: ChipSpec) -> None:
    op = REDUCE_OPS.get(ins.op)
    require(op is not None, f"unknown reduce op {ins.op!r}", f"use one of: {', '.join(REDUCE_OPS)}")
    nfree = len(ins.src.free)
    require(len(set(ins.axes)) == len(ins.axes) and all(0 <= a < nfree for a in ins.axes),
            f"axes {ins.axes} for {nfree} free dims", f"list distinct free axes in 0..{nfree - 1}")
    kept = 1
    for i, (_, c) in enumerate(ins.src.free):
        kept *= 1 if i in ins.axes else c
    require(ins.dst.partitions == ins.src.partitions and ins.dst.free_size == kept,
            f"dst {ins.dst.shape} should hold {kept} elements per partition", "drop the reduced axes from dst")


def _select8(ins: Max8 | FindIndex8 | MatchReplace8, spec: ChipSpec) -> None:
    """max8 / find_index8 / match_replace8: rows of at least 8 values, 8 values (or indices) per partition."""
    data = ins.src if isinstance(ins, Max8) else ins.data
    require(data.free_size >= SELECT_WIDTH, f"{ins.mnemonic} over {data.free_size} values per partition",
            f"give at least {SELECT_WIDTH} values per partition (pad the row with the lowest value)")
    require(get_dtype(data.dtype).kind == "float", f"{ins.mnemonic} on {data.dtype} data",
            "select among float values (convert integers to fp32 first)")
    eight = ins.dst if isinstance(ins, Max8 | FindIndex8) else ins.vals
    require(eight.partitions == data.partitions and eight.free_size == SELECT_WIDTH,
            f"{ins.mnemonic}: {eight.shape} for {SELECT_WIDTH} values per partition of {data.shape}",
            f"use a [{data.partitions}, {SELECT_WIDTH}] pattern")
    if isinstance(ins, FindIndex8):
        require(ins.vals.partitions == data.partitions and ins.vals.free_size == SELECT_WIDTH,
                f"find_index8: vals {ins.vals.shape}", f"use a [{data.partitions}, {SELECT_WIDTH}] pattern")
        require(ins.dst.dtype in ("int32", "uint32"), f"find_index8 writes {ins.dst.dtype} indices",
                "point dst at an int32 or uint32 tile")
    if isinstance(ins, MatchReplace8):
        same_shape(ins.dst, ins.data, "dst/data")


Rule = Callable[[Any, ChipSpec], object]  # lambdas that chain several checks return a tuple
# Per-instruction rules (the generic operand checks run first).
RULES: dict[type[Instruction], Rule] = {
    Matmul: _matmul,
    TensorTranspose: _transpose,
    DmaCopy: lambda i, s: require(i.dst.size == i.src.size, f"dma_copy sizes differ: {i.dst.shape} vs "
                                  f"{i.src.shape}", "both patterns must hold the same number of elements"),
    DmaGather: _gather,
    DmaScatter: _gather,
    DmaScatterAdd: _gather,
    TensorTensor: lambda i, s: (same_shape(i.dst, i.in0, "dst/in0"), same_shape(i.in0, i.in1, "in0/in1"),
                                alu("tensor_tensor", i.op, i.in0, i.in1)),
    TensorScalar: lambda i, s: (same_shape(i.dst, i.src, "dst/src"), alu("op0", i.op0, i.src),
                                i.op1 is None or alu("op1", i.op1, i.src), scalar_ap("scalar0", i.scalar0, i.src),
                                scalar_ap("scalar1", i.scalar1, i.src)),
    TensorCopy: lambda i, s: same_shape(i.dst, i.src, "dst/src"),
    Select: lambda i, s: (same_shape(i.dst, i.predicate, "dst/predicate"), same_shape(i.dst, i.on_true, "on_true"),
                          same_shape(i.dst, i.on_false, "on_false")),
    Memset: lambda i, s: None,
    Iota: lambda i, s: require(len(i.steps) == len(i.dst.free), f"{len(i.steps)} steps for {len(i.dst.free)} free "
                               "dims", "give one step per free dimension"),
    Activation: lambda i, s: (
        require(i.func in ACTIVATIONS, f"unknown function {i.func!r}", f"use one of: {', '.join(ACTIVATIONS)}"),
        same_shape(i.dst, i.src, "dst/src"), scalar_ap("scale", i.scale, i.src), scalar_ap("bias", i.bias, i.src),
        i.accumulate is None or scalar_ap("accumulate", i.accumulate, i.src),
        require(REDUCE_OPS.get(i.reduce_op, REDUCE_OPS["and"]).kind == "arith", f"bad reduce_op {i.reduce_op!r}",
                "use add, max, min or mul")),
    AffineSelect: lambda i, s: (
        require(i.cmp in COMPARES, f"unknown comparison {i.cmp!r}", f"use one of: {', '.join(COMPARES)}"),
        same_shape(i.dst, i.src, "dst/src"),
        require(len(i.steps) == len(i.src.free), f"{len(i.steps)} steps for {len(i.src.free)} free dims",
                "give one step per free dimension")),
    TensorReduce: _reduce,
    Max8: _select8,
    FindIndex8: _select8,
    MatchReplace8: _select8,
    BnStats: lambda i, s: (
        require(i.src.free_size <= BN_STATS_FMAX, f"bn_stats over {i.src.free_size} > {BN_STATS_FMAX} elements",
                "split the free axis and combine with bn_aggr"),
        require(i.dst.partitions == i.src.partitions and i.dst.free_size == BN_STATS_WIDTH,
                f"dst {i.dst.shape}", f"dst is [P, {BN_STATS_WIDTH}]")),
    BnAggr: lambda i, s: require(i.src.free_size % BN_STATS_WIDTH == 0 and i.dst.free_size == 2
                                 and i.dst.partitions == i.src.partitions, f"bn_aggr {i.src.shape} → {i.dst.shape}",
                                 "src is [P, 3·G] bn_stats records, dst [P, 2]"),
    Transpose32: lambda i, s: (same_shape(i.dst, i.src, "dst/src"),
                               require(i.src.partitions % 32 == 0 and i.src.free_size % 32 == 0,
                                       f"transpose32 of {i.src.shape}",
                                       "partitions and free size are multiples of 32")),
    PartitionReduce: lambda i, s: (
        require(i.op in REDUCE_OPS, f"unknown reduce op {i.op!r}", f"use one of: {', '.join(REDUCE_OPS)}"),
        require(i.dst.partitions == 1 and i.dst.free_size == i.src.free_size, f"dst {i.dst.shape}",
                "dst is one partition of the source's free size")),
    PartitionBroadcast: lambda i, s: require(i.src.partitions == 1 and i.dst.free_size == i.src.free_size,
                                             f"src {i.src.shape} → dst {i.dst.shape}", "src is one partition"),
    Nop: lambda i, s: None,
}


def check_instruction(engine: str, ins: Instruction, program: Program, spec: ChipSpec,
                      passed: set[tuple[AccessPattern, bool]] | None = None) -> None:
    """Check one instruction. ``passed`` remembers the (pattern, engine_op) pairs already found legal for
    this program and spec, so a pattern used by many instructions is checked once."""
    require(engine in ins.engines, f"{ins.mnemonic} cannot run on {engine}",
            f"put it in the stream of: {', '.join(ins.engines)}")
    engine_op = not isinstance(ins, DMA_TYPES)
    for name, ap in ins.operands().items():
        if passed is None or (ap, engine_op) not in passed:
            check_ap(name, ap, program, spec, engine_op)
            if passed is not None:
                passed.add((ap, engine_op))
    if isinstance(ins, DmaCopy | DmaGather | DmaScatter | DmaScatterAdd):
        assert spec.core is not None
        require(0 <= ins.queue < spec.core.dma.queues, f"DMA queue {ins.queue}",
                f"use a queue in 0..{spec.core.dma.queues - 1}")
    rule = RULES.get(type(ins))
    require(rule is not None, f"no verifier rule for {type(ins).__name__}", "register one in verify.RULES")
    assert rule is not None
    rule(ins, spec)


def check_semaphores(program: Program) -> None:
    """Run the semaphore protocol without data; report dangling or circular waits."""
    count: Counter[str] = Counter()
    pc = dict.fromkeys(program.streams, 0)
    progress = True
    while progress:
        progress = False
        for engine, stream in program.streams.items():
            while pc[engine] < len(stream) and all(count[s] >= n for s, n in stream[pc[engine]].wait):
                count.update(stream[pc[engine]].signal)
                pc[engine] += 1
                progress = True
    blocked = [(e, pc[e], s[pc[e]]) for e, s in program.streams.items() if pc[e] < len(s)]
    if not blocked:
        return
    total: Counter[str] = Counter(sig for _, _, ins in program.instructions() for sig in ins.signal)
    for engine, i, ins in blocked:
        for sem, n in ins.wait:
            if total[sem] < n:
                raise VerifyError(f"dangling wait: {sem}>={n} can never hold, the program signals {sem} "
                                  f"{total[sem]} time(s)", where=where(engine, i, ins),
                                  hint=f"signal {sem} from the producer, or wait for {sem}>={total[sem]}")
    stuck = "; ".join(f"{where(e, i, ins)} waits for "
                      + ",".join(f"{s}>={n} (at {count[s]})" for s, n in ins.wait if count[s] < n)
                      for e, i, ins in blocked)
    raise VerifyError(f"circular wait (deadlock): {stuck}", where=where(*blocked[0]),
                      hint="an instruction waits for a signal issued only after it in another stream; reorder them")


def verify(program: Program, spec: ChipSpec) -> None:
    """Raise ``VerifyError`` for the first illegal instruction, then check the semaphore protocol."""
    if spec.core is None:
        raise VerifyError(f"{spec.name} has no NeuronCore", hint="verify against a Trainium preset, e.g. trn3")
    if program.rounding not in ("rne", "stochastic"):
        raise VerifyError(f"unknown rounding {program.rounding!r}", hint="use rne or stochastic")
    names = [t.name for t in program.tensors]
    dup = [n for n, c in Counter(names).items() if c > 1]
    if dup:
        raise VerifyError(f"tensor {dup[0]!r} declared twice", hint="give every HBM tensor its own name")
    for t in program.tensors:
        if t.dtype not in DTYPES:
            raise VerifyError(f"tensor {t.name}: unknown dtype {t.dtype!r}", hint=f"use one of: {', '.join(DTYPES)}")
    passed: set[tuple[AccessPattern, bool]] = set()
    for engine, i, ins in program.instructions():
        try:
            check_instruction(engine, ins, program, spec, passed)
        except Issue as e:
            raise VerifyError(e.message, where=where(engine, i, ins), hint=e.hint) from None
    check_semaphores(program)
