"""quantize() against ml_dtypes casts, ties, saturation, stochastic rounding, and the general algorithm."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim.numerics as tn
from trnsim.errors import NumericsError
from trnsim.numerics.formats import FORMATS, FloatFormat
from trnsim.numerics.rounding import round_to_format

REF = [f for f in FORMATS.values() if isinstance(f, FloatFormat) and f.ml_dtype is not None and f.signed]
LOW_HALVES = np.array([0, 1, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF], dtype=np.uint32)


def _structured_patterns() -> np.ndarray:
    """Every sign/exponent/top-7-mantissa combination, with low halves that exercise ties and sticky bits.

    For the ≤8-bit formats this is exhaustive: their rounding depends only on the top 16 bits and on
    whether any lower bit is set (quantize.py's rounding classes), and every one of the 2^17 classes
    appears here several times. The random patterns add coverage for bf16/fp16, which round lower."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    bits = (hi[:, None] | LOW_HALVES[None, :]).reshape(-1)
    rng = np.random.default_rng(7)
    bits = np.concatenate([bits, rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    return x[np.isfinite(x)]


PATTERNS = _structured_patterns()


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("fmt", REF, ids=lambda f: f.name)
def test_quantize_matches_ml_dtypes_for_finite_inputs_in_range(fmt: FloatFormat) -> None:
    x = PATTERNS[np.abs(PATTERNS) <= fmt.max]
    ours = tn.quantize(x, fmt)
    ref = x.astype(fmt.ml_dtype).astype(np.float32)
    bad = ~_same(ours, ref)
    assert not bad.any(), f"{bad.sum()} mismatches, e.g. {x[bad][:3]} -> {ours[bad][:3]} vs {ref[bad][:3]}"


@pytest.mark.parametrize("fmt", REF, ids=lambda f: f.name)
def test_overflow_non_saturating_follows_ml_dtypes_and_saturating_clamps(fmt: FloatFormat) -> None:
    x = np.concatenate([PATTERNS[np.abs(PATTERNS) > fmt.max], np.float32([np.inf, -np.inf])])
    with np.errstate(over="ignore"):
        ref = x.astype(fmt.ml_dtype).astype(np.float32)
    assert _same(tn.quantize(x, fmt, saturate=False), ref).all()
    sat = tn.quantize(x, fmt, saturate=True)
    assert np.array_equal(sat, np.where(x > 0, fmt.max, -fmt.max).astype(np.float32))


@pytest.mark.parametrize("fmt", [f for f in REF if f.bits <= 8], ids=lambda f: f.name)
def test_midpoints_round_half_to_even(fmt: FloatFormat) -> None:
    codes = np.arange(1 << (fmt.bits - 1))  # non-negative codes in increasing value order
    vals = tn.decode(codes, fmt)
    vals = vals[np.isfinite(vals)].astype(np.float64)
    mids = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)  # exact: one more bit than the format has
    got = tn.quantize(mids, fmt)
    expected = np.where(np.arange(len(mids)) % 2 == 0, vals[:-1], vals[1:]).astype(np.float32)  # even code
    assert np.array_equal(got, expected)
    assert np.array_equal(tn.quantize(-mids, fmt), -expected)


def test_documented_examples() -> None:
    """reference/frontend_numerics.md §B2's checked ties and overflows."""
    q = lambda v, f, **kw: tn.quantize(np.float32(v), f, **kw).tolist()  # noqa: E731
    assert q([1.0625, 1.1875], "fp8_e4m3") == [1.0, 1.25]
    assert q([1.125, 1.375], "fp8_e5m2") == [1.0, 1.5]
    assert q([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], "fp4_e2m1") == [0, 1, 1, 2, 2, 4, 4]
    assert q([2.0**-10], "fp8_e4m3") == [0.0]
    assert q([464.0], "fp8_e4m3", saturate=False) == [448.0]
    assert np.isnan(q([465.0], "fp8_e4m3", saturate=False)[0])
    assert q([61440.0], "fp8_e5m2", saturate=False) == [np.inf]
    assert q([1.5, 3.0, 6.0, 0.75, 5.0], "e8m0") == [2, 4, 8, 1, 4]


def _exact_bf16(v: float) -> float:
    """Round a float64 to bf16 exactly (Fraction arithmetic, ties to even): an oracle independent of any
    binary cast. (ml_dtypes 0.6's *scalar* bfloat16 constructor double-rounds through float32.)"""
    if v == 0:
        return v
    e = math.frexp(abs(v))[1] - 1  # floor(log2|v|); bf16's normal range covers every value used here
    quantum = Fraction(2) ** (e - 7)
    q = Fraction(abs(v)) / quantum
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return math.copysign(float(n * quantum), v)


def test_float64_input_is_rounded_once() -> None:
    """ml_dtypes' array cast double-rounds through float32 (§B2); quantize rounds float64 directly."""
    x = np.array([1.0625 + 2.0**-30, 1 + 2.0**-8 + 2.0**-40], dtype=np.float64)
    assert tn.quantize(x[:1], "fp8_e4m3")[0] == float(ml_dtypes.float8_e4m3fn(x[0])) == 1.125
    assert tn.quantize(x[1:], "bf16")[0] == _exact_bf16(float(x[1])) == 1.0078125
    rng = np.random.default_rng(3)
    y = rng.standard_normal(2000) * np.exp2(rng.integers(-20, 10, 2000))
    oracles = {"fp8_e4m3": lambda v: float(ml_dtypes.float8_e4m3fn(v)),  # scalar fp8 casts round once
               "fp8_e5m2": lambda v: float(ml_dtypes.float8_e5m2(v)),
               "bf16": _exact_bf16, "fp16": lambda v: float(np.float16(v))}
    for name, oracle in oracles.items():
        with np.errstate(over="ignore"):
            ref = np.array([oracle(v) for v in y], dtype=np.float32)
        assert _same(tn.quantize(y, name, saturate=False), ref).all(), name


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "bf16", "fp16",
                                  "tf32", "e8m0"])
