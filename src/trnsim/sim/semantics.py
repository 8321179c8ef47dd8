"""The functional semantics of every instruction: a table from instruction type to a plain numpy function.

This is the specification of the ISA (STYLE rule 4): obvious code, no shortcuts. Each function reads its
operands through the ``Context`` and writes its results; the docstring of the instruction class gives the
same semantics as pseudo-code. This module holds data movement and TensorE; ``semantics_engines`` holds
VectorE, ScalarE and GpSimd.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction, Nop
from trnsim.isa.dma import DmaCopy, DmaGather, DmaScatter, DmaScatterAdd
from trnsim.isa.tensor_engine import MX_BLOCK, SPARSE_PATTERNS, Matmul, TensorTranspose
from trnsim.sim.context import Context
from trnsim.sim.memory import Fault

InsT = TypeVar("InsT", bound=Instruction)
SEMANTICS: dict[type[Instruction], Callable[[Context, Any], None]] = {}


def semantics(cls: type[InsT]) -> Callable[[Callable[[Context, InsT], None]], Callable[[Context, InsT], None]]:
    """Register the semantics of ``cls``."""
    def register(fn: Callable[[Context, InsT], None]) -> Callable[[Context, InsT], None]:
        SEMANTICS[cls] = fn
        return fn
    return register


@semantics(Nop)
def nop(ctx: Context, ins: Nop) -> None:
    pass


@semantics(DmaCopy)
def dma_copy(ctx: Context, ins: DmaCopy) -> None:
    if ins.dst.size != ins.src.size:
        raise Fault(f"dma_copy of {ins.src.size} elements into {ins.dst.size}", "match the two patterns' sizes")
    if ins.dst.dtype == ins.src.dtype:
        ctx.copy_raw(ins.dst, ins.src)  # bit for bit: no decode, NaN payloads kept
    else:
        ctx.write(ins.dst, ctx.read(ins.src))


def row(ap: AccessPattern, r: int) -> AccessPattern:
    """Partition (on chip) or row (HBM) ``r`` of a pattern."""
    return replace(ap, partition_start=ap.partition_start + r, partitions=1)


def indices(ctx: Context, index: AccessPattern, rows: int) -> list[int]:
    idx = ctx.read(index).reshape(-1).astype(np.int64).tolist()
    for p, r in enumerate(idx):
        if not 0 <= r < rows:
            raise Fault(f"index[{p}] = {r} is outside the table's {rows} rows", "clamp or mask the indices")
    return idx


@semantics(DmaGather)
def dma_gather(ctx: Context, ins: DmaGather) -> None:
    for p, r in enumerate(indices(ctx, ins.index, ins.src.partitions)):
        src, dst = row(ins.src, r), row(ins.dst, p)
        if src.dtype == dst.dtype:
            ctx.write_raw(dst, ctx.read_raw(src))
        else:
            ctx.write(dst, ctx.read(src))


@semantics(DmaScatter)
def dma_scatter(ctx: Context, ins: DmaScatter) -> None:
    for p, r in enumerate(indices(ctx, ins.index, ins.dst.partitions)):  # in order: the last write wins
        src, dst = row(ins.src, p), row(ins.dst, r)
        if src.dtype == dst.dtype:
            ctx.write_raw(dst, ctx.read_raw(src))
        else:
            ctx.write(dst, ctx.read(src))


@semantics(DmaScatterAdd)
def dma_scatter_add(ctx: Context, ins: DmaScatterAdd) -> None:
    for p, r in enumerate(indices(ctx, ins.index, ins.dst.partitions)):
        dst = row(ins.dst, r)
        with np.errstate(all="ignore"):  # inf + -inf is NaN on the chip too: no warning
            total = ctx.read32(dst).reshape(-1) + ctx.read32(row(ins.src, p)).reshape(-1)
        ctx.write(dst, total)


def scale_factors(ctx: Context, scale: AccessPattern, k: int) -> NDArray[np.float64]:
    """E8M0 codes [ceil(K/32), C] → per-element factors 2^(code-127) [K, C]; code 255 is NaN."""
    codes = ctx.read_raw(scale).reshape(scale.partitions, -1).astype(np.int64)
    factors = np.where(codes == 255, np.nan, np.ldexp(1.0, codes - 127))
    return np.repeat(factors, MX_BLOCK, axis=0)[:k]


def stationary_values(ctx: Context, ins: Matmul) -> NDArray[np.floating[Any]]:
    """The dense stationary [K, M] in exact values (sparse: scattered to their positions; MX: scaled)."""
    vals = ctx.operand32(ins.stationary)
    if ins.sparsity is not None:
        assert ins.stationary_index is not None
        n, m = SPARSE_PATTERNS[ins.sparsity]
        pos = ctx.read_raw(ins.stationary_index).reshape(vals.shape).astype(np.int64)
        if (pos >= m).any():
            raise Fault(f"sparse index {int(pos.max())} ≥ group size {m}", f"positions lie in 0..{m - 1}")
        dense_rows = (np.arange(vals.shape[0])[:, None] // n) * m + pos
        cols = np.broadcast_to(np.arange(vals.shape[1]), vals.shape)
        dense = np.zeros((ins.contraction, vals.shape[1]), dtype=np.float32)
        hits = np.zeros(dense.shape, dtype=np.int64)
        np.add.at(hits, (dense_rows, cols), 1)
        if (hits > 1).any():
            raise Fault("two kept values of one sparse group share a position", "positions within a group differ")
        dense[dense_rows, cols] = vals
        vals = dense
    if ins.stationary_scale is not None:
        vals = vals * scale_factors(ctx, ins.stationary_scale, vals.shape[0])
    return vals


@semantics(Matmul)
def matmul(ctx: Context, ins: Matmul) -> None:
    s = stationary_values(ctx, ins)  # [K, M]
    v = ctx.operand32(ins.moving)  # [K, N]
    if ins.moving_scale is not None:
        v = v * scale_factors(ctx, ins.moving_scale, v.shape[0])
    bank = ctx.bank_bytes
    lo, hi = ins.dst.byte_span()
    if lo // bank != (hi - 1) // bank:
        raise Fault(f"matmul output bytes {lo}..{hi - 1} overflow a PSUM bank", "keep [M, N≤512] fp32 in one bank")
    # NOTE: operands are exact in fp32 (decoded from their format, MX scales applied), so every product is
    # exact for ≤16-bit operands; TensorE sums them in fp32 (neuron.md §1.2: "accumulation is FP32"). The
    # docs do not fix the order of the additions within one instruction, nor within a run of accumulating
    # instructions, so the BLAS order over the run stands in for it (``fastpath.DeferredMatmuls`` sums an
    # accumulation group as one product): results are bit-exact wherever the partial sums are representable
    # (small integers, few terms), and within K fp32 rounding errors otherwise.
    ctx.accumulate_product(ins.dst, s.astype(np.float32, copy=False), v.astype(np.float32, copy=False),
                           add=ins.accumulate)


@semantics(TensorTranspose)
def tensor_transpose(ctx: Context, ins: TensorTranspose) -> None:
    raw = ctx.read_raw(ins.src).reshape(ins.src.partitions, ins.src.free_size)
    ctx.write_raw(ins.dst, raw.T)
