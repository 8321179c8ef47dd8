"""Element formats: ``quantize`` (round to representable values), ``encode`` and ``decode`` (bit codes).

Correctness comes from ``rounding.round_to_format``, the general algorithm; speed from two derived forms:

* **Class tables** for formats of at most 8 bits. A float32 input rounds to such a format from its top 16
  bits and one *sticky* bit (are any of the lower bits set?), because every ≤8-bit format keeps at most 3
  mantissa bits, so its rounding position is at bit 16 or above. The 2^17 classes are rounded once by the
  general algorithm into a value table and a code table; a quantize is then a few integer ops and a
  gather per element, processed in cache-sized chunks.
* **bf16 / fp16** use the bit trick (bf16) and numpy's IEEE half cast (fp16) for round-to-nearest-even.

Tests check every fast form against the general algorithm, and the general algorithm against ml_dtypes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim.config import settings
from trnsim.errors import NumericsError
from trnsim.numerics._parallel import for_chunks
from trnsim.numerics.formats import BF16, FP16, FP32, FloatFormat, Format, float_format, get_format
from trnsim.numerics.rounding import check_rounding, round_to_format

CHUNK = 1 << 18  # elements per chunk (1 MiB of float32): measured best on 2 cores with 1 MiB L2 each
_STICKY_BITS = 15  # a class is (bits >> 16, any of bits 15..0 set)


def as_float_array(x: ArrayLike) -> NDArray[np.floating]:
    """float32 or float64 view of ``x``: narrower floats widen exactly; integers go to float64 (exact to
    2^53) so that they are rounded once."""
    arr = np.asarray(x)
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    if arr.dtype.kind == "f" or arr.dtype.itemsize <= 2:  # float16, bfloat16, float8 ... (ml_dtypes kinds)
        try:
            return arr.astype(np.float32)
        except (TypeError, ValueError):
            pass
    raise NumericsError(f"cannot quantize an array of dtype {arr.dtype}", hint="pass real floating-point data")


def _class_index(u: NDArray[np.uint32], out: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """out = (u | sticky) >> 15 where bit 15 of the OR is set when any of bits 15..0 of u are."""
    np.bitwise_and(u, (1 << _STICKY_BITS) - 1, out=out)
    np.add(out, (1 << _STICKY_BITS) - 1, out=out)
    np.bitwise_or(out, u, out=out)
    np.right_shift(out, _STICKY_BITS, out=out)
    return out


@functools.cache
def class_tables(fmt: FloatFormat, rounding: str, saturate: bool) -> tuple[NDArray[np.float32], NDArray[Any]]:
    """Value and code of each of the 2^17 rounding classes of float32, for a ≤8-bit format."""
    reps = (np.arange(1 << (32 - _STICKY_BITS), dtype=np.uint32) << _STICKY_BITS).view(np.float32)
    values = round_to_format(reps, fmt, rounding=rounding, saturate=saturate)
    return values, encode_exact(values, fmt)


def take_classes(x32: NDArray[np.float32], table: NDArray[Any], out: NDArray[Any]) -> None:
    """``out[:] = table[class(x32)]`` for one contiguous chunk (``out`` may alias ``x32``)."""
    u = x32.reshape(-1).view(np.uint32)
    idx = _class_index(u, np.empty(u.size, dtype=np.uint32))
    np.take(table, idx, mode="wrap", out=out.reshape(-1))


def gather_classes(x32: NDArray[np.float32], table: NDArray[Any]) -> NDArray[Any]:
    """``table[class(x)]`` for every element, chunk by chunk on all cores."""
    flat = np.ascontiguousarray(x32).reshape(-1)
    res = np.empty(flat.shape, dtype=table.dtype)
    for_chunks(flat.size, CHUNK, lambda start, stop: take_classes(flat[start:stop], table, res[start:stop]))
    return res.reshape(x32.shape)


def _bf16_rne(x32: NDArray[np.float32]) -> NDArray[np.float32]:
    """bf16 round-to-nearest-even by the carry trick; overflow becomes inf like a cast."""
    u = x32.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) & np.uint32(0xFFFF0000)
    nan = np.isnan(x32)
    return np.where(nan, x32, rounded.view(np.float32))


def _fp16_rne(x32: NDArray[np.float32]) -> NDArray[np.float32]:
    with np.errstate(over="ignore"):
        return x32.astype(np.float16).astype(np.float32)


# Fast round-to-nearest-even for the 16-bit formats, without saturation (overflow → inf, as a cast does).
_FAST_RNE: dict[str, Callable[[NDArray[np.float32]], NDArray[np.float32]]] = {
    BF16.name: _bf16_rne,
    FP16.name: _fp16_rne,
}


def quantize_element(
    x: NDArray[np.floating],
    fmt: FloatFormat,
    *,
    rounding: str = "rne",
    saturate: bool = True,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float32]:
    """Round float32/float64 ``x`` to the element format ``fmt`` (values returned as float32)."""
    check_rounding(rounding)
    if fmt is FP32 and x.dtype == np.float32:
        return np.clip(x, -fmt.max, fmt.max) if saturate else x.copy()
    if x.dtype == np.float32 and rounding != "stochastic":
        if fmt.bits <= 8:
            return gather_classes(x, class_tables(fmt, rounding, saturate)[0])
        fast = _FAST_RNE.get(fmt.name)
        if fast is not None and rounding == "rne":
            out = fast(x)
            if saturate:
                np.clip(out, -fmt.max, fmt.max, out=out)
            return out
    return round_to_format(x, fmt, rounding=rounding, saturate=saturate, rng=rng)


def make_rng(seed: int | None) -> np.random.Generator:
    """Stochastic rounding is reproducible: no seed means the configured default (TRNSIM_SEED)."""
    return np.random.default_rng(settings.seed if seed is None else seed)


def quantize(
    x: ArrayLike,
    fmt: str | Format,
    rounding: str = "rne",
    saturate: bool = True,
    seed: int | None = None,
    axis: int = -1,
) -> NDArray[np.float32]:
    """Round ``x`` to values representable in ``fmt``; return them as float32 in the shape of ``x``.

    * element formats (fp32, tf32, bf16, fp16, fp8_*, fp6_*, fp4_e2m1, e8m0): ``rounding`` is ``"rne"``,
      ``"stochastic"`` (seeded, unbiased) or ``"rtz"``. ``saturate=True`` clamps overflow to ±max;
      ``saturate=False`` follows ml_dtypes/XLA casts (inf, or NaN for fp8_e4m3).
    * MX formats: OCP MX v1.0 block scaling along ``axis`` (default the last; see ``mx_quantize``), then
      dequantized.
    * int8 / int4: symmetric per-tensor scaling (see ``quantize_int`` for the other granularities).

    NaN inputs stay NaN in the float32 result even where the format has no NaN (fp6/fp4), rather than
    ml_dtypes' silent ±0: a NaN is never turned into a number.
    """
    from trnsim.numerics.intq import quantize_int
    from trnsim.numerics.mx import mx_fake_quantize

    f = get_format(fmt)
    arr = as_float_array(x)
    rng = make_rng(seed) if rounding == "stochastic" else None
    if f.kind == "mx":
        return mx_fake_quantize(arr, f, axis, rounding=rounding, seed=seed)
    if f.kind == "int":
        return quantize_int(arr, f, granularity="tensor").dequantize()
    assert isinstance(f, FloatFormat)
    return quantize_element(arr, f, rounding=rounding, saturate=saturate, rng=rng)


def encode_exact(values: NDArray[np.float32], fmt: FloatFormat) -> NDArray[Any]:
    """Bit codes of values already representable in ``fmt`` (NaN payloads kept where they fit)."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN; its payload is read from the bits
        v = values.astype(np.float64)
    mag = np.abs(v)
    m = fmt.man_bits
    mant, exp = np.frexp(mag)  # mag = mant * 2^exp, mant in [0.5, 1)
    e = exp.astype(np.int64) - 1
    normal = (e >= fmt.emin) & np.isfinite(mag) & (mag > 0)
    E = np.where(normal, e + fmt.bias, 0)
    frac = np.where(normal, (mant * 2.0 - 1.0) * (1 << m), np.where(np.isfinite(mag), mag / fmt.min_subnormal, 0))
    M = frac.astype(np.int64)
    top = (1 << fmt.exp_bits) - 1
    inf_code = top << m
    nan_payload = (values.view(np.uint32).astype(np.int64) >> (23 - m)) & ((1 << m) - 1)
    nan_code = {
        "ieee": (top << m) | np.where(nan_payload == 0, 1 << max(m - 1, 0), nan_payload),
        "fn": np.full(values.shape, (top << m) | ((1 << m) - 1), dtype=np.int64),
        "none": np.zeros(values.shape, dtype=np.int64),
    }[fmt.nan]
    code = (E << m) | M
    code = np.where(np.isinf(v), inf_code, code)
    code = np.where(np.isnan(v), nan_code, code)
    if fmt.signed:
        code |= np.signbit(v).astype(np.int64) << (fmt.exp_bits + m)
    return code.astype(fmt.code_dtype)


