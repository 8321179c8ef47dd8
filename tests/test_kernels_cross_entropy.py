"""trnsim.kernels.cross_entropy against float64 numpy: loss and gradient within bounds derived from the fp32
operations of the online log-sum-exp, and the output format of the gradient; -inf (masked) logits, rows at
large offsets, and the input errors of the kernel and its host wrapper."""

from __future__ import annotations

import doctest
import math
import re
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
from trnsim.dsl.errors import KernelError
from trnsim.isa.dma import DmaCopy
from trnsim.kernels import losses as ce

U32 = 2.0**-24  # fp32 unit roundoff
TINY = 2.0**-126  # fp32's (and bf16's) smallest normal: smaller results may underflow to subnormals or zero
UNIT = {"fp32": U32, "bf16": 2.0**-8}


def run_strict(compiled: dsl.Compiled, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled kernel on a device that faults on reads of memory nothing wrote."""
    feed = {name: a for name, a in zip(compiled.inputs, arrays, strict=True) if name is not None}
    return trnsim.Device("trn3", strict_reads=True).run(compiled.program, feed).outputs


def stored(x: np.ndarray, dtype: str) -> np.ndarray:
    return (x.astype(ml_dtypes.bfloat16) if dtype == "bf16" else x.astype(np.float32)).astype(np.float64)


def reference(x: np.ndarray, labels: np.ndarray, chunk: int, scale: float, out_unit: float,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(loss, dlogits, loss bound, dlogits bound) of rows with a finite max m; -inf logits add exp(-inf) = 0.
    Per row, with D = m - min(finite x) (every exponent x - m' and rescale argument m - m' is at most D in
    magnitude, whatever the offset of the row), σ = Σ exp(x - m) and K chunks: σ sums V terms (V·u
    relative); each term's exponent x - m' rounds (≤ D·u) and so does its exp (u); each of the K online
    rescales exp(m - m') rounds its argument and result and the fold σ·r + Σ rounds twice ((D + 4)·u), so
        rel(σ) ≤ (V + K·(D + 4) + D + 2)·u.
    The label's logit t is exact (a select, summed with zeros). The loss ln σ - (t - m) rounds the log, the
    difference and the result: |Δloss| ≤ rel(σ) + 2u·(L + 1) with L = ln σ + |m - t|. The gradient
    (p - onehot·σ)·(scale/σ) has p = exp(x - m) within u·(m - x + 1) relative, σ within rel(σ), and rounds
    scale, scale/σ, the difference and the product (4u·|g|); then the output format rounds (relative).
    Values below fp32's normal range are off by at most TINY (underflow). The loss and gradient are
    computed from the differences x - m, as the bounds are, so that a large offset of the row does not
    round them away in float64 either."""
    n, v = x.shape
    m = x.max(1, keepdims=True)
    finite = np.isfinite(x)
    below = np.where(finite, m - x, 0.0)  # m - x, 0 for masked entries (p = 0 exactly there)
    e = np.exp(x - m)
    s = e.sum(1, keepdims=True)
    rows = np.arange(n)
    loss = np.log(s[:, 0]) + (m[:, 0] - x[rows, labels])
    onehot = np.zeros_like(x)
    onehot[rows, labels] = 1.0
    p = e / s * scale
    grad = p - onehot * scale
    spread = below.max(1, keepdims=True)
    k = -(-v // chunk)
    rel_s = (v + k * (spread + 4) + spread + 2) * U32
    big_l = np.log(s[:, 0]) + np.abs(m[:, 0] - x[rows, labels])
    loss_bound = rel_s[:, 0] + 2 * U32 * (big_l + 1)
    fp32 = p * (rel_s + U32 * (below + 1)) + 4 * U32 * np.abs(grad) + TINY
    return loss, grad, loss_bound, fp32 + out_unit * (np.abs(grad) + fp32)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), v=st.integers(1, 3000), chunk=st.sampled_from([300, 512, 2048]),
       dtype=st.sampled_from(["fp32", "bf16"]), spread=st.sampled_from([0.1, 3.0, 30.0]), mean=st.booleans(),
       offset=st.sampled_from([20.0, 1e4, 1e8]), seed=st.integers(0, 2**16))
