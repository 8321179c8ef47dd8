"""trnsim.kernels.attention: flash attention forward and backward against float64 softmax attention.

The reference is exact (float64) attention of the values the device holds (inputs rounded to the format)
and its analytic gradient. Tolerances are first-order error bounds built from the formats, elementwise
(``forward_bounds``, ``backward_bounds``): every rounding the kernel does is a relative error of at most
``u`` (bf16 2^-8, fp16 2^-11, fp32 2^-24) on a known quantity, and an fp32 sum of n terms is off by at most
``n·2^-24`` times the sum of its magnitudes. The bounds are doubled to cover second-order terms.
"""

from __future__ import annotations

import doctest
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

import trnsim
from trnsim import dsl
from trnsim.dsl import KernelError, typed
from trnsim.kernels import attention, attention_backward, attention_tiles
from trnsim.kernels.attention import (
    flash_attention,
    flash_attention_backward,
    flash_attention_backward_kernel,
    flash_attention_kernel,
)

F64 = NDArray[np.float64]
U = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}  # unit roundoff of P, dS and the outputs
U32 = 2.0**-24  # fp32: the engines' arithmetic and TensorE/PSUM accumulation
NUMPY = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}


def held(x: NDArray[Any], dtype: str) -> F64:
    """The values of ``x`` rounded to ``dtype`` (what the device holds), exactly, in float64."""
    return np.asarray(x, np.float32).astype(NUMPY[dtype]).astype(np.float64)


def mT(x: F64) -> F64:
    return np.swapaxes(x, -1, -2)


class Reference(NamedTuple):
    s: F64  # scaled scores, -inf where masked
    p: F64  # softmax probabilities
    o: F64
    lse: F64


def reference(q: F64, k: F64, v: F64, causal: bool, scale: float) -> Reference:
    s = q @ mT(k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(-1, keepdims=True)
    return Reference(s, p, p @ v, (m + np.log(e.sum(-1, keepdims=True)))[..., 0])


def score_error(ref: Reference, q: F64, k: F64, scale: float, lse: F64) -> F64:
    """Bound on the error of the exp argument ``scale·S − shift`` (absolute), hence on P's relative error
    before rounding: S's fp32 accumulation over d, then the activation's fp32 multiply-add, then exp."""
    finite = np.isfinite(ref.s)
    s = np.where(finite, ref.s, 0.0)
    e = scale * q.shape[-1] * U32 * (np.abs(q) @ mT(np.abs(k))) + 4 * U32 * (np.abs(s) + np.abs(lse)[..., None]) + U32
    return np.where(finite, e, 0.0)


def forward_bounds(ref: Reference, q: F64, k: F64, v: F64, scale: float, dtype: str) -> tuple[F64, F64]:
    """Elementwise bounds on |o − o_ref| and |lse − lse_ref|. o = Σ p̃ v / l̃ with p̃ = p(1+ε)(1+δ) (ε the
    argument error, δ ≤ u the rounding of P before P·V) and l̃ = Σ p(1+ε) in fp32; then o rounds to dtype."""
    u, n_k, p = U[dtype], k.shape[-2], ref.p
    e_p = score_error(ref, q, k, scale, ref.lse)
    abs_o, p_absv = np.abs(ref.o), p @ np.abs(v)
    spread = (p * e_p).sum(-1, keepdims=True)
    tol_o = (p * (e_p + u)) @ np.abs(v) + abs_o * (spread + n_k * U32 + u) + n_k * U32 * p_absv
    tol_lse = spread[..., 0] + n_k * U32 + 2 * U32 * np.abs(ref.lse)
    return 2 * tol_o, 2 * tol_lse


def backward_bounds(ref: Reference, q: F64, k: F64, v: F64, do: F64, o: F64, lse: F64, scale: float,
                    dtype: str, grads: tuple[F64, F64, F64]) -> tuple[F64, F64, F64]:
    """Elementwise bounds on the gradient errors, given the forward's ``o`` and ``lse`` the kernel used:
    P rounds to dtype (relative u, plus the argument error from S and lse), dP = dO Vᵀ and D = rowsum(dO ∘ o)
    accumulate in fp32 (and D sees o's own error), dS = P(dP − D) rounds to dtype, the gradients to dtype."""
    u, n_q, n_k, dv = U[dtype], q.shape[-2], k.shape[-2], v.shape[-1]
    p = ref.p
    e_p = score_error(ref, q, k, scale, lse) + np.abs(lse - ref.lse)[..., None]
    dp = do @ mT(v)
    dsum = (do * ref.o).sum(-1, keepdims=True)
    dd = (np.abs(do) * np.abs(o - ref.o)).sum(-1, keepdims=True) + dv * U32 * (np.abs(do) * np.abs(o)).sum(
        -1, keepdims=True)
    err_p = p * (e_p + u)
    e_dp = dv * U32 * (np.abs(do) @ mT(np.abs(v)))
    ds = p * (dp - dsum)
    err_ds = err_p * np.abs(dp - dsum) + p * (e_dp + dd + U32 * np.abs(dp - dsum)) + u * np.abs(ds)
    dq, dk, dvg = grads
    tol_dv = mT(err_p) @ np.abs(do) + n_q * U32 * (mT(p) @ np.abs(do)) + u * np.abs(dvg)
    tol_dk = scale * (mT(err_ds) @ np.abs(q) + n_q * U32 * (mT(np.abs(ds)) @ np.abs(q))) + u * np.abs(dk)
    tol_dq = scale * (err_ds @ np.abs(k) + n_k * U32 * (np.abs(ds) @ np.abs(k))) + u * np.abs(dq)
    return 2 * tol_dq, 2 * tol_dk, 2 * tol_dv


def gradients(ref: Reference, q: F64, k: F64, v: F64, do: F64, scale: float) -> tuple[F64, F64, F64]:
    """Analytic gradients of softmax attention (FlashAttention-2's formulas, in float64)."""
    dp = do @ mT(v)
    ds = ref.p * (dp - (do * ref.o).sum(-1, keepdims=True))
    return scale * ds @ k, scale * mT(ds) @ q, mT(ref.p) @ do


def within(name: str, got: NDArray[Any], want: F64, tol: F64) -> None:
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= tol)
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {err.size} outside the bound; worst excess "
                           f"{float((err - tol).max()):.3g} (error {float(err.max()):.3g})")


