"""A small GPT in plain JAX: the model, a hand-written AdamW, and a character corpus every machine has.

Written as a workload for trnsim's StableHLO compiler: every parameter and optimizer state is a pytree of
arrays, ``make_train_step`` returns a function of arrays only, and the layers are unrolled Python loops (no
``lax.scan``), so ``jax.jit(step).lower(...).as_text()`` is one flat StableHLO function.

Run as a script, it trains a few steps with ``jax.jit`` on CPU and prints the losses::

    python -m trnsim.examples.gpt --steps 20 --dtype bfloat16     (or: python examples/gpt.py ...)

``trnsim demo`` trains it on a simulated Trainium3; ``trnsim_programs`` lists the demo's compiled programs,
so that ``trnsim cache warm examples/gpt.py`` pre-compiles them.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, Any]
"""``{"embed", "pos", "layers": [{"attn_norm", "wqkv", "wo", "mlp_norm", "w1", "w2"}, ...], "norm_f", "head"}``"""
OptState = dict[str, Params]
"""``{"m": Params, "v": Params}``, both float32."""
TrainStep = Callable[[Params, OptState, jax.Array, jax.Array, jax.Array], tuple[Params, OptState, jax.Array]]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_NEG_INF = -1e9  # NOTE: finite, so a fully masked row (none here, but padding would make one) gives no NaN


@dataclass(frozen=True)
class GPTConfig:
    """Model shape and parameter dtype. The defaults are a tiny but real model (about 0.4 M parameters)."""

    vocab: int = 128  # the tokenizer's 97 symbols padded to one 128-wide tile; the unused logits learn to be small
    seq_len: int = 64
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512
    dtype: Literal["float32", "bfloat16"] = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"GPTConfig.dtype={self.dtype!r}: expected one of {sorted(_DTYPES)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"GPTConfig: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("vocab", "seq_len", "d_model", "n_heads", "n_layers", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name}={getattr(self, name)}: expected a positive int")

    @property
    def jnp_dtype(self) -> np.dtype[Any]:
        return jnp.dtype(_DTYPES[self.dtype])

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# ---------------------------------------------------------------------------------------------------- model


def init_params(cfg: GPTConfig, key: jax.Array) -> Params:
    """Normal(0, 0.02) weights (GPT-2's), residual-output projections scaled by 1/sqrt(2 n_layers), unit norms."""
    dt, d = cfg.jnp_dtype, cfg.d_model
    keys = iter(jax.random.split(key, 3 + 4 * cfg.n_layers))
    resid_std = 0.02 / math.sqrt(2 * cfg.n_layers)  # keeps the residual stream's variance flat with depth

    def normal(shape: tuple[int, ...], std: float = 0.02) -> jax.Array:
        return (std * jax.random.normal(next(keys), shape, jnp.float32)).astype(dt)

    layers = [
        {
            "attn_norm": jnp.ones((d,), dt),
            "wqkv": normal((d, 3 * d)),
            "wo": normal((d, d), resid_std),
            "mlp_norm": jnp.ones((d,), dt),
            "w1": normal((d, cfg.d_ff)),
            "w2": normal((cfg.d_ff, d), resid_std),
        }
        for _ in range(cfg.n_layers)
    ]
    return {
        "embed": normal((cfg.vocab, d)),
        "pos": normal((cfg.seq_len, d)),
        "layers": layers,
        "norm_f": jnp.ones((d,), dt),
        "head": normal((d, cfg.vocab)),
    }


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
    """``x / sqrt(mean(x**2) + eps) * scale``, reduced in float32 (a bf16 sum of squares loses the mean)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``: GPT-2's GELU, written out so the ops are visible."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + jnp.tanh(c * (x + 0.044715 * x * x * x)))


def attention(x: jax.Array, layer: Params, cfg: GPTConfig) -> jax.Array:
    """Causal multi-head self-attention; matmuls take ``cfg.dtype`` inputs, the softmax runs in float32."""
    b, t, d = x.shape
    h, hd = cfg.n_heads, cfg.head_dim
    qkv = (x @ layer["wqkv"]).reshape(b, t, 3, h, hd)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # each (b, h, t, hd)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) * (1.0 / math.sqrt(hd))
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))
    scores = jnp.where(causal, scores, _NEG_INF)
    # The max shift only guards exp against overflow and cancels in the ratio, so it needs no gradient:
    # stop_gradient keeps argmax-style compare/select ops out of the backward pass.
    scores = scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    probs = jnp.exp(scores)
    probs = (probs / jnp.sum(probs, axis=-1, keepdims=True)).astype(x.dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", probs, v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return out @ layer["wo"]


def forward(params: Params, tokens: jax.Array, cfg: GPTConfig) -> jax.Array:
    """Logits ``(batch, seq, vocab)`` in ``cfg.dtype`` for int32 ``tokens`` of shape ``(batch, seq)``."""
    t = tokens.shape[1]
    x = params["embed"][tokens] + params["pos"][:t]
    for layer in params["layers"]:
        x = x + attention(rms_norm(x, layer["attn_norm"]), layer, cfg)
        x = x + gelu_tanh(rms_norm(x, layer["mlp_norm"]) @ layer["w1"]) @ layer["w2"]
    return rms_norm(x, params["norm_f"]) @ params["head"]


def loss_fn(params: Params, tokens: jax.Array, targets: jax.Array, cfg: GPTConfig) -> jax.Array:
    """Mean next-token cross-entropy, in float32 whatever ``cfg.dtype`` is."""
    logits = forward(params, tokens, cfg).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


# ---------------------------------------------------------------------------------------------------- AdamW


def init_opt_state(params: Params) -> OptState:
    """Zero first and second moments, float32 whatever the parameter dtype."""

    def zeros(p: jax.Array) -> jax.Array:
        return jnp.zeros(p.shape, jnp.float32)

    return {"m": jax.tree.map(zeros, params), "v": jax.tree.map(zeros, params)}


def adamw_update(
    params: Params,
    grads: Params,
    opt_state: OptState,
    step: jax.Array,
    lr: float,
    b1: float = 0.9,
    b2: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.1,
) -> tuple[Params, OptState]:
    """One decoupled-weight-decay Adam step; ``step`` counts from 0.

    ``m = b1 m + (1-b1) g``; ``v = b2 v + (1-b2) g**2``;
    ``p -= lr (m / (1-b1**t) / (sqrt(v / (1-b2**t)) + eps) + wd p)`` with ``t = step + 1``,
    all in float32, ``p`` cast back to its dtype. Only matrices decay: pulling norm scales toward 0 fights
    the normalisation they exist to undo.
    """
    t = step.astype(jnp.float32) + 1.0
    bc1 = 1.0 - jnp.power(b1, t)
    bc2 = 1.0 - jnp.power(b2, t)

    def one(p: jax.Array, g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        g32, p32 = g.astype(jnp.float32), p.astype(jnp.float32)
        m = b1 * m + (1.0 - b1) * g32
        v = b2 * v + (1.0 - b2) * g32 * g32
        update = (m / bc1) / (jnp.sqrt(v / bc2) + eps)
        if p.ndim >= 2:
            update = update + weight_decay * p32
        return (p32 - lr * update).astype(p.dtype), m, v

    flat_p, treedef = jax.tree.flatten(params)
    flat_g, flat_m, flat_v = (treedef.flatten_up_to(tree) for tree in (grads, opt_state["m"], opt_state["v"]))
    new_p, new_m, new_v = zip(*map(one, flat_p, flat_g, flat_m, flat_v), strict=True)
    unflatten = functools.partial(jax.tree.unflatten, treedef)
    return unflatten(new_p), {"m": unflatten(new_m), "v": unflatten(new_v)}


def train_step(
    params: Params,
    opt_state: OptState,
    step: jax.Array,
    tokens: jax.Array,
    targets: jax.Array,
    cfg: GPTConfig,
    lr: float,
) -> tuple[Params, OptState, jax.Array]:
    """Loss, gradients and one AdamW update. Returns ``(new_params, new_opt_state, loss)``."""
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets, cfg)
    new_params, new_opt_state = adamw_update(params, grads, opt_state, step, lr)
    return new_params, new_opt_state, loss


def make_train_step(cfg: GPTConfig, lr: float = 3e-3) -> TrainStep:
    """``train_step`` with ``cfg`` and ``lr`` bound, so every argument is an array (``step`` an int32 scalar)."""

    def step_fn(
        params: Params, opt_state: OptState, step: jax.Array, tokens: jax.Array, targets: jax.Array
    ) -> tuple[Params, OptState, jax.Array]:
        return train_step(params, opt_state, step, tokens, targets, cfg, lr)

    return step_fn


# ---------------------------------------------------------------------------------------------------- data

# Present, under these names, in every CPython from 3.11 on. Their text differs between versions; the
# tokenizer's vocabulary does not.
CORPUS_FILES = (
    "argparse.py",
    "bisect.py",
    "collections/__init__.py",
    "contextlib.py",
    "dataclasses.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "inspect.py",
    "json/decoder.py",
    "json/encoder.py",
    "os.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "textwrap.py",
    "typing.py",
)


def load_corpus(max_bytes: int = 1 << 20) -> str:
    """The ``CORPUS_FILES`` of this interpreter's standard library, concatenated in order, cut at ``max_bytes``."""
    stdlib = os.path.dirname(os.__file__)
    parts: list[str] = []
    size = 0
    for name in CORPUS_FILES:
        if size >= max_bytes:
            break
        with open(os.path.join(stdlib, name), encoding="utf-8") as f:
            text = f.read()
        parts.append(text)
        size += len(text)
    return "".join(parts)[:max_bytes]


class CharTokenizer:
    """Newline plus printable ASCII (space through ``~``), and ``<unk>`` = id 0 for anything else.

    The alphabet is fixed rather than read from the corpus, so ids mean the same on every machine.
    ``decode(encode(s)) == s`` for any ``s`` within the alphabet.
    """

    UNK = 0

    def __init__(self) -> None:
        self.chars = "\n" + "".join(chr(c) for c in range(32, 127))
        self.vocab_size = 1 + len(self.chars)
        lut = np.full(128, self.UNK, np.int32)
        lut[[ord(c) for c in self.chars]] = np.arange(1, self.vocab_size, dtype=np.int32)
        self._lut = lut
        self._inverse = np.array(["\ufffd", *self.chars])

    def encode(self, text: str) -> np.ndarray:
        """int32 ids, one per character."""
        codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        return np.where(codes < 128, self._lut[np.minimum(codes, 127)], self.UNK).astype(np.int32)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        """The characters for ``ids``; ``<unk>`` (and ids beyond the alphabet) as U+FFFD."""
        ids = np.asarray(ids)
        return "".join(self._inverse[np.where((ids >= 0) & (ids < self.vocab_size), ids, self.UNK)].tolist())


def batches(tokens: np.ndarray, batch: int, seq_len: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless ``(tokens, targets)`` pairs of int32 ``(batch, seq_len)`` windows; targets are shifted by one.

    Window starts are uniform over the corpus, drawn from ``np.random.default_rng(seed)``.
    """
    if len(tokens) <= seq_len + 1:
        raise ValueError(f"batches: {len(tokens)} tokens is too few for seq_len={seq_len}; load a longer corpus")
    rng = np.random.default_rng(seed)
    offsets = np.arange(seq_len + 1)
    while True:
        starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
        window = np.asarray(tokens[starts[:, None] + offsets], np.int32)
        yield window[:, :-1], window[:, 1:]


# ---------------------------------------------------------------------------------------------------- trnsim

DEMO_BATCH = 16
DEMO_RUNS: tuple[tuple[str, dict[str, str]], ...] = (
    ("bf16", {}),
    ("mxfp6", {"auto_cast": "matmul", "auto_cast_type": "mxfp6"}),
    ("fp8_e4m3", {"auto_cast": "matmul", "auto_cast_type": "fp8_e4m3"}),
)
"""The demo's runs: a bf16 model, trained as is and with its matmuls auto-cast to MXFP6 and to FP8."""


def lower_train_step(cfg: GPTConfig, batch: int, lr: float = 3e-3) -> Any:
    """``jax.jit(make_train_step(cfg, lr)).lower(...)`` for ``(batch, seq_len)`` token batches (a
    ``jax.stages.Lowered``); shapes only, nothing is computed."""
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    opt_state = jax.eval_shape(init_opt_state, params)
    tokens = jax.ShapeDtypeStruct((batch, cfg.seq_len), jnp.int32)
    step = jax.ShapeDtypeStruct((), jnp.int32)
    return jax.jit(make_train_step(cfg, lr)).lower(params, opt_state, step, tokens, tokens)


def step_module(lowered: Any) -> str:
    """The StableHLO text of a lowered step with its source locations (``file:line:col`` of the Python that
    made each op), so profiles point at this file."""
    return str(lowered.as_text(debug_info=True))


def trnsim_programs(batch: int = DEMO_BATCH) -> list[tuple[str, str, dict[str, str]]]:
    """``(name, StableHLO text, compile options)`` of each program ``trnsim demo`` compiles (what ``trnsim
    cache warm`` reads from a script)."""
    text = step_module(lower_train_step(GPTConfig(dtype="bfloat16"), batch))
    return [(f"gpt-train-step-{name}", text, dict(options)) for name, options in DEMO_RUNS]


# ---------------------------------------------------------------------------------------------------- script


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    cfg = GPTConfig(dtype=args.dtype)
    tok = CharTokenizer()
    data = batches(tok.encode(load_corpus()), args.batch, cfg.seq_len, args.seed)
    params = init_params(cfg, jax.random.key(args.seed))
    opt_state = init_opt_state(params)
    step_fn = jax.jit(make_train_step(cfg, args.lr))
    n_params = sum(p.size for p in jax.tree.leaves(params))
    print(f"GPT {cfg}: {n_params:,} parameters, log(vocab) = {math.log(cfg.vocab):.3f}")
    for i in range(args.steps):
        x, y = next(data)
        t0 = time.perf_counter()
        params, opt_state, loss = step_fn(params, opt_state, jnp.int32(i), x, y)
        loss = float(loss)
        print(f"step {i:3d}  loss {loss:.4f}  {1e3 * (time.perf_counter() - t0):8.1f} ms")


if __name__ == "__main__":
    main()
