"""VectorE / ScalarE / GpSimd semantics against numpy references."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from trnsim.isa import (
    ACTIVATIONS,
    Activation,
    AffineSelect,
    BnAggr,
    BnStats,
    Iota,
    Memset,
    PartitionBroadcast,
    PartitionReduce,
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose32,
    tile,
)
from trnsim.sim.harness import run_on_tiles

RNG = np.random.default_rng(1)
P, F = 32, 16
A, B, OUT = (tile("sbuf", "fp32", (P, F), offset=o) for o in (0, 1024, 2048))


def run1(engine: str, ins: object, inputs: dict[str, tuple[np.ndarray, object]], out: object = OUT) -> np.ndarray:
    return run_on_tiles([(engine, ins)], inputs, {"o": out})["o"]  # type: ignore[list-item,arg-type,dict-item]


NUMPY_ALU = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum, "min": np.minimum,
    "pow": np.power, "abs_max": lambda a, b: np.maximum(abs(a), abs(b)), "ge": lambda a, b: (a >= b) * 1.0,
    "lt": lambda a, b: (a < b) * 1.0, "eq": lambda a, b: (a == b) * 1.0,
}


@pytest.mark.parametrize("op", list(NUMPY_ALU))
def test_tensor_tensor_matches_numpy_fp32(op: str) -> None:
    x = RNG.uniform(0.5, 2, (P, F)).astype(np.float32)
    y = RNG.uniform(0.5, 2, (P, F)).astype(np.float32)
    y[0, :4] = x[0, :4]
    out = run1("vector", TensorTensor(OUT, A, B, op), {"x": (x, A), "y": (y, B)})
    ref = NUMPY_ALU[op](x, y).astype(np.float32)
    if op == "pow":  # fp32 pow is not correctly rounded in every libm; allow one ulp
        np.testing.assert_allclose(out, ref, rtol=2e-7)
    else:
        assert np.array_equal(out, ref)


def test_bitwise_ops_on_integers() -> None:
    a, b, o = (tile("sbuf", "int32", (P, F), offset=k) for k in (0, 1024, 2048))
    x = RNG.integers(-1000, 1000, (P, F)).astype(np.int32)
    y = RNG.integers(0, 1000, (P, F)).astype(np.int32)
    for op, fn in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
        assert np.array_equal(run1("gpsimd", TensorTensor(o, a, b, op), {"x": (x, a), "y": (y, b)}, o), fn(x, y))


def test_tensor_scalar_immediate_and_per_partition_bf16_out() -> None:
    x = RNG.standard_normal((P, F)).astype(np.float32)
    s = RNG.standard_normal((P, 1)).astype(np.float32)
    col = tile("sbuf", "fp32", (P, 1), offset=4096)
    out16 = tile("sbuf", "bf16", (P, F), offset=2048)
    ins = TensorScalar(out16, A, "sub", col, op1="mul", scalar1=3.0, reverse0=True)
    out = run1("scalar", ins, {"x": (x, A), "s": (s, col)}, out16)
    ref = ((s - x).astype(np.float32) * np.float32(3.0)).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(out, ref)


def test_tensor_copy_casts_with_rne_and_stochastic_is_seeded() -> None:
    x = (1.0 + RNG.integers(0, 2**16, (P, F)) * 2.0**-23).astype(np.float32)  # between bf16 neighbours
    out16 = tile("sbuf", "bf16", (P, F), offset=2048)
    rne = run1("vector", TensorCopy(out16, A), {"x": (x, A)}, out16)
    assert np.array_equal(rne, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    runs = [run_on_tiles([("vector", TensorCopy(out16, A))], {"x": (x, A)}, {"o": out16}, rounding="stochastic",
                         seed=s)["o"] for s in (7, 7, 8)]
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2])
    lo = np.float32(1.0)
    assert np.all((runs[0] == lo) | (runs[0] == np.float32(1.0 + 2.0**-7)))
    assert abs(float(runs[0].mean()) - float(x.mean())) < 2e-4  # unbiased on average


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_tensor_reduce(op: str, axes: tuple[int, ...]) -> None:
    src = tile("sbuf", "fp32", (P, 4, 4))
    x = RNG.integers(-8, 8, (P, 4, 4)).astype(np.float32)  # small integers: sums are exact in any order
    keep = [c for i, c in enumerate((4, 4)) if i not in axes] or [1]
    dst = tile("sbuf", "fp32", (P, *keep), offset=2048)
    out = run1("vector", TensorReduce(dst, src, op, axes, negate=True), {"x": (x, src)}, dst)
    ref = -{"add": np.sum, "max": np.max, "min": np.min}[op](x, axis=tuple(a + 1 for a in axes))
    assert np.array_equal(out.reshape(ref.shape), ref)


def test_bn_stats_and_aggr_give_mean_and_variance() -> None:
    x = RNG.standard_normal((P, 2 * F)).astype(np.float32)
    src = tile("sbuf", "fp32", (P, 2 * F))
    stats = tile("sbuf", "fp32", (P, 6), offset=4096)
    halves = [tile("sbuf", "fp32", (P, F), offset=o) for o in (0, 4 * F)]
    agg = tile("sbuf", "fp32", (P, 2), offset=8192)
    s0, s1 = (tile("sbuf", "fp32", (P, 3), offset=4096 + 12 * i) for i in range(2))
    out = run_on_tiles([("vector", BnStats(s0, halves[0])), ("vector", BnStats(s1, halves[1])),
                        ("vector", BnAggr(agg, stats))], {"x": (x, src)}, {"o": agg})["o"]
    np.testing.assert_allclose(out[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], x.var(axis=1), rtol=1e-5)


def test_transpose32_swaps_within_blocks() -> None:
    src, dst = tile("sbuf", "bf16", (64, 96)), tile("sbuf", "bf16", (64, 96), offset=4096)
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    out = run1("vector", Transpose32(dst, src), {"x": (x, src)}, dst)
    ref = x.astype(ml_dtypes.bfloat16).astype(np.float32).reshape(2, 32, 3, 32).transpose(0, 3, 2, 1).reshape(64, 96)
    assert np.array_equal(out, ref)


def test_iota_select_memset() -> None:
    it = tile("sbuf", "int32", (P, 2, 8))
    out = run1("gpsimd", Iota(it, base=5, channel_multiplier=100, steps=(10, 1)), {}, it)
    p, i, j = np.meshgrid(np.arange(P), np.arange(2), np.arange(8), indexing="ij")
    assert np.array_equal(out.reshape(P, 2, 8), 5 + 100 * p + 10 * i + j)
    pred = (RNG.random((P, F)) > 0.5).astype(np.float32)
    x, y = RNG.standard_normal((2, P, F)).astype(np.float32)
    C = tile("sbuf", "fp32", (P, F), offset=3072)
    sel = run1("vector", Select(OUT, C, A, B), {"x": (x, A), "y": (y, B), "p": (pred, C)})
    assert np.array_equal(sel, np.where(pred != 0, x, y))
    assert (run1("scalar", Memset(OUT, -2.5), {}) == -2.5).all()


# Max relative error allowed vs float64 math: a few fp32 ulps for the reference functions.
@pytest.mark.parametrize("func", sorted(ACTIVATIONS))
def test_activation_functions(func: str) -> None:
    x = np.linspace(-4, 4, P * F, dtype=np.float32).reshape(P, F)
    if func in ("log", "rsqrt", "sqrt", "reciprocal", "log1p"):
        x = np.abs(x) + np.float32(0.25)
    ref_fn = {
        "identity": lambda v: v, "exp": math.exp, "log": math.log, "tanh": math.tanh,
        "sigmoid": lambda v: 1 / (1 + math.exp(-v)), "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
        "gelu_tanh": lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
        "silu": lambda v: v / (1 + math.exp(-v)), "relu": lambda v: max(v, 0.0), "rsqrt": lambda v: 1 / math.sqrt(v),
        "sqrt": math.sqrt, "reciprocal": lambda v: 1 / v, "square": lambda v: v * v,
        "softplus": lambda v: math.log1p(math.exp(v)), "erf": math.erf, "abs": abs, "neg": lambda v: -v,
        "sin": math.sin, "cos": math.cos, "tan": math.tan, "arctan": math.atan, "log1p": math.log1p,
        "expm1": math.expm1, "cbrt": np.cbrt,
    }[func]
    bias = tile("sbuf", "fp32", (P, 1), offset=4096)
    acc = tile("sbuf", "fp32", (P, 1), offset=4352)
    ins = Activation(OUT, A, func, scale=2.0, bias=bias, accumulate=acc)
    zero = np.zeros((P, 1), np.float32)
    res = run_on_tiles([("scalar", ins)], {"x": (x / 2, A), "b": (zero, bias)}, {"o": OUT, "acc": acc})
    ref = np.vectorize(ref_fn)(x.astype(np.float64))
    tol = 4 * 2.0**-24  # fp32 destination: a few units of rounding
    np.testing.assert_allclose(res["o"], ref, rtol=tol, atol=1e-30)
    np.testing.assert_allclose(res["acc"][:, 0], res["o"].astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_activation_bf16_destination_within_half_ulp() -> None:
    x = np.linspace(-3, 3, P * F, dtype=np.float32).reshape(P, F)
    dst = tile("sbuf", "bf16", (P, F), offset=2048)
    out = run1("scalar", Activation(dst, A, "tanh"), {"x": (x, A)}, dst)
    assert np.all(np.abs(out - np.tanh(x.astype(np.float64))) <= 2.0**-8 * np.abs(np.tanh(x)) + 1e-30)


def test_affine_select_builds_a_causal_mask() -> None:
    n = 32
    scores, out = tile("sbuf", "fp32", (n, n)), tile("sbuf", "fp32", (n, n), offset=1024)
    x = RNG.standard_normal((n, n)).astype(np.float32)
    ins = AffineSelect(out, scores, "ge", -np.inf, offset=0, channel_multiplier=1, steps=(-1,))
    res = run1("gpsimd", ins, {"x": (x, scores)}, out)
    assert np.array_equal(res, np.where(np.tril(np.ones((n, n), bool)), x, -np.inf))


def test_partition_reduce_and_broadcast() -> None:
    x = RNG.integers(-9, 9, (P, F)).astype(np.float32)
    row = tile("sbuf", "fp32", (1, F), offset=4096)
    total = run1("gpsimd", PartitionReduce(row, A, "add"), {"x": (x, A)}, row)
    assert np.array_equal(total[0], x.sum(axis=0))
    y = RNG.standard_normal((1, F)).astype(np.float32)
    out = run1("gpsimd", PartitionBroadcast(OUT, row), {"y": (y, row)})
    assert np.array_equal(out, np.repeat(y, P, axis=0))


# ScalarE's trigonometric, log1p / expm1 and cbrt functions: the exact function rounded once to fp32 (the
# reference ``ir.semantics`` holds StableHLO's sine, cosine, tan, log_plus_one, exponential_minus_one, cbrt and
# chlo.atan's atan2(x, 1) to), so bit for bit against math's f64 functions, at the edges of their domains too.
_EDGE_INPUTS = np.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-30, -1e-8, 0.5, -1.0, 1.0,
                           -0.99999994, -1.0000001, -2.0, 3.1415927, 1.5707964, -1.5707964, 88.7, 89.0, -104.0,
                           1e10, -1e10, 12345.678, 1e30, -3.4e38, 3.4028235e38, 2.0**24 + 2, 7.0, -27.0, 0.1, 1e-5],
                          np.float32)
_MATH: dict[str, object] = {"sin": math.sin, "cos": math.cos, "tan": math.tan, "arctan": math.atan,
                            "log1p": math.log1p, "expm1": math.expm1, "cbrt": np.cbrt}


def _math_f64(func: str, v: float) -> float:
    """The function in f64, its domain's edges as IEEE has them (NaN outside, ±inf at poles and overflow)."""
    fn = _MATH[func]
    assert callable(fn)
    if math.isnan(v) or (math.isinf(v) and func in ("sin", "cos", "tan")):
        return math.nan
    if func == "log1p" and v <= -1.0:
        return -math.inf if v == -1.0 else math.nan
    if func == "expm1" and v == math.inf:
        return math.inf
    try:
        return float(fn(v))
    except OverflowError:
        return math.inf