def encode(x: ArrayLike, fmt: str | Format, rounding: str = "rne", saturate: bool = True) -> NDArray[Any]:
    """Bit codes (uint8 for ≤8-bit formats, uint16 for 16-bit, uint32 for tf32/fp32) of ``x`` rounded to the
    element format ``fmt``. Sub-byte codes occupy the low bits of each byte (as ml_dtypes stores them)."""
    f = float_format(fmt)
    arr = as_float_array(x)
    if f.nan == "none" and np.isnan(arr).any():
        raise NumericsError(
            f"cannot encode NaN in {f.name}: the format has no NaN code",
            where=f"element {int(np.argmax(np.isnan(arr.reshape(-1))))} (flat index)",
            hint="replace NaNs first, or use quantize(), which keeps them as float32 NaN",
        )
    if arr.dtype == np.float32 and f.bits <= 8 and rounding != "stochastic":
        return gather_classes(arr, class_tables(f, rounding, saturate)[1])
    return encode_exact(quantize_element(arr, f, rounding=rounding, saturate=saturate), f)


@functools.cache
def decode_table(fmt: FloatFormat) -> NDArray[np.float32]:
    """float32 value of every code of a format of at most 16 bits, from the bit-layout formula."""
    codes = np.arange(1 << fmt.bits, dtype=np.int64)
    with np.errstate(over="ignore"):  # the inf/NaN codes' formula value overflows before it is replaced
        return _decode_formula(codes, fmt)


