"""``ApproxTopK``, the custom_call of ``lax.approx_max_k``/``approx_min_k``: imported as XLA's fallback (a sort by
the comparator, then the first entries; trnsim's sort is stable), so the values equal XLA's on CPU exactly and the
indices point at them (among equal values XLA's CPU fallback may list a later index first)."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import trnsim


@settings(max_examples=12, deadline=None)
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3), data=st.data(),
       dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.float16]), largest=st.booleans())
def test_approx_top_k_equals_xla(shape: list[int], data: st.DataObject, dtype: type, largest: bool) -> None:
    dim = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(1, shape[dim]))
    rng = np.random.default_rng(len(shape) * 100 + k)
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[rng.integers(0, x.size, x.size // 3)] = x.reshape(-1)[0]          # ties
    fn = lax.approx_max_k if largest else lax.approx_min_k

    def f(a):  # type: ignore[no-untyped-def]
        return fn(a, k, reduction_dimension=dim, recall_target=0.9)

    (want, _), (values, index) = jax.jit(f)(x), trnsim.jit(f, cache=False)(x)
    np.testing.assert_array_equal(np.asarray(values), np.asarray(want))
    np.testing.assert_array_equal(np.take_along_axis(x, np.asarray(index), axis=dim), np.asarray(want))
    ordered = np.sort(np.asarray(index), axis=dim)
    assert not (np.diff(ordered, axis=dim) == 0).any()                              # distinct positions


def test_a_malformed_approx_top_k_is_a_compile_error() -> None:
    text = """module {
  func.func public @main(%arg0: tensor<4x5xf32>) -> tensor<4x2xf32> {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %0 = stablehlo.custom_call @ApproxTopK(%arg0, %cst) {mhlo.backend_config = {top_k = 2 : i64}} :
      (tensor<4x5xf32>, tensor<f32>) -> tensor<4x2xf32>
    return %0 : tensor<4x2xf32>
  }
}"""
    with pytest.raises(trnsim.CompileError, match="ApproxTopK needs"):
        trnsim.compile(text, cache=False)
