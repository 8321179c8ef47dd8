"""Transformer model descriptions: the zoo (``zoo.toml``) and user model files (TOML or JSON).

A :class:`ModelSpec` is a decoder-only transformer: ``layers`` blocks of attention (``heads`` query heads,
``kv_heads`` key/value heads for GQA, ``head_dim``) and an MLP (``ffn`` wide; GeLU, or gated SwiGLU with three
matrices), an input embedding, an LM head and optional mixture of experts (``experts``, ``top_k``,
``moe_ffn``). A user file holds the same keys as a zoo entry, flat::

    layers = 32        hidden = 4096      heads = 32      kv_heads = 8
    ffn = 14336        vocab = 128256     seq_len = 8192  mlp = "swiglu"

Files are validated on load through the same schema builder as the hardware presets, so every mistake names
the file and key (``my.toml: kv_heads``) and says what to change.

Parameter count (op level; ``d`` = head_dim, ``g`` = kv_heads, ``a`` = heads, ``f`` = ffn)::

    attention  h·a·d + 2·h·g·d + a·d·h           (+ biases a·d + 2·g·d + h)
    MLP        2·h·f (GeLU) or 3·h·f (SwiGLU)    (+ biases f + h);  MoE: × experts, + router h·experts
    norms      2 per layer (2h LayerNorm, h RMSNorm) + a final one
    embedding  V·h (+ s·h learned positions), LM head V·h unless tied

For Megatron's GPT this is eq. 2 of Narayanan et al. 2021, P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)),
plus the final LayerNorm's 2h.

    >>> from trnsim.cluster import models
    >>> m = models.get("llama3-70b")
    >>> m.kv_heads, m.head_dim, round(m.params().total / 1e9, 1)
    (8, 128, 70.6)
"""

from __future__ import annotations

import difflib
import functools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from trnsim.errors import ConfigError, SpecError
from trnsim.hw.schema import FieldIssue, build, doc

ZOO_FILE = Path(__file__).parent / "zoo.toml"

MLP_KINDS: dict[str, str] = {"gelu": "two matrices h→f→h with GeLU", "swiglu": "gated: three matrices, SiLU(xW)⊙xV"}
NORM_KINDS: dict[str, str] = {"layernorm": "LayerNorm (scale and bias)", "rmsnorm": "RMSNorm (scale only)"}
POSITION_KINDS: dict[str, str] = {"learned": "learned absolute position embeddings (s·h parameters)",
                                  "rope": "rotary embeddings (no parameters)"}
# Llama 3.1 has Llama 3's architecture ([LLAMA3] §3); only the context length was extended late in training.
ALIASES: dict[str, str] = {"llama3.1-8b": "llama3-8b", "llama3.1-70b": "llama3-70b",
                           "llama3.1-405b": "llama3-405b", "gpt3": "gpt3-175b"}


