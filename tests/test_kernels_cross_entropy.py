"""trnsim.kernels.cross_entropy against float64 numpy: loss and gradient within bounds derived from the fp32
operations of the online log-sum-exp, and the output format of the gradient."""

from __future__ import annotations

import doctest
import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
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
    """(loss, dlogits, loss bound, dlogits bound). Per row, with M = max|x|, ln s ≤ ln V and K chunks:
    s = Σ exp(x - m) sums V terms (V·u relative); each term's exponent x - m' rounds (≤ 2M·u), and each of
    the K online rescales exp(m - m') rounds its argument and result ((2M + 4)·u), so
        rel(s) ≤ (V + K·(2M + 4) + 2M + 2)·u.
    The label's logit is exact (one-hot · x sums one product with zeros). The loss ln s + m - x[label]
    rounds three times: |Δloss| ≤ rel(s) + 2u·L with L = ln s + M + |ln scale| + 1 bounding every operand.
    The gradient's exp(x + bias) has bias = -(m + ln s) + ln scale off by ≤ rel(s) + 3u·L and rounds
    x + bias and the exp (≤ u·(L + M) + u): p is within rel(s) + 5u·L relative; the one-hot · scale
    rounds once (u·scale) and p - onehot once (u·|g|); then the output format rounds (relative). Values
    below fp32's normal range are off by at most TINY (underflow)."""
    n, v = x.shape
    m = x.max(1, keepdims=True)
    s = np.exp(x - m).sum(1, keepdims=True)
    lse = m + np.log(s)
    rows = np.arange(n)
    loss = lse[:, 0] - x[rows, labels]
    onehot = np.zeros_like(x)
    onehot[rows, labels] = 1.0
    p = np.exp(x - lse) * scale
    grad = p - onehot * scale
    big_m = np.abs(x).max(1, keepdims=True)
    k = -(-v // chunk)
    rel_s = (v + k * (2 * big_m + 4) + 2 * big_m + 2) * U32
    big_l = np.log(s) + big_m + abs(math.log(scale)) + 1
    loss_bound = (rel_s + 2 * U32 * big_l)[:, 0]
    fp32 = p * (rel_s + 5 * U32 * big_l) + U32 * scale * onehot + U32 * np.abs(grad) + TINY
    return loss, grad, loss_bound, fp32 + out_unit * (np.abs(grad) + fp32)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), v=st.integers(1, 3000), chunk=st.sampled_from([300, 512, 2048]),
       dtype=st.sampled_from(["fp32", "bf16"]), spread=st.sampled_from([0.1, 3.0, 30.0]), mean=st.booleans(),
       seed=st.integers(0, 2**16))
@example(n=1, v=384, chunk=300, dtype="bf16", spread=0.1, mean=False, seed=36)  # a bf16 rescale was off by 2^-8
def test_cross_entropy_any_shape(n: int, v: int, chunk: int, dtype: str, spread: float, mean: bool,
                                 seed: int) -> None:
    """Any N (row blocks), any V (chunks of ``chunk`` with a ragged last one), logits up to ±120 (spread 30)
    where a sum of exp without max-subtraction overflows fp32."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, v)) * spread + rng.uniform(-20, 20, (n, 1))).astype(np.float32)
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
