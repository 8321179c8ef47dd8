"""trnsim.kernels.matmul against numpy: bit-exact where the arithmetic is exact, else within a bound derived
from the formats (never a tolerance chosen to pass)."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
import trnsim.numerics as tn
from trnsim import dsl, kernels
from trnsim.isa.program import Program
from trnsim.kernels import gemm, prepare_matmul

spec: Any = trnsim.TensorSpec  # a shape description: compiled or timed without data
U32 = 2.0**-24  # fp32 unit roundoff
BF16 = 2.0**-8  # bf16 unit roundoff (8 significant bits)

ALL_DTYPES = ["bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
              "mxfp6_e3m2", "mxfp4_e2m1", "int8", "int4"]


def small_ints(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> np.ndarray:
    """Integers every format holds exactly (|x| ≤ 4; int4/int8: up to ±qmax with one qmax, so the symmetric
    per-tensor scale is 1)."""
    qmax = {"int4": 7, "int8": 127}.get(dtype)
    if qmax is not None:
        x = rng.integers(-qmax, qmax + 1, shape).astype(np.float32)
        x.flat[0] = qmax
        return x
    return rng.integers(-4, 5, shape).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 300), k=st.integers(1, 400), n=st.integers(1, 1100), dtype=st.sampled_from(ALL_DTYPES),
       seed=st.integers(0, 2**16))
def test_exact_on_small_integers_any_shape_any_dtype(m: int, k: int, n: int, dtype: str, seed: int) -> None:
    """Products of small integers and their fp32 sums (< 2^24) are exact: the result must be bit-exact."""
    rng = np.random.default_rng(seed)
    a, b = small_ints(rng, (m, k), dtype), small_ints(rng, (k, n), dtype)
    got = kernels.matmul(a, b, dtype, out_dtype="fp32")
    assert got.shape == (m, n)
    assert np.array_equal(got, a.astype(np.float64) @ b)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 260), k=st.integers(1, 300), n=st.integers(1, 700), sparsity=st.sampled_from(["2:4", "4:8"]),
       dtype=st.sampled_from(["bf16", "fp8_e4m3", "mxfp8_e4m3", "int4"]), seed=st.integers(0, 2**16))
def test_sparse_weights_exact_on_small_integers(m: int, k: int, n: int, sparsity: str, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = small_ints(rng, (m, k), dtype), small_ints(rng, (k, n), dtype)
    nn, mm = (int(v) for v in sparsity.split(":"))
    pad = -k % mm
    pruned = tn.prune(np.pad(b, ((0, pad), (0, 0))), nn, mm, axis=0)[:k]
    got = kernels.matmul(a, b, dtype, sparsity=sparsity, out_dtype="fp32")
    assert np.array_equal(got, a.astype(np.float64) @ pruned)


def test_bias_and_activation_epilogue_exact_where_it_can_be() -> None:
    """relu(a @ b + bias) of integers with fp32 output is exact, in both orientations (dense: bias along the
    free axis on VectorE; sparse: per-partition bias fused into ScalarE)."""
    rng = np.random.default_rng(3)
    a, b = small_ints(rng, (70, 90), "bf16"), small_ints(rng, (90, 600), "bf16")
    bias = rng.integers(-50, 50, 600).astype(np.float32)
    got = kernels.matmul(a, b, "bf16", bias=bias, activation="relu", out_dtype="fp32")
    assert np.array_equal(got, np.maximum(a @ b + bias, 0))
    pruned = kernels.prepare_matmul(a, b, "bf16", "2:4").reference[1][:90]
    got = kernels.matmul(a, b, "bf16", sparsity="2:4", bias=bias, activation="relu", out_dtype="fp32")
    assert np.array_equal(got, np.maximum(a @ pruned + bias, 0))
    got = kernels.matmul(a, b, "bf16", bias=bias, out_dtype="fp32")  # bias only: the add writes the output
    assert np.array_equal(got, a @ b + bias)


# Lipschitz constants of the activations on the reals (max |f'|): how far an input error can move the output.
LIPSCHITZ = {None: 1.0, "relu": 1.0, "gelu": 1.13, "silu": 1.1}
ACT = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0),
       "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
       "silu": lambda x: x / (1 + np.exp(-x))}


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 200), k=st.integers(1, 700), n=st.integers(1, 900), seed=st.integers(0, 2**16),
       dtype=st.sampled_from(ALL_DTYPES), act=st.sampled_from([None, "relu", "gelu", "silu"]),
       with_bias=st.booleans(), sparsity=st.sampled_from([None, None, "2:4"]))
def test_floats_within_the_format_error_bound(m: int, k: int, n: int, seed: int, dtype: str, act: str | None,
                                              with_bias: bool, sparsity: str | None) -> None:
    """Output of ``act(s · Σ a b + bias)``: |c - ref| ≤ u |ref| (rounding to the output: bf16 u = 2^-8, fp32
    for fp32 operands u = 2^-24) + L · (K · 2^-24 ·
    s · Σ|a||b| (fp32 accumulation) + 2^-22 (|s · Σ a b| + |bias|) (epilogue roundings)) + the smallest
    bf16 subnormal, with ``ref`` computed in float64 from the quantized operands the device multiplies."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    ops = prepare_matmul(a, b, dtype, sparsity)
    va, vb = ops.reference
    exact = ops.scale * (va @ vb)
    mag = ops.scale * (np.abs(va) @ np.abs(vb))
    pre = exact + (0 if bias is None else bias)
    ref = ACT[act](pre)
    bound = (U32 if dtype == "fp32" else BF16) * np.abs(ref) + LIPSCHITZ[act] * ((va.shape[1] + 2) * U32 * mag
                                                    + 4 * U32 * (np.abs(exact) + np.abs(pre))) + 2.0**-133
    got = kernels.matmul(a, b, dtype, sparsity=sparsity, bias=bias, activation=act)
    err = np.abs(got - ref)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), f"max excess {np.max(err - bound)} at {worst}"


