"""examples/gpt.py under plain ``jax.jit`` on CPU: shapes, initial loss, training, data, and its StableHLO."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# NOTE: `examples/` is not an installed package; bare `pytest` puts only tests/ on sys.path.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
gpt: Any = importlib.import_module("examples.gpt")

DTYPES = ["float32", "bfloat16"]


@pytest.fixture(scope="module")
def corpus_ids() -> np.ndarray:
    return gpt.CharTokenizer().encode(gpt.load_corpus(200_000))


def _setup(dtype: str, corpus_ids: np.ndarray, batch: int = 16) -> tuple[Any, Any, Any, Any]:
    cfg = gpt.GPTConfig(dtype=dtype)
    params = gpt.init_params(cfg, jax.random.key(0))
    return cfg, params, gpt.init_opt_state(params), gpt.batches(corpus_ids, batch, cfg.seq_len, seed=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shapes_and_dtypes(dtype: str, corpus_ids: np.ndarray) -> None:
    cfg, params, opt_state, data = _setup(dtype, corpus_ids, batch=2)
    x, _ = next(data)
    logits = jax.jit(gpt.forward, static_argnums=2)(params, x, cfg)
    assert logits.shape == (2, cfg.seq_len, cfg.vocab)
    assert logits.dtype == cfg.jnp_dtype
    assert {p.dtype for p in jax.tree.leaves(params)} == {cfg.jnp_dtype}
    assert {m.dtype for m in jax.tree.leaves(opt_state)} == {jnp.dtype(jnp.float32)}
    assert len(params["layers"]) == cfg.n_layers
    assert params["layers"][0]["wqkv"].shape == (cfg.d_model, 3 * cfg.d_model)


def test_initial_loss_is_near_log_vocab(corpus_ids: np.ndarray) -> None:
    cfg, params, _, data = _setup("float32", corpus_ids)
    loss = float(jax.jit(gpt.loss_fn, static_argnums=3)(params, *next(data), cfg))
    assert loss == pytest.approx(math.log(cfg.vocab), rel=0.10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_decreases_over_20_steps(dtype: str, corpus_ids: np.ndarray) -> None:
    cfg, params, opt_state, data = _setup(dtype, corpus_ids)
    step_fn = jax.jit(gpt.make_train_step(cfg, lr=3e-3))
    losses: list[float] = []
    for i in range(20):
        params, opt_state, loss = step_fn(params, opt_state, jnp.int32(i), *next(data))
        losses.append(float(loss))
    assert all(map(math.isfinite, losses)), losses
    # Per-batch losses are noisy (a docstring-heavy window costs more), so compare averages.
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:2]), losses
    assert {p.dtype for p in jax.tree.leaves(params)} == {cfg.jnp_dtype}


def test_first_adamw_step_is_lr_times_sign_plus_decay() -> None:
    # At step 0 the bias-corrected moments are g and g**2, so the Adam direction is g / |g| = sign(g).
    params = {"w": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "scale": jnp.array([1.0, 2.0])}
    grads = {"w": jnp.array([[0.3, -0.1], [2.0, -4.0]]), "scale": jnp.array([-0.5, 0.25])}
    lr, wd = 0.01, 0.1
    new, state = gpt.adamw_update(params, grads, gpt.init_opt_state(params), jnp.int32(0), lr, weight_decay=wd)
    np.testing.assert_allclose(new["w"], params["w"] - lr * (np.sign(grads["w"]) + wd * params["w"]), rtol=1e-6)
    np.testing.assert_allclose(new["scale"], params["scale"] - lr * np.sign(grads["scale"]), rtol=1e-6)
    np.testing.assert_allclose(state["m"]["w"], 0.1 * grads["w"], rtol=1e-6)


def test_tokenizer_round_trip_and_fixed_vocab() -> None:
    tok = gpt.CharTokenizer()
    assert tok.vocab_size == 97 <= gpt.GPTConfig().vocab
    text = gpt.load_corpus(50_000)
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and len(ids) == len(text)
    in_alphabet = "".join(c for c in text if c in tok.chars)
    assert tok.decode(tok.encode(in_alphabet)) == in_alphabet
    assert tok.encode("a\té").tolist() == [tok.encode("a")[0], tok.UNK, tok.UNK]
    assert tok.decode([tok.UNK]) == "\ufffd"


def test_batches_are_deterministic_and_shifted(corpus_ids: np.ndarray) -> None:
    def take(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
        data = gpt.batches(corpus_ids, 4, 64, seed)
        return [next(data) for _ in range(3)]

    a, b, c = take(1), take(1), take(2)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a[0][0], c[0][0])
    x, y = a[0]
    assert x.shape == y.shape == (4, 64) and x.dtype == y.dtype == np.int32
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError, match="too few"):
        next(gpt.batches(corpus_ids[:10], 1, 64, 0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_train_step_lowers_to_plain_stablehlo(dtype: str, corpus_ids: np.ndarray) -> None:
    cfg, params, opt_state, data = _setup(dtype, corpus_ids)
    text = jax.jit(gpt.make_train_step(cfg)).lower(params, opt_state, jnp.int32(0), *next(data)).as_text()
    assert "stablehlo.dot_general" in text
    assert "custom_call" not in text  # nothing the compiler would have to special-case
    if dtype == "bfloat16":
        # every matmul keeps bf16 operands; only the softmax, norms, loss and optimizer widen to f32
        dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
        assert dots and all("xbf16>, tensor<" in line and "f32" not in line.split(":")[-1] for line in dots)
