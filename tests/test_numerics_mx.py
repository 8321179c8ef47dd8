"""MX block quantization against two independent references, on more than 10^6 values per format."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim.numerics as tn
from trnsim.errors import NumericsError
from trnsim.numerics.formats import FloatFormat, MXFormat
from trnsim.numerics.mx import shared_exponents

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1"]
EMAX = {"mxfp8_e4m3": 8, "mxfp8_e5m2": 15, "mxfp6_e3m2": 4, "mxfp6_e2m3": 2, "mxfp4_e2m1": 2}  # §B1 table


def _element_grid(exp_bits: int, man_bits: int, bias: int, fmax: float) -> np.ndarray:
    """All non-negative values of an element format, enumerated from its definition (independently of
    trnsim's decode): subnormals m·2^(1-bias-M), normals (1 + m/2^M)·2^(e-bias), up to fmax."""
    vals = [m * 2.0 ** (1 - bias - man_bits) for m in range(1 << man_bits)]
    for e in range(1, 1 << exp_bits):
        vals += [(1 + m / (1 << man_bits)) * 2.0 ** (e - bias) for m in range(1 << man_bits)]
    return np.array([v for v in vals if v <= fmax])


def reference_mx(x: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Straightforward OCP MX: per 32-block, shared_exp = floor(log2 amax) − emax (math.frexp), clamp to
    [−127, 127]; each element v / 2^se rounded to the nearest grid value, ties to the even code, clamped."""
    fmt = tn.get_format(name)
    assert isinstance(fmt, MXFormat)
    el = fmt.element
    grid = _element_grid(el.exp_bits, el.man_bits, el.bias, el.max)
    blocks = x.astype(np.float64).reshape(-1, 32)
    se = np.empty(len(blocks), dtype=np.int64)
    for i, amax in enumerate(np.abs(blocks).max(axis=1)):
        se[i] = -127 if amax == 0 else min(max(math.frexp(amax)[1] - 1 - EMAX[name], -127), 127)
    scaled = np.abs(blocks) / np.exp2(se)[:, None]
    hi = np.clip(np.searchsorted(grid, scaled), 1, len(grid) - 1)
    lo = hi - 1
    d_lo, d_hi = scaled - grid[lo], grid[hi] - scaled
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    q = np.where(scaled >= grid[-1], grid[-1], np.where(pick_hi, grid[hi], grid[lo]))
    q = np.copysign(q, blocks)
    return (q * np.exp2(se)[:, None]).astype(np.float32).reshape(x.shape), se


def ml_dtypes_recipe(x32: np.ndarray, elem: type, emax: int) -> np.ndarray:
    """The recipe of reference/frontend_numerics.md §B3 (validated there against microxcaling, torchao)."""
    b = x32.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=-1, keepdims=True)
    e = ((amax.view(np.int32) >> 23) & 0xFF).astype(np.int32) - 127
    se = np.clip(e - emax, -127, 128)
    X = np.where(se == 128, np.nan, np.ldexp(np.float32(1), np.minimum(se, 127))).astype(np.float32)
    fmax = float(ml_dtypes.finfo(elem).max)
    P = np.clip(b / X, -fmax, fmax).astype(elem)
    return (P.astype(np.float32) * X).reshape(x32.shape)


def _test_data(seed: int) -> np.ndarray:
    """~1.2M float32 values in 32-blocks: gaussian blocks over 2^[-40, 40], tie-heavy grids, zeros,
    subnormal elements, huge and tiny (float32-subnormal) blocks."""
    rng = np.random.default_rng(seed)
    gauss = rng.standard_normal((24_000, 32)) * np.exp2(rng.integers(-40, 41, (24_000, 1)))
    k = rng.integers(1, 6, (8_000, 1))
    ties = (rng.integers(-64, 65, (8_000, 32)) + 0.5) * np.exp2(-k.astype(np.float64))
    ties[:, 0] = rng.choice([1.0, 1.5, 1.75, 1.875], 8_000) * np.exp2(rng.integers(-3, 8, 8_000))
    zeros = np.zeros((500, 32))
    mixed = rng.standard_normal((2_000, 32)) * np.exp2(rng.integers(-30, 1, (2_000, 32)))  # wide in-block range
    huge = rng.uniform(-1, 1, (500, 32)) * 3.0e38
    tiny = rng.uniform(-1, 1, (500, 32)) * 1e-39
    sparse = np.where(rng.random((2_000, 32)) < 0.9, 0.0, rng.standard_normal((2_000, 32)))
    return np.concatenate([gauss, ties, zeros, mixed, huge, tiny, sparse]).astype(np.float32).reshape(-1)


DATA = _test_data(0)


@pytest.mark.parametrize("name", MX)
def test_bit_exact_with_independent_reference(name: str) -> None:
    assert DATA.size >= 1_000_000
    mx = tn.mx_quantize(DATA, name)
    ref_values, ref_se = reference_mx(DATA, name)
    assert np.array_equal(mx.scale_exponents, ref_se)
    got = mx.dequantize()
    assert np.array_equal(got.view(np.uint32), ref_values.view(np.uint32))
    fmt = tn.get_format(name)
    assert isinstance(fmt, MXFormat)
    assert np.array_equal(got.view(np.uint32), ml_dtypes_recipe(DATA, fmt.element.ml_dtype, EMAX[name]).view(np.uint32))


@pytest.mark.parametrize("name", MX)
def test_fast_path_equals_general_path(name: str) -> None:
    x = DATA[: 32 * 20_000]
    fast = tn.mx_quantize(x, name)
    general = tn.mx_quantize(x.astype(np.float64), name)  # float64 takes the plain path
    assert np.array_equal(fast.scale_exponents, general.scale_exponents)
    assert np.array_equal(fast.elements.view(np.uint32), general.elements.view(np.uint32))
    assert np.array_equal(tn.quantize(x, name).view(np.uint32), fast.dequantize().view(np.uint32))


def test_special_blocks() -> None:
    x = np.zeros((4, 32), dtype=np.float32)
    x[1, 3], x[2, 5], x[3] = np.nan, np.inf, 1.0
    mx = tn.mx_quantize(x, "mxfp8_e4m3")
    assert mx.scale_exponents[:, 0].tolist() == [-127, 128, 128, -8]
    out = mx.dequantize()
    assert (out[0] == 0).all() and np.isnan(out[1]).all() and np.isnan(out[2]).all() and (out[3] == 1).all()
    assert mx.scale_codes()[:, 0].tolist() == [0, 255, 255, 119]
    assert (mx.elements[1:3] == 0).all()


def test_scale_rules() -> None:
    e2m1 = tn.get_format("fp4_e2m1")
    e4m3 = tn.get_format("fp8_e4m3")
    assert isinstance(e2m1, FloatFormat) and isinstance(e4m3, FloatFormat)
    rules = {r: shared_exponents(np.array([3.0, 3.5, 4.0]), e2m1, r).tolist()
             for r in tn.SCALE_RULES}
    assert rules == {"floor": [-1, -1, 0], "ceil": [0, 0, 0], "rceil": [-1, 0, 0]}
    assert shared_exponents(np.array([448.0, 449.0]), e4m3, "rceil").tolist() == [0, 1]
    assert shared_exponents(np.array([2.0**200]), e4m3, "floor").tolist() == [128]
    # OCP example: amax 3.0 in E2M1 → X = 0.5 → 6.0 exact; amax 3.5 → 7 → clamped to 6
    assert tn.mx_quantize(np.float32([3.0] + [0] * 31), "mxfp4_e2m1").dequantize()[0] == 3.0
    assert tn.mx_quantize(np.float32([3.5] + [0] * 31), "mxfp4_e2m1").dequantize()[0] == 3.0
    assert tn.mx_quantize(np.float32([3.5] + [0] * 31), "mxfp4_e2m1", scale_rule="rceil").dequantize()[0] == 4.0
    with pytest.raises(NumericsError, match="scale rule"):
        tn.mx_quantize(np.ones(32), "mxfp4_e2m1", scale_rule="round")


def test_axis_and_ragged_blocks() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((70, 96)).astype(np.float32)
    a = tn.mx_quantize(x, "mxfp6_e2m3", axis=0)
    b = tn.mx_quantize(x.T, "mxfp6_e2m3", axis=-1)
    assert a.scale_exponents.shape == (3, 96)
    assert np.array_equal(a.dequantize(), b.dequantize().T)
    assert np.array_equal(a.scale_exponents, b.scale_exponents.T)
    padded = np.concatenate([x, np.zeros((26, 96), np.float32)])
    assert np.array_equal(a.dequantize(), tn.mx_quantize(padded, "mxfp6_e2m3", axis=0).dequantize()[:70])
    assert np.array_equal(tn.quantize(x, "mxfp6_e2m3", axis=0), a.dequantize())


@pytest.mark.parametrize("name", MX)
def test_bytes_round_trip(name: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 100)).astype(np.float32)
    mx = tn.mx_quantize(x, name)
    data = mx.to_bytes()
    fmt = tn.get_format(name)
    assert isinstance(fmt, MXFormat)
    assert len(data) == mx.nbytes == -(-800 * fmt.element.bits // 8) + 8 * 4
    back = tn.MXArray.from_bytes(data, name, x.shape)
    assert np.array_equal(back.dequantize(), mx.dequantize())
    with pytest.raises(NumericsError, match="expected"):
        tn.MXArray.from_bytes(data[:-1], name, x.shape)


def test_stochastic_mx_is_reproducible_and_unbiased() -> None:
    x = np.full((4000, 32), 1.1, dtype=np.float32)
    x[:, 0] = 4.0  # scale 2^0 for e2m1: 1.1 lies between 1.0 and 1.5
    a = tn.mx_quantize(x, "mxfp4_e2m1", rounding="stochastic", seed=5).dequantize()
    assert np.array_equal(a, tn.mx_quantize(x, "mxfp4_e2m1", rounding="stochastic", seed=5).dequantize())
    vals = a[:, 1:]
    assert set(np.unique(vals).tolist()) == {1.0, 1.5}
    p, n = 0.2, vals.size
    assert abs(vals.mean() - 1.1) <= 5 * 0.5 * math.sqrt(p * (1 - p) / n)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 90), st.sampled_from(MX), st.integers(-30, 30))
def test_dequantized_error_is_bounded(rows: int, cols: int, name: str, scale_exp: int) -> None:
    """|x − dq(x)| ≤ half the element spacing at the block scale (RNE), or clamped at the block max."""
    rng = np.random.default_rng(rows * 1000 + cols)
    x = (rng.standard_normal((rows, cols)) * 2.0**scale_exp).astype(np.float32)
    mx = tn.mx_quantize(x, name)
    fmt = tn.get_format(name)
    assert isinstance(fmt, MXFormat)
    el = fmt.element
    scale = np.repeat(np.exp2(mx.scale_exponents.astype(np.float64)), 32, axis=-1)[:, :cols]
    scaled = np.abs(x) / scale
    spacing = np.exp2(np.floor(np.log2(np.maximum(scaled, el.min_normal))) - el.man_bits) * scale
    err = np.abs(mx.dequantize().astype(np.float64) - x)
    ok = (err <= spacing / 2 * (1 + 1e-12)) | (scaled > el.max)
    assert ok.all()


def test_other_block_sizes() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 48)).astype(np.float32)
    mx16 = tn.mx_quantize(x, "mxfp8_e4m3", block=16)
    assert mx16.scale_exponents.shape == (6, 3)
    rows = tn.mx_quantize(x.reshape(18, 16), "mxfp8_e4m3", block=16)
    assert np.array_equal(mx16.dequantize(), rows.dequantize().reshape(6, 48))
    with pytest.raises(NumericsError, match="positive"):
        tn.mx_quantize(x, "mxfp8_e4m3", block=0)
