"""Format parameters and bit codes: every code of every ≤8-bit format, checked against ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import trnsim.numerics as tn
from trnsim.errors import NumericsError
from trnsim.numerics.formats import FORMATS, FloatFormat

FLOATS = [f for f in FORMATS.values() if isinstance(f, FloatFormat)]
SMALL = [f for f in FLOATS if f.bits <= 8]
WITH_REF = [f for f in FLOATS if f.ml_dtype is not None]


@pytest.mark.parametrize("fmt", WITH_REF, ids=lambda f: f.name)
def test_derived_limits_match_ml_dtypes(fmt: FloatFormat) -> None:
    info = ml_dtypes.finfo(fmt.ml_dtype)
    assert fmt.max == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert fmt.bits == info.bits


def test_ocp_element_table() -> None:
    """reference/frontend_numerics.md §B1: max normal and emax_elem of each MX element format."""
    table = {"fp8_e4m3": (448, 8), "fp8_e5m2": (57344, 15), "fp6_e3m2": (28, 4), "fp6_e2m3": (7.5, 2),
             "fp4_e2m1": (6, 2)}
    for name, (fmax, emax) in table.items():
        fmt = tn.get_format(name)
        assert isinstance(fmt, FloatFormat)
        assert (fmt.max, fmt.emax) == (fmax, emax)
    mx4 = tn.get_format("mxfp4_e2m1")
    assert isinstance(mx4, tn.MXFormat) and mx4.block == 32 and mx4.bits_per_value == 4.25


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_every_code_decodes_and_reencodes(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    values = tn.decode(codes, fmt)
    assert np.array_equal(tn.encode(values, fmt, saturate=False), codes)


@pytest.mark.parametrize("fmt", [*SMALL, tn.get_format("bf16"), tn.get_format("fp16")], ids=lambda f: f.name)
def test_decode_matches_ml_dtypes_bit_for_bit(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.bits, dtype=fmt.code_dtype)
    ours = tn.decode(codes, fmt)
    ref_dtype = fmt.ml_dtype if fmt.name != "fp16" else np.float16
    ref = codes.view(ref_dtype).astype(np.float32) if fmt.bits in (8, 16) else \
        codes.astype(np.uint8).view(ref_dtype).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))
    # NaN keeps its sign (and payload: checked by the round trip above)
    assert np.array_equal(np.signbit(ours[nan]), (codes[nan] >> (fmt.bits - 1)).astype(bool)) or not fmt.signed


def test_e8m0_codes() -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = tn.decode(codes, "e8m0")
    assert values[127] == 1.0 and values[0] == 2.0**-127 and values[254] == 2.0**127 and np.isnan(values[255])
    assert np.array_equal(tn.encode(values[:255], "e8m0"), codes[:255])


def test_encode_rejects_nan_for_formats_without_nan() -> None:
    with pytest.raises(NumericsError, match="no NaN code"):
        tn.encode(np.float32([1.0, np.nan]), "fp4_e2m1")


def test_decode_rejects_out_of_range_codes() -> None:
    with pytest.raises(NumericsError, match="out of range"):
        tn.decode(np.array([64]), "fp6_e2m3")
    with pytest.raises(NumericsError, match="integers"):
        tn.decode(np.array([1.5]), "fp8_e4m3")


def test_unknown_format_lists_known_names() -> None:
    with pytest.raises(NumericsError, match="fp8_e4m3"):
        tn.get_format("fp7")
    assert tn.get_format("bfloat16").name == "bf16"
    with pytest.raises(NumericsError, match="element floating-point"):
        tn.encode([1.0], "mxfp8_e4m3")
