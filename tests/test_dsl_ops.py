"""trnsim.dsl operations against numpy: what each call computes, on which engine, with which instruction."""

from __future__ import annotations

import doctest
import importlib
import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import trnsim
import trnsim.numerics as tn
from trnsim import dsl
from trnsim.dsl import Tensor

RNG = np.random.default_rng(2)


def run_tiles(body: Callable[..., Tensor | tuple[Tensor, ...]], *arrays: np.ndarray, **kw: object) -> list[np.ndarray]:
    """Load each array into a tile, apply ``body``, store every resulting tile (as fp32) and return them."""

    @trnsim.kernel
    def k(a, b=None, c=None):
        tiles = [dsl.load(t) for t in (a, b, c) if t is not None]
        res = body(*tiles, **kw)
        outs = []
        for i, r in enumerate(res if isinstance(res, tuple) else (res,)):
            o = dsl.hbm_tensor(r.shape, "fp32", name=f"o{i}")
            dsl.store(o, r if r.memory == "sbuf" and r.dtype == "fp32" else dsl.copy(r, dtype="fp32"))
            outs.append(o)
        return tuple(outs)

    return trnsim.run_kernel(k, *arrays).outputs


def engines_of(body: Callable[..., object], *arrays: np.ndarray) -> dict[str, list[str]]:
    @trnsim.kernel
    def k(a, b=None):
        body(*[dsl.load(t) for t in (a, b) if t is not None])
        return None

    prog = k.compile(*arrays).program
    return {e: [i.mnemonic for i in s] for e, s in prog.streams.items() if e != "sync"}


X = RNG.uniform(0.5, 2.0, (16, 24)).astype(np.float32)
Y = RNG.uniform(0.5, 2.0, (16, 24)).astype(np.float32)
COL = RNG.uniform(0.5, 2.0, (16, 1)).astype(np.float32)


@pytest.mark.parametrize(("name", "ref"), [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum), ("power", np.power),
    ("greater", lambda a, b: (a > b) * 1.0), ("less_equal", lambda a, b: (a <= b) * 1.0),
])
def test_binary_ops_tile_tile_scalar_and_column(name: str, ref: Callable[..., np.ndarray]) -> None:
    fn = getattr(dsl, name)
    tt, ts, st_, tc, ct = run_tiles(lambda x, y, c: (fn(x, y), fn(x, 1.5), fn(1.5, x), fn(x, c), fn(c, x)), X, Y, COL)
    np.testing.assert_allclose(tt, ref(X, Y), rtol=1e-6)
    np.testing.assert_allclose(ts, ref(X, np.float32(1.5)), rtol=1e-6)
    np.testing.assert_allclose(st_, ref(np.float32(1.5), X), rtol=1e-6)
    np.testing.assert_allclose(tc, ref(X, COL), rtol=1e-6)
    np.testing.assert_allclose(ct, ref(COL, X), rtol=1e-6)


def test_binary_ops_choose_their_instruction() -> None:
    assert engines_of(lambda x, y: (dsl.add(x, y), dsl.add(x, 2.0), dsl.add(x, y[:, 0:1])), X, Y) == {
        "vector": ["tensor_tensor", "tensor_scalar", "tensor_scalar"]}
    assert engines_of(lambda x: dsl.add(x, x, engine="gpsimd"), X) == {"gpsimd": ["tensor_tensor"]}
    assert engines_of(lambda x: (dsl.exp(x), dsl.iota((4, 4))), X) == {"scalar": ["activation"], "gpsimd": ["iota"]}


def test_bitwise_ops_on_integers() -> None:
    a = RNG.integers(0, 255, (8, 8)).astype(np.int32)
    b = RNG.integers(0, 255, (8, 8)).astype(np.int32)

    @trnsim.kernel
    def k(x, y):
        o = dsl.hbm_tensor((8, 8), "int32")
        dsl.store(o, dsl.bitwise_xor(dsl.left_shift(dsl.load(x), 1), dsl.load(y)))
        return o

    assert np.array_equal(trnsim.run_kernel(k, a, b).outputs[0], (a << 1) ^ b)


REFERENCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0), "rsqrt": lambda x: 1 / np.sqrt(x),
    "sqrt": np.sqrt, "reciprocal": lambda x: 1 / x, "square": np.square, "softplus": lambda x: np.log1p(np.exp(x)),
    "erf": np.vectorize(math.erf), "absolute": np.abs, "negative": np.negative, "identity": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_activation_functions_with_scale_and_bias(name: str) -> None:
    (got,) = run_tiles(lambda x, c: getattr(dsl, name)(x, scale=0.5, bias=c), X, COL)
    pre = (X * np.float32(0.5) + COL).astype(np.float64)
    np.testing.assert_allclose(got, REFERENCE[name](pre), rtol=2e-6, atol=1e-7)
    assert set(dsl.ACTIVATION_FUNCS.values()) <= set(trnsim.isa.ACTIVATIONS)


def test_activation_reduce_fuses_the_row_sum() -> None:
    y, s = run_tiles(lambda x: dsl.activation_reduce("exp", x, bias=-1.0), X)
    np.testing.assert_allclose(y, np.exp(X - 1), rtol=1e-6)
    np.testing.assert_allclose(s, np.exp(X - 1).astype(np.float32).sum(1, keepdims=True), rtol=1e-6)


def test_reductions() -> None:
    x3 = RNG.standard_normal((8, 3, 5)).astype(np.float32)
    s, mx, mn, nm, all_free = run_tiles(
        lambda x: (dsl.reduce_sum(x), dsl.reduce_max(x, axis=1), dsl.reduce_min(x, axis=-1),
                   dsl.reduce_max(x, axis=2, negate=True), dsl.reduce_sum(x, axis=(1, 2))), x3)
    np.testing.assert_allclose(s.reshape(8, 3), x3.sum(2), rtol=1e-6)
    np.testing.assert_allclose(mx.reshape(8, 5), x3.max(1))
    np.testing.assert_allclose(mn.reshape(8, 3), x3.min(2))
    np.testing.assert_allclose(nm.reshape(8, 3), -x3.max(2))
    np.testing.assert_allclose(all_free.reshape(8, 1), x3.sum((1, 2))[:, None], rtol=1e-5)
    assert s.shape == (8, 3, 1) and all_free.shape == (8, 1, 1)


def test_partition_reduce_and_broadcast() -> None:
    cols, bcast = run_tiles(lambda x: (dsl.reduce_sum(x, axis=0), dsl.partition_broadcast(x[0:1, :], 8)), X)
    np.testing.assert_allclose(cols, X.sum(0, keepdims=True), rtol=1e-5)
    assert np.array_equal(bcast, np.repeat(X[0:1], 8, axis=0))


def test_iota_affine_select_causal_mask_and_where() -> None:
    (pos,) = run_tiles(lambda x: dsl.iota((4, 6), "fp32", base=1, channel_multiplier=10), X)
    assert np.array_equal(pos, 1 + 10 * np.arange(4)[:, None] + np.arange(6))
    s = RNG.standard_normal((8, 8)).astype(np.float32)
    masked, chosen = run_tiles(lambda x: (dsl.affine_select(x, "ge", -1e30, channel_multiplier=1, steps=[-1]),
                                          dsl.where(dsl.greater(x, 0.0), x, dsl.multiply(x, 0.1))), s)
    assert np.array_equal(masked, np.where(np.tril(np.ones((8, 8), bool)), s, np.float32(-1e30)))
    np.testing.assert_allclose(chosen, np.where(s > 0, s, s * np.float32(0.1)), rtol=1e-7)


