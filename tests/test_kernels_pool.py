"""The pool kernels against references: the forward pass (max, min, sum, average) against
``jax.lax.reduce_window`` over random shapes, windows, strides, paddings and dilations along one or two
adjacent axes, bit-exact for max/min and for sums of small integers; the max-pool gradient against a plain
loop over windows implementing StableHLO's ``select_and_scatter`` (the first element no later one beats
wins; ties are common with small integers), and against ``jax.grad`` of a max pool."""

from __future__ import annotations

import doctest
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim.dsl.errors import KernelError
from trnsim.kernels import pool as pool_module
from trnsim.kernels import pool_bands, reduce_window, select_and_gather, select_and_scatter

Pads = list[tuple[int, int]]
JAX_OPS = {"max": (jax.lax.max, -np.inf), "min": (jax.lax.min, np.inf), "add": (jax.lax.add, 0.0),
           "mul": (jax.lax.mul, 1.0)}


def reference(x: np.ndarray, size: list[int], stride: list[int], pad: Pads, dilation: list[int], op: str,
              init: float | None = None) -> np.ndarray:
    fn, identity = JAX_OPS[op]
    out = jax.lax.reduce_window(jnp.asarray(x), identity if init is None else init, fn, tuple(size), tuple(stride),
                                pad, window_dilation=tuple(dilation))
    return np.asarray(out)


def scatter_reference(x: np.ndarray, source: np.ndarray, size: list[int], stride: list[int], pad: Pads,
                      select: str = "GE") -> np.ndarray:
    """``select_and_scatter`` with ``compare select`` and ``add``, one window at a time (padding never picked)."""
    keep = {"GE": np.greater_equal, "GT": np.greater, "LE": np.less_equal, "LT": np.less}[select]
    out = np.zeros(x.shape, np.float64)
    for o in itertools.product(*(range(n) for n in source.shape)):
        best, at = None, None
        for off in itertools.product(*(range(k) for k in size)):
            pos = tuple(i * s + f - lo for i, s, f, (lo, _) in zip(o, stride, off, pad, strict=True))
            if any(q < 0 or q >= n for q, n in zip(pos, x.shape, strict=True)):
                continue
            if best is None or not keep(best, x[pos]):
                best, at = x[pos], pos
        if at is not None:
            out[at] += source[o]
    return out


