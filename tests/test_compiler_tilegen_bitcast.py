"""Generated tile code for ``bitcast_convert`` between types of one width of at most 16 bits, inside fused groups
(``nextafter``'s bit arithmetic, sign and exponent masks): the bits are copied as unsigned integers, so the kernel
on the functional simulator gives the interpreter's bits, NaN payloads included. (32-bit bitcasts, whose integer
arithmetic runs on bit patterns beyond 2**24: ``test_compiler_tilegen_words``.)"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from test_compiler_tilegen import _compile, _run_step

SPECIAL = {"bfloat16": [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x8001, 0x7F7F, 0xFF7F,
                        0x0080, 0x3F80],
           "float16": [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7C01, 0x0001, 0x8001, 0x7BFF, 0xFBFF,
                       0x0400, 0x3C00]}
DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _bits(rng: np.random.Generator, dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """Random 16-bit patterns (NaNs with payloads, subnormals, infinities among them) and the special values."""
    codes = rng.integers(0, 1 << 16, shape, dtype=np.uint32).astype(np.uint16)
    flat = codes.reshape(-1)
    special = np.array(SPECIAL[dtype], np.uint16)
    flat[rng.integers(0, flat.size, special.size)] = special
    return codes.view(DTYPES[dtype])


def _generated(program) -> list[int]:  # type: ignore[no-untyped-def]
    return [s.index for s in program.plan.steps if s.kernel == "generated_elementwise"]


def _same_bits(pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """The kernel's outputs come back decoded to fp32 (or int64): bf16's codes are their top 16 bits, so those
    compare bit for bit, NaN payloads included; fp16 values compare bit for bit as fp32 except NaNs, which
    compare as NaNs (numpy's fp16 conversions may quiet a signalling NaN on the way in and out); integers as
    integers."""
    for got, want in pairs:
        got = got[:want.size]
        if want.dtype == ml_dtypes.bfloat16:
            assert np.array_equal((got.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16),
                                  want.view(np.uint16))
        elif want.dtype == np.float16:
            w = want.astype(np.float32)
            nan = np.isnan(w)
            assert np.array_equal(np.isnan(got), nan)
            assert np.array_equal(got.astype(np.float32)[~nan].view(np.uint32), w[~nan].view(np.uint32))
        else:
            assert np.array_equal(got.astype(np.int64), want.astype(np.int64))


@settings(max_examples=10, deadline=None)
@given(dtype=st.sampled_from(list(DTYPES)), rows=st.integers(1, 200), cols=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_nextafter_is_generated_and_bit_exact(dtype: str, rows: int, cols: int, seed: int) -> None:
    """``nextafter`` (chlo: bitcast to the integers of the width, ±1, masks, selects) over every kind of value."""
    rng = np.random.default_rng(seed)
    x, y = _bits(rng, dtype, (rows, cols)), _bits(rng, dtype, (rows, cols))
    program = _compile(jnp.nextafter, x, y)
    assert [s.kernel for s in program.plan.steps] == ["generated_elementwise"]
    recipe, pairs = _run_step(program, [x, y], 0)
    assert any(s[0] == "bitcast" for s in recipe.steps)
    _same_bits(pairs)


@pytest.mark.parametrize(("dtype", "twin", "mask"), [("bfloat16", np.int16, 0x7FFF), ("float16", np.uint16, 0x7FFF),
                                                     ("float16", np.int16, -1024)])
def test_bit_masks_round_trip(dtype: str, twin: type, mask: int) -> None:
    """|x| by clearing the sign bit, and the sign and exponent kept (a float's bits through an integer ``and``):
    bitcast there and back in one group. (No float arithmetic after it: the interpreter's bf16 arithmetic makes
    NaNs canonical where VectorE keeps their payloads, which StableHLO leaves unspecified.)"""
    x = _bits(np.random.default_rng(7), dtype, (130, 33))
    program = _compile(lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x, twin) & twin(mask), x.dtype),
                       x)
    (step,) = _generated(program)
    _, pairs = _run_step(program, [x], step)
    _same_bits(pairs)


def test_byte_bitcasts_between_signed_and_unsigned() -> None:
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    program = _compile(lambda x: lax.bitcast_convert_type(x, np.uint8) // 3 + 1, x)
    (step,) = _generated(program)
    _, pairs = _run_step(program, [x], step)
    _same_bits(pairs)