def test_bf16_output_is_the_rounded_fp32_result() -> None:
    """With K ≤ 128 (one matmul, no PSUM accumulation) and exact products, the bf16 output is RNE of the
    fp32 sum: compare to ml_dtypes' rounding of numpy's fp32 result where that sum is exact."""
    rng = np.random.default_rng(5)
    a = (rng.integers(-64, 64, (40, 100)) / 8).astype(np.float32)
    b = (rng.integers(-64, 64, (100, 50)) / 8).astype(np.float32)
    got = kernels.matmul(a, b, "bf16")
    assert np.array_equal(got, (a @ b).astype(ml_dtypes.bfloat16).astype(np.float32))


def test_wide_n_runs_in_chunks_and_long_k_streams_the_moving_panel() -> None:
    rng = np.random.default_rng(6)
    a, b = small_ints(rng, (3, 5), "bf16"), small_ints(rng, (5, 4200), "bf16")
    assert np.array_equal(kernels.matmul(a, b, out_dtype="fp32"), a @ b)  # 3 column chunks of ≤ 2048
    a, b = small_ints(rng, (2, 12416), "bf16"), small_ints(rng, (12416, 600), "bf16")
    compiled = kernels.matmul_kernel.compile(dsl.typed(a, "bf16"), dsl.typed(b, "bf16"), out_dtype="fp32")
    loads = [i for i in compiled.program.stream("sync") if i.src.tensor == "b"]  # type: ignore[attr-defined]
    assert len(loads) == 97 * 2  # 97 K tiles × 2 column tiles, streamed: one group, a panel would save nothing
    assert np.array_equal(kernels.matmul(a, b, out_dtype="fp32"), a @ b)


def test_k_too_long_for_resident_groups_uses_8_bank_blocks() -> None:
    """fp32 with K = 4200 (33 K tiles of 2 KiB per 512-column group): two groups would take more than half
    the SBUF, so each block loads its group's K tiles and takes all 8 PSUM banks (4 × 2); still exact."""
    rng = np.random.default_rng(7)
    a, b = small_ints(rng, (520, 4200), "fp32"), small_ints(rng, (4200, 1024), "fp32")
    p = gemm.plan(520, 1024, 33, 4, 4, dsl_sbuf_bytes())
    assert (p.group, p.resident, p.banks, p.panel) == (512, False, 8, True)
    prog = kernels.matmul_kernel.compile(dsl.typed(a, "fp32"), dsl.typed(b, "fp32"), out_dtype="fp32").program
    assert len(hbm_loads(prog, "a")) == 33 * 2 and len(hbm_loads(prog, "b")) == 33 * 2  # one block per group
    assert len(prog.stream("tensor")) == 33 * (4 * 2 + 1 * 2)  # groups of 512 and 8 rows × 2 moving tiles
    assert np.array_equal(kernels.matmul(a, b, "fp32"), a.astype(np.float64) @ b)