@st.composite
def windows(draw: st.DrawFn, dilation: bool = True) -> dict[str, object]:
    """An NHWC-style window over two adjacent axes, an NDHWC-style one over three, one over two axes with one
    between (``gap``: its window of one), or a 1-D one (rank 2 or 3), that fits its padded input."""
    layout = draw(st.sampled_from(["nhwc", "nlc", "hw", "ndhwc", "gap"]))
    spatial = {"nlc": 1, "ndhwc": 3, "gap": 3}.get(layout, 2)
    small = 3 if spatial == 3 else 9       # (3-D windows: small volumes, fast tests)
    size = [draw(st.integers(1, 3)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dil = [draw(st.integers(1, 2)) if dilation else 1 for _ in range(spatial)]
    pad = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(spatial)]
    if layout == "gap":
        size[1], stride[1], dil[1], pad[1] = 1, 1, 1, (0, 0)
    dims = [max(draw(st.integers(1, small)), (k - 1) * d + 1) for k, d in zip(size, dil, strict=True)]
    if layout == "hw":
        return {"shape": dims, "size": size, "stride": stride, "pad": pad, "dilation": dil}
    n = draw(st.sampled_from([1, 2, 5, 40, 130] if spatial < 3 else [1, 2]))
    c = draw(st.sampled_from([1, 3, 8, 64, 130] if spatial < 3 else [1, 3]))
    one = [(0, 0)]
    return {"shape": [n, *dims, c], "size": [1, *size, 1], "stride": [1, *stride, 1], "pad": one + pad + one,
            "dilation": [1, *dil, 1]}


def _out_shape(shape: list[int], size: list[int], stride: list[int], pad: Pads) -> list[int]:
    return [(s + lo + hi - k) // st + 1 for s, k, st, (lo, hi) in zip(shape, size, stride, pad, strict=True)]


@settings(max_examples=40, deadline=None)
@given(windows(), st.sampled_from(["max", "min", "add", "mul"]), st.integers(0, 2**31))
def test_pool_is_exact(w: dict[str, list[int]], op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, w["shape"]).astype(np.float32)     # sums of small integers are exact
    if op == "mul":                                              # products of ±2^k are exact
        x = np.ldexp(rng.choice([-1.0, 1.0], x.shape), rng.integers(-3, 4, x.shape)).astype(np.float32)
    elif op != "add":
        x = x + rng.standard_normal(x.shape).astype(np.float32)
    args = (w["size"], w["stride"], w["pad"], w["dilation"])
    got = reduce_window(x, *args, op=op)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, reference(x, *args, op))  # type: ignore[arg-type]


@pytest.mark.parametrize("op,init", [("max", 0.0), ("add", 1.5), ("min", 2.0)])
def test_an_init_that_is_not_the_identity_pads_and_folds_in(op: str, init: float) -> None:
    """StableHLO pads with the init value and folds it in once (trnsim's reference executor; XLA's CPU
    backend pads a sum with 0 instead, so ``jax`` itself is not the reference here)."""
    x = np.random.default_rng(0).integers(-5, 5, (2, 7, 6, 3)).astype(np.float32)
    args = ([1, 3, 3, 1], [1, 2, 2, 1], [(0, 0), (1, 1), (1, 0), (0, 0)], [1, 1, 1, 1])
    fn = JAX_OPS[op][0]

    def f(a: jax.Array) -> jax.Array:
        return jax.lax.reduce_window(a, init, fn, *args[:3])  # type: ignore[arg-type]

    want = trnsim.jit(f)(x)
    np.testing.assert_array_equal(reduce_window(x, *args, op=op, init=init), np.asarray(want))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_two_byte_pools_round_once(dtype: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 12, 12, 16)).astype(np.float32)
    jdt = jnp.bfloat16 if dtype == "bf16" else jnp.float16
    xr = np.asarray(jnp.asarray(x).astype(jdt).astype(jnp.float32))
    args = ([1, 3, 3, 1], [1, 2, 2, 1], [(0, 0), (1, 1), (1, 1), (0, 0)], [1, 1, 1, 1])
    np.testing.assert_array_equal(reduce_window(x, *args, op="max", dtype=dtype), reference(xr, *args, "max"))  # type: ignore[arg-type]
    total = reference(xr, *args, "add").astype(jdt).astype(np.float32)       # an fp32 sum rounded once
    np.testing.assert_array_equal(reduce_window(x, *args, op="add", dtype=dtype), total)  # type: ignore[arg-type]
    product = reference(xr, *args, "mul").astype(jdt).astype(np.float32)     # an fp32 product rounded once
    np.testing.assert_array_equal(reduce_window(x, *args, op="mul", dtype=dtype), product)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype,op", [(np.int16, "max"), (np.uint16, "min"), (np.int8, "max"), (np.uint8, "min")])
