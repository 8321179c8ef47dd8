"""A zoo of everyday JAX programs (scan, loops, control flow, random numbers, convolutions, sorting, remat,
integer math, bf16) runs through ``trnsim.jit`` and matches ``jax.jit`` on CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import trnsim

rng = np.random.default_rng(0)
x = rng.standard_normal((8, 16)).astype(np.float32)
w = rng.standard_normal((16, 16)).astype(np.float32)
img = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
ker = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)


def rnn(x: Any, w: Any) -> Any:
    def step(h: Any, xt: Any) -> Any:
        h = jnp.tanh(h @ w + xt)
        return h, h.sum()

    return lax.scan(step, jnp.zeros(16), x)


def dropout(x: Any) -> Any:
    keep = jax.random.bernoulli(jax.random.PRNGKey(0), 0.9, x.shape)
    return jnp.where(keep, x / 0.9, 0)


def normal(x: Any) -> Any:
    return x + jax.random.normal(jax.random.PRNGKey(1), x.shape)


CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
 "rnn scan": (rnn, (x, w)),
 "fori": (lambda x: lax.fori_loop(0, 5, lambda i, a: a * 1.1 + i, x), (x,)),
 "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (x,)),
 "layernorm": (lambda x: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5), (x,)),
 "argmax": (lambda x: jnp.argmax(x, axis=1), (x,)),
 "top_k": (lambda x: lax.top_k(x, 3), (x,)),
 "cumsum": (lambda x: jnp.cumsum(x, axis=1), (x,)),
 "sort": (lambda x: jnp.sort(x, axis=1), (x,)),
 "one_hot": (lambda x: jax.nn.one_hot(jnp.argmax(x, 1), 16) @ w, (x,)),
 "einsum": (lambda x, w: jnp.einsum("bi,ij->bj", x, w), (x, w)),
 "conv": (lambda a, k: lax.conv(a, k, (1, 1), "SAME"), (img, ker)),
 "maxpool": (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"), (img,)),
 "checkpoint grad": (jax.grad(lambda w, x: jax.checkpoint(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)), (w, x)),
 "dropout": (dropout, (x,)),
 "normal": (normal, (x,)),
 "dus kv": (lambda c, x: lax.dynamic_update_slice(c, x[:2], (3, 0)), (np.zeros((8, 16), np.float32), x)),
 "erf gelu": (lambda x: jax.nn.gelu(x, approximate=False), (x,)),
 "logsumexp": (lambda x: jax.scipy.special.logsumexp(x, axis=1), (x,)),
 "vmap matmul": (jax.vmap(lambda a, b: a @ b), (rng.standard_normal((4, 8, 16)).astype(np.float32),
                                                rng.standard_normal((4, 16, 8)).astype(np.float32))),
 "cond": (lambda x: lax.cond(x.sum() > 0, lambda y: y * 2, lambda y: y - 1, x), (x,)),
 "switch": (lambda x: lax.switch(1, [lambda y: y, lambda y: y * 3, lambda y: -y], x), (x,)),
 "int ops": (lambda x: (x * 100).astype(jnp.int32) // 7 % 5, (x,)),
 "bf16 mlp": (lambda x, w: jax.nn.relu(x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)), (x, w)),
 "clip grad norm": (lambda g: g * jnp.minimum(1.0, 1.0 / jnp.sqrt(jnp.sum(g * g))), (x,)),
}
# f32 results: a few ulp of the largest magnitude (summation order and transcendentals differ from XLA's)
TOLERANCE = 64 * float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("name", list(CASES))
def test_program_matches_jax(name: str) -> None:
    fn, args = CASES[name]
    expected = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    got = jax.tree_util.tree_leaves(trnsim.jit(fn, cache=False)(*args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        if np.issubdtype(e.dtype, np.floating) or e.dtype.kind == "V":
            scale = max(1.0, float(np.max(np.abs(e.astype(np.float64))))) if e.size else 1.0
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=0, atol=TOLERANCE * scale)
        else:
            np.testing.assert_array_equal(g, e)
