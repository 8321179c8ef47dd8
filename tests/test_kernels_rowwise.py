"""trnsim.kernels gelu, silu, softmax and transpose against numpy references, over shapes that are not
multiples of the tile sizes; tolerances follow from one rounding per engine step."""

from __future__ import annotations

import doctest
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import dsl, kernels
from trnsim.kernels import rowwise, transposes

U32 = 2.0**-24
OUT_U = {"fp32": U32, "bf16": 2.0**-8, "fp16": 2.0**-11}
CAST = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
TINY = {"fp32": 2.0**-149, "bf16": 2.0**-133, "fp16": 2.0**-24}  # smallest subnormals

# The ISA's function definitions (isa/ops.py): ScalarE evaluates them in float64 and rounds once to fp32.
SPEC = {
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}

shapes = st.tuples(st.integers(1, 300), st.integers(1, 5000)).filter(lambda s: s[0] * s[1] <= 400_000)


@settings(max_examples=12, deadline=None)
@given(shape=shapes, func=st.sampled_from(["gelu", "silu"]), dtype=st.sampled_from(["fp32", "bf16", "fp16"]),
       seed=st.integers(0, 2**16))
def test_activations_round_the_spec_function_once(shape: tuple[int, int], func: str, dtype: str, seed: int) -> None:
    """Output = the function of the (rounded) input, rounded to fp32 then to the output dtype: within one
    rounding of each (2^-24 + u_out relative), plus the smallest subnormal of the output."""
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    xin = x.astype(CAST[dtype]).astype(np.float64)  # what the DMA into HBM stored
    got = getattr(kernels, func)(x, dtype)
    ref = SPEC[func](xin)
    assert got.shape == shape
    bound = (U32 + OUT_U[dtype]) * np.abs(ref) + TINY[dtype]
    assert (np.abs(got - ref) <= bound).all()


def test_activation_fp32_is_bit_exact_to_the_spec() -> None:
    x = np.random.default_rng(1).standard_normal((130, 257)).astype(np.float32) * 3
    assert np.array_equal(kernels.silu(x), SPEC["silu"](x.astype(np.float64)).astype(np.float32))
    assert kernels.gelu(x[0]).shape == (257,)  # any shape: rows are the last axis


def softmax_bound(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Reference and bound: x - max rounds once (2^-24 |x - max| in the exponent), exp rounds once, the fp32
    sum of C terms at most C · 2^-24 relative, the reciprocal and product once each, then the output; near
    underflow, the output's smallest subnormal (and the fp32 intermediates' below it) absolutely."""
    xs = x.astype(np.float64)
    z = xs - xs.max(axis=1, keepdims=True)
    ref = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    rel = OUT_U[dtype] + (np.abs(z) + x.shape[1] + 4) * U32
    return ref, rel * ref + TINY[dtype]


@settings(max_examples=12, deadline=None)
@given(shape=st.tuples(st.integers(1, 260), st.integers(1, 9000)).filter(lambda s: s[0] * s[1] <= 500_000),
       dtype=st.sampled_from(["fp32", "bf16"]), scale=st.sampled_from([1.0, 30.0]), seed=st.integers(0, 2**16))
def test_softmax_within_bound_one_pass_and_chunked(shape: tuple[int, int], dtype: str, scale: float,
                                                    seed: int) -> None:
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    x = x.astype(CAST[dtype]).astype(np.float32)
    ref, bound = softmax_bound(x, dtype)
    got = kernels.softmax(x, dtype)
    assert (np.abs(got - ref) <= bound).all()


def test_softmax_is_stable_and_chunks_long_rows() -> None:
    x = np.array([[1e4, 0.0, -1e4], [-1e30, -1e30, -1e30]], np.float32)
    got = kernels.softmax(x)
    assert np.isfinite(got).all() and got[0].tolist() == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(got[1], 1 / 3, rtol=1e-6)
    long = dsl.typed(np.zeros((2, rowwise.COLS * 2 + 5)), "fp32")
    reads = [i for i in rowwise.softmax_kernel.compile(long).program.stream("sync") if i.src.memory == "hbm"]
    assert len(reads) == 3 * 3  # three passes over three column chunks


@settings(max_examples=10, deadline=None)
@given(shape=st.tuples(st.integers(1, 400), st.integers(1, 2500)).filter(lambda s: s[0] * s[1] <= 400_000),
       dtype=st.sampled_from(["fp32", "bf16", "fp8_e4m3", "int32", "int8", "uint16"]), seed=st.integers(0, 2**16))
def test_transpose_dma_bit_exact(shape: tuple[int, int], dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dict(int32=np.int32, int8=np.int8, uint16=np.uint16)[dtype])
        x = rng.integers(info.min, info.max, shape, dtype=np.int64)
        if dtype == "int32":
            x[0, 0] = 2**31 - 1  # beyond fp32: a DMA moves bytes, never values
        x = x.astype(np.float64)
    else:
        x = np.clip(rng.standard_normal(shape) * 100, -440, 440).astype(np.float32)  # finite in fp8_e4m3
        x = x.astype(CAST.get(dtype, ml_dtypes.float8_e4m3fn)).astype(np.float32)
    got = kernels.transpose(x, dtype)
    assert np.array_equal(got, x.T)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_transpose_tensor_engine_bit_exact(dtype: str) -> None:
    x = np.random.default_rng(2).standard_normal((300, 130)).astype(np.float32) * 1e3
    x[0, 0], x[1, 1] = np.inf, -np.inf
    x = x.astype(CAST[dtype]).astype(np.float32)
    got = kernels.transpose(x, dtype, method="tensor")
    assert np.array_equal(got, x.T)
    prog = transposes.transpose_kernel.compile(dsl.typed(x, dtype), method="tensor").program
    assert [i.mnemonic for i in prog.stream("tensor")] == ["tensor_transpose"] * (3 * 2)


def test_transpose_tensor_rejects_integers() -> None:
    with pytest.raises(dsl.KernelError, match="use method='dma'"):
        kernels.transpose(np.zeros((4, 4), np.int32), method="tensor")


def test_doc_examples() -> None:
    for mod in (rowwise, transposes):
        result = doctest.testmod(mod, extraglobs={"np": np})
        assert result.failed == 0 and result.attempted > 0
