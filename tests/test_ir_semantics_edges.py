"""Integer and conversion corner cases where C leaves the result undefined and StableHLO/XLA define it, and
XLA's random bit generators: the reference semantics must match XLA on CPU bit for bit."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

import trnsim


def _both(fn, *args):  # type: ignore[no-untyped-def]
    expected = np.asarray(jax.jit(fn)(*args))
    got = np.asarray(trnsim.jit(fn, cache=False, timing=False)(*args))
    return got, expected


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.int8, np.int16, np.int32])
def test_arithmetic_right_shift_fills_with_the_top_bit_even_for_unsigned_types(dtype: type) -> None:
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 1, info.max // 2 + 1, 5, 200 % (info.max + 1)], dtype)
    s = np.array([1, 3, 0, info.bits - 1, info.bits, 250 % (info.max + 1)], dtype)
    got, expected = _both(lax.shift_right_arithmetic, a, s)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16])
def test_integer_division_and_remainder_by_zero_and_overflow(dtype: type) -> None:
    info = np.iinfo(dtype)
    a = np.array([7, -7 if info.min < 0 else 9, info.min, info.min, 0, info.max], dtype)
    b = np.array([0, 2, -1 if info.min < 0 else 1, 0, 0, 3], dtype)
    for op in (lax.div, lax.rem):
        got, expected = _both(op, a, b)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("to", [np.int8, np.uint8, np.int32, np.uint32])
def test_float_to_int_conversion_saturates_and_maps_nan_to_zero(to: type) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 2.7, -2.7, 255.9, -0.5], np.float32)
    got, expected = _both(lambda v: lax.convert_element_type(v, to), x)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("algorithm", ["RNG_PHILOX", "RNG_THREE_FRY", "RNG_DEFAULT"])
@pytest.mark.parametrize(("dtype", "shape"), [(np.uint32, (8,)), (np.uint32, (3, 5)), (np.uint32, (5, 3)),
                                               (np.uint32, (4, 6)), (np.uint8, (3, 5, 7)), (np.uint16, (2, 3)),
                                               (np.uint32, ())])
def test_rng_bit_generator_matches_xla_bit_for_bit(algorithm: str, dtype: type, shape: tuple[int, ...]) -> None:
    key = np.array([0xDEADBEEF, 7, 0xFFFFFFFF, 5], np.uint32)      # the counter carries into its high word

    def fn(k):  # type: ignore[no-untyped-def]
        return lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=getattr(lax.RandomAlgorithm, algorithm))

    expected = jax.jit(fn)(key)
    got = trnsim.jit(fn, cache=False, timing=False)(key)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


@pytest.mark.parametrize(("dtype", "width"), [(np.float32, 32), (jax.numpy.bfloat16, 16), (np.float16, 16)])
@pytest.mark.parametrize(("exponent_bits", "mantissa_bits"), [(8, 23), (8, 7), (5, 10), (8, 10), (5, 2), (4, 3),
                                                              (2, 1), (1, 0), (11, 52), (6, 0), (8, 0)])
def test_reduce_precision_works_on_the_operands_bits_as_xla_does(dtype: type, width: int, exponent_bits: int,
                                                                 mantissa_bits: int) -> None:
    """Random bit patterns (subnormals, infinities, NaNs with payloads among them): the mantissa field rounded to
    nearest even, a carry into the exponent, flushes only where the format's exponent is narrower than the
    operand's (its own subnormals stay), NaNs kept; equal to XLA's bits, NaNs compared as NaNs."""
    rng = np.random.default_rng(exponent_bits * 64 + mantissa_bits)
    codes = rng.integers(0, 1 << width, 2000, dtype=np.uint64).astype(np.uint32 if width == 32 else np.uint16)
    x = codes.view(dtype)
    got, expected = _both(lambda v: lax.reduce_precision(v, exponent_bits=exponent_bits,
                                                         mantissa_bits=mantissa_bits), x)
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got.view(codes.dtype)[~nan], expected.view(codes.dtype)[~nan])


def _argmax_pair(a, b):  # type: ignore[no-untyped-def]
    (av, ai), (bv, bi) = a, b
    pick = (av > bv) | ((av == bv) & (ai < bi))
    return lax.select(pick, av, bv), lax.select(pick, ai, bi)


_SCATTER_ROWS = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                            scatter_dims_to_operand_dims=(0,))
_GATHER_ROWS = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
EMPTY_CASES = {
    "sum of an empty operand": (lambda x: lax.reduce(x, np.float32(0), lax.add, (0, 2)),
                                [np.zeros((0, 1, 5), np.float32)]),
    "product of an empty operand": (lambda x: lax.reduce(x, np.uint16(1), lax.mul, (0, 2)),
                                    [np.zeros((0, 1, 5), np.uint16)]),
    "variadic reduce to an empty result": (
        lambda x: lax.reduce((x, lax.broadcasted_iota(np.int32, x.shape, 0)), (np.int8(-128), np.int32(0)),
                             _argmax_pair, (0,)), [np.zeros((2, 0, 5), np.int8)]),
    "scatter into an empty operand": (lambda x, i, u: x.at[i].add(u, mode="drop"),
                                      [np.zeros((0, 1), np.float32), np.array([0, 2], np.int32),
                                       np.ones((2, 1), np.float32)]),
    "scatter of empty windows": (lambda x, i, u: lax.scatter_add(x, i, u, _SCATTER_ROWS, mode="drop"),
                                 [np.zeros((2, 0), np.float32), np.array([[1], [0]], np.int32),
                                  np.ones((2, 0), np.float32)]),
    "gather of empty slices": (lambda x, i: lax.gather(x, i, _GATHER_ROWS, (1, 0), mode="clip"),
                               [np.zeros((2, 0), np.float32), np.array([[1], [0]], np.int32)]),
    "rank-0 dynamic_slice (JAX prints text that does not parse)": (lambda x: lax.dynamic_slice(x, [], []),
                                                                   [np.float32(3.0)]),
}


@pytest.mark.parametrize("name", list(EMPTY_CASES))
def test_zero_size_dimensions_and_rank_0_slices_compile_and_run(name: str) -> None:
    """Found by fuzzing against jax: operands with a zero-size dimension (and a rank-0 dynamic slice) compile, run
    and give XLA's results and shapes."""
    fn, args = EMPTY_CASES[name]
    expected = jax.jit(fn)(*args)
    got = trnsim.jit(fn, cache=False)(*args)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


