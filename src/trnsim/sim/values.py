"""Element codes ↔ values: how the simulator reads and writes every ISA dtype.

Reads decode exactly to float64 (every ISA value is exact in float64; engines then compute in fp32).
Writes round to the destination dtype (RNE or seeded stochastic). Overflow: a float format with an infinity
(fp32, bf16, fp16, fp8_e5m2) overflows to it, as IEEE casts do; one without (fp8_e4m3, fp6, fp4) saturates to
±max rather than producing NaN. Integers round half to even and saturate; NaN becomes 0. tf32 is stored as
4 fp32 bytes and read as the tf32 value (RNE to 10 mantissa bits).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

from trnsim.isa.dtypes import DType, get_dtype, int_range
from trnsim.numerics.formats import FloatFormat, float_format
from trnsim.numerics.quantize import decode, encode_exact, quantize_element
from trnsim.sim.memory import RAW

SIGNED: dict[int, type[np.signedinteger[Any]]] = {1: np.int8, 2: np.int16, 4: np.int32}


def _element(d: DType) -> FloatFormat:
    assert d.element is not None
    return float_format(d.element)


def decode_raw(raw: NDArray[Any], dtype: str) -> NDArray[np.float64]:
    """Exact values of codes of ``dtype`` (MX: the unscaled element)."""
    d = get_dtype(dtype)
    if d.kind == "int":
        if d.name == "int4":  # one code per byte, sign in bit 3
            low = raw.astype(np.int64) & 0xF
            return np.where(low >= 8, low - 16, low).astype(np.float64)
        return (raw.view(SIGNED[d.itemsize]) if d.signed else raw).astype(np.float64)
    if d.name in ("fp32", "tf32"):
        vals = raw.astype(np.uint32).view(np.float32)
        if d.name == "tf32":
            vals = quantize_element(vals, float_format("tf32"), saturate=False)
        with np.errstate(invalid="ignore"):
            return vals.astype(np.float64)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one, as the cast should
        return decode(raw & ((1 << d.bits) - 1), _element(d)).astype(np.float64)


def _bf16_to_fp32(raw: NDArray[Any]) -> NDArray[np.float32]:
    if raw.dtype == np.uint16:  # see ``_bf16_into``
        return raw.view(ml_dtypes.bfloat16).astype(np.float32)
    return np.left_shift(raw, 16, dtype=np.uint32, casting="unsafe").view(np.float32)  # one pass, widening


def _fp16_to_fp32(raw: NDArray[Any]) -> NDArray[np.float32]:
    return raw.astype(np.uint16, copy=False).view(np.float16).astype(np.float32)


def _fp32_to_fp32(raw: NDArray[Any]) -> NDArray[np.float32]:
    return raw.astype(np.uint32).view(np.float32)


# Widening by bit manipulation (exact, NaN payloads kept), for the dtypes engines read most.
_DECODE32: dict[str, Any] = {"bf16": _bf16_to_fp32, "fp16": _fp16_to_fp32, "fp32": _fp32_to_fp32}


def _bf16_into(raw: NDArray[Any], out: NDArray[np.float32]) -> None:
    # NOTE: ml_dtypes widens bf16 by the same 16-bit shift (NaN payloads kept; tested on every code), about 2x
    # faster than numpy's uint16 → uint32 cast and shift, which runs through a buffer
    if raw.dtype == np.uint16:
        np.copyto(out, raw.view(ml_dtypes.bfloat16), casting="unsafe")
    else:
        np.left_shift(raw, 16, out=out.view(np.uint32), dtype=np.uint32, casting="unsafe")


def _fp16_into(raw: NDArray[Any], out: NDArray[np.float32]) -> None:
    np.copyto(out, raw.view(np.float16))


def _fp32_into(raw: NDArray[Any], out: NDArray[np.float32]) -> None:
    np.copyto(out.view(np.uint32), raw)


_DECODE_INTO: dict[str, Any] = {"bf16": _bf16_into, "fp16": _fp16_into, "fp32": _fp32_into}


def can_decode_into(dtype: str) -> bool:
    return dtype in _DECODE_INTO


def decode_into(raw: NDArray[Any], dtype: str, out: NDArray[np.float32]) -> None:
    """``out[...] = decode_raw32(raw, dtype)`` for a dtype ``can_decode_into`` takes, in one pass (``raw`` may
    be a strided view of memory)."""
    _DECODE_INTO[dtype](raw, out)


def decode_raw32(raw: NDArray[Any], dtype: str) -> NDArray[np.float32]:
    """Values of codes as an engine reads them, in fp32 (exact for every float dtype; integers beyond
    2^24 round, as an fp32 datapath does)."""
    fast = _DECODE32.get(dtype)
    return fast(raw) if fast is not None else decode_raw(raw, dtype).astype(np.float32)


CHUNK = 1 << 16  # elements per pass of the bf16 encoder: its temporary stays in cache


def _bf16_codes(x: NDArray[Any], out: NDArray[np.uint16] | None = None) -> NDArray[np.uint16]:
    """RNE to bf16 by the carry trick, ``(u + 0x7FFF + (u >> 16 & 1)) >> 16`` (overflow → inf), as codes; a
    NaN keeps its sign and top payload bits, made quiet if they would read as inf. Runs in cache-sized
    chunks, and fixes NaN codes only when there are NaNs. Chunks of values already exact in bf16 (low 16
    bits zero, where the carry trick is ``u >> 16``) are shifted only, until the first inexact chunk; an
    input exact throughout needs no NaN fix. ``out``:
    a contiguous array of ``x.size`` codes to write (else a new one, shaped as ``x``)."""
    f = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    u = f.view(np.uint32)
    shaped = out is None
    out = np.empty(u.size, dtype=np.uint16) if out is None else out.reshape(-1)
    tmp = np.empty(min(u.size, CHUNK), dtype=np.uint32)
    exact = True
    for i in range(0, u.size, CHUNK):
        src = u[i : i + CHUNK]
        t = tmp[: src.size]
        if exact:
            np.bitwise_and(src, 0xFFFF, out=t)
            if not t.any():
                np.right_shift(src, 16, out=out[i : i + src.size], casting="unsafe")
                continue
            exact = False
        np.right_shift(src, 16, out=t)
        t &= 1
        t += 0x7FFF
        t += src  # NOTE: wraps only for negative NaNs, which are fixed below
        t >>= 16
        out[i : i + src.size] = t
    # NOTE: a NaN whose low 16 bits are zero keeps a payload bit in its top code: only the carry trick needs fixing
    if not exact and np.isnan(f.max()):  # max propagates NaN: one cheap pass
        nan = np.isnan(f)
        top = (u[nan] >> 16).astype(np.uint16)
        out[nan] = np.where((top & 0x7F) == 0, top | 0x40, top)
    return out.reshape(np.shape(x)) if shaped else out


def bf16_round_into(x: NDArray[np.float32], out: NDArray[np.uint16]) -> None:
    """``out[...] = encode_values(x, "bf16")`` for fp32 ``x`` and codes ``out`` of one shape, any strides, not
    overlapping: ml_dtypes' cast rounds to nearest even with overflow to inf, as ``_bf16_codes`` does (tested
    equal on random bit patterns), and NaNs, which it makes canonical, get ``_bf16_codes``' codes after."""
    with np.errstate(invalid="ignore"):
        np.copyto(out.view(ml_dtypes.bfloat16), x, casting="unsafe")
    if x.size and np.isnan(x.max()):  # max propagates NaN: one cheap pass
        nan = np.isnan(x)
        top = (x[nan].view(np.uint32) >> 16).astype(np.uint16)
        out[nan] = np.where((top & 0x7F) == 0, top | 0x40, top)