@pytest.mark.parametrize("rounding", ["rne", "rtz"])
@pytest.mark.parametrize("saturate", [True, False])
def test_fast_paths_equal_general_algorithm(name: str, rounding: str, saturate: bool) -> None:
    fmt = tn.get_format(name)
    assert isinstance(fmt, FloatFormat)
    x = PATTERNS[::7]
    fast = tn.quantize(x, fmt, rounding=rounding, saturate=saturate)
    general = round_to_format(x, fmt, rounding=rounding, saturate=saturate)
    assert _same(fast, general).all()
    if rounding == "rtz" and fmt.subnormals:  # (E8M0 has no zero: tiny values go up to 2^-127)
        finite = np.isfinite(general) & (np.abs(x) <= fmt.max)
        assert (np.abs(general[finite]) <= np.abs(x[finite])).all()


def test_nan_propagates_and_zero_sign_is_kept() -> None:
    for name in ("fp8_e4m3", "fp6_e2m3", "fp4_e2m1", "bf16"):
        out = tn.quantize(np.float32([np.nan, -0.0, 0.0]), name)
        assert np.isnan(out[0]) and np.signbit(out[1]) and not np.signbit(out[2])


def test_stochastic_rounding_is_unbiased_and_reproducible() -> None:
    fmt = tn.get_format("fp8_e4m3")
    n = 200_000
    for value in (1.03, 1.1, 300.5, 0.0041, -2.7):
        x = np.full(n, value, dtype=np.float32)
        q = tn.quantize(x, fmt, rounding="stochastic", seed=11)
        lo, hi = np.min(q), np.max(q)
        assert set(np.unique(q)) <= {lo, hi}  # only the two neighbours
        p = (float(np.float32(value)) - lo) / (hi - lo) if hi > lo else 0.0
        sigma = (hi - lo) * np.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(q.mean(dtype=np.float64) - float(np.float32(value))) <= 5 * sigma + 1e-12
        assert np.array_equal(q, tn.quantize(x, fmt, rounding="stochastic", seed=11))
    a = tn.quantize(np.full(1000, 1.03, np.float32), fmt, rounding="stochastic", seed=1)
    b = tn.quantize(np.full(1000, 1.03, np.float32), fmt, rounding="stochastic", seed=2)
    assert not np.array_equal(a, b)


def test_bad_arguments_raise_numerics_error() -> None:
    with pytest.raises(NumericsError, match="rounding"):
        tn.quantize([1.0], "bf16", rounding="nearest")
    with pytest.raises(NumericsError, match="dtype"):
        tn.quantize(np.array([1 + 1j]), "bf16")
    with pytest.raises(NumericsError, match="unknown number format"):
        tn.quantize([1.0], "fp9")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=2, max_size=40),
       st.sampled_from(["fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "bf16", "fp16"]))
def test_quantize_properties(values: list[float], name: str) -> None:
    x = np.array(values, dtype=np.float32)
    q = tn.quantize(x, name)
    assert np.array_equal(tn.quantize(q, name), q)  # idempotent
    assert np.array_equal(tn.quantize(-x, name), -q)  # sign symmetric
    order = np.argsort(x, kind="stable")
    assert (np.diff(q[order]) >= 0).all()  # monotone
    fmt = tn.get_format(name)
    assert isinstance(fmt, FloatFormat)
    inside = np.abs(x) <= fmt.max
    spacing = np.maximum(np.exp2(np.floor(np.log2(np.maximum(np.abs(x), fmt.min_normal))) - fmt.man_bits),
                         fmt.min_subnormal)
    assert (np.abs(q - x)[inside] <= spacing[inside] / 2).all()  # round to nearest