# a bf16 rescale was off by 2^-8
@example(n=1, v=384, chunk=300, dtype="bf16", spread=0.1, mean=False, offset=20.0, seed=36)
def test_cross_entropy_any_shape(n: int, v: int, chunk: int, dtype: str, spread: float, mean: bool, offset: float,
                                 seed: int) -> None:
    """Any N (row blocks), any V (chunks of ``chunk`` with a ragged last one), logits up to ±120 (spread 30)
    where a sum of exp without max-subtraction overflows fp32, and rows offset by up to 1e8 (where ln V is
    below the ulp of the logits: the bounds depend on the spread of a row, not its offset)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, v)) * spread + rng.uniform(-offset, offset, (n, 1))).astype(np.float32)
    labels = rng.integers(0, v, n).astype(np.int32)
    res = trnsim.run_kernel(ce.cross_entropy_kernel, dsl.typed(x, dtype), labels, mean=mean, chunk=chunk)
    loss, grad = res.outputs
    ref_loss, ref_grad, loss_bound, grad_bound = reference(stored(x, dtype), labels, chunk, 1 / n if mean else 1.0,
                                                           UNIT[dtype])
    assert loss.shape == (n,) and grad.shape == (n, v)
    assert (np.abs(loss - ref_loss) <= loss_bound).all(), float(np.max(np.abs(loss - ref_loss) - loss_bound))
    assert (np.abs(grad - ref_grad) <= grad_bound).all(), float(np.max(np.abs(grad - ref_grad) - grad_bound))


@settings(max_examples=10, deadline=None)
@given(v=st.integers(1, 40), chunk=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_online_softmax_in_tiny_chunks(v: int, chunk: int, seed: int) -> None:
    """Chunks of 1..5 columns: the running max changes at many chunks (logits sorted ascending so it
    rises at every one), each time rescaling the running sum."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.standard_normal((5, v)) * 10, axis=1).astype(np.float32)
    labels = rng.integers(0, v, 5).astype(np.int32)
    loss, grad = trnsim.run_kernel(ce.cross_entropy_kernel, x, labels, chunk=chunk).outputs
    ref_loss, ref_grad, loss_bound, grad_bound = reference(x.astype(np.float64), labels, chunk, 1 / 5, U32)
    assert (np.abs(loss - ref_loss) <= loss_bound).all()
    assert (np.abs(grad - ref_grad) <= grad_bound).all()


