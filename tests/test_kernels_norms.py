"""trnsim.kernels layernorm / rmsnorm against float64 numpy, within bounds derived from fp32 arithmetic and the
output format (module docstrings of ``trnsim.kernels.norms`` say which engine does which step)."""

from __future__ import annotations

import doctest
from collections.abc import Sequence
from typing import NamedTuple

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
from trnsim.isa.dma import DmaCopy
from trnsim.isa.reduction import BN_STATS_FMAX
from trnsim.kernels import norms

U32 = 2.0**-24  # fp32 unit roundoff


class Shape(NamedTuple):
    """A shape description: kernels trace from it without data."""

    shape: tuple[int, ...]
    dtype: str

UNIT = {"fp32": U32, "bf16": 2.0**-8}  # unit roundoff of the output format


def run_strict(compiled: dsl.Compiled, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled kernel on a device that faults on reads of memory nothing wrote."""
    feed = {name: a for name, a in zip(compiled.inputs, arrays, strict=True) if name is not None}
    return trnsim.Device("trn3", strict_reads=True).run(compiled.program, feed).outputs


def stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values of ``x`` once stored as ``dtype`` (what the kernel reads)."""
    return (x.astype(ml_dtypes.bfloat16) if dtype == "bf16" else x.astype(np.float32)).astype(np.float64)


def inputs(rng: np.random.Generator, n: int, d: int, offset: float) -> tuple[np.ndarray, ...]:
    x = (offset + rng.standard_normal((n, d)) * rng.uniform(0.1, 10.0, (n, 1))).astype(np.float32)
    return x, rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)


def layernorm_bound(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out_unit: float,
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(reference, error bound). Per row, with A = rstd·max|x| + 1 and ŷ = (x - mean)·rstd:
    the mean is an fp32 sum of D terms, off by ≤ D·u·mean|x| (≤ D·u·A/rstd); the variance (bn_stats M2 per
    ≤ 512, bn_aggr's combination) by ≤ (D + 8)·u·(1 + 4A) relative, so rstd by half that plus 2u; the fused
    x·rstd + nbias rounds twice (≤ 3u·A). So |Δŷ| ≤ (D + 8)·u·A·(1 + 3|ŷ|); then ·gamma + beta rounds twice
    more, and the output format rounds once (its unit roundoff, relative)."""
    d = x.shape[1]
    mean = x.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(1, keepdims=True) + eps)
    yhat = (x - mean) * rstd
    ref = yhat * gamma + beta
    a = rstd * np.abs(x).max(1, keepdims=True) + 1.0
    fp32 = np.abs(gamma) * (d + 8) * U32 * a * (1 + 3 * np.abs(yhat)) + 2 * U32 * (np.abs(yhat * gamma) + np.abs(beta))
    return ref, fp32 + out_unit * (np.abs(ref) + fp32)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 1300), dtype=st.sampled_from(["fp32", "bf16"]),
       offset=st.sampled_from([0.0, 3.0, 1000.0]), eps=st.sampled_from([1e-5, 1e-2]), seed=st.integers(0, 2**16))
def test_layernorm_any_shape(n: int, d: int, dtype: str, offset: float, eps: float, seed: int) -> None:
    """Any N (row blocks of 128 and a ragged one), any D (bn_stats chunks of 512 and a ragged one); an offset
    of 1000 (|mean| ≫ std) would wreck an E[x²] - E[x]² variance but not bn_stats/bn_aggr's."""
    x, gamma, beta = inputs(np.random.default_rng(seed), n, d, offset)
    got = kernels.layernorm(x, gamma, beta, eps, dtype=dtype)
    ref, bound = layernorm_bound(stored(x, dtype), gamma.astype(np.float64), beta.astype(np.float64), eps,
                                 UNIT[dtype])
    assert got.shape == (n, d)
    assert (np.abs(got - ref) <= bound).all(), float(np.max(np.abs(got - ref) - bound))


def rmsnorm_bound(x: np.ndarray, gamma: np.ndarray, eps: float, out_unit: float) -> tuple[np.ndarray, np.ndarray]:
    """(reference, error bound): Σx² sums D rounded squares (≤ (D + 1)·u relative, all terms positive),
    · 1/D + eps adds 3u, rsqrt halves that and adds u, · rstd · gamma 2u: every element is within
    (D/2 + 6)·u of the reference, relative; then the output format rounds once."""
    d = x.shape[1]
    ref = x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * gamma
    fp32 = (d / 2 + 6) * U32 * np.abs(ref)
    return ref, fp32 + out_unit * (np.abs(ref) + fp32)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 4500), dtype=st.sampled_from(["fp32", "bf16"]),
       eps=st.sampled_from([1e-6, 1e-1]), seed=st.integers(0, 2**16))
def test_rmsnorm_any_shape(n: int, d: int, dtype: str, eps: float, seed: int) -> None:
    """Any N, any D (column chunks of 2048 whose partial Σx² VectorE adds)."""
    x, gamma, _ = inputs(np.random.default_rng(seed), n, d, 0.5)
    got = kernels.rmsnorm(x, gamma, eps, dtype=dtype)
    ref, bound = rmsnorm_bound(stored(x, dtype), gamma.astype(np.float64), eps, UNIT[dtype])
    assert got.shape == (n, d)
    assert (np.abs(got - ref) <= bound).all(), float(np.max(np.abs(got - ref) - bound))


