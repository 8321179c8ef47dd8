"""Rounding a binary float to a narrower float format: the plain, general algorithm.

This is the specification of rounding in trnsim. It works on the bit pattern of the *source* value
(float32 or float64, so a float64 input is rounded once, not twice through float32 — the double-rounding
pitfall of ``reference/frontend_numerics.md`` §B2), for any ``FloatFormat`` of the table, in any mode of
``ROUNDING``. The fast paths in ``quantize.py`` are tables built by this function and are tested against it.

For a finite source value ``x = sig · 2^(ue − P)`` (``sig`` the significand with its implicit bit, ``P`` the
source's stored mantissa bits, ``ue`` the unbiased exponent, at least the source's ``emin``), rounding to a
format with ``m`` mantissa bits and smallest normal exponent ``emin`` drops

    shift = (P − m) + max(0, emin − ue)

low bits of ``sig`` (the ``max`` term: below ``2^emin`` the format's spacing stays ``2^(emin − m)``). The
kept quotient ``q`` is rounded by the mode; the result is ``q · 2^(ue − P + shift)``, which may carry into
the next binade. Results beyond the format's ``max`` saturate or overflow as the caller asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from trnsim.errors import NumericsError
from trnsim.numerics.formats import FloatFormat


@dataclass(frozen=True)
class _Source:
    """Bit layout of a source float type."""

    uint: type[np.unsignedinteger]
    man_bits: int
    exp_bits: int

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1


SOURCES: dict[np.dtype, _Source] = {
    np.dtype(np.float32): _Source(np.uint32, 23, 8),
    np.dtype(np.float64): _Source(np.uint64, 52, 11),
}

Bits = NDArray[np.uint64]
Rounder = Callable[[Bits, Bits, "np.random.Generator | None"], Bits]


def _rne(sig: Bits, shift: Bits, rng: np.random.Generator | None) -> Bits:
    """Round half to even: add half the dropped range, minus one unless the kept lsb is odd."""
    del rng
    half = (np.uint64(1) << shift) >> np.uint64(1)
    odd = (sig >> shift) & np.uint64(1)
    # half - 1 + odd rounds ties up only when the kept lsb is odd; with nothing dropped (shift 0) add nothing
    return (sig + np.where(shift > 0, half - np.uint64(1) + odd, np.uint64(0))) >> shift


def _rtz(sig: Bits, shift: Bits, rng: np.random.Generator | None) -> Bits:
    """Round toward zero (truncate the magnitude)."""
    del rng
    return sig >> shift


def _stochastic(sig: Bits, shift: Bits, rng: np.random.Generator | None) -> Bits:
    """Round up with probability (dropped bits) / 2^shift: add uniform random bits below the lsb."""
    assert rng is not None
    noise = rng.integers(0, np.iinfo(np.uint64).max, size=sig.shape, dtype=np.uint64, endpoint=True)
    noise &= (np.uint64(1) << shift) - np.uint64(1)
    return (sig + noise) >> shift


# Rounding modes by name (STYLE rule 2: a table, not a ladder).
ROUNDING: dict[str, Rounder] = {"rne": _rne, "stochastic": _stochastic, "rtz": _rtz}


def check_rounding(rounding: str) -> Rounder:
    rounder = ROUNDING.get(rounding)
    if rounder is None:
        raise NumericsError(f"unknown rounding mode {rounding!r}", hint=f"use one of: {', '.join(ROUNDING)}")
    return rounder


def round_to_format(
    x: NDArray[np.floating],
    fmt: FloatFormat,
    *,
    rounding: str = "rne",
    saturate: bool = True,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float32]:
    """Round float32/float64 ``x`` to ``fmt``; return the values as float32 (every format value is one).

    Overflow (a rounded magnitude above ``fmt.max``, or an infinity): with ``saturate`` the result is
    ``±fmt.max``; without, it follows ml_dtypes/XLA: ±inf where the format has infinities, NaN for ``fn``
    formats, ``±max`` for formats with neither (fp6/fp4 casts saturate in ml_dtypes too). NaN stays NaN.
    E8M0 has no sign and no zero: values ≤ 0 become NaN, positive values below 2^-127 become 2^-127.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return _round(x, fmt, rounding, saturate, rng)


def _round(
    x: NDArray[np.floating], fmt: FloatFormat, rounding: str, saturate: bool, rng: np.random.Generator | None
) -> NDArray[np.float32]:
    src = SOURCES.get(np.dtype(x.dtype))
    if src is None:
        raise NumericsError(f"cannot round from dtype {x.dtype}", hint="pass float32 or float64 values")
    rounder = check_rounding(rounding)
    if rounding == "stochastic" and rng is None:
        raise NumericsError("stochastic rounding needs a seeded generator", hint="pass seed=...")
    if fmt.emin < 1 - src.bias:  # E8M0 reaches below float32's normals: round from the exact float64
        x = x.astype(np.float64)
        src = SOURCES[np.dtype(np.float64)]
    u = np.ascontiguousarray(x).view(src.uint).astype(np.uint64)
    P = src.man_bits
    sign_bit = np.uint64(1) << np.uint64(P + src.exp_bits)
    negative = (u & sign_bit) != 0
    mag = u & (sign_bit - np.uint64(1))
    e_field = (mag >> np.uint64(P)).astype(np.int64)
    exp_all_ones = (1 << src.exp_bits) - 1
    is_nan = (e_field == exp_all_ones) & ((mag & np.uint64((1 << P) - 1)) != 0)
    is_inf = (e_field == exp_all_ones) & ~is_nan

    ue = np.maximum(e_field, 1) - src.bias  # source subnormals share the smallest normal exponent
    sig = (mag & np.uint64((1 << P) - 1)) | ((e_field > 0).astype(np.uint64) << np.uint64(P))
    # NOTE: capping the shift at P + 2 is exact: sig < 2^(P+1) is then below half the dropped range, so
    # every mode gives 0 (rne, rtz) or the same probability of rounding up as the true shift (stochastic,
    # up to 2^-(P+2)).
    shift = (P - fmt.man_bits) + np.clip(fmt.emin - ue, 0, P + 2 - (P - fmt.man_bits))
    q = rounder(sig, shift.astype(np.uint64), rng)
    out = np.ldexp(q.astype(np.float64), (ue - P + shift).astype(np.int32))

    fmax = fmt.max
    over = (out > fmax) | is_inf
    if saturate:
        out = np.where(over, fmax, out)
    else:
        overflow_value = np.inf if fmt.has_inf else np.nan if fmt.has_nan else fmax
        out = np.where(over, overflow_value, out)
    if not fmt.subnormals:  # E8M0: no zero, nothing below 2^emin
        out = np.where(out < fmt.min_normal, fmt.min_normal, out)
    out = np.where(negative, -out, out)
    if not fmt.signed:
        out = np.where(negative | (x == 0), np.nan, out)
    res = out.astype(np.float32)
    if is_nan.any():  # NaN keeps its sign and the top of its payload, bit for bit, as a cast does
        payload = (mag & np.uint64((1 << P) - 1)) >> np.uint64(P - 23)
        payload = np.where(payload == 0, np.uint64(1 << 22), payload)
        nan32 = (negative.astype(np.uint64) << np.uint64(31)) | np.uint64(0x7F800000) | payload
        res.view(np.uint32)[is_nan] = nan32[is_nan].astype(np.uint32)
    return res
