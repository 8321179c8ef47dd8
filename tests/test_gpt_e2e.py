"""The small GPT's training step through trnsim.jit against jax.jit on CPU: one step in float32 and bfloat16
within dtype-derived tolerances, and training with fp8 / MXFP6 matmuls still lowers the loss.

A smaller model than ``GPTConfig()`` (same structure: embedding, RMSNorm, causal attention, MLP,
cross-entropy, backward, AdamW) keeps the file fast; ``benchmarks/compile.py`` runs the default one.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.examples import gpt

CFG = dict(seq_len=32, d_model=64, n_heads=2, n_layers=2, d_ff=256)
BATCH = 8
EPS = {"float32": float(np.finfo(np.float32).eps), "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)}
# Normwise per tensor: |trnsim − jax| ≤ FACTOR · eps · max|jax|. The step is ~1,000 ops deep; both sides
# round each op once in the parameter dtype but in different orders (XLA reassociates sums and may keep bf16
# intermediates in f32), so leaves differ by a few eps of their largest entry: ≤ 4 eps measured in f32,
# ≤ 1.5 eps in bf16. The factor leaves room above that without hiding an error of one wrong op.
FACTOR = {"float32": 32, "bfloat16": 8}


@pytest.fixture(scope="module")
def corpus_ids() -> np.ndarray:
    return gpt.CharTokenizer().encode(gpt.load_corpus(200_000))


def _state(cfg: gpt.GPTConfig) -> tuple[Any, Any]:
    params = gpt.init_params(cfg, jax.random.key(0))
    opt = gpt.init_opt_state(params)
    # NOTE: from v = 0 the first AdamW step is lr·g/(|g| + 1e-8) ≈ lr·sign(g), which flips for gradients near
    # the 1e-8 floor on any rounding difference; a v bounded away from 0 makes the update a smooth function of
    # the gradient, so comparing parameters compares gradients
    opt = {"m": opt["m"], "v": jax.tree.map(lambda v: v + 1e-6, opt["v"])}
    return params, opt


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_training_step_matches_jax(dtype: str, corpus_ids: np.ndarray) -> None:
    cfg = gpt.GPTConfig(**CFG, dtype=dtype)
    params, opt = _state(cfg)
    x, y = next(gpt.batches(corpus_ids, BATCH, cfg.seq_len, seed=0))
    step = gpt.make_train_step(cfg)
    args = (params, opt, jnp.int32(3), x, y)
    fn = trnsim.jit(step)
    got = fn(*args)
    ref = jax.jit(step)(*args)
    assert fn.compiles == 1 and fn.last_profile.total_seconds > 0

    assert jax.tree.structure(got) == jax.tree.structure(ref)
    loss, ref_loss = float(got[2]), float(ref[2])
    # the loss is computed in f32 from the logits (bf16 in the bf16 model): relative error of the f32 sum,
    # or a few bf16 roundings of logits that the softmax averages out
    assert loss == pytest.approx(ref_loss, rel=1e-5 if dtype == "float32" else 4 * EPS[dtype])
    eps, factor = EPS[dtype], FACTOR[dtype]
    leaves = jax.tree_util.tree_flatten_with_path(ref)[0]
    for (path, want), have in zip(leaves, jax.tree.leaves(got), strict=True):
        name = jax.tree_util.keystr(path)
        assert have.shape == want.shape and have.dtype == want.dtype, name
        have64, want64 = np.asarray(have, np.float64), np.asarray(want, np.float64)
        assert np.all(np.isfinite(have64)), name
        scale = float(np.max(np.abs(want64)))
        err = float(np.max(np.abs(have64 - want64)))
        assert err <= factor * eps * scale, f"{name}: {err / (eps * scale):.1f} eps"
    # the step changed the parameters: a comparison of two no-ops would prove nothing
    assert not np.array_equal(np.asarray(got[0]["head"]), np.asarray(params["head"]))


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "mxfp6"])
def test_training_with_narrow_matmuls_lowers_the_loss(fmt: str, corpus_ids: np.ndarray) -> None:
    cfg = gpt.GPTConfig(**CFG)
    params = gpt.init_params(cfg, jax.random.key(0))
    opt = gpt.init_opt_state(params)
    data = gpt.batches(corpus_ids, BATCH, cfg.seq_len, seed=0)
    fn = trnsim.jit(gpt.make_train_step(cfg, lr=3e-3), auto_cast="matmul", auto_cast_type=fmt)
    losses: list[float] = []
    for i in range(10):
        params, opt, loss = fn(params, opt, jnp.int32(i), *next(data))
        losses.append(float(loss))
    assert fn.compiles == 1
    program = fn.last_program
    dots = [n for n in program.graph.nodes if n.op == "dot_general"]
    assert dots and all(n.attrs.get("operand_format") == fmt for n in dots)   # every matmul, forward and back
    assert sum(n.op == "qdq" for n in program.graph.nodes) == 2 * len(dots)
    assert all(map(math.isfinite, losses)), losses
    assert losses[0] == pytest.approx(math.log(cfg.vocab), rel=0.10)
    # per-batch losses are noisy, so compare averages (as tests/test_example_gpt.py does)
    assert np.mean(losses[-3:]) < 0.85 * np.mean(losses[:2]), losses