def test_large_vocabulary_streams_twice() -> None:
    """V = 40000 fp32 (156 KiB a row) is too big to keep: each chunk is loaded in both passes; the result is
    the same as with everything resident."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 40000)) * 4).astype(np.float32)
    labels = np.array([0, 39999, 12345], np.int32)
    res = trnsim.run_kernel(ce.cross_entropy_kernel, x, labels)
    ref_loss, ref_grad, loss_bound, grad_bound = reference(x.astype(np.float64), labels, ce.CHUNK, 1 / 3, U32)
    assert (np.abs(res.outputs[0] - ref_loss) <= loss_bound).all()
    assert (np.abs(res.outputs[1] - ref_grad) <= grad_bound).all()
    loads = [i for i in res.program.streams["sync"] if isinstance(i, DmaCopy) and i.dst.on_chip]
    chunks = -(-40000 // ce.CHUNK)
    assert len(loads) == 2 * chunks + 1  # every chunk twice, plus the labels


def test_gradient_rows_sum_to_zero_and_equal_logits_give_log_v() -> None:
    """Equal logits: loss = ln V and the gradient is 1/V off the label, 1/V - 1 on it (exact in fp32 for V a
    power of two)."""
    loss, grad = kernels.cross_entropy(np.zeros((4, 256), np.float32), [0, 1, 2, 255], mean=False)
    np.testing.assert_allclose(loss, math.log(256), rtol=4 * U32)
    expect = np.full((4, 256), 1 / 256)
    expect[np.arange(4), [0, 1, 2, 255]] -= 1
    assert np.array_equal(grad, expect)


def test_label_outside_the_vocabulary_matches_nothing() -> None:
    """A label such as -100 (an ignore index) selects no column: loss = logsumexp, gradient = softmax."""
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    loss, grad = kernels.cross_entropy(x, [-100], mean=False)
    lse = math.log(np.exp(x.astype(np.float64)).sum())
    assert abs(float(loss[0]) - lse) <= 8 * U32 * (lse + 4)
    np.testing.assert_allclose(grad[0], np.exp(x[0] - lse), rtol=16 * U32 * (lse + 4))


def test_engines_and_strict_reads() -> None:
    """The one-hot runs on GpSimd (its iota once), exp on ScalarE, the rest on VectorE; no read of unwritten
    memory (ragged row block and chunk)."""
    x = np.random.default_rng(2).standard_normal((130, 300)).astype(np.float32)
    labels = np.arange(130, dtype=np.int32)
    compiled = ce.cross_entropy_kernel.compile(x, labels, chunk=128)
    streams = compiled.program.streams
    assert [i.mnemonic for i in streams["gpsimd"]].count("iota") == 1
    assert {i.mnemonic for i in streams["gpsimd"]} == {"iota", "tensor_scalar"}
    assert {i.mnemonic for i in streams["scalar"]} == {"activation"}
    run_strict(compiled, (x, labels))
    assert doctest.testmod(ce).failed == 0


def check(x: np.ndarray, labels: np.ndarray, dtype: str = "fp32", chunk: int = ce.CHUNK, mean: bool = True,
          ) -> tuple[np.ndarray, np.ndarray]:
    """Run the kernel and compare with ``reference`` (finite results only where the reference is finite)."""
    n = x.shape[0]
    loss, grad = trnsim.run_kernel(ce.cross_entropy_kernel, dsl.typed(x, dtype), labels.astype(np.int32),
                                   mean=mean, chunk=chunk).outputs
    ref_loss, ref_grad, loss_bound, grad_bound = reference(stored(x, dtype), labels, chunk, 1 / n if mean else 1.0,
                                                           UNIT[dtype])
    assert np.isfinite(loss).all() and np.isfinite(grad).all()
    assert (np.abs(loss - ref_loss) <= loss_bound).all(), float(np.max(np.abs(loss - ref_loss) - loss_bound))
    assert (np.abs(grad - ref_grad) <= grad_bound).all(), float(np.max(np.abs(grad - ref_grad) - grad_bound))
    return loss, grad


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("chunk", [ce.CHUNK, 64])
def test_minus_inf_logits_are_masked_entries(dtype: str, chunk: int) -> None:
    """-inf logits off the label (a masked vocabulary) add exp(-inf) = 0 to the sum and get a gradient of
    exactly 0; they are never multiplied by the one-hot's zeros (0 · -inf = NaN). A -inf label logit gives
    the loss +inf."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 300)) * 3).astype(np.float32)
    labels = np.array([1, 2, 3, 299, 0])
    x[1, 7] = -np.inf
    x[2, ::2] = -np.inf  # every other entry, the label (3) kept
    x[3, :299] = -np.inf  # everything but the label: loss 0
    x[4, 1:] = -np.inf
    _, grad = check(x, labels, dtype, chunk)
    masked = np.isneginf(x)
    assert (grad[masked] == 0).all()
    loss, grad = trnsim.run_kernel(ce.cross_entropy_kernel, dsl.typed(x, dtype), np.array([1, 2, 4, 299, 0], np.int32),
                                   chunk=chunk).outputs
    assert loss[2] == np.inf and np.isfinite(loss[[0, 1, 3, 4]]).all() and np.isfinite(grad).all()