def _decode_formula(codes: NDArray[np.int64], fmt: FloatFormat) -> NDArray[np.float32]:
    m = fmt.man_bits
    M = codes & ((1 << m) - 1)
    E = (codes >> m) & ((1 << fmt.exp_bits) - 1)
    negative = ((codes >> (fmt.exp_bits + m)) & 1).astype(bool) if fmt.signed else np.zeros(codes.shape, bool)
    if fmt.subnormals:
        mag = np.where(E == 0, np.ldexp(M.astype(np.float64), fmt.emin - m),
                       np.ldexp(1.0 + M / (1 << m), (E - fmt.bias).astype(np.int32)))
    else:
        mag = np.ldexp(1.0 + M / (1 << m), (E - fmt.bias).astype(np.int32))
    top = (1 << fmt.exp_bits) - 1
    is_special = {"ieee": top == E, "fn": (top == E) & ((1 << m) - 1 == M), "none": np.zeros(codes.shape, bool)}
    special = is_special[fmt.nan]
    # NaN payload: the code's mantissa moves to the top of the float32 mantissa, as a widening cast does
    # (a NaN code without mantissa bits, E8M0's 0xFF, becomes the canonical quiet NaN)
    payload = np.where(M == 0, 1 << 22, M << (23 - m))
    nan_bits = (np.int64(0x7F800000) | payload).astype(np.uint32)
    val = mag.astype(np.float32)
    if fmt.nan == "ieee":
        val = np.where(special & (M == 0), np.float32(np.inf), val)
        special = special & (M != 0)
    val = np.where(special, nan_bits.view(np.float32), val)
    return np.where(negative, -val, val).astype(np.float32)


def decode(codes: ArrayLike, fmt: str | Format) -> NDArray[np.float32]:
    """float32 values of bit codes of the element format ``fmt``."""
    f = float_format(fmt)
    c = np.asarray(codes)
    if c.dtype.kind not in "ui":
        raise NumericsError(f"codes must be integers, got dtype {c.dtype}", hint="pass the output of encode()")
    if c.size and (c.min() < 0 or c.max() >= (1 << f.bits)):
        raise NumericsError(
            f"code out of range for {f.name} ({f.bits} bits): min {c.min()}, max {c.max()}",
            hint=f"codes of {f.name} lie in 0..{(1 << f.bits) - 1}",
        )
    if f.bits <= 16:
        return decode_table(f)[c.astype(np.intp)]
    return _decode_formula(c.astype(np.int64), f)
