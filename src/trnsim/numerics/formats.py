"""The number-format table: one row per format, every parameter derived from its bit layout.

Sources: OCP 8-bit floating point (OFP8) and OCP Microscaling (MX) v1.0 as summarised in
``reference/frontend_numerics.md`` §B1 (element formats, E8M0 scale, block size 32); IEEE 754 for
fp32/fp16; bfloat16 and tf32 as their vendors define them; ml_dtypes 0.6 (§B2) for the names of the
reference dtypes we test against.

NaN conventions (``nan`` column):

* ``ieee``  — exponent all ones: mantissa 0 is ±inf, anything else NaN (fp32, bf16, fp16, tf32, e5m2).
* ``fn``    — "finite": no inf; only the all-ones code (S.1111.111) is NaN, so the largest mantissa at the
  top exponent is not a number (fp8 e4m3fn, max 448), and E8M0's 0xFF.
* ``none``  — every code is a finite number (fp6 e2m3/e3m2, fp4 e2m1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

from trnsim.errors import NumericsError

NanKind = Literal["ieee", "fn", "none"]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: sign (optional), ``exp_bits`` exponent bits, ``man_bits`` stored
    mantissa bits, exponent ``bias``. All limits are derived, never typed in."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    nan: NanKind
    ml_dtype: type | None = None  # the ml_dtypes/numpy scalar type with the same semantics, if any
    signed: bool = True
    subnormals: bool = True  # E8M0 has none: exponent field 0 is 2^-127, not zero

    kind = "float"

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias if self.subnormals else -self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (the MX spec's ``emax_elem``)."""
        top = (1 << self.exp_bits) - 1
        # ieee: the all-ones exponent is inf/NaN; fn without mantissa bits (E8M0): the all-ones code is NaN
        reserved = self.nan == "ieee" or (self.nan == "fn" and self.man_bits == 0)
        return (top - 1 if reserved else top) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        # fn with mantissa bits: the all-ones mantissa at the top exponent is the NaN code
        frac_codes = (1 << self.man_bits) - (2 if self.nan == "fn" and self.man_bits > 0 else 1)
        return math.ldexp(1.0 + frac_codes / (1 << self.man_bits), self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.man_bits) if self.subnormals else self.min_normal

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.nan != "none"

    @property
    def code_dtype(self) -> type[np.unsignedinteger]:
        return np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32


@dataclass(frozen=True)
class MXFormat:
    """An OCP MX block format: ``block`` elements of ``element`` share one E8M0 power-of-two scale along
    the contraction (last) axis (``reference/frontend_numerics.md`` §B1: k = 32)."""

    name: str
    element: FloatFormat
    block: int = 32

    kind = "mx"

    @property
    def scale(self) -> FloatFormat:
        return E8M0

    @property
    def bits(self) -> int:
        return self.element.bits

    @property
    def bits_per_value(self) -> float:
        """Storage cost including the shared scale: e.g. 4 + 8/32 = 4.25 for MXFP4."""
        return self.element.bits + self.scale.bits / self.block


@dataclass(frozen=True)
class IntFormat:
    """A two's-complement (or unsigned) integer format."""

    name: str
    bits: int
    signed: bool = True

    kind = "int"

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


Format = FloatFormat | MXFormat | IntFormat

FP32 = FloatFormat("fp32", 8, 23, 127, "ieee", np.float32)
TF32 = FloatFormat("tf32", 8, 10, 127, "ieee")
BF16 = FloatFormat("bf16", 8, 7, 127, "ieee", ml_dtypes.bfloat16)
FP16 = FloatFormat("fp16", 5, 10, 15, "ieee", np.float16)
FP8_E4M3 = FloatFormat("fp8_e4m3", 4, 3, 7, "fn", ml_dtypes.float8_e4m3fn)
FP8_E5M2 = FloatFormat("fp8_e5m2", 5, 2, 15, "ieee", ml_dtypes.float8_e5m2)
FP6_E2M3 = FloatFormat("fp6_e2m3", 2, 3, 1, "none", ml_dtypes.float6_e2m3fn)
FP6_E3M2 = FloatFormat("fp6_e3m2", 3, 2, 3, "none", ml_dtypes.float6_e3m2fn)
FP4_E2M1 = FloatFormat("fp4_e2m1", 2, 1, 1, "none", ml_dtypes.float4_e2m1fn)
E8M0 = FloatFormat("e8m0", 8, 0, 127, "fn", ml_dtypes.float8_e8m0fnu, signed=False, subnormals=False)

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        FP32, TF32, BF16, FP16, FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1, E8M0,
        MXFormat("mxfp8_e4m3", FP8_E4M3),
        MXFormat("mxfp8_e5m2", FP8_E5M2),
        MXFormat("mxfp6_e2m3", FP6_E2M3),
        MXFormat("mxfp6_e3m2", FP6_E3M2),
        MXFormat("mxfp4_e2m1", FP4_E2M1),
        IntFormat("int8", 8),
        IntFormat("int4", 4),
        IntFormat("uint8", 8, signed=False),
        IntFormat("int32", 32),
    )
}

# Aliases users and other tools write; resolved by `get_format`, never stored twice.
ALIASES: dict[str, str] = {
    "float32": "fp32", "f32": "fp32", "bfloat16": "bf16", "float16": "fp16", "f16": "fp16",
    "fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "f8e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "f8e5m2": "fp8_e5m2", "fp4": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1",
    "float6_e2m3fn": "fp6_e2m3", "float6_e3m2fn": "fp6_e3m2", "float8_e8m0fnu": "e8m0",
    "mxfp8": "mxfp8_e4m3", "mxfp6": "mxfp6_e2m3", "mxfp4": "mxfp4_e2m1",
}


def get_format(name: str | Format) -> Format:
    """Look a format up by name (or alias); raise ``NumericsError`` listing the known names."""
    if isinstance(name, FloatFormat | MXFormat | IntFormat):
        return name
    key = ALIASES.get(name, name)
    fmt = FORMATS.get(key)
    if fmt is None:
        raise NumericsError(
            f"unknown number format {name!r}",
            hint=f"use one of: {', '.join(FORMATS)}",
        )
    return fmt


def float_format(name: str | Format) -> FloatFormat:
    """Like ``get_format`` but requires an element (non-block, non-integer) floating-point format."""
    fmt = get_format(name)
    if not isinstance(fmt, FloatFormat):
        raise NumericsError(
            f"{fmt.name!r} is a {fmt.kind} format, but an element floating-point format is needed here",
            hint="use mx_quantize for MX formats and quantize_int for integer formats",
        )
    return fmt
