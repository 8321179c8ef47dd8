"""Functional semantics of VectorE, ScalarE and GpSimd instructions (registered in ``semantics.SEMANTICS``).

Every one computes in fp32 (``Context.read32``) and rounds once on write; bitwise ops and iota work on
exact integers. Op behaviour comes from the tables in ``isa.ops``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.elementwise import (
    Activation,
    AffineSelect,
    Iota,
    Memset,
    Scalar,
    Select,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, COMPARES, REDUCE_OPS
from trnsim.isa.reduction import (
    NOT_FOUND,
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
from trnsim.sim.context import Context
from trnsim.sim.semantics import semantics


def operand(ctx: Context, ap: AccessPattern, bitwise: bool) -> NDArray[Any]:
    """An ALU input: fp32 values (read-only: ``Context.peek32``), or exact int64 for bitwise ops."""
    if bitwise:
        return ctx.read(ap).astype(np.int64).reshape(ap.partitions, ap.free_size)
    return ctx.peek32(ap)


def scalar(ctx: Context, s: Scalar, bitwise: bool = False) -> NDArray[Any]:
    """An immediate or a [P, 1] per-partition operand, shaped to broadcast along the free axis."""
    if isinstance(s, AccessPattern):
        return operand(ctx, s, bitwise).reshape(s.partitions, 1)
    return np.array(s, dtype=np.int64 if bitwise else np.float32)


@semantics(TensorTensor)
def tensor_tensor(ctx: Context, ins: TensorTensor) -> None:
    op = ALU_OPS[ins.op]
    bitwise = op.kind == "bitwise"
    ctx.write(ins.dst, op.fn(operand(ctx, ins.in0, bitwise), operand(ctx, ins.in1, bitwise)))


@semantics(TensorScalar)
def tensor_scalar(ctx: Context, ins: TensorScalar) -> None:
    op0 = ALU_OPS[ins.op0]
    bitwise = op0.kind == "bitwise" or (ins.op1 is not None and ALU_OPS[ins.op1].kind == "bitwise")
    x, s0 = operand(ctx, ins.src, bitwise), scalar(ctx, ins.scalar0, bitwise)
    t = op0.fn(s0, x) if ins.reverse0 else op0.fn(x, s0)
    if ins.op1 is not None:
        op1, s1 = ALU_OPS[ins.op1], scalar(ctx, ins.scalar1, bitwise)
        t = op1.fn(s1, t) if ins.reverse1 else op1.fn(t, s1)
    ctx.write(ins.dst, t)


@semantics(TensorCopy)
def tensor_copy(ctx: Context, ins: TensorCopy) -> None:
    ctx.copy_values(ins.dst, ins.src)  # = ctx.write(ins.dst, ctx.read32(ins.src))


@semantics(Select)
def select(ctx: Context, ins: Select) -> None:
    pred = ctx.read32(ins.predicate) != 0
    ctx.write(ins.dst, np.where(pred, ctx.read32(ins.on_true), ctx.read32(ins.on_false)))


@semantics(Memset)
def memset(ctx: Context, ins: Memset) -> None:
    ctx.write(ins.dst, np.full(ins.dst.shape, ins.value, dtype=np.float32))


def affine(ap: AccessPattern, base: int, channel_multiplier: int, steps: tuple[int, ...]) -> NDArray[np.int64]:
    """base + channel_multiplier * p + Σ steps[k] * i_k over the shape of ``ap`` (exact integers)."""
    value = np.full(ap.shape, base, dtype=np.int64)
    for axis, mult in enumerate((channel_multiplier, *steps)):
        shape = [1] * len(ap.shape)
        shape[axis] = ap.shape[axis]
        value = value + mult * np.arange(ap.shape[axis], dtype=np.int64).reshape(shape)
    return value


@semantics(Iota)
def iota(ctx: Context, ins: Iota) -> None:
    values = affine(ins.dst, ins.base, ins.channel_multiplier, ins.steps)
    ctx.write(ins.dst, values if get_dtype(ins.dst.dtype).kind == "int" else values.astype(np.float32))


@semantics(AffineSelect)
def affine_select(ctx: Context, ins: AffineSelect) -> None:
    keep = COMPARES[ins.cmp](affine(ins.src, ins.offset, ins.channel_multiplier, ins.steps), 0)
    src = ctx.read(ins.src).astype(np.float32)
    ctx.write(ins.dst, np.where(keep, src, np.float32(ins.fill)))


@semantics(Activation)
def activation(ctx: Context, ins: Activation) -> None:
    with np.errstate(all="ignore"):
        src = ctx.peek32(ins.src)
        y = ctx.scratch.work(src.shape)  # the intermediate values, in a buffer reused by every instruction
        np.multiply(src, scalar(ctx, ins.scale), out=y)  # then in place:
        np.add(y, scalar(ctx, ins.bias), out=y)  # + bias and func, each step rounded to fp32
        ACTIVATIONS[ins.func](y, out=y)
        ctx.write(ins.dst, y)
        if ins.accumulate is not None:
            red = REDUCE_OPS[ins.reduce_op].ufunc.reduce(y, axis=1, dtype=np.float32)
            ctx.write(ins.accumulate, red)


@semantics(TensorReduce)
def tensor_reduce(ctx: Context, ins: TensorReduce) -> None:
    op = REDUCE_OPS[ins.op]
    # fp32 values are peek32's (the fp32 decode directly, not through float64), shaped as the pattern
    data = ctx.read(ins.src).astype(np.int64) if op.kind == "bitwise" else ctx.peek32(ins.src).reshape(ins.src.shape)
    with np.errstate(all="ignore"):
        r = op.ufunc.reduce(data, axis=tuple(a + 1 for a in ins.axes))
    ctx.write(ins.dst, -r if ins.negate else r)


def total_order(x: NDArray[np.float32]) -> NDArray[np.int64]:
    """Integers in the IEEE-754 total order of the fp32 values ``x`` (-NaN < -inf < -0.0 < +0.0 < +inf < +NaN):
    a negative float's magnitude bits, negated below -1."""
    i = x.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF) - 1, i)


