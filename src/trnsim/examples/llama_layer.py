"""One Llama decoder layer in plain JAX (RMSNorm, GQA attention with a causal mask, SwiGLU MLP), forward and
backward, lowered from shapes alone (``jax.ShapeDtypeStruct``): how trnsim compiles and times a layer of a
real-size model without any data.

``LLAMA3_70B`` is the 70B geometry (``reference/calibration_megatron.md`` and the cluster zoo: hidden 8192,
FFN 28672, 64 heads, 8 KV heads, head size 128).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    seq: int
    dtype: str = "bfloat16"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


LLAMA3_70B = LayerShape(hidden=8192, ffn=28672, heads=64, kv_heads=8, seq=4096)


def layer_fn(s: LayerShape) -> Any:
    """``loss(params, x)``: the layer's output summed (a scalar, so ``value_and_grad`` gives the backward)."""
    import jax
    import jax.numpy as jnp

    dt = jnp.dtype(s.dtype)
    hd, rep = s.head_dim, s.heads // s.kv_heads

    def rms(x: Any, w: Any) -> Any:
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-5)).astype(dt) * w

    def layer(p: dict[str, Any], x: Any) -> Any:
        h = rms(x, p["ln1"])
        q = (h @ p["wq"]).reshape(s.seq, s.heads, hd)
        k = jnp.repeat((h @ p["wk"]).reshape(s.seq, s.kv_heads, hd), rep, axis=1)
        v = jnp.repeat((h @ p["wv"]).reshape(s.seq, s.kv_heads, hd), rep, axis=1)
        scores = jnp.einsum("qhd,khd->hqk", q, k).astype(jnp.float32) / np.sqrt(hd)
        scores = jnp.where(jnp.tril(jnp.ones((s.seq, s.seq), bool)), scores, -1e9)
        attn = jax.nn.softmax(scores, axis=-1).astype(dt)
        x = x + jnp.einsum("hqk,khd->qhd", attn, v).reshape(s.seq, s.hidden) @ p["wo"]
        h = rms(x, p["ln2"])
        return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]

    def loss(p: dict[str, Any], x: Any) -> Any:
        return jnp.sum(layer(p, x).astype(jnp.float32))

    return loss


def abstract_inputs(s: LayerShape) -> tuple[dict[str, Any], Any]:
    """Shape-only parameters and input of the layer."""
    import jax

    dt = np.dtype(s.dtype) if s.dtype != "bfloat16" else jax.numpy.bfloat16
    sd = jax.ShapeDtypeStruct
    kv = s.kv_heads * s.head_dim
    params = {"ln1": sd((s.hidden,), dt), "ln2": sd((s.hidden,), dt), "wq": sd((s.hidden, s.hidden), dt),
              "wk": sd((s.hidden, kv), dt), "wv": sd((s.hidden, kv), dt), "wo": sd((s.hidden, s.hidden), dt),
              "w1": sd((s.hidden, s.ffn), dt), "w3": sd((s.hidden, s.ffn), dt), "w2": sd((s.ffn, s.hidden), dt)}
    return params, sd((s.seq, s.hidden), dt)


def lower_forward_backward(s: LayerShape = LLAMA3_70B) -> Any:
    """``jax.jit(value_and_grad(loss)).lower`` on abstract inputs: the layer's forward and backward."""
    import jax

    params, x = abstract_inputs(s)
    return jax.jit(jax.value_and_grad(layer_fn(s))).lower(params, x)