@pytest.mark.parametrize("v", [5000, 20000])  # resident rows, and rows streamed twice
@pytest.mark.parametrize("masked", [(0, ce.CHUNK), (ce.CHUNK, 2 * ce.CHUNK), (0, 2 * ce.CHUNK + 5)])
def test_a_chunk_without_a_finite_logit(v: int, masked: tuple[int, int]) -> None:
    """A whole chunk of -inf (its -max is +inf): it adds 0 to the sum, and neither its exp(-inf + inf) nor
    the rescale of the next chunk is NaN; first chunks, a middle one, and a span of more than one."""
    rng = np.random.default_rng(19)
    x = rng.standard_normal((3, v)).astype(np.float32)
    x[:, masked[0] : masked[1]] = -np.inf
    labels = np.array([v - 1, masked[1], (masked[1] + v) // 2])
    _, grad = check(x, labels)
    assert (grad[:, masked[0] : masked[1]] == 0).all()


def test_a_row_without_a_finite_logit_has_no_softmax() -> None:
    """The module docstring: an all -inf row's gradient is NaN (its loss too, for a label in range; for
    one outside, logsumexp = -inf); the other rows of its block are unaffected."""
    x = np.zeros((3, 5000), np.float32)
    x[1] = -np.inf
    loss, grad = trnsim.run_kernel(ce.cross_entropy_kernel, x, np.array([0, 1, 2], np.int32)).outputs
    assert np.isnan(loss[1]) and np.isnan(grad[1]).all()
    np.testing.assert_allclose(loss[[0, 2]], math.log(5000), rtol=4 * U32)
    loss, _ = trnsim.run_kernel(ce.cross_entropy_kernel, x, np.array([0, -100, 2], np.int32)).outputs
    assert loss[1] == -np.inf


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("c", [0.0, 1e5, 1e8, -1e30, 3e38, -3e38])
def test_equal_logits_give_log_v_whatever_their_value(c: float, dtype: str) -> None:
    """Rows of equal logits c: every x - m is 0, every term 1 and σ = V exactly, so the loss is ln V rounded
    once (u·ln V) and the gradient (1 - onehot·V)·fl(fl(1/N)/V) rounds three times (3u relative), then to
    the output format; a row's gradient sums to 0 within those roundings. (The exp bias -(m + ln σ)
    rounded ln σ at the ulp of c: loss 8.0 for c = 1e8.)"""
    v, labels = 300, np.array([1, 7, 299])
    loss, grad = trnsim.run_kernel(ce.cross_entropy_kernel, dsl.typed(np.full((3, v), c, np.float32), dtype),
                                   labels.astype(np.int32)).outputs
    assert (np.abs(loss - math.log(v)) <= U32 * math.log(v)).all(), loss
    expect = np.full((3, v), 1 / v / 3)
    expect[np.arange(3), labels] -= 1 / 3
    bound = 3 * U32 * np.abs(expect)
    bound += UNIT[dtype] * (np.abs(expect) + bound)
    assert (np.abs(grad - expect) <= bound).all()
    assert (np.abs(grad.astype(np.float64).sum(1)) <= bound.sum(1)).all()


@pytest.mark.parametrize(("dtype", "offset"), [("fp32", 2.0**16), ("fp32", -(2.0**20)), ("bf16", 16.0)])
def test_an_exact_offset_changes_nothing(dtype: str, offset: float) -> None:
    """x in eighths in [-2, 2) and x + offset are exact (fp32: 24 bits hold 2^20 in eighths; bf16: 8 bits
    hold 18 in eighths): every difference x - m is the same exact number, so the loss and gradient are bit
    for bit equal (the fused exp bias made the loss of x + 2^16 differ by 3.6e-3), and both are within the
    bounds of the float64 reference."""
    rng = np.random.default_rng(0)
    x = (rng.integers(-16, 16, (3, 3000)) / 8).astype(np.float32)
    labels = np.array([1, 7, 2999])
    loss0, grad0 = check(x, labels, dtype, chunk=512)
    loss1, grad1 = check(x + np.float32(offset), labels, dtype, chunk=512)
    assert np.array_equal(loss0, loss1) and np.array_equal(grad0, grad1)


@pytest.mark.parametrize("offset", [-1e6, 3e4, 1e7])
def test_large_offsets_of_random_rows(offset: float) -> None:
    """Random logits (spread 4) offset by up to 1e7, where an fp32 ulp of the logits exceeds ln V's size:
    within the float64 reference's bounds, which depend on the spread only."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((130, 3000)) * 4 + offset * rng.uniform(0.5, 1, (130, 1))).astype(np.float32)
    check(x, rng.integers(0, 3000, 130), chunk=1024)


def test_bad_labels_and_dtypes_are_errors() -> None:
    """Labels that cannot be represented (floats, NaN, values outside int32), a labels shape other than
    (N,), dtypes other than bf16/fp32 and logits that are not 2-D are KernelErrors naming the problem, on the
    host wrapper and (for what it can see) the kernel; chunk must be ≥ 1."""
    x = np.zeros((4, 10), np.float32)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: kernels.cross_entropy(x, np.array([3.9, 3, 3, 3])), "dtype float64"),
        (lambda: kernels.cross_entropy(x, np.array([np.nan, 3, 3, 3])), "dtype float64"),
        (lambda: kernels.cross_entropy(x, [True, False, True, False]), "dtype bool"),
        (lambda: kernels.cross_entropy(x, np.array([2**32 + 3, 3, 3, 3])), "4294967299 does not fit int32"),
        (lambda: kernels.cross_entropy(x, np.array([-(2**31) - 1, 3, 3, 3])), "does not fit int32"),
        (lambda: kernels.cross_entropy(x, [1, 2, 3, 4, 5]), "labels (5,) for 4 rows"),
        (lambda: kernels.cross_entropy(x, [[1, 2, 3, 4]]), "labels (1, 4) for 4 rows"),
        (lambda: kernels.cross_entropy(x, [1, 2, 3, 4], dtype="int8"), "int8 logits"),
        (lambda: kernels.cross_entropy(x, [1, 2, 3, 4], dtype="fp8_e4m3"), "fp8_e4m3 logits"),
        (lambda: kernels.cross_entropy(np.zeros(10), [1]), "logits (10,)"),
        (lambda: trnsim.run_kernel(ce.cross_entropy_kernel, x, np.arange(5, dtype=np.int32)), "labels (5,)"),
        (lambda: trnsim.run_kernel(ce.cross_entropy_kernel, x, np.zeros(4, np.float32)), "labels of dtype fp32"),
        (lambda: trnsim.run_kernel(ce.cross_entropy_kernel, x[None], np.zeros(4, np.int32)), "logits (1, 4, 10)"),
        (lambda: trnsim.run_kernel(ce.cross_entropy_kernel, x, np.zeros(4, np.int32), chunk=0), "chunk=0"),
    ]
    for call, words in cases:
        with pytest.raises(KernelError, match=re.escape(words)):
            call()


def test_labels_outside_the_vocabulary_that_fit_int32_still_match_nothing() -> None:
    """-100, V, and int32's extremes are labels of no class (the documented ignore-index behaviour): the
    loss is logsumexp and the gradient the softmax, as for any out-of-range label."""
    x = (np.random.default_rng(4).standard_normal((4, 10)) * 2).astype(np.float32)
    loss, grad = kernels.cross_entropy(x, np.array([-100, 10, 2**31 - 1, -(2**31)], np.int64), mean=False)
    x64 = x.astype(np.float64)
    m = x64.max(1, keepdims=True)
    s = np.exp(x64 - m).sum(1, keepdims=True)
    np.testing.assert_allclose(loss, (m + np.log(s))[:, 0], rtol=16 * U32)
    np.testing.assert_allclose(grad, np.exp(x64 - m) / s, rtol=16 * U32, atol=TINY)