def test_small_integers_pool_exactly(dtype: type, op: str) -> None:
    """VectorE computes in fp32: exact for 8- and 16-bit integers; the init is the type's limit (padding)."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(7).integers(info.min, info.max, (3, 11, 10, 6), endpoint=True).astype(dtype)
    init = info.min if op == "max" else info.max
    got = trnsim.run_kernel(pool_module.pool_kernel, x, size=(3, 3), stride=(2, 2), pad=((1, 1), (0, 1)), op=op,
                            init=float(init)).outputs[0]
    fn = jax.lax.max if op == "max" else jax.lax.min
    want = jax.lax.reduce_window(x, dtype(init), fn, (1, 3, 3, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (0, 1), (0, 0)])
    np.testing.assert_array_equal(got, np.asarray(want).astype(np.int64))


def test_avg_divides_by_the_window() -> None:
    x = np.random.default_rng(2).standard_normal((2, 8, 8, 5)).astype(np.float32)
    args = ([1, 2, 2, 1], [1, 2, 2, 1], [(0, 0)] * 4, [1] * 4)
    np.testing.assert_allclose(reduce_window(x, *args, op="avg"), reference(x, *args, "add") / 4, rtol=1e-6)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(130, 10, 10, 3), (1, 1, 1600), (3, 57, 60, 200)])
def test_many_bands_and_long_windows(shape: tuple[int, ...]) -> None:
    """More bands than partitions, a 401-wide 1-D window (the conformance corpus's), channels past 128."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    if len(shape) == 3:
        args = ([1, 1, 401], [1, 1, 160], [(0, 0)] * 3, [1] * 3)
    else:
        args = ([1, 3, 3, 1], [1, 2, 2, 1], [(0, 0), (1, 1), (1, 1), (0, 0)], [1] * 4)
    np.testing.assert_array_equal(reduce_window(x, *args, op="max"), reference(x, *args, "max"))  # type: ignore[arg-type]


def gather_reference(x: np.ndarray, tangent: np.ndarray, size: list[int], stride: list[int], pad: Pads,
                     dilation: list[int], select: str, init: float, tangent_init: float) -> np.ndarray:
    """A two-operand reduce_window whose body keeps the accumulated pair where ``compare select (acc, new)``
    holds: the init pair first, then the window's elements in window order (padding is the init pair)."""
    keep = {"GE": np.greater_equal, "GT": np.greater, "LE": np.less_equal, "LT": np.less}[select]
    xp = np.pad(x, pad, constant_values=init)
    tp = np.pad(tangent, pad, constant_values=tangent_init)
    out_shape = [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(xp.shape, size, stride, dilation, strict=True)]
    out = np.zeros(out_shape, np.float32)
    for o in itertools.product(*(range(n) for n in out_shape)):
        best, tan = init, tangent_init
        for off in itertools.product(*(range(k) for k in size)):
            pos = tuple(i * s + f * d for i, s, f, d in zip(o, stride, off, dilation, strict=True))
            if not keep(best, xp[pos]):
                best, tan = xp[pos], tp[pos]
        out[o] = tan
    return out


@settings(max_examples=20, deadline=None)
@given(windows(), st.sampled_from(["GE", "GT", "LE", "LT"]), st.booleans(), st.integers(0, 2**31))
def test_gather_takes_the_tangent_of_the_selected_element(w: dict[str, list[int]], select: str, other_init: bool,
                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, w["shape"]).astype(np.float32)        # many ties: the order decides
    tangent = rng.integers(-50, 50, w["shape"]).astype(np.float32)
    identity = -np.inf if select in ("GE", "GT") else np.inf
    init, tangent_init = (1.0, 7.0) if other_init else (identity, 0.0)
    args = (w["size"], w["stride"], w["pad"], w["dilation"])
    got = select_and_gather(x, tangent, *args, select=select, init=init, tangent_init=tangent_init)  # type: ignore[arg-type]
    want = gather_reference(x, tangent, *args, select, init, tangent_init)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)


def test_gather_is_jax_max_pool_jvp() -> None:
    """The JVP of a max pool: ``jax.jvp`` emits select_and_gather_add (fp32 normals: no ties, whose winner
    XLA's CPU backend, packing each pair in one word, may pick otherwise)."""
    rng = np.random.default_rng(10)
    x, t = rng.standard_normal((2, 2, 9, 8, 6)).astype(np.float32)

    def max_pool(a: jax.Array) -> jax.Array:
        return jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    _, want = jax.jvp(max_pool, (jnp.asarray(x),), (jnp.asarray(t),))
    pads = jax.lax.padtype_to_pads(x.shape, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    np.testing.assert_array_equal(select_and_gather(x, t, [1, 3, 3, 1], [1, 2, 2, 1], pads), np.asarray(want))


@settings(max_examples=40, deadline=None)
@given(windows(dilation=False), st.sampled_from(["GE", "GT", "LE", "LT"]), st.integers(0, 2**31))
def test_pool_grad_gives_each_window_to_its_selected_element(w: dict[str, list[int]], select: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, w["shape"]).astype(np.float32)        # many ties: the order decides
    source = rng.integers(-4, 5, _out_shape(w["shape"], w["size"], w["stride"], w["pad"])).astype(np.float32)  # type: ignore[arg-type]
    got = select_and_scatter(x, source, w["size"], w["stride"], w["pad"], select=select)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, scatter_reference(x, source, w["size"], w["stride"], w["pad"], select))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape,window,stride,padding", [
    ((8, 16, 16, 32), (2, 2), (2, 2), "VALID"),
    ((3, 15, 13, 20), (3, 3), (2, 2), "SAME"),
    ((2, 9, 9, 4), (3, 3), (1, 1), "SAME"),
])
def test_pool_grad_is_jax_max_pool_gradient(shape: tuple[int, ...], window: tuple[int, int],
                                            stride: tuple[int, int], padding: str) -> None:
    def max_pool(x: jax.Array) -> jax.Array:
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, *window, 1), (1, *stride, 1), padding)

    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    y, vjp = jax.vjp(max_pool, jnp.asarray(x))
    g = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
    (want,) = vjp(jnp.asarray(g))
    pads = jax.lax.padtype_to_pads(shape, (1, *window, 1), (1, *stride, 1), padding)
    got = select_and_scatter(x, g, [1, *window, 1], [1, *stride, 1], pads)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-6)


