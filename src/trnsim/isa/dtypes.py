"""Element types as the NeuronCore stores them in SBUF, PSUM and HBM.

Storage rule: 4 bytes for fp32/tf32/int32/uint32, 2 bytes for bf16/fp16/int16/uint16, 1 byte for every
format of at most 8 bits. Sub-byte formats (fp6, fp4, int4) take one byte per element, holding the code in
the low bits as ml_dtypes stores them; an MX tensor is its element codes (one byte each, dtype ``mxfp8_e4m3``
…) plus a separate ``e8m0``/``uint8`` scale tensor. All multi-byte values are little-endian.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trnsim.errors import CompileError

DTypeKind = Literal["float", "mx", "int"]


class VerifyError(CompileError):
    """A program is illegal on the target: names the instruction (engine, index, text) and the fix."""


@dataclass(frozen=True)
class DType:
    """An ISA element type: its storage size and how its bytes are read.

    ``element`` names the ``trnsim.numerics`` element format that decodes a float or MX code (for MX the
    *unscaled* element); integers are two's complement (``signed``) or unsigned."""

    name: str
    itemsize: int
    kind: DTypeKind
    element: str | None = None
    bits: int = 8
    signed: bool = True


def _float(name: str, itemsize: int, bits: int) -> DType:
    return DType(name, itemsize, "float", name, bits)


def _mx(name: str, element: str, bits: int) -> DType:
    return DType(name, 1, "mx", element, bits)


def _int(name: str, itemsize: int, bits: int, signed: bool = True) -> DType:
    return DType(name, itemsize, "int", None, bits, signed)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _float("fp32", 4, 32), _float("tf32", 4, 19), _float("bf16", 2, 16), _float("fp16", 2, 16),
        _float("fp8_e4m3", 1, 8), _float("fp8_e5m2", 1, 8), _float("fp6_e2m3", 1, 6), _float("fp6_e3m2", 1, 6),
        _float("fp4_e2m1", 1, 4), _float("e8m0", 1, 8),
        _mx("mxfp8_e4m3", "fp8_e4m3", 8), _mx("mxfp8_e5m2", "fp8_e5m2", 8), _mx("mxfp6_e2m3", "fp6_e2m3", 6),
        _mx("mxfp6_e3m2", "fp6_e3m2", 6), _mx("mxfp4_e2m1", "fp4_e2m1", 4),
        _int("int4", 1, 4), _int("int8", 1, 8), _int("uint8", 1, 8, False), _int("int16", 2, 16),
        _int("uint16", 2, 16, False), _int("int32", 4, 32), _int("uint32", 4, 32, False),
    )
}


def get_dtype(name: str) -> DType:
    """Look an ISA dtype up; raise ``VerifyError`` listing the known names."""
    d = DTYPES.get(name)
    if d is None:
        raise VerifyError(f"unknown element type {name!r}", hint=f"use one of: {', '.join(DTYPES)}")
    return d


def int_range(d: DType) -> tuple[int, int]:
    """Smallest and largest value of an integer dtype."""
    if d.signed:
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1