class ModelError(ConfigError):
    """A model name is unknown or a model file is malformed: names the file and key."""


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameters by part. ``matmul`` counts every weight that takes part in a matmul (all but the input
    embedding table, position embeddings, biases and norms): the N of the 6·N·T approximation."""

    attention: int
    mlp: int
    norms: int
    embedding: int
    head: int
    per_layer: int
    active_per_layer: int
    total: int
    active: int
    matmul: int


# NOTE: sanity bounds, each orders of magnitude above any published model, so that a typo (layers =
# 1000000000000) is an error, not a search that never ends
SIZE_LIMITS: dict[str, int] = {
    "layers": 100_000, "hidden": 10_000_000, "heads": 1_000_000, "kv_heads": 1_000_000, "head_dim": 1_000_000,
    "ffn": 100_000_000, "vocab": 1_000_000_000, "seq_len": 1_000_000_000, "experts": 1_000_000,
    "top_k": 1_000_000, "moe_ffn": 100_000_000,
}


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer; ``name`` and ``source`` are filled by the loader."""

    name: str = field(metadata=doc("model name", internal=True))
    layers: int = field(metadata=doc("transformer blocks"))
    hidden: int = field(metadata=doc("model width h"))
    heads: int = field(metadata=doc("query heads a"))
    kv_heads: int | None = field(default=None, metadata=doc("key/value heads g (GQA); default: heads"))
    head_dim: int | None = field(default=None, metadata=doc("per-head width d; default: hidden / heads"))
    ffn: int | None = field(default=None, metadata=doc("MLP width f; default: 4 × hidden"))
    vocab: int = field(metadata=doc("vocabulary size V"))
    seq_len: int = field(metadata=doc("training sequence length s"))
    mlp: str = field(default="gelu", metadata=doc("MLP kind", choices=MLP_KINDS))
    norm: str = field(default="layernorm", metadata=doc("normalisation", choices=NORM_KINDS))
    position: str = field(default="learned", metadata=doc("position encoding", choices=POSITION_KINDS))
    bias: bool = field(default=True, metadata=doc("linear layers have biases"))
    dropout: bool = field(default=True, metadata=doc("dropout after attention probabilities and projections"))
    tied_embeddings: bool = field(default=True, metadata=doc("LM head shares the input embedding"))
    experts: int = field(default=1, metadata=doc("experts per MoE layer (1: dense)"))
    top_k: int = field(default=1, metadata=doc("experts each token is routed to"))
    moe_ffn: int | None = field(default=None, metadata=doc("expert MLP width; default: ffn"))
    source: str = field(default="user file", metadata=doc("where the shapes come from"))

    def __post_init__(self) -> None:
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if value is not None and value > limit:
                raise FieldIssue(name, f"{value:,} is larger than trnsim models ({limit:,} at most)",
                                 hint="check the value (published models are far below this limit)")
        if self.head_dim is None and self.hidden % self.heads:
            raise FieldIssue("heads", f"hidden {self.hidden} is not divisible by heads {self.heads}",
                             hint="give head_dim explicitly, or choose heads dividing hidden")
        kv = self.kv_heads if self.kv_heads is not None else self.heads
        if kv > self.heads or self.heads % kv:
            raise FieldIssue("kv_heads", f"{kv} key/value heads do not divide {self.heads} query heads",
                             hint="GQA groups heads evenly: kv_heads must divide heads")
        if self.top_k > self.experts:
            raise FieldIssue("top_k", f"top_k {self.top_k} exceeds experts {self.experts}",
                             hint="route each token to at most `experts` experts")
        ffn = self.ffn if self.ffn is not None else 4 * self.hidden
        # NOTE: the dataclass is frozen; defaults that depend on other fields are resolved once, here.
        object.__setattr__(self, "kv_heads", kv)
        object.__setattr__(self, "head_dim", self.head_dim or self.hidden // self.heads)
        object.__setattr__(self, "ffn", ffn)
        object.__setattr__(self, "moe_ffn", self.moe_ffn or ffn)

    # Resolved views (never None after __post_init__), typed as int for callers.
    @property
    def g(self) -> int:
        return cast(int, self.kv_heads)

    @property
    def d(self) -> int:
        return cast(int, self.head_dim)

    @property
    def f(self) -> int:
        return cast(int, self.ffn)

    @property
    def f_moe(self) -> int:
        return cast(int, self.moe_ffn)

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    @property
    def moe(self) -> bool:
        return self.experts > 1

    def mlp_params(self, width: int) -> int:
        """One MLP (or one expert) of ``width``: 2 or 3 matrices, plus biases."""
        mats = 3 if self.gated else 2
        return mats * self.hidden * width + ((mats - 1) * width + self.hidden if self.bias else 0)

    def params(self) -> ParamCount:
        """Parameter count from the op-level shapes (see the module docstring)."""
        return _params(self)

    def describe(self) -> str:
        p = self.params()
        kind = f"MoE {self.experts}×top-{self.top_k}, " if self.moe else ""
        return (f"{self.name}: {p.total / 1e9:.1f} B params ({kind}{self.layers} layers, h={self.hidden}, "
                f"{self.heads} heads/{self.g} kv, ffn {self.f} {self.mlp}, V={self.vocab}, s={self.seq_len})")


@functools.lru_cache(maxsize=256)
def _params(m: ModelSpec) -> ParamCount:
    h, a, g, d = m.hidden, m.heads, m.g, m.d
    attn_mm = h * a * d + 2 * h * g * d + a * d * h
    attention = attn_mm + ((a + 2 * g) * d + h if m.bias else 0)
    mats = 3 if m.gated else 2
    if m.moe:
        router = h * m.experts
        mlp, active_mlp = m.experts * m.mlp_params(m.f_moe) + router, m.top_k * m.mlp_params(m.f_moe) + router
        mlp_mm = m.top_k * mats * h * m.f_moe + router
    else:
        mlp = active_mlp = m.mlp_params(m.f)
        mlp_mm = mats * h * m.f
    norm = 2 * h if m.norm == "layernorm" else h
    embedding = m.vocab * h + (m.seq_len * h if m.position == "learned" else 0)
    head = 0 if m.tied_embeddings else m.vocab * h
    per_layer, active_layer = attention + mlp + 2 * norm, attention + active_mlp + 2 * norm
    return ParamCount(attention=attention, mlp=mlp, norms=2 * norm, embedding=embedding, head=head,
                      per_layer=per_layer, active_per_layer=active_layer,
                      total=m.layers * per_layer + norm + embedding + head,
                      active=m.layers * active_layer + norm + embedding + head,
                      matmul=m.layers * (attn_mm + mlp_mm) + m.vocab * h)


def _build(table: object, file: str, name: str) -> ModelSpec:
    try:
        return build(ModelSpec, table, file=file, extra={"name": name})
    except SpecError as exc:  # the schema builder speaks of presets; a model is configuration
        raise ModelError(exc.message, where=exc.where, hint=exc.hint) from None


@functools.cache
def _zoo() -> dict[str, ModelSpec]:
    with ZOO_FILE.open("rb") as fh:
        tables = cast("dict[str, Any]", tomllib.load(fh)["models"])
    return {name: _build(t, f"{ZOO_FILE}: models.{name}", name) for name, t in tables.items()}


def names() -> list[str]:
    """Zoo model names, in file order."""
    return list(_zoo())


def load(path: str | Path) -> ModelSpec:
    """Read and validate a model file (``.toml`` or ``.json``, flat keys as in the zoo)."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelError(f"cannot read model file: {exc.strerror}", where=str(file),
                         hint="check the path, or use a zoo name from `trnsim estimate --help`") from None
    except UnicodeDecodeError as exc:
        raise ModelError(f"the model file is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
                         where=str(file), hint="save it as UTF-8 TOML or JSON (is it the right file?)") from None
    try:
        table: object = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"syntax error: {exc}", where=str(file),
                         hint="a model file is flat `key = value` TOML, or a JSON object, with the zoo's keys"
                         ) from None
    return _build(table, str(file), file.stem)


def get(name: str) -> ModelSpec:
    """A zoo model by name (or alias), or a model file when ``name`` ends in .toml/.json."""
    if name.endswith((".toml", ".json")):
        return _load_cached(str(Path(name).expanduser().resolve()))
    zoo = _zoo()
    key = ALIASES.get(name, name)
    if key in zoo:
        return zoo[key]
    near = difflib.get_close_matches(name, [*zoo, *ALIASES], n=1)
    raise ModelError(f"unknown model {name!r}",
                     hint=(f"did you mean {near[0]!r}? " if near else "") + f"zoo: {', '.join(zoo)}; "
                     "or pass a .toml/.json model file")


@functools.lru_cache(maxsize=32)
def _load_cached(path: str) -> ModelSpec:
    return load(path)