def test_windows_spanning_four_axes_are_an_error() -> None:
    with pytest.raises(KernelError, match="three adjacent"):
        reduce_window(np.zeros((2, 4, 6, 3)), [2, 1, 1, 2])
    assert pool_module.canonical((2, 4, 6, 3), [2, 2, 2, 2], [1] * 4, [(0, 0)] * 4, [1] * 4) is None
    assert pool_module.canonical((2, 4, 6), [2, 1, 2], [1, 1, 1], [(0, 0)] * 3, [1] * 3) is not None


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_small_integer_sums_wrap_exactly(dtype: type) -> None:
    """StableHLO's integer add wraps: the sums made in int32, their low bits kept (3-D windows, padding)."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(8).integers(info.min, info.max, (2, 3, 7, 6, 5), endpoint=True).astype(dtype)
    size, stride, pad = (1, 2, 3, 3, 1), (1, 1, 2, 2, 1), [(0, 0), (0, 1), (1, 1), (1, 0), (0, 0)]
    win = pool_module.canonical(x.shape, size, stride, pad, [1] * 5)
    assert win is not None
    got = trnsim.run_kernel(pool_module.pool_kernel, x.reshape(-1, *win.shape[1:]), size=win.size,
                            stride=win.stride, pad=win.pad, op="add", init=3.0, depth=win.depth).outputs[0]
    padded = np.pad(x.astype(np.int64), pad, constant_values=3)     # StableHLO pads with the init, folds it once
    want = (np.asarray(jax.lax.reduce_window(padded, 0, jax.lax.add, size, stride, "VALID")) + 3).astype(dtype)
    np.testing.assert_array_equal(got.reshape(want.shape), want.astype(np.int64))


@pytest.mark.parametrize("dtype,select", [(np.int8, "GE"), (np.uint8, "GT"), (np.int16, "LE"), (np.uint16, "GE")])
@pytest.mark.parametrize("size,stride", [((1, 2, 3, 3, 1), (1, 1, 2, 2, 1)), ((1, 2, 2, 2, 1), (1, 2, 2, 2, 1))])
def test_small_integer_gradients_wrap_exactly(dtype: type, select: str, size: tuple[int, ...],
                                              stride: tuple[int, ...]) -> None:
    """Integer select_and_scatter (SIGNED/UNSIGNED compares are exact in fp32): shares summed in int32, wrapped."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(9)
    x = rng.integers(info.min, info.max, (2, 3, 7, 6, 5), endpoint=True).astype(dtype)
    source = rng.integers(info.min, info.max, _out_shape(list(x.shape), list(size), list(stride), [(0, 0)] * 5),
                          endpoint=True).astype(dtype)
    win = pool_module.canonical(x.shape, size, stride, [(0, 0)] * 5, [1] * 5)
    assert win is not None
    got = trnsim.run_kernel(pool_module.pool_grad_kernel, x.reshape(-1, *win.shape[1:]),
                            source.reshape(-1, *win.out, win.shape[3]), size=win.size, stride=win.stride,
                            select=select, depth=win.depth).outputs[0]
    want = scatter_reference(x.astype(np.int64), source.astype(np.int64), list(size), list(stride), [(0, 0)] * 5,
                             select).astype(np.int64).astype(dtype)
    np.testing.assert_array_equal(got.reshape(x.shape), want.astype(np.int64))


def test_doctests() -> None:
    assert doctest.testmod(pool_module).failed == 0


