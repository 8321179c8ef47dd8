"""Helpers shared by the evaluation rules: the compute type of floats and rounding on write."""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Value
from trnsim.ir.types import DTYPES

NARROW_FLOATS = frozenset(d.np_dtype for d in DTYPES.values() if d.is_float and d.bits < 32)
NARROW_INTS = {np.dtype(d.np_dtype): np.dtype(np.int8 if d.kind == "signed" else np.uint8)
               for d in DTYPES.values() if d.is_int and d.bits < 8}


def compute(x: np.ndarray) -> np.ndarray:
    """Floats narrower than 32 bits are computed in fp32, as the Vector and Scalar engines do; 4-bit
    integers in 8 bits."""
    if x.dtype in NARROW_FLOATS:
        return _widen(x, np.dtype(np.float32))
    if x.dtype in NARROW_INTS:
        return _widen(x, NARROW_INTS[x.dtype])
    return x


def _widen(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    # NOTE: a broadcast (stride-0) view converts its distinct elements only, and stays a view
    if x.ndim and 0 in x.strides and x.size > 1:
        core = x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.strides)]
        return np.broadcast_to(core.astype(dt), x.shape)
    return x.astype(dt)


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in NARROW_FLOATS


def precise(x: np.ndarray) -> np.ndarray:
    """Transcendentals are evaluated in f64 and rounded once to the result type: correctly rounded in
    practice, so the result is the nearest representable value to the true function (within 1 ulp)."""
    return x.astype(np.float64)


def to(value: Value, a: np.ndarray) -> np.ndarray:
    """Round ``a`` to the element type of ``value`` (RNE for floats); the one rounding step of an op."""
    dt = value.type.np_dtype
    a = np.asarray(a)
    if a.dtype == dt:
        return a
    if a.dtype == np.float64 and DTYPES[value.type.dtype].is_float and dt.itemsize < 4:
        # NOTE: f64 → bf16/f16/f8 via ml_dtypes rounds twice (through f32); reference/frontend_numerics.md §0.5.
        # Round to f32 with an odd sticky bit first, which makes the second rounding exact.
        return round_odd_f32(a).astype(dt)
    return a.astype(dt)


def round_odd_f32(a: np.ndarray) -> np.ndarray:
    """f64 → f32 rounding to odd: truncate, then set the last bit if anything was lost."""
    f = a.astype(np.float32)
    back = f.astype(np.float64)
    inexact = (back != a) & np.isfinite(a)
    if not inexact.any():
        return f
    bits = f.view(np.uint32).copy()
    # truncate toward zero where RNE went away from zero
    away = inexact & (np.abs(back) > np.abs(a))
    bits[away] -= 1
    bits[inexact] |= 1
    return bits.view(np.float32)


def ieee_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 maximum: NaN if either is NaN, and +0 > -0 (np.maximum returns either zero)."""
    out = np.maximum(a, b)
    if is_float(out.dtype):
        zeros = (a == 0) & (b == 0)
        if np.any(zeros):
            out = np.where(zeros, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0).astype(out.dtype), out)
    return out


def ieee_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 minimum: NaN if either is NaN, and -0 < +0."""
    out = np.minimum(a, b)
    if is_float(out.dtype):
        zeros = (a == 0) & (b == 0)
        if np.any(zeros):
            out = np.where(zeros, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0).astype(out.dtype), out)
    return out


def type_bits(dt: np.dtype) -> int:
    """The width of an element type in bits (4 for int4, though numpy stores it in a byte)."""
    from trnsim.ir.types import dtype_of_numpy

    return dtype_of_numpy(dt).bits if dt in NARROW_INTS else dt.itemsize * 8


def bit_pattern(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(the two's-complement bits of each element as uint64, the type's width): int4 -1 is 0b1111, not 0xFF."""
    bits = type_bits(x.dtype)
    c = compute(x)
    u = c.view(np.dtype(f"u{c.dtype.itemsize}")).astype(np.uint64)
    if bits < 64:
        u = u & np.uint64((1 << bits) - 1)
    return u, bits


def int_range(dt: np.dtype) -> tuple[int, int]:
    """(min, max) of an integer type, sub-byte types included."""
    bits = type_bits(dt)
    signed = dt.kind == "i" or (dt in NARROW_INTS and NARROW_INTS[dt].kind == "i")
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