def test_wide_rows_and_bf16_output_are_rounded_once() -> None:
    """D = 16384 bf16 (32 bn_stats chunks, 8 normalising chunks) fits SBUF with three row blocks; the output
    is the fp32 result rounded to bf16 once, so it is within one bf16 rounding (plus the fp32 bound) of the
    reference. The documented widest rows trace for many row blocks."""
    for dtype, d in (("bf16", 16384), ("fp32", 8192)):
        for kernel, vectors in ((norms.layernorm_kernel, 2), (norms.rmsnorm_kernel, 1)):
            kernel.compile(Shape((1024, d), dtype), *[Shape((d,), "fp32")] * vectors)
    x, gamma, beta = inputs(np.random.default_rng(7), 300, 16384, 1.0)
    ref, bound = layernorm_bound(stored(x, "bf16"), gamma.astype(np.float64), beta.astype(np.float64), 1e-5,
                                 UNIT["bf16"])
    got = kernels.layernorm(x, gamma, beta, dtype="bf16")
    assert (np.abs(got - ref) <= bound).all()
    assert np.array_equal(got, got.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_constant_rows_give_beta() -> None:
    """Zero variance: (x - mean) is exactly 0, so the output is exactly beta (and rmsnorm of zeros is 0)."""
    x = np.full((5, 700), 3.25, np.float32)
    gamma, beta = np.arange(700, dtype=np.float32), np.linspace(-1, 1, 700, dtype=np.float32)
    assert np.array_equal(kernels.layernorm(x, gamma, beta), np.broadcast_to(beta, x.shape))
    assert np.array_equal(kernels.rmsnorm(np.zeros_like(x), gamma), np.zeros_like(x))


def test_dma_pattern_and_engines() -> None:
    """Each element of x is loaded once and stored once, gamma/beta loaded once, in pieces over all 16 DMA
    queues; block 1's load is issued before block 0's store (prefetch); bn_stats per 512 columns."""
    n, d = 300, 1100
    prog = norms.layernorm_kernel.compile(np.zeros((n, d), np.float32), np.zeros(d, np.float32),
                                          np.zeros(d, np.float32)).program
    dmas = [i for i in prog.streams["sync"] if isinstance(i, DmaCopy)]
    assert len(dmas) == len(prog.streams["sync"])
    sizes = {name: sum(i.dst.size for i in dmas if name in (i.src.tensor, i.dst.tensor)) for name in "xy"}
    assert sizes == {"x": n * d, "y": n * d}
    assert sum(i.dst.size for i in dmas if i.src.tensor in ("gamma", "beta")) == 2 * 128 * d
    assert len({i.queue for i in dmas}) == 16
    first_store = next(k for k, i in enumerate(dmas) if i.dst.tensor == "y")
    assert any(i.src.tensor == "x" and i.src.offset >= 128 * d * 4 for i in dmas[:first_store])
    mnemonics = [(e, i.mnemonic) for e, st in prog.streams.items() for i in st]
    blocks, stat_chunks = 3, -(-d // BN_STATS_FMAX)
    assert mnemonics.count(("vector", "bn_stats")) == blocks * stat_chunks
    assert mnemonics.count(("vector", "bn_aggr")) == blocks
    assert mnemonics.count(("scalar", "activation")) == blocks * 2  # rsqrt + one normalising chunk
    assert {e for e, st in prog.streams.items() if st} == {"sync", "vector", "scalar"}


def test_bn_stats_out_collects_records() -> None:
    """dsl.bn_stats(..., out=) writes a record into a slice of a wider tile, for bn_aggr (the DSL addition)."""
    @trnsim.kernel
    def mean_var(x: dsl.Tensor) -> dsl.Tensor:
        out = dsl.hbm_tensor((x.shape[0], 2), "fp32")
        t = dsl.load(x)
        stats = dsl.sbuf((x.shape[0], 6))
        dsl.bn_stats(t[:, 0:4], out=stats[:, 0:3])
        dsl.bn_stats(t[:, 4:10], out=stats[:, 3:6])
        dsl.store(out, dsl.bn_aggr(stats))
        return out

    x = np.arange(30, dtype=np.float32).reshape(3, 10) ** 2 / 7
    got = trnsim.run_kernel(mean_var, x).outputs[0]
    np.testing.assert_allclose(got, np.stack([x.mean(1), x.var(1)], 1), rtol=10 * 8 * U32)


def test_strict_reads_and_docstrings() -> None:
    """No instruction reads memory nothing wrote (e.g. rows past a ragged block); the examples run."""
    x = np.random.default_rng(1).standard_normal((130, 600)).astype(np.float32)
    g = np.ones(600, np.float32)
    for k, args in ((norms.layernorm_kernel, (x, g, g)), (norms.rmsnorm_kernel, (x, g))):
        compiled = k.compile(*args)
        run_strict(compiled, args)
    assert doctest.testmod(norms).failed == 0