def check(shape: tuple[int, ...], seq_k: int, dv: int, causal: bool, dtype: str, kv_tile: int | None, seed: int,
          amplitude: float = 1.0) -> None:
    """Forward and backward of one case against the reference, within the format-derived bounds."""
    rng = np.random.default_rng(seed)
    *lead, seq_q, d = shape
    q = held(amplitude * rng.standard_normal(shape), dtype)
    k = held(amplitude * rng.standard_normal((*lead, seq_k, d)), dtype)
    v = held(rng.standard_normal((*lead, seq_k, dv)), dtype)
    do = held(rng.standard_normal((*lead, seq_q, dv)), dtype)
    scale = 1.0 / np.sqrt(d)
    o, lse = flash_attention(q, k, v, causal, dtype=dtype, kv_tile=kv_tile)
    ref = reference(q, k, v, causal, scale)
    tol_o, tol_lse = forward_bounds(ref, q, k, v, scale, dtype)
    within("o", o, ref.o, tol_o)
    within("lse", lse, ref.lse, tol_lse)
    got = flash_attention_backward(q, k, v, o, do, lse, causal, dtype=dtype)
    want = gradients(ref, q, k, v, do, scale)
    tols = backward_bounds(ref, q, k, v, do, o.astype(np.float64), lse.astype(np.float64), scale, dtype, want)
    for name, g, w, t in zip(("dq", "dk", "dv"), got, want, tols, strict=True):
        within(name, g, w, t)


@settings(max_examples=8, deadline=None)
@given(
    seq=st.integers(1, 260),
    d=st.sampled_from([1, 16, 40, 64, 128]),
    dv=st.sampled_from([None, 8, 128]),
    lead=st.sampled_from([(1,), (2,), (1, 2)]),
    causal=st.booleans(),
    dtype=st.sampled_from(["bf16", "bf16", "fp32"]),
    kv_tile=st.sampled_from([128, 256, None]),
    seed=st.integers(0, 2**16),
)
def test_matches_float64_attention_and_gradients(seq: int, d: int, dv: int | None, lead: tuple[int, ...],
                                                 causal: bool, dtype: str, kv_tile: int | None, seed: int) -> None:
    check((*lead, seq, d), seq, dv or d, causal, dtype, kv_tile, seed)


def test_cross_attention_fp16_and_large_scores() -> None:
    check((2, 130, 32), 390, 24, False, "fp16", 128, 1)  # seq_q ≠ seq_k, three softmax steps
    check((1, 1, 200, 64), 200, 64, True, "bf16", 128, 2, amplitude=6.0)  # scores of ±50: rescaling matters


def test_online_softmax_rescales_when_later_keys_dominate() -> None:
    """Scores growing along the keys: each key tile raises the running max, so every step rescales."""
    rng = np.random.default_rng(3)
    q = np.abs(rng.standard_normal((1, 128, 16))) + 0.5
    k = np.linspace(0.0, 8.0, 512)[None, :, None] * np.ones((1, 1, 16))
    v = rng.standard_normal((1, 512, 16))
    q, k, v = held(q, "fp32"), held(k, "fp32"), held(v, "fp32")
    ref = reference(q, k, v, False, 0.25)
    o, lse = flash_attention(q, k, v, scale=0.25, dtype="fp32", kv_tile=128)
    tol_o, tol_lse = forward_bounds(ref, q, k, v, 0.25, "fp32")
    within("o", o, ref.o, tol_o)
    within("lse", lse, ref.lse, tol_lse)
    assert ref.p[..., :384].sum() < 1e-3 * ref.p.sum()  # the last key tile holds nearly all the weight


