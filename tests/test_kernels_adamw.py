"""trnsim.kernels.adamw against a float64 transcription of torch.optim.AdamW, within bounds derived from the
fp32 operations of each output (every operation rounds once; every constant is rounded to fp32 once)."""

from __future__ import annotations

import doctest
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
from trnsim.isa.dma import DmaCopy
from trnsim.kernels import layout, optim

U32 = 2.0**-24  # fp32 unit roundoff

SHAPES = st.one_of(st.tuples(st.integers(1, 70000)), st.tuples(st.integers(1, 300), st.integers(1, 3000)),
                   st.tuples(st.integers(1, 3), st.integers(1, 40), st.integers(1, 300)))


def run_strict(compiled: dsl.Compiled, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled kernel on a device that faults on reads of memory nothing wrote."""
    feed = {name: a for name, a in zip(compiled.inputs, arrays, strict=True) if name is not None}
    return trnsim.Device("trn3", strict_reads=True).run(compiled.program, feed).outputs


def reference(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, b1: float, b2: float,
              eps: float, wd: float, step: int) -> tuple[np.ndarray, ...]:
    """(p', m', v', and their error bounds). torch.optim.AdamW in float64:
        p ← p·(1 - lr·wd);  m ← β1·m + (1-β1)·g;  v ← β2·v + (1-β2)·g²
        p ← p - lr/(1-β1^t) · m / (sqrt(v / (1-β2^t)) + eps)
    Bounds: m' sums two products of an fp32-rounded constant and a value (2u each) and rounds (u):
    |Δm'| ≤ 3u·(β1|m| + (1-β1)|g|). v' = β2·v + (sqrt(1-β2)·g)² : ≤ 6u relative (all terms ≥ 0).
    den = (sqrt(v'·(1/(1-β2^t))) + eps)·(-(1-β1^t)/lr): v' 6u, the constant and product 2u, sqrt halves
    (4u) and rounds (u), + eps (u), the last product 2u: ≤ 8u relative. The update m'/den is off by
    (|Δm'| + 9u·|m'|)/den; p·(1 - lr·wd) by 2u·|p(1-lr·wd)|, and the last sum rounds (u·|p'|)."""
    p, g, m, v = (a.astype(np.float64) for a in (p, g, m, v))
    decayed = p * (1 - lr * wd)
    m_new = b1 * m + (1 - b1) * g
    v_new = b2 * v + (1 - b2) * g * g
    step_size = lr / (1 - b1**step)
    den = np.sqrt(v_new / (1 - b2**step)) + eps
    upd = step_size * m_new / den
    p_new = decayed - upd
    m_bound = 3 * U32 * (b1 * np.abs(m) + (1 - b1) * np.abs(g))
    v_bound = 6 * U32 * v_new
    p_bound = step_size * (m_bound + 9 * U32 * np.abs(m_new)) / den + 2 * U32 * np.abs(decayed) + U32 * np.abs(p_new)
    return p_new, m_new, v_new, p_bound, m_bound, v_bound


@settings(max_examples=30, deadline=None)
@given(shape=SHAPES, lr=st.floats(1e-5, 0.1), beta1=st.floats(0.5, 0.99), beta2=st.floats(0.9, 0.99999),
       eps=st.sampled_from([1e-8, 1e-6]), wd=st.sampled_from([0.0, 0.01, 0.1]), step=st.integers(1, 5000),
       grad_dtype=st.sampled_from(["fp32", "bf16"]), seed=st.integers(0, 2**16))
def test_adamw_any_shape(shape: tuple[int, ...], lr: float, beta1: float, beta2: float, eps: float, wd: float,
                         step: int, grad_dtype: str, seed: int) -> None:
    """1-D (runs of 128·2048 and a ragged [k, 1] tile), 2-D (rows packed, or [128, 2048] blocks when wide),
    3-D (per leading index); hyper-parameters across their usual ranges, first steps to late ones."""
    rng = np.random.default_rng(seed)
    p, g, m = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    v = (rng.random(shape) * rng.choice([1e-8, 1e-2, 1.0])).astype(np.float32)
    if grad_dtype == "bf16":
        g = g.astype(ml_dtypes.bfloat16).astype(np.float32)
    got = kernels.adamw(p, g, m, v, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd, step=step,
                        grad_dtype=grad_dtype)
    ref = reference(p, g, m, v, lr, beta1, beta2, eps, wd, step)
    for name, out, want, bound in zip("pmv", got, ref[:3], ref[3:], strict=True):
        assert out.shape == shape and out.dtype == np.float32
        err = np.abs(out - want)
        assert (err <= bound).all(), (name, float(np.max(err - bound)))


def test_first_step_moves_every_weight_by_lr() -> None:
    """At step 1 with m = v = 0 and wd = 0: m̂ = g and v̂ = g², so each weight moves by lr·g/(|g| + eps),
    i.e. by lr against the gradient's sign (to within the bound)."""
    g = np.array([3.0, -0.25, 1e-3, -7.0], np.float32)
    p, m, v = kernels.adamw(np.zeros(4, np.float32), g, np.zeros(4, np.float32), np.zeros(4, np.float32),
                            lr=0.01, weight_decay=0.0)
    np.testing.assert_allclose(p, -0.01 * g / (np.abs(g) + 1e-8), rtol=16 * U32)
    np.testing.assert_allclose(m, 0.1 * g, rtol=4 * U32)
    np.testing.assert_allclose(v, 0.001 * g.astype(np.float64) ** 2, rtol=8 * U32)


def test_zero_learning_rate_keeps_the_weights() -> None:
    p = np.linspace(-3, 3, 500, dtype=np.float32)
    out, _, _ = kernels.adamw(p, p, p, np.abs(p), lr=0.0)
    assert np.array_equal(out, p)


def test_flat_tiles_cover_once_in_bounds() -> None:
    """Every element is covered exactly once, tiles respect [128, FREE], and each key's view holds p·f
    elements."""
    for shape in [(1,), (300,), (70000,), (1000, 7), (3, 5, 7), (2, 3000), (130, 5000), (1, 300000), (129, 1)]:
        seen = np.zeros(shape, np.int64)
        for key, p, f in layout.flat_tiles(shape, 128, optim.FREE):
            assert 1 <= p <= 128 and 1 <= f <= optim.FREE
            assert seen[key].size == p * f
            seen[key] += 1
        assert (seen == 1).all(), shape


def test_engine_balance_and_strict_reads() -> None:
    """11 instructions a tile on three engines (3 ScalarE, 3 GpSimd, 5 VectorE) and 7 DMAs; nothing reads
    unwritten memory."""
    arrays = [np.ones((300, 50), np.float32)] * 4
    compiled = optim.adamw_kernel.compile(*arrays, lr=1e-3)
    tiles = len(layout.flat_tiles((300, 50), 128, optim.FREE))
    counts = {e: len(s) for e, s in compiled.program.streams.items() if s}
    assert counts == {"scalar": 3 * tiles, "gpsimd": 3 * tiles, "vector": 5 * tiles, "sync": 7 * tiles}
    run_strict(compiled, arrays)
    assert doctest.testmod(optim).failed == 0
    assert doctest.testmod(layout).failed == 0


def test_prefetch_and_staged_issue_order() -> None:
    """layout.prefetch calls loads ``depth`` ahead of the consumer, layout.staged runs the stage one item
    ahead; in the kernel, tile 1's loads come before tile 0's stores."""
    log: list[str] = []

    def load(i: int) -> Callable[[], int]:
        def run() -> int:
            log.append(f"load{i}")
            return i
        return run

    for i in layout.prefetch([load(i) for i in range(4)], 2):
        log.append(f"use{i}")
    assert log == ["load0", "load1", "load2", "use0", "load3", "use1", "use2", "use3"]
    log.clear()
    for i, _ in layout.staged(range(3), lambda i: log.append(f"stage{i}")):
        log.append(f"use{i}")
    assert log == ["stage0", "stage1", "use0", "stage2", "use1", "use2"]
    arrays = [np.ones(128 * optim.FREE * 5, np.float32)] * 4
    sync = optim.adamw_kernel.compile(*arrays, lr=1e-3).program.streams["sync"]
    first_store = next(k for k, i in enumerate(sync) if isinstance(i, DmaCopy) and i.dst.tensor == "param_out")
    assert first_store >= 4 * (optim.DEPTH + 1)