def test_bn_stats_and_aggr() -> None:
    x = RNG.standard_normal((16, 1024)).astype(np.float32)

    def body(t: Tensor) -> Tensor:
        stats = dsl.sbuf((16, 6))
        for g in range(2):  # two groups of 512, combined
            dsl.copy(dsl.bn_stats(t[:, g * 512 : (g + 1) * 512]), out=stats[:, 3 * g : 3 * g + 3])
        return dsl.bn_aggr(stats)

    (mv,) = run_tiles(body, x)
    np.testing.assert_allclose(mv[:, 0], x.mean(1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(mv[:, 1], x.var(1), rtol=1e-4)


def test_copy_casts_memset_zeros_full_and_dma_copy() -> None:
    x = RNG.standard_normal((4, 6)).astype(np.float32)

    @trnsim.kernel
    def k(a):
        o = dsl.hbm_tensor((4, 6), "bf16", name="cast")
        f = dsl.hbm_tensor((4, 6), "fp32", name="filled")
        flat = dsl.hbm_tensor((24, 1), "fp32", name="flat")
        t = dsl.load(a)
        dsl.store(o, dsl.copy(t, dtype="bf16", engine="scalar"))
        z = dsl.add(dsl.zeros((4, 6)), dsl.full((4, 6), 2.5))
        dsl.memset(z[:, 0:2], -1.0)
        dsl.store(f, z)
        dsl.dma_copy(flat, t)  # any two views of the same size, element by element
        return o, f, flat

    cast, filled, flat = trnsim.run_kernel(k, x).outputs
    assert np.array_equal(cast, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert (filled[:, :2] == -1).all() and (filled[:, 2:] == 2.5).all()
    assert np.array_equal(flat, x.reshape(24, 1))


def test_tensor_engine_transpose_is_bit_exact() -> None:
    x = RNG.standard_normal((96, 40)).astype(np.float32)
    (t,) = run_tiles(lambda a: dsl.transpose(a), x)
    assert np.array_equal(t, x.T)


def test_matmul_accumulates_over_k_tiles_exactly() -> None:
    a = RNG.integers(-8, 9, (256, 64)).astype(np.float32)  # [K, M]
    b = RNG.integers(-8, 9, (256, 200)).astype(np.float32)  # [K, N]

    @trnsim.kernel
    def k(s, m):
        o = dsl.hbm_tensor((64, 200), "fp32")
        acc = dsl.psum((64, 200))
        for i in range(2):
            dsl.matmul(acc, dsl.load(s[128 * i : 128 * (i + 1), :]), dsl.load(m[128 * i : 128 * (i + 1), :]),
                       accumulate=i > 0)
        dsl.store(o, dsl.copy(acc))
        return o

    got = trnsim.run_kernel(k, dsl.typed(a, "bf16"), dsl.typed(b, "fp8_e4m3")).outputs[0]
    assert np.array_equal(got, a.T @ b)


def test_matmul_mx_and_sparse_forms() -> None:
    k_, m_, n_ = 64, 32, 48
    w = tn.prune(RNG.standard_normal((k_, m_)).astype(np.float32), 2, 4, axis=0)
    x = RNG.standard_normal((k_, n_)).astype(np.float32)
    qw, qx = tn.mx_quantize(w, "mxfp8_e4m3", axis=0), tn.mx_quantize(x, "mxfp8_e4m3", axis=0)
    values, meta = tn.compress(qw.elements, 2, 4, axis=0)
    index = meta.positions().reshape(m_, -1).T.astype(np.uint8)  # [K/2, M]: position in each group of 4

    @trnsim.kernel
    def k(s, s_scale, s_index, v, v_scale):
        o = dsl.hbm_tensor((m_, n_), "fp32")
        acc = dsl.matmul(dsl.psum((m_, n_)), dsl.load(s), dsl.load(v), stationary_scale=dsl.load(s_scale),
                         moving_scale=dsl.load(v_scale), sparsity="2:4", stationary_index=dsl.load(s_index))
        dsl.store(o, dsl.copy(acc))
        return o

    got = trnsim.run_kernel(k, dsl.typed(values, "mxfp8_e4m3"), qw.scale_codes(), index,
                            dsl.typed(qx.elements, "mxfp8_e4m3"), qx.scale_codes()).outputs[0]
    ref = qw.dequantize().astype(np.float64).T @ qx.dequantize().astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module", ["trnsim.dsl.alloc", "trnsim.dsl.deps", "trnsim.dsl.errors", "trnsim.dsl.jit",
                                    "trnsim.dsl.trace"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