class Spec(NamedTuple):
    shape: tuple[int, ...]
    dtype: str


def matmuls(kernel: dsl.Kernel, *specs: Spec, **params: object) -> int:
    compiled = kernel.compile(*specs, **params)
    return sum(ins.mnemonic == "matmul" for ins in compiled.program.streams["tensor"])


def test_causal_skips_the_blocks_past_the_diagonal() -> None:
    x = Spec((1, 512, 64), "bf16")
    # forward, 4 query tiles × 4 key tiles of 128: each block is one QKᵀ matmul and one P·V matmul
    assert matmuls(flash_attention_kernel, x, x, x, kv_tile=128) == 4 * 4 * 2
    assert matmuls(flash_attention_kernel, x, x, x, kv_tile=128, causal=True) == (1 + 2 + 3 + 4) * 2
    # backward, one key tile of 512: per query tile an S and a dP matmul (as wide as the keys it sees), and
    # per (query tile, 128 keys) block a dV, a dK and a dQ matmul
    lse = Spec((1, 512), "fp32")
    assert matmuls(flash_attention_backward_kernel, x, x, x, x, x, lse) == 4 * 2 + 16 * 3
    assert matmuls(flash_attention_backward_kernel, x, x, x, x, x, lse, causal=True) == 4 * 2 + 10 * 3


def test_streaming_keys_and_queries_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heads too long to keep in SBUF load K/V (forward) and the query side (backward) per use instead."""
    rng = np.random.default_rng(4)
    q, k, v, do = (typed(rng.standard_normal((2, 200, 32)), "bf16") for _ in range(4))
    o, lse = trnsim.run_kernel(flash_attention_kernel, q, k, v, causal=True, kv_tile=128).outputs
    grads = trnsim.run_kernel(flash_attention_backward_kernel, q, k, v, typed(o, "bf16"), do, lse).outputs
    monkeypatch.setattr(attention_tiles, "CACHE_BYTES", 0)
    fwd, bwd = dsl.kernel(flash_attention_kernel.fn), dsl.kernel(flash_attention_backward_kernel.fn)  # no cache
    res = trnsim.run_kernel(fwd, q, k, v, causal=True, kv_tile=128)
    assert all(np.array_equal(a, b) for a, b in zip(res.outputs, (o, lse), strict=True))
    streamed = trnsim.run_kernel(bwd, q, k, v, typed(o, "bf16"), do, lse)
    assert all(np.array_equal(a, b) for a, b in zip(streamed.outputs, grads, strict=True))
    assert len(streamed.program.streams["sync"]) > len(res.program.streams["sync"])


@pytest.mark.parametrize(("shapes", "params", "match"), [
    (((1, 8, 130), (1, 8, 130), (1, 8, 130)), {}, "at most 128"),
    (((1, 8, 16), (1, 9, 16), (1, 9, 16)), {"causal": True}, "seq_q == seq_k"),
    (((1, 8, 16), (1, 9, 16), (1, 8, 16)), {}, "one value row per key"),
    (((8, 16),), {}, "batch, heads, seq, d"),
    (((1, 8, 16), (1, 8, 16), (1, 8, 16)), {"kv_tile": 100}, "multiple of 128 up to 1536 for fp32"),
    (((1, 8, 16), (1, 8, 16), (1, 8, 16)), {"kv_tile": 2048}, "multiple of 128 up to 1536 for fp32"),
    (((1, 8, 16), (1, 8, 16), (1, 8, 16)), {"scale": -1.0}, "positive"),
])
def test_errors_name_the_problem(shapes: tuple[tuple[int, ...], ...], params: dict[str, Any], match: str) -> None:
    arrays = [np.zeros(s, np.float32) for s in shapes]
    arrays += [arrays[-1]] * (3 - len(arrays))
    with pytest.raises(KernelError, match=match) as info:
        trnsim.run_kernel(flash_attention_kernel, *arrays, **params)
    assert info.value.hint


def test_mixed_dtypes_and_host_dtype_errors() -> None:
    x = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(KernelError, match="dtypes"):
        trnsim.run_kernel(flash_attention_kernel, typed(x, "bf16"), x, x)
    with pytest.raises(KernelError, match="numpy dtype int64"):
        flash_attention(np.zeros((1, 4, 8), np.int64), x, x)
    with pytest.raises(KernelError, match="attention in fp8_e4m3"):
        flash_attention(x, x, x, dtype="fp8_e4m3")


def test_default_key_tile_fills_psum_with_two_steps() -> None:
    assert attention.max_kv_tile("bf16") == 2048 and attention.max_kv_tile("fp32") == 1536


def test_docstring_examples() -> None:
    result = doctest.testmod(attention)
    assert result.attempted and not result.failed
    assert not doctest.testmod(attention_backward).failed
