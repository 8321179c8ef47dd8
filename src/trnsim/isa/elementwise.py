"""Elementwise instructions of VectorE, ScalarE and GpSimd.

All of them compute in fp32 and round on write to the destination dtype (RNE, or stochastic when the
program asks). Operands are on-chip tiles ``[P, …]``; ``dst`` and the tensor inputs hold the same number of
partitions and of elements per partition (their free dimensions may be shaped differently). A *scalar*
operand is an immediate float or a per-partition ``[P, 1]`` access pattern, broadcast along the free axis.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction

Scalar = float | AccessPattern


@dataclass(frozen=True)
class TensorTensor(Instruction):
    """``dst = op(in0, in1)`` elementwise (``op`` from ``ops.ALU_OPS``).

        for idx: dst[idx] = round(ALU_OPS[op](in0[idx], in1[idx]), dst.dtype)
    """

    mnemonic = "tensor_tensor"
    engines = ("vector", "gpsimd")

    dst: AccessPattern
    in0: AccessPattern
    in1: AccessPattern
    op: str


@dataclass(frozen=True)
class TensorScalar(Instruction):
    """``dst = (src op0 scalar0) op1 scalar1``, scalars broadcast along the free dimension.

        t = op0(scalar0, src) if reverse0 else op0(src, scalar0)
        if op1: t = op1(scalar1, t) if reverse1 else op1(t, scalar1)
        dst = round(t, dst.dtype)
    """

    mnemonic = "tensor_scalar"
    engines = ("vector", "scalar", "gpsimd")

    dst: AccessPattern
    src: AccessPattern
    op0: str
    scalar0: Scalar
    op1: str | None = None
    scalar1: Scalar = 0.0
    reverse0: bool = False
    reverse1: bool = False


@dataclass(frozen=True)
class TensorCopy(Instruction):
    """``dst = round(src, dst.dtype)``: a copy, or a cast through fp32."""

    mnemonic = "tensor_copy"
    engines = ("vector", "scalar", "gpsimd")

    dst: AccessPattern
    src: AccessPattern


@dataclass(frozen=True)
class Select(Instruction):
    """Predicated choose: ``dst = on_true where predicate != 0 else on_false``."""

    mnemonic = "select"
    engines = ("vector", "gpsimd")

    dst: AccessPattern
    predicate: AccessPattern
    on_true: AccessPattern
    on_false: AccessPattern


@dataclass(frozen=True)
class Memset(Instruction):
    """``dst[...] = round(value, dst.dtype)``."""

    mnemonic = "memset"
    engines = ("vector", "scalar", "gpsimd")

    dst: AccessPattern
    value: float


@dataclass(frozen=True)
class Iota(Instruction):
    """An affine index pattern (GpSimd): positions, masks and gather indices are built from it.

        dst[p, i0, i1, …] = base + channel_multiplier * p + Σ steps[k] * i_k      (exact integers)
    ``steps`` has one entry per free dimension of ``dst``.
    """

    mnemonic = "iota"
    engines = ("gpsimd",)

    dst: AccessPattern
    base: int = 0
    channel_multiplier: int = 0
    steps: tuple[int, ...] = (1,)


@dataclass(frozen=True)
class Activation(Instruction):
    """ScalarE's pipeline: ``dst = func(src * scale + bias)``, optionally reduced along the free axis.

        y = ACTIVATIONS[func](fp32(fp32(src * scale) + bias))     # scale/bias immediate or [P, 1]
        dst = round(y, dst.dtype)
        if accumulate: accumulate[p, 0] = round(REDUCE_OPS[reduce_op] over y[p, ...], accumulate.dtype)
    """

    mnemonic = "activation"
    engines = ("scalar",)
    write_fields = ("dst", "accumulate")

    dst: AccessPattern
    src: AccessPattern
    func: str
    scale: Scalar = 1.0
    bias: Scalar = 0.0
    accumulate: AccessPattern | None = None
    reduce_op: str = "add"


@dataclass(frozen=True)
class AffineSelect(Instruction):
    """Keep ``src`` where an affine predicate of the position holds, else ``fill`` (GpSimd).

        v = offset + channel_multiplier * p + Σ steps[k] * i_k
        dst[p, i…] = src[p, i…] if COMPARES[cmp](v, 0) else fill
    A causal mask over scores ``[q, k]`` keeps ``k ≤ q``: offset 0, channel_multiplier 1, steps (-1,), ge.
    """

    mnemonic = "affine_select"
    engines = ("gpsimd",)

    dst: AccessPattern
    src: AccessPattern
    cmp: str
    fill: float
    offset: int = 0
    channel_multiplier: int = 0
    steps: tuple[int, ...] = (1,)
