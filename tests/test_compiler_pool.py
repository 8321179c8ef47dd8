"""Pooling steps: ``reduce_window`` (max/min/sum pools, forward) and ``select_and_scatter`` (the max-pool
gradient) lower to the library's pool kernels and take their timed run; forms the kernels do not take keep
the analytic cost; large batches are sampled; the conformance corpus's pooling files still pass."""

# pyright: reportUnknownLambdaType=false

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim.compiler import poolgen
from trnsim.compiler.lowering import Step
from trnsim.conformance import run_file
from trnsim.kernels.pool import Depth

POOL_OPS = ("reduce_window", "select_and_scatter")
CORPUS = Path("/work/shared/conformance/stablehlo")


def max_pool(x: jax.Array, window: int = 2, stride: int = 2, padding: str = "VALID") -> jax.Array:
    """``flax.linen.max_pool`` on NHWC."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, window, window, 1), (1, stride, stride, 1), padding)


def avg_pool(x: jax.Array, window: int = 2, stride: int = 2, padding: str = "VALID") -> jax.Array:
    """``flax.linen.avg_pool`` on NHWC (padding counted)."""
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, window, window, 1), (1, stride, stride, 1), padding)
    return total / (window * window)


def _pool_steps(program: trnsim.CompiledProgram) -> list[Step]:
    return [s for s in program.plan.steps if any(op in POOL_OPS for op in s.ops)]


def _cnn_step():  # type: ignore[no-untyped-def]
    def loss(p, x):  # type: ignore[no-untyped-def]
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c"], (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
        h = max_pool(h, 3, 2, "SAME")
        h = avg_pool(h, 2, 2)
        h = max_pool(h)
        return jnp.mean(jnp.square(h))

    def step(p, x):  # type: ignore[no-untyped-def]
        value, grads = jax.value_and_grad(loss)(p, x)
        return value, jax.tree.map(lambda a, b: a - 0.1 * b, p, grads)

    return step


def test_cnn_pools_and_their_gradients_are_kernels() -> None:
    step = _cnn_step()
    p = {"c": jax.random.normal(jax.random.key(0), (3, 3, 3, 8)) * 0.3}
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 3)).astype(np.float32)
    program = trnsim.compile(jax.jit(step).lower(p, x), cache=False)
    pools = _pool_steps(program)
    ops = sorted(op for s in pools for op in s.ops)
    assert ops == ["reduce_window"] * 4 + ["select_and_scatter"] * 2   # 3 pools, the avg pool's gradient, 2 grads
    assert {s.kernel for s in pools} == {"pool"}
    assert not [s for s in program.plan.steps if s.kernel == "vector_reduce" and set(s.ops) & set(POOL_OPS)]
    for s in pools:
        form = poolgen.pool_for(program.graph.nodes[s.nodes[0]])
        assert form is not None
        timed = poolgen.pool_time("trn3", form)
        assert s.seconds == timed.seconds and s.busy == timed.busy and s.busy["vector"] > 0
    got = trnsim.jit(step)(p, x)
    ref = jax.jit(step)(p, x)
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_max_pool_and_gradient_of_a_typical_layer(dtype: jnp.dtype) -> None:
    """2x2/2 max pool of [8, 32, 32, 64] and its gradient: kernels, timed; results as JAX's."""
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        y, vjp = jax.vjp(max_pool, x)
        return y, vjp(jnp.ones_like(y))[0]

    x = jnp.asarray(np.random.default_rng(1).standard_normal((8, 32, 32, 64)), dtype)
    program = trnsim.compile(jax.jit(f).lower(x), cache=False)
    pools = _pool_steps(program)
    assert [s.kernel for s in pools] == ["pool", "pool"]
    assert all(0 < s.seconds < 1e-4 for s in pools)
    for g, r in zip(trnsim.jit(f)(x), jax.jit(f)(x), strict=True):
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(r, np.float32))


@pytest.mark.parametrize("fn,shape,dtype", [
    (lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (2, 2, 2, 2), (1, 1, 1, 1), "VALID"),
     (3, 4, 5, 2), jnp.float32),                                                    # four windowed axes
    (lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID",
                                     base_dilation=(1, 2, 2, 1)), (2, 5, 5, 3), jnp.float32),  # base dilation
])
def test_other_window_reductions_keep_the_analytic_cost(fn: object, shape: tuple[int, ...], dtype: object) -> None:
    program = trnsim.compile(jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype)), cache=False)  # type: ignore[arg-type]
    (step,) = _pool_steps(program)
    assert step.kernel == "vector_reduce"


