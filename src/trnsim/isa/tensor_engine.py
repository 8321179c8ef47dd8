"""TensorE instructions: matrix multiply into PSUM (dense, MX-scaled, N:M sparse) and transpose."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction

SPARSE_PATTERNS: dict[str, tuple[int, int]] = {"2:4": (2, 4), "4:8": (4, 8)}
MX_BLOCK = 32  # MX scale group along K (OCP MX v1.0)


@dataclass(frozen=True)
class Matmul(Instruction):
    """``dst[M, N] (+)= stationary[K, M].T @ moving[K, N]`` on the systolic array.

        S = decode(stationary)                   # operand format → exact float32 values
        if stationary_scale: S[k, m] *= 2 ** (stationary_scale[k // 32, m] - 127)    # MX (E8M0)
        if sparsity "n:m":                      # stationary holds the kept values, K·n/m rows
            S = scatter S[g·n + j, col] to dense row g·m + stationary_index[g·n + j, col]
        V = decode(moving) (× 2 ** (moving_scale[k // 32, n] - 127) for MX)
        acc = 0 (fp32); for k in 0..K-1: acc = fp32(acc + fp32(S[k, :, None] * V[k, None, :]))
        dst = fp32(dst + acc) if accumulate else acc

    Limits: K ≤ spec.core.tensor.rows, M ≤ cols, N ≤ one PSUM bank of fp32 (512), dst fp32 in PSUM within
    one bank; operands in SBUF in a dtype of ``spec.core.tensor.rate``. MX operands (dtype ``mxfp*``)
    need their scale AP ``[ceil(K/32), M or N]`` of e8m0/uint8. Sparse stationary (``sparsity`` 2:4 or 4:8
    along K) needs ``stationary_index`` (uint8, same shape as ``stationary``: each kept value's position
    within its group of m).
    """

    mnemonic = "matmul"
    engines = ("tensor",)

    dst: AccessPattern
    stationary: AccessPattern
    moving: AccessPattern
    accumulate: bool = False
    stationary_scale: AccessPattern | None = None
    moving_scale: AccessPattern | None = None
    sparsity: str | None = None
    stationary_index: AccessPattern | None = None

    def reads(self) -> tuple[AccessPattern, ...]:
        ops = super().reads()
        return (*ops, self.dst) if self.accumulate else ops

    @property
    def contraction(self) -> int:
        """K of the dense product (the stationary is K·n/m rows when sparse)."""
        if self.sparsity is None:
            return self.stationary.partitions
        n, m = SPARSE_PATTERNS[self.sparsity]
        return self.stationary.partitions * m // n


@dataclass(frozen=True)
class TensorTranspose(Instruction):
    """``dst[N, P] = src[P, N].T`` on TensorE (a matmul with the identity in transpose mode): bit-exact,
    NaN and Inf included, so ``dst`` has ``src``'s dtype.

        for p, n: dst[n, p] = src[p, n]          # the bytes, unchanged
    """

    mnemonic = "tensor_transpose"
    engines = ("tensor",)

    dst: AccessPattern
    src: AccessPattern