def hbm_loads(prog: Program, tensor: str) -> list[Any]:
    return [i for i in prog.stream("sync") if i.src.memory == "hbm" and i.src.tensor == tensor]  # type: ignore[attr-defined]


def dsl_sbuf_bytes() -> int:
    return trnsim.hw.get("trn3").core.sbuf.bytes_per_partition  # type: ignore[union-attr]


def test_tiling_loads_each_tile_once_in_groups() -> None:
    """a.T in one DMA per K tile for a group of up to 4 stationary tiles (300 columns here), b in
    [128, 512] tiles; every element is loaded once, and TensorE gets [≤128, ≤512] products."""
    shapes = dsl.typed(np.zeros((300, 260)), "bf16"), dsl.typed(np.zeros((260, 1100)), "bf16")
    prog = kernels.matmul_kernel.compile(*shapes).program
    a_loads, b_loads = hbm_loads(prog, "a"), hbm_loads(prog, "b")
    assert [i.dst.partitions * i.dst.free_size for i in a_loads] == [128 * 300, 128 * 300, 4 * 300]
    assert len(b_loads) == 3 * 3 and sum(i.dst.partitions * i.dst.free_size for i in b_loads) == 260 * 1100
    mm = prog.stream("tensor")
    assert len(mm) == 3 * 3 * 3
    assert {i.moving.free_size for i in mm} == {512, 76}  # type: ignore[attr-defined]
    assert {i.stationary.free_size for i in mm} == {128, 44}  # type: ignore[attr-defined]


def test_resident_groups_and_panel_load_both_operands_once() -> None:
    """Two 512-row groups share a resident panel of b: a and b each cross the DMA queues once, and each
    block of 4 PSUM banks (4 stationary tiles × 1 moving tile) accumulates all of K before its stores."""
    shapes = spec((1024, 512), "bf16"), spec((512, 2048), "bf16")
    p = gemm.plan(1024, 2048, 4, 2, 2, dsl_sbuf_bytes())
    assert (p.group, p.resident, p.chunk, p.panel) == (512, True, 2048, True)
    prog = kernels.matmul_kernel.compile(*shapes).program
    assert len(hbm_loads(prog, "a")) == 2 * 4 and len(hbm_loads(prog, "b")) == 4 * 4
    assert len(prog.stream("tensor")) == 8 * 4 * 4
    stores = [i for i in prog.stream("sync") if i.dst.memory == "hbm"]  # type: ignore[attr-defined]
    assert len(stores) == 7 * 4 + 4 * 4  # the last block's 4 in row quarters: the tail runs on 16 queues
    assert sum(i.dst.partitions * i.dst.free_size for i in stores) == 1024 * 2048


def test_narrow_transposed_loads_are_split_over_the_queues() -> None:
    """1-byte a.T cannot take the DMA-transpose path (neuron.md §1.3): its group loads are cut into
    128-column DMAs, one per stationary tile."""
    shapes = spec((512, 256), "fp8_e4m3"), spec((256, 512), "fp8_e4m3")
    prog = kernels.matmul_kernel.compile(*shapes).program
    a_loads = hbm_loads(prog, "a")
    assert len(a_loads) == 2 * 4 and {i.dst.free_size for i in a_loads} == {128}
    assert len({i.queue for i in a_loads}) == 8


@pytest.mark.parametrize(("m", "k", "n", "floor"), [(2048, 2048, 2048, 0.9), (512, 4096, 4096, 0.9)])
def test_large_bf16_gemm_keeps_tensore_busy(m: int, k: int, n: int, floor: float) -> None:
    """Timing-only: loads run ahead of the matmuls and stores after the epilogues, so TensorE is busy all
    but the pipeline's fill and drain (HFU 95.2% and 95.0% when written; the first was 70% with loads
    issued behind the previous block's stores)."""
    res = trnsim.run_kernel(kernels.matmul_kernel, spec((m, k), "bf16"), spec((k, n), "bf16"), timing=True)
    assert res.profile is not None and res.profile.hfu >= floor


@pytest.mark.parametrize("dtype", ["bf16", "mxfp4_e2m1"])
def test_doc_examples(dtype: str) -> None:
    import doctest

    from trnsim.kernels import operands

    for mod in (gemm, operands, kernels):
        assert doctest.testmod(mod).failed == 0
    assert kernels.matmul(np.ones((1, 64)), np.ones((64, 1)), dtype).tolist() == [[64.0]]