def test_a_sort_whose_comparator_compares_an_element_with_itself_keeps_the_order() -> None:
    """``compare LT, %lhs, %lhs`` is always false: no element goes before another, so a stable sort is the
    identity (it was taken for an ascending sort by the key)."""
    text = """module @m {
  func.func public @main(%arg0: tensor<5xi32>, %arg1: tensor<5xf32>) -> (tensor<5xi32>, tensor<5xf32>) {
    %0:2 = "stablehlo.sort"(%arg0, %arg1) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%a0: tensor<i32>, %b0: tensor<i32>, %a1: tensor<f32>, %b1: tensor<f32>):
      %c = stablehlo.compare LT, %a0, %a0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }) : (tensor<5xi32>, tensor<5xf32>) -> (tensor<5xi32>, tensor<5xf32>)
    return %0#0, %0#1 : tensor<5xi32>, tensor<5xf32>
  }
}"""
    x, y = np.array([3, 1, 4, 1, 5], np.int32), np.arange(5, dtype=np.float32)
    got = trnsim.compile(text, cache=False).run(x, y, timing=False)
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], y)


def test_reduce_window_with_no_window_that_fits_is_empty() -> None:
    """A (dilated) window longer than the padded operand: an empty result (a strided slice's stop counted from
    the end gave a wrongly shaped view)."""
    x = np.ones((2, 2), np.float32)
    for fn in (lambda v: lax.reduce_window(v, np.float32(0), lax.add, (1, 3), (1, 2), ((0, 0), (0, 2)), (1, 1),
                                           (1, 2)),
               lambda v: lax.reduce_window(v, np.float32(0), lax.add, (1, 5), (1, 1), "VALID")):
        got, expected = _both(fn, x)
        assert got.shape == expected.shape == (2, 0)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_integer_dot_and_convolution_with_a_float_result_do_not_wrap(dtype: type) -> None:
    """Integer operands with a float result type are converted to it first (as XLA does), not summed in 64-bit
    integers, which wrapped at 2**64: (-2**31)² · 4 = 2**64."""
    info = np.iinfo(dtype)
    a = np.full((1, 4), info.min if info.min else info.max, dtype)
    got, expected = _both(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())),
                                                       preferred_element_type=np.float32), a, a.T.copy())
    np.testing.assert_array_equal(got, expected)
    x = np.full((1, 4, 1), info.min if info.min else info.max, dtype)
    got, expected = _both(lambda v, w: lax.conv_general_dilated(v, w, (1,), "VALID", dimension_numbers=(
        "NCH", "OIH", "NCH"), preferred_element_type=np.float32), x, x.copy())
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_a_reduce_over_no_dimensions_of_one_element_compiles(shape: tuple[int, ...]) -> None:
    x = np.full(shape, 7, np.float32)
    got, expected = _both(lambda v: lax.reduce(v, np.float32(-np.inf), lax.max, ()), x)
    np.testing.assert_array_equal(got, expected)
