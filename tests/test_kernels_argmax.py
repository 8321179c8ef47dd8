"""The argmax kernel (VectorE max8 / find_index8 per row chunk): bit-exact against ``jnp.argmax`` /
``jnp.argmin`` over shapes, axes, dtypes, ties, infinities, signed zeros and NaNs (the first NaN wins),
including rows split into chunks and merged."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim.dsl.errors import KernelError
from trnsim.kernels import argmax, argmax_kernel

NAN, INF = float("nan"), float("inf")
NP_DTYPES: dict[str, Any] = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16, "int8": np.int8,
                             "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
                             "uint32": np.uint32}


def _reference(x: np.ndarray, axis: int, smallest: bool) -> np.ndarray:
    return np.asarray((jnp.argmin if smallest else jnp.argmax)(x, axis=axis))


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3), axis_pick=st.integers(0, 2),
       dtype=st.sampled_from(sorted(NP_DTYPES)), smallest=st.booleans(), spread=st.sampled_from([2, 1000]),
       chunk=st.sampled_from([8, 13, 16384]), segment=st.sampled_from([3, 2048]), seed=st.integers(0, 2**16))
def test_argmax_equals_jnp(shape: list[int], axis_pick: int, dtype: str, smallest: bool, spread: int, chunk: int,
                           segment: int, seed: int) -> None:
    """``spread`` 2 makes ties everywhere; floats also get ±inf, ±0 and NaNs of either sign and any payload;
    ``chunk`` 8 and 13 split rows into chunks (a full one and a short last one), ``segment`` 3 spreads few
    rows over the partitions."""
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(shape)
    kind = NP_DTYPES[dtype]
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(kind)
        lo, hi = (info.min, info.max) if spread > 2 and info.bits == 32 else (max(info.min, -spread),
                                                                               min(info.max, spread))
        x = rng.integers(lo, hi, shape, dtype=np.int64, endpoint=True).astype(kind)
        x[rng.random(shape) < 0.05] = info.max if smallest else info.min
    else:
        x = (rng.integers(-spread, spread + 1, shape) / 4).astype(np.float32)
        specials = np.array([INF, -INF, -0.0, 0.0, NAN, -NAN, np.uint32(0x7FC12345).view(np.float32)], np.float32)
        hits = rng.random(shape) < 0.08
        x[hits] = specials[rng.integers(0, len(specials), int(hits.sum()))]
        x = x.astype(kind)
    got = argmax(x, axis, dtype, smallest=smallest, chunk=chunk, segment=segment)
    assert np.array_equal(got, _reference(x, axis, smallest))


@pytest.mark.parametrize("smallest", [False, True])
def test_nan_ties_and_signed_zeros_take_the_first_position(smallest: bool) -> None:
    x = np.array([[1.0, 2.0, NAN, -NAN, 2.0],          # a NaN wins over every number, the first one
                  [-0.0, 0.0, 0.0, -0.0, -0.0],       # -0.0 == +0.0: the first position
                  [-INF, -INF, -INF, -INF, -INF],
                  [INF, INF, -INF, -INF, 3.0],
                  [3.0, -NAN, 1.0, 5.0, NAN]], np.float32)
    want = [2, 0, 0, 2 if smallest else 0, 1]
    assert argmax(x, smallest=smallest).tolist() == want == _reference(x, -1, smallest).tolist()


def test_chunked_rows_merge_to_the_first_best_across_chunks() -> None:
    """The best value in chunk 0 and again in chunk 2: chunk 0's position; a NaN only in the last chunk."""
    x = np.zeros((3, 50), np.float32)
    x[0, [7, 35]] = 9.0
    x[1, [3, 47]] = [9.0, NAN]
    x[2, :] = -INF
    for chunk in (8, 16, 49):
        assert argmax(x, chunk=chunk).tolist() == [7, 47, 0]


def test_32_bit_integers_compare_high_then_low_halves() -> None:
    """Values fp32 cannot tell apart (2**24 + 1 vs 2**24) and the extremes: ``(x >> 16, x & 0xFFFF)`` keys."""
    x = np.array([[2**24, 2**24 + 1, -2**31, 2**31 - 1, 2**31 - 1, 65535, 65536, -1, -2**31]], np.int32)
    for smallest in (False, True):
        for chunk in (3, 16384):
            assert argmax(x, -1, "int32", smallest=smallest, chunk=chunk).tolist() == \
                _reference(x, -1, smallest).tolist()
    u = np.array([[2**32 - 1, 2**31, 2**32 - 2, 0, 2**32 - 1]], np.uint32)
    assert argmax(u, -1, "uint32").tolist() == [0] and argmax(u, -1, "uint32", smallest=True).tolist() == [3]


@pytest.mark.parametrize("cols", [10_000, 9_999, 20_001])
def test_few_long_rows_spread_over_partitions(cols: int) -> None:
    """Pieces of a row on many partitions (the last chunk partly empty), ties between pieces resolved by
    position: the first occurrence wins even when a later partition's piece comes first in the row."""
    rng = np.random.default_rng(cols)
    x = rng.integers(-5, 6, (3, cols)).astype(np.float32)
    x[0, [17, cols - 1]] = 9.0
    x[1, [cols // 2, 100]] = np.nan
    for chunk in (64, 16384):
        for smallest in (False, True):
            got = argmax(x, smallest=smallest, chunk=chunk, segment=64)
            assert np.array_equal(got, _reference(x, -1, smallest))


def test_rejects_empty_arrays_and_dtypes_without_exact_keys() -> None:
    with pytest.raises(KernelError, match="argmax of an array of shape"):
        argmax(np.zeros((3, 0), np.float32))
    with pytest.raises(KernelError, match="argmax of fp8_e4m3 values"):
        argmax(np.zeros((2, 5), np.float32), dtype="fp8_e4m3")


@pytest.mark.parametrize("shape", [(300, 20, 5), (20, 30, 7), (3, 40, 300)])
def test_rows_along_a_middle_axis_pack_several_outer_indices_a_tile(shape: tuple[int, int, int]) -> None:
    """``x[o, :, i]`` rows: strided views of each o's slab (o on the partitions), the i of as many o as fit
    in 128 partitions (one transposed load an o), or blocks of 128 i at one o."""
    x = np.random.default_rng(0).integers(-2, 3, shape).astype(np.float32)
    x[::7, 3, ::3] = np.nan
    for smallest in (False, True):
        assert np.array_equal(argmax(x, 1, smallest=smallest), _reference(x, 1, smallest))


def test_tiles_pipeline_over_the_dma_queues_and_three_engines() -> None:
    """Loads are issued ahead of compute, ScalarE makes keys and GpSimd finds NaNs while VectorE selects: the
    kernel takes little more than its busiest engine or queue, far less than their sum."""
    import trnsim

    spec: Any = trnsim.TensorSpec((2048, 1000, 1), "fp32")
    profile = trnsim.run_kernel(argmax_kernel, spec, target="trn3", timing=True).profile
    assert profile is not None
    queue = max(profile.queue_busy.values())
    busiest = max(*profile.engine_busy.values(), queue)
    assert profile.total_seconds < 1.25 * busiest
    assert profile.total_seconds < 0.6 * (sum(profile.engine_busy.values()) + queue)   # serial: their sum
    assert set(profile.engine_busy) >= {"vector", "scalar", "gpsimd"}