def _fp16_codes(x: NDArray[Any]) -> NDArray[np.uint16]:
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def _fp32_codes(x: NDArray[Any]) -> NDArray[np.uint32]:
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float32).view(np.uint32)


# Round-to-nearest-even encoders of the formats with an infinity (so overflow saturates to it, as the
# general path does); tested equal to the general path.
_ENCODE_RNE: dict[str, Any] = {"bf16": _bf16_codes, "fp16": _fp16_codes, "fp32": _fp32_codes}


def encode_into(x: NDArray[Any], dtype: str, out: NDArray[Any]) -> None:
    """``out[...] = encode_values(x, dtype)`` (RNE) for a contiguous ``out`` of ``x.size`` codes; bf16 from
    fp32 is encoded in place, without a temporary, and from ml_dtypes' bfloat16 (whose codes are bf16's,
    NaN payloads included) copied."""
    if dtype == "bf16" and x.dtype.name == "bfloat16" and x.dtype.itemsize == 2:
        out[...] = x.view(np.uint16).reshape(out.shape)
    elif dtype == "bf16" and x.dtype == np.float32 and out.dtype == np.uint16 and out.flags.c_contiguous:
        _bf16_codes(x, out)
    else:
        out[...] = encode_values(x, dtype).reshape(out.shape)


def encode_values(
    x: NDArray[Any], dtype: str, rounding: str = "rne", rng: np.random.Generator | None = None
) -> NDArray[Any]:
    """Codes of ``x`` rounded to ``dtype``."""
    d = get_dtype(dtype)
    if d.kind == "int":
        lo, hi = int_range(d)
        with np.errstate(invalid="ignore"):
            v = np.clip(np.nan_to_num(np.rint(x.astype(np.float64)), nan=0.0), lo, hi).astype(np.int64)
        return (v & ((1 << (8 * d.itemsize)) - 1)).astype(RAW[d.itemsize])
    fmt = _element(d)
    src = x if x.dtype == np.float32 or x.dtype == np.float64 else x.astype(np.float64)
    fast = _ENCODE_RNE.get(d.name) if rounding == "rne" and src.dtype == np.float32 else None
    if fast is not None:
        return fast(src)
    if fmt.name == "fp32" and rounding == "rne":
        with np.errstate(over="ignore"):
            return src.astype(np.float32).view(np.uint32)
    vals = quantize_element(src, fmt, rounding=rounding, saturate=not fmt.has_inf, rng=rng)
    if fmt.name in ("fp32", "tf32"):
        return vals.astype(np.float32).view(np.uint32)
    if not fmt.has_nan:
        vals = np.nan_to_num(vals, nan=0.0)  # NOTE: fp6/fp4 have no NaN code; the hardware writes 0
    return encode_exact(vals, fmt).astype(RAW[d.itemsize])