def first_matches(data: NDArray[np.float32], vals: NDArray[np.float32]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """For each row and each of its values in order, the first position holding the same fp32 bits that an
    earlier value of the row did not take: (positions [P, n], found [P, n])."""
    bits, want = data.view(np.uint32), vals.view(np.uint32)
    taken = np.zeros(bits.shape, dtype=np.bool_)
    rows = np.arange(bits.shape[0])
    pos = np.zeros(want.shape, dtype=np.int64)
    found = np.zeros(want.shape, dtype=np.bool_)
    for j in range(want.shape[1]):
        hit = (bits == want[:, j : j + 1]) & ~taken
        found[:, j] = hit.any(axis=1)
        pos[:, j] = hit.argmax(axis=1)
        taken[rows[found[:, j]], pos[found[:, j], j]] = True
    return pos, found


@semantics(Max8)
def max8(ctx: Context, ins: Max8) -> None:
    x = ctx.read32(ins.src)
    order = np.argsort(-total_order(x), axis=1, kind="stable")[:, : ins.dst.free_size]
    ctx.write(ins.dst, np.take_along_axis(x, order, axis=1))


@semantics(FindIndex8)
def find_index8(ctx: Context, ins: FindIndex8) -> None:
    pos, found = first_matches(ctx.read32(ins.data), ctx.read32(ins.vals))
    ctx.write_raw(ins.dst, np.where(found, pos, NOT_FOUND).astype(np.uint32))  # NOT_FOUND: -1 as int32


@semantics(MatchReplace8)
def match_replace8(ctx: Context, ins: MatchReplace8) -> None:
    x = ctx.read32(ins.data)
    pos, found = first_matches(x, ctx.read32(ins.vals))
    y = x.copy()
    rows = np.broadcast_to(np.arange(x.shape[0])[:, None], pos.shape)
    y[rows[found], pos[found]] = np.float32(ins.imm)
    ctx.write(ins.dst, y)


@semantics(BnStats)
def bn_stats(ctx: Context, ins: BnStats) -> None:
    x = ctx.read32(ins.src)
    mean = x.mean(axis=1, dtype=np.float32)
    m2 = np.square(x - mean[:, None]).sum(axis=1, dtype=np.float32)
    count = np.full(mean.shape, x.shape[1], dtype=np.float32)
    ctx.write(ins.dst, np.stack([count, mean, m2], axis=1))


@semantics(BnAggr)
def bn_aggr(ctx: Context, ins: BnAggr) -> None:
    rec = ctx.read32(ins.src).reshape(ins.src.partitions, -1, 3)
    count, mean_g, m2_g = rec[..., 0], rec[..., 1], rec[..., 2]
    n = count.sum(axis=1, dtype=np.float32)
    mean = (count * mean_g).sum(axis=1, dtype=np.float32) / n
    m2 = (m2_g + count * np.square(mean_g - mean[:, None])).sum(axis=1, dtype=np.float32)
    ctx.write(ins.dst, np.stack([mean, m2 / n], axis=1))


@semantics(Transpose32)
def transpose32(ctx: Context, ins: Transpose32) -> None:
    p, f = ins.src.partitions, ins.src.free_size
    raw = ctx.read_raw(ins.src).reshape(p // 32, 32, f // 32, 32)
    ctx.write_raw(ins.dst, raw.transpose(0, 3, 2, 1).reshape(p, f))  # swap within each block only


@semantics(PartitionReduce)
def partition_reduce(ctx: Context, ins: PartitionReduce) -> None:
    op = REDUCE_OPS[ins.op]
    x = operand(ctx, ins.src, op.kind == "bitwise")
    ctx.write(ins.dst, op.ufunc.reduce(x, axis=0))


@semantics(PartitionBroadcast)
def partition_broadcast(ctx: Context, ins: PartitionBroadcast) -> None:
    row = ctx.read32(ins.src)
    ctx.write(ins.dst, np.broadcast_to(row, (ins.dst.partitions, row.shape[1])))
