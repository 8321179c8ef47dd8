"""Host-side operand preparation for ``matmul``: float arrays → the HBM tensors ``matmul_kernel`` takes.

The kernel API takes float inputs and quantizes them here, with ``trnsim.numerics``, by the kind of the
operand dtype (one table, ``PREPARE``):

    kind    a and b become                                        extra inputs              epilogue scale
    float   the values (the DMA into HBM rounds them, RNE)        —                         1
    mx      element values, ``mx_quantize`` along K (OCP, 32)     E8M0 scale codes          1
    int     integer codes, ``quantize_int`` symmetric per tensor  —                         scale_a · scale_b

Sparse weights (``sparsity="2:4"`` or ``"4:8"``): ``b`` is first pruned along K (``numerics.prune``: the n
largest magnitudes of every m), K is padded with zeros to a multiple of m, and after quantization ``b`` is
compressed to its kept values ``[K·n/m, N]`` plus their positions (uint8, the same shape), the layout
TensorE's sparse stationary operand reads.

``MatmulOperands.reference`` holds what the device multiplies, exactly: ``scale · a_values @ b_values``
in float64 is the product before fp32 accumulation rounding (tests use it).

    >>> import numpy as np
    >>> ops = prepare_matmul(np.ones((2, 40), np.float32), np.ones((40, 3), np.float32), "mxfp8_e4m3")
    >>> ops.a.dtype, ops.a_scale.shape, ops.b_scale.shape
    ('mxfp8_e4m3', (2, 2), (2, 3))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

import trnsim.numerics as tn
from trnsim.dsl import Typed, typed
from trnsim.errors import NumericsError
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.tensor_engine import SPARSE_PATTERNS
from trnsim.sim.values import decode_raw, encode_values

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class MatmulOperands:
    """Inputs of ``matmul_kernel`` (scales and index ``None`` where unused) and the exact reference."""

    a: Typed
    b: Typed
    a_scale: NDArray[np.uint8] | None
    b_scale: NDArray[np.uint8] | None
    b_index: NDArray[np.uint8] | None
    scale: float
    reference: tuple[F64, F64]  # (a values, b values) as the device sees them; product × scale = c


# (a, b, dtype) → (a values, b values, a input, b input, a scale codes [Kb, M], b scale codes [Kb, N], scale)
Prepared = tuple[F64, F64, NDArray[Any], NDArray[Any], NDArray[np.uint8] | None, NDArray[np.uint8] | None, float]


def _float(a: NDArray[np.float32], b: NDArray[np.float32], dtype: str) -> Prepared:
    def rounded(x: NDArray[np.float32]) -> F64:
        return decode_raw(encode_values(x, dtype), dtype)  # exactly what the DMA into HBM stores

    return rounded(a), rounded(b), a, b, None, None, 1.0


def _mx(a: NDArray[np.float32], b: NDArray[np.float32], dtype: str) -> Prepared:
    qa, qb = tn.mx_quantize(a, dtype, axis=1), tn.mx_quantize(b, dtype, axis=0)
    return (qa.dequantize().astype(np.float64), qb.dequantize().astype(np.float64), qa.elements, qb.elements,
            np.ascontiguousarray(qa.scale_codes().T), qb.scale_codes(), 1.0)


def _int(a: NDArray[np.float32], b: NDArray[np.float32], dtype: str) -> Prepared:
    qa, qb = tn.quantize_int(a, dtype), tn.quantize_int(b, dtype)
    va, vb = qa.values.astype(np.float64), qb.values.astype(np.float64)
    return va, vb, qa.values, qb.values, None, None, float(qa.scale.reshape(-1)[0] * qb.scale.reshape(-1)[0])


PREPARE: dict[str, Callable[[NDArray[np.float32], NDArray[np.float32], str], Prepared]] = {
    "float": _float, "mx": _mx, "int": _int,
}


def prepare_matmul(a: ArrayLike, b: ArrayLike, dtype: str = "bf16", sparsity: str | None = None) -> MatmulOperands:
    """Quantize ``a [M, K]`` and ``b [K, N]`` to ``dtype`` (and prune/compress ``b``) for ``matmul_kernel``."""
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a32.ndim != 2 or b32.ndim != 2 or a32.shape[1] != b32.shape[0]:
        raise NumericsError(f"matmul of {a32.shape} and {b32.shape}", hint="a is [M, K] and b is [K, N]")
    kind = get_dtype(dtype).kind
    if sparsity is not None:
        if sparsity not in SPARSE_PATTERNS:
            raise NumericsError(f"unknown sparsity {sparsity!r}", hint=f"use one of: {', '.join(SPARSE_PATTERNS)}")
        n, m = SPARSE_PATTERNS[sparsity]
        pad = -a32.shape[1] % m
        a32 = np.pad(a32, ((0, 0), (0, pad)))
        b32 = tn.prune(np.pad(b32, ((0, pad), (0, 0))), n, m, axis=0)
    va, vb, ia, ib, sa, sb, scale = PREPARE[kind](a32, b32, dtype)
    index = None
    if sparsity is not None:
        n, m = SPARSE_PATTERNS[sparsity]
        ib, meta = tn.compress(ib, n, m, axis=0)
        pos = meta.positions()  # [N, K/m, n]
        index = np.ascontiguousarray(pos.reshape(pos.shape[0], -1).T.astype(np.uint8))
    return MatmulOperands(typed(ia, dtype), typed(ib, dtype), sa, sb, index, scale, (va, vb))