@pytest.fixture
def small_sbuf(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Bands of a few hundred bytes: rows, then columns, then channels are cut (traces cached per budget)."""
    def clear() -> None:
        for kernel in (pool_module.pool_kernel, pool_module.pool_grad_kernel):
            kernel.forget_traces()

    clear()
    monkeypatch.setattr(pool_bands, "BAND_BYTES", 600)
    yield
    clear()


@pytest.mark.parametrize("shape,size,stride,pad", [
    ((2, 9, 23, 12), (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((3, 8, 17, 4), (2, 2), (2, 2), ((0, 0), (0, 1))),
    ((1, 5, 12, 40), (3, 2), (1, 1), ((1, 1), (0, 1))),
])
def test_column_blocks_and_channel_chunks(small_sbuf: None, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...],
                                          size: tuple[int, int], stride: tuple[int, int],
                                          pad: tuple[tuple[int, int], ...]) -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(-2, 3, shape).astype(np.float32)
    full = ([1, *size, 1], [1, *stride, 1], [(0, 0), *pad, (0, 0)])
    np.testing.assert_array_equal(reduce_window(x, *full, op="max"), reference(x, *full, [1] * 4, "max"))  # type: ignore[arg-type]
    np.testing.assert_array_equal(reduce_window(x, *full, op="add"), reference(x, *full, [1] * 4, "add"))  # type: ignore[arg-type]
    source = rng.integers(-4, 5, _out_shape(list(shape), *full)).astype(np.float32)  # type: ignore[arg-type]
    np.testing.assert_array_equal(select_and_scatter(x, source, *full),  # type: ignore[arg-type]
                                  scatter_reference(x, source, *full))  # type: ignore[arg-type]
    # 32-bit integer shares summed as halves (two gradient tiles, the x and share halves: a window takes
    # about three times a float one's bytes)
    monkeypatch.setattr(pool_bands, "BAND_BYTES", 2000)
    info = np.iinfo(np.int32)
    big = rng.integers(info.min, info.max, source.shape, dtype=np.int64, endpoint=True).astype(np.int32)
    xi = (x.astype(np.int64) << 20).astype(np.int32)
    want = scatter_reference(xi.astype(np.int64), big.astype(np.int64), *full)  # type: ignore[arg-type]
    np.testing.assert_array_equal(select_and_scatter(xi, big, *full, dtype="int32"),  # type: ignore[arg-type]
                                  want.astype(np.int64).astype(np.int32).astype(np.int64))


@pytest.mark.parametrize("call,message", [
    (lambda: reduce_window(np.zeros((4, 5), np.float32), [2], [1], [(0, 0)]), "window size of 1 entries for a 2-D"),
    (lambda: reduce_window(np.zeros((4, 5), np.float32), [2, 2], [0, 1]), "window stride (0, 1)"),
    (lambda: select_and_scatter(np.zeros((4, 4), np.float32), np.zeros((3, 3), np.float32), [2, 2], [2, 2]),
     "a source of shape (3, 3)"),
    (lambda: select_and_gather(np.zeros((4, 4), np.float32), np.zeros((4, 3), np.float32), [2, 2], [2, 2]),
     "a tangent of shape (4, 3)"),
])
def test_bad_windows_and_operands_are_kernel_errors(call: Any, message: str) -> None:
    with pytest.raises(KernelError) as err:
        call()
    assert message in err.value.render() and "kernels.pool" in err.value.render()


@settings(max_examples=20, deadline=None)
@given(windows(dilation=False), st.sampled_from(["GE", "GT", "LE", "LT"]), st.sampled_from([np.int32, np.uint32]),
       st.integers(0, 2**31))
def test_32_bit_integer_gradients_are_exact(w: dict[str, list[int]], select: str, dtype: type, seed: int) -> None:
    """Windows that do not overlap (stride ≥ size): values a few apart above 2**24, which fp32 cannot tell
    apart, select as jax does, and every share arrives bit for bit."""
    size, stride = w["size"], [max(s, k) for s, k in zip(w["stride"], w["size"], strict=True)]
    pad = [(0, 0)] * len(size)
    shape = w["shape"]
    if any(n < k for n, k in zip(shape, size, strict=True)):
        return
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    base = rng.integers(info.min, info.max, 4, dtype=np.int64, endpoint=True)
    base = np.concatenate([base, base + 1, base - 1, [2**24, 2**24 + 1, info.min, info.max]])
    x = np.clip(rng.choice(base, shape), info.min, info.max).astype(dtype)
    src = rng.integers(info.min, info.max, _out_shape(shape, size, stride, pad), dtype=np.int64,
                       endpoint=True).astype(dtype)
    got = select_and_scatter(x, src, size, stride, pad, select=select, dtype=np.dtype(dtype).name)
    want = scatter_reference(x.astype(np.int64), src.astype(np.int64), size, stride, pad, select)
    assert np.array_equal(got.astype(np.int64), want.astype(np.int64))


def jax_scatter(x: np.ndarray, source: np.ndarray, size: list[int], stride: list[int], pad: Pads,
                select: str = "GE", init: int = 0) -> np.ndarray:
    """JAX's ``select_and_scatter`` (``_select_and_scatter_add``, what ``jax.grad`` of a max pool emits) plus
    ``init``, wrapped to ``x``'s integer type as StableHLO's add."""
    from jax._src.lax.windowed_reductions import _select_and_scatter_add  # pyright: ignore[reportPrivateUsage]

    prim = {"GE": jax.lax.ge_p, "GT": jax.lax.gt_p, "LE": jax.lax.le_p, "LT": jax.lax.lt_p}[select]
    out = np.asarray(_select_and_scatter_add(jnp.asarray(source), jnp.asarray(x), prim, tuple(size), tuple(stride),
                                             tuple(pad)))
    return (out.astype(np.int64) + init).astype(x.dtype)


@settings(max_examples=25, deadline=None)
@given(windows(dilation=False), st.sampled_from(["GE", "GT", "LE", "LT"]), st.sampled_from([np.int32, np.uint32]),
       st.integers(0, 2**31), st.booleans())
def test_32_bit_integer_gradients_over_overlapping_windows_wrap_exactly(w: dict[str, list[int]], select: str,
                                                                        dtype: type, seed: int, init: bool) -> None:
    """Overlapping windows (stride < size along some axis; else a non-zero init) sum 32-bit shares drawn over
    the whole range, so sums wrap: the halves' sums give JAX's result bit for bit (padding: the reference that
    never selects it, the padding's fill value, the type's limit, left out of x)."""
    size, shape, pad = w["size"], w["shape"], list[Any](w["pad"])
    stride = [min(s, k) for s, k in zip(w["stride"], size, strict=True)]
    if any(n + lo + hi < k for n, k, (lo, hi) in zip(shape, size, pad, strict=True)):
        return
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    padded = any(lo or hi for lo, hi in pad)
    lo_x, hi_x = int(info.min) + padded, int(info.max) - padded
    base = rng.integers(lo_x, hi_x, 4, dtype=np.int64, endpoint=True)
    base = np.concatenate([base, base + 1, base - 1, [2**24, 2**24 + 1, lo_x, hi_x]])
    x = np.clip(rng.choice(base, shape), lo_x, hi_x).astype(dtype)
    src = rng.integers(info.min, info.max, _out_shape(shape, size, stride, pad), dtype=np.int64,  # type: ignore[arg-type]
                       endpoint=True).astype(dtype)
    start = int(rng.integers(info.min, info.max, endpoint=True)) if init or all(
        s >= k for s, k in zip(stride, size, strict=True)) else 0
    got = select_and_scatter(x, src, size, stride, pad, select=select, init=float(start), dtype=np.dtype(dtype).name)  # type: ignore[arg-type]
    want = scatter_reference(x.astype(np.int64), src.astype(np.int64), size, stride, pad, select)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, (want.astype(np.int64) + start).astype(dtype).astype(np.int64))
    if not padded:
        np.testing.assert_array_equal(got, jax_scatter(x, src, size, stride, pad, select, start).astype(np.int64))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_the_most_shares_an_element_sums(dtype: type) -> None:
    """An element in all 256 windows of 16 × 16 taps sums 256 shares of the type's largest low half: the
    halves' bound (``MAX_INT_TERMS``), exact; one term more (init) is refused."""
    info = np.iinfo(dtype)
    x = np.full((1, 31, 31, 1), info.min, dtype)
    x[0, 15, 15, 0] = info.max
    src = np.full((1, 16, 16, 1), -1, np.int64).astype(dtype)
    window, one = (1, 16, 16, 1), (1, 1, 1, 1)
    got = select_and_scatter(x, src, window, one, dtype=np.dtype(dtype).name)
    np.testing.assert_array_equal(got, jax_scatter(x, src, list(window), list(one), [(0, 0)] * 4).astype(np.int64))
    assert got[0, 15, 15, 0] == np.array(-256, np.int64).astype(dtype)
    with pytest.raises(KernelError, match="summing up to 257 terms"):
        select_and_scatter(x, src, window, one, init=1.0, dtype=np.dtype(dtype).name)


def test_a_column_padding_wider_than_the_tile_is_all_fill() -> None:
    """Two padded columns before a one-column input with stride 2: the tile's one column is padding (its memset
    sliced past the tile, which the DSL now rejects; found by hypothesis once slices stopped clamping)."""
    x = np.full((1, 1, 1, 1), 3.0, np.float32)
    args = ([1, 1, 1, 1], [1, 1, 2, 1], [(0, 0), (0, 0), (2, 0), (0, 0)], [1, 2, 1, 1])
    np.testing.assert_array_equal(reduce_window(x, *args, op="max"), reference(x, *args, "max"))  # type: ignore[arg-type]