def max_pool3(x: jax.Array, window: int = 2, stride: int = 2, padding: str = "VALID") -> jax.Array:
    """``flax.linen.max_pool`` on NDHWC (3-D: volumes, video)."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, *[window] * 3, 1), (1, *[stride] * 3, 1), padding)


@pytest.mark.parametrize("window,stride,padding", [(2, 2, "VALID"), (3, 2, "SAME")])
def test_3d_max_pool_and_gradient_are_kernels(window: int, stride: int, padding: str) -> None:
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        y, vjp = jax.vjp(lambda a: max_pool3(a, window, stride, padding), x)
        return y, vjp(jnp.arange(y.size, dtype=y.dtype).reshape(y.shape) % 7)[0]

    x = jnp.asarray(np.random.default_rng(3).integers(-3, 4, (2, 5, 6, 7, 3)), jnp.float32)   # ties
    program = trnsim.compile(jax.jit(f).lower(x), cache=False)
    assert [s.kernel for s in _pool_steps(program)] == ["pool", "pool"]
    for g, r in zip(trnsim.jit(f)(x), jax.jit(f)(x), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))


@pytest.mark.parametrize("fn,shape,dtype", [
    (lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (2, 2, 2), (1, 1, 1), "VALID"),
     (3, 4, 5), jnp.float32),                                                       # three windowed axes
    (lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 1, 2), (1, 1, 2), "VALID"),
     (3, 4, 5), jnp.float32),                                                       # two, one apart
    (lambda x: jax.lax.reduce_window(x, 0, jax.lax.add, (1, 2), (1, 2), "VALID"), (4, 6), jnp.int16),  # int sum
    (lambda x: jax.lax.reduce_window(x, 0, jax.lax.add, (2, 3), (1, 1), [(1, 0), (1, 1)]), (4, 6), jnp.uint8),
])
def test_volumes_gaps_and_integer_sums_are_kernels(fn: object, shape: tuple[int, ...], dtype: object) -> None:
    program = trnsim.compile(jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype)), cache=False)  # type: ignore[arg-type]
    assert [s.kernel for s in _pool_steps(program)] == ["pool"]
    x = np.random.default_rng(4).integers(0, 250, shape).astype(dtype)  # type: ignore[call-overload]
    np.testing.assert_array_equal(np.asarray(trnsim.jit(fn)(x)), np.asarray(jax.jit(fn)(x)))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(4, 9, 8, 6), (2, 5, 6, 7, 3)])
def test_max_pool_jvp_is_a_kernel(shape: tuple[int, ...]) -> None:
    """``jax.jvp`` of a max pool emits select_and_gather_add: a two-operand reduce_window, pool_gather_kernel."""
    window = (1, *[3] * (len(shape) - 2), 1)
    stride = (1, *[2] * (len(shape) - 2), 1)

    def f(x: jax.Array, t: jax.Array) -> jax.Array:
        return jax.jvp(lambda a: jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, window, stride, "SAME"), (x,), (t,))[1]

    rng = np.random.default_rng(5)
    x, t = rng.standard_normal((2, *shape)).astype(np.float32)
    program = trnsim.compile(jax.jit(f).lower(x, t), cache=False)
    (step,) = _pool_steps(program)
    assert step.kernel == "pool" and step.busy["vector"] > 0
    form = poolgen.pool_for(program.graph.nodes[step.nodes[0]])
    assert form is not None and form.gather == 0.0 and form.select == "GE"
    np.testing.assert_array_equal(np.asarray(trnsim.jit(f)(x, t)), np.asarray(jax.jit(f)(x, t)))


def test_a_whole_axis_window_is_a_scan_not_a_pool() -> None:
    """``jnp.cumsum`` lowers to a reduce_window of 4096 taps: too many tap instructions, the analytic cost."""
    program = trnsim.compile(jax.jit(jnp.cumsum).lower(jax.ShapeDtypeStruct((4, 4096), jnp.float32)), cache=False)
    (step,) = _pool_steps(program)
    assert step.kernel == "vector_reduce"
    short = trnsim.compile(jax.jit(lambda x: jnp.cumsum(x, axis=1)).lower(jax.ShapeDtypeStruct((8, 100, 16),
                                                                                               jnp.float32)),
                           cache=False)
    assert [s.kernel for s in _pool_steps(short)] == ["pool"]


def test_integer_max_pool_is_a_kernel() -> None:
    x = np.random.default_rng(2).integers(-1000, 1000, (2, 9, 9, 4)).astype(np.int16)
    f = lambda x: jax.lax.reduce_window(x, np.int16(-32768), jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")  # noqa: E731
    program = trnsim.compile(jax.jit(f).lower(x), cache=False)
    assert [s.kernel for s in _pool_steps(program)] == ["pool"]
    np.testing.assert_array_equal(np.asarray(trnsim.jit(f)(x)), np.asarray(f(x)))


@pytest.mark.parametrize("form", [
    poolgen.Pool((600, 8, 8, 16), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), "fp32", "max", None),
    poolgen.Pool((80, 56, 56, 64), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), "bf16", "max", None),
    poolgen.Pool((70, 57, 57, 64), (3, 3), (2, 2), ((0, 0), (0, 0)), (1, 1), "bf16", "add", 0.0, "GE"),
    poolgen.Pool((600, 16, 16, 24), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), "fp32", "add", 0.0, "GE"),
    poolgen.Pool((300, 16, 16, 24), (3, 3), (2, 2), ((0, 1), (0, 1)), (1, 1), "int32", "add", 0.0, "GE"),  # halves
    poolgen.Pool((130, 4, 4, 4), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), "bf16", "add", 0.0, "GE",
                 depth=Depth(8, 2, 2)),                                                 # 3-D: bands of planes
    poolgen.Pool((130, 4, 4, 4), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), "fp32", "max", None, "GE",
                 depth=Depth(8, 3, 2, (1, 1)), gather=0.0),
])
def test_large_batches_are_sampled(form: poolgen.Pool) -> None:
    sampled = poolgen.pool_time("trn3", form)
    whole = poolgen._timed("trn3", form)  # pyright: ignore[reportPrivateUsage]
    assert sampled is not whole
    assert sampled.seconds == pytest.approx(whole.seconds, rel=0.1)
    assert sampled.hbm_bytes == pytest.approx(whole.hbm_bytes, rel=0.02)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no conformance corpus")
def test_conformance_pooling_files_pass_and_most_are_kernels() -> None:
    from trnsim.compiler.api import compile_graph
    from trnsim.errors import UnsupportedError
    from trnsim.frontend.importer import import_module
    from trnsim.frontend.mlir import parse

    files = sorted([*CORPUS.glob("reduce_window_*.mlir"), *CORPUS.glob("select_and_scatter_*.mlir"),
                    *CORPUS.glob("select_and_gather_*.mlir")])
    pooled = 0
    for path in files:
        result = run_file(path)
        assert result.ok, f"{path.name}: {result.message}"
        try:
            imported = import_module(parse(path.read_text())[0], where=str(path), lift="inputs", collect_checks=True)
            program = compile_graph(imported.graph)
        except UnsupportedError:
            continue
        pooled += any(s.kernel == "pool" for s in _pool_steps(program))  # type: ignore[arg-type]
    # of 32 the compiler takes: 3-D windows, 8-/16-bit integers, select_and_gather, 32-bit integer gradients
    # (not: the 64-bit integer ones)
    assert pooled >= 30


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint32])
@pytest.mark.parametrize("window,stride", [(2, 2), (3, 2), (3, 1)])
def test_32_bit_integer_select_and_scatter(dtype: Any, window: int, stride: int) -> None:
    """32-bit integer gradients are the kernel: windows that do not overlap copy shares bit for bit, overlapping
    ones sum them as two exact fp32 halves (``kernels.pool_grad``)."""
    from jax._src.lax.windowed_reductions import _select_and_scatter_add  # pyright: ignore[reportPrivateUsage]

    def grad(src: jax.Array, x: jax.Array) -> jax.Array:
        return _select_and_scatter_add(src, x, jax.lax.ge_p, (1, window, window, 1), (1, stride, stride, 1),
                                       ((0, 0),) * 4)

    out = (16 - window) // stride + 1
    args = [jax.ShapeDtypeStruct((2, out, out, 8), dtype), jax.ShapeDtypeStruct((2, 16, 16, 8), dtype)]
    program = trnsim.compile(jax.jit(grad).lower(*args), cache=False)
    (step,) = _pool_steps(program)
    assert step.kernel == "pool"


@pytest.mark.parametrize("reverse", [False, True])
def test_cumlogsumexp_is_the_pool_kernel_bit_for_bit(reverse: bool) -> None:
    """``lax.cumlogsumexp``'s window body, ``jnp.logaddexp`` as JAX writes it, is the pool kernel's
    ``logaddexp`` op (f32): the kernel, run with data, gives the interpreter's bits, infinities, NaN and -0
    included."""
    from trnsim.kernels.pool import pool_kernel

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((40, 7)) * 30).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2], x[3, 3], x[4, 4] = -np.inf, np.inf, np.nan, -0.0, 0.0
    x[:, 5], x[7:, 6] = np.inf, -np.inf

    def f(x: jax.Array) -> jax.Array:
        return jax.lax.cumlogsumexp(x, axis=0, reverse=reverse)

    program = trnsim.compile(jax.jit(f).lower(x), cache=False)
    (step,) = _pool_steps(program)
    assert step.kernel == "pool"
    pool = poolgen.pool_for(program.graph.nodes[step.nodes[0]])
    assert pool is not None and pool.op == "logaddexp"
    want = program.run(x)[0]
    np.testing.assert_allclose(want, np.asarray(f(x)), rtol=4e-7, atol=0)   # the interpreter, as JAX's
    got = trnsim.run_kernel(pool_kernel, x.reshape(pool.shape), size=pool.size, stride=pool.stride, pad=pool.pad,
                            dilation=pool.dilation, op=pool.op, init=pool.init).outputs[0]
    assert np.array_equal(got.reshape(want.shape).view(np.uint32), want.view(np.uint32))


def test_a_logaddexp_lookalike_and_narrow_floats_keep_the_analytic_cost() -> None:
    """Only JAX's logaddexp body on f32 is the kernel's op: a body that differs (no NaN guard) and a bf16
    cumlogsumexp (whose ops round to bf16 one by one) are not."""
    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.maximum(a, b) + jnp.log1p(jnp.exp(-jnp.abs(a - b)))

    x = np.ones((6, 3), np.float32)
    lookalike = trnsim.compile(jax.jit(lambda x: jax.lax.reduce_window(
        x, -jnp.inf, body, (6, 1), (1, 1), ((5, 0), (0, 0)))).lower(x), cache=False)
    narrow = trnsim.compile(jax.jit(lambda x: jax.lax.cumlogsumexp(x, axis=0)).lower(x.astype(jnp.bfloat16)),
                            cache=False)
    for program in (lookalike, narrow):
        node = next(n for n in program.graph.nodes if n.op == "reduce_window")
        assert poolgen.pool_for(node) is None


def test_windows_much_taller_than_their_stride_load_a_band_in_one_dma() -> None:
    """A 608-tap window of stride 3: every band's input rows overlap its neighbours' almost entirely, so each
    band loads its rows in one DMA (a DMA per halo row of a run of bands would be ~600 per run: 77,000
    one-element DMAs, and a minute of tracing). The kernel's result is the interpreter's, bit for bit."""
    from trnsim.kernels.pool import reduce_window

    def f(x: jax.Array) -> jax.Array:
        return jax.lax.reduce_window(x, np.int8(127), jax.lax.min, (1, 608), (1, 3), ((0, 0), (2, 1)))

    program = trnsim.compile(jax.jit(f).lower(jax.ShapeDtypeStruct((127, 1000), np.int8)), cache=False)
    (step,) = _pool_steps(program)
    assert step.instructions["dma"] < 2 * 127 + 200 and step.instructions["vector"] >= 608
    for shape, size, stride, pad in [((9, 1000), (1, 608), (1, 3), ((0, 0), (2, 1))),
                                     ((3, 260, 4), (1, 50, 1), (1, 3, 1), ((0, 0), (2, 2), (0, 0)))]:
        x = np.random.default_rng(len(shape)).integers(-128, 128, shape).astype(np.int8)
        want = np.asarray(jax.lax.reduce_window(x, np.int8(127), jax.lax.min, size, stride, pad))
        got = np.asarray(reduce_window(x, size, stride, pad, op="min", dtype="int8"))
        np.testing.assert_array_equal(got.reshape(want.shape).astype(np.int64), want.astype(np.int64))