@pytest.mark.parametrize("func", list(_MATH))
def test_scalar_engine_maths_round_the_exact_function_once(func: str) -> None:
    n = _EDGE_INPUTS.size
    src, dst = tile("sbuf", "fp32", (1, n)), tile("sbuf", "fp32", (1, n), offset=1024)
    x = _EDGE_INPUTS.reshape(1, n)
    # the bias -0.0 keeps -0 (x + (-0) = x); the default +0 makes it +0 before the function
    out = run1("scalar", Activation(dst, src, func, bias=-0.0), {"x": (x, src)}, dst)[0]
    with np.errstate(over="ignore"):
        want = np.asarray([_math_f64(func, float(v)) for v in _EDGE_INPUTS], np.float64).astype(np.float32)
    np.testing.assert_array_equal(out, want)                        # NaN where NaN, ±inf where ±inf
    signed = ~np.isnan(want)                                        # (a NaN's sign is no value's)
    np.testing.assert_array_equal(np.signbit(out)[signed], np.signbit(want)[signed])   # sin(-0) = -0, ...
    default = run1("scalar", Activation(dst, src, func), {"x": (x, src)}, dst)[0]
    assert np.signbit(default[1]) == np.signbit(_math_f64(func, 0.0))   # f(+0) for the input -0


@pytest.mark.parametrize("func", ["exp", "log", "tanh", "sqrt", "square", "abs", "neg", "sin", "log1p", "cbrt"])
def test_activation_ufuncs_round_their_float64_value_once(func: str) -> None:
    """A ufunc activation runs in numpy's buffered float64 loop (``isa.ops._act``): bit for bit the float64
    value rounded once to fp32, on a tile longer than a buffer, with edge values and NaN payloads."""
    from trnsim.isa.ops import ACTIVATIONS

    rng = np.random.default_rng(4)
    bits = rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), np.float32([0.0, -0.0, np.inf, -np.inf, 1e-45, 88.7, 89.0]),
                        rng.standard_normal(10_000).astype(np.float32)]).reshape(1, -1)
    fn = getattr(np, {"neg": "negative"}.get(func, func))
    with np.errstate(all="ignore"):
        want = fn(x.astype(np.float64)).astype(np.float32)
    got = ACTIVATIONS[func](x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    inplace = x.copy()
    ACTIVATIONS[func](inplace, out=inplace)
    assert np.array_equal(inplace.view(np.uint32), want.view(np.uint32))
