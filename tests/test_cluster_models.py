"""Model zoo and model files: parameter counts (Megatron eq. 2), FLOPs (op level vs 6·N·T), file errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trnsim.cluster import models
from trnsim.cluster.models import ModelError
from trnsim.cluster.ops import forward_flops_per_token, six_nt_flops_per_token

# Narayanan et al. 2021 Table 1 (reference/calibration_megatron.md): zoo name → published "Params (B)".
TABLE1 = {"megatron-1.7b": 1.7, "megatron-3.6b": 3.6, "megatron-7.5b": 7.5, "megatron-18.4b": 18.4,
          "megatron-39.1b": 39.1, "megatron-76.1b": 76.1, "megatron-145.6b": 145.6, "megatron-310.1b": 310.1,
          "megatron-529.6b": 529.6, "megatron-1t": 1008.0, "megatron-174.6b": 174.6}  # the last: Table 2


@pytest.mark.parametrize("name", list(TABLE1))
def test_megatron_eq2_params(name: str) -> None:
    m = models.get(name)
    h, layers, v, s = m.hidden, m.layers, m.vocab, m.seq_len
    eq2 = 12 * layers * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))
    assert round(eq2 / 1e9, 1) == TABLE1[name]
    # op-level count = eq. 2 + the final LayerNorm (2h), which eq. 2 leaves out
    assert m.params().total == round(eq2) + 2 * h


@pytest.mark.parametrize("name", models.names())
def test_op_level_flops_match_6nt(name: str) -> None:
    """Training FLOPs per token from the op shapes (3 × forward, full attention) vs 6·N + 12·L·a·d·s.
    Stated margin 0.1%: the rule counts biases and norms as if they were matmul weights."""
    m = models.get(name)
    op_level = 3 * forward_flops_per_token(m)
    assert op_level == pytest.approx(six_nt_flops_per_token(m), rel=1e-3)
    assert op_level <= six_nt_flops_per_token(m)


def test_causal_flash_counts_about_half_the_attention() -> None:
    m = models.get("llama3-8b")
    full, causal = forward_flops_per_token(m), forward_flops_per_token(m, causal=True)
    attention = 4 * m.layers * m.heads * m.d * m.seq_len
    assert full - causal == pytest.approx(attention / 2, rel=1e-3)


@pytest.mark.parametrize(("name", "billions"), [("llama2-7b", 6.74), ("llama2-13b", 13.02), ("llama2-70b", 68.98),
                                                ("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85),
                                                ("gpt3-175b", 174.6), ("mixtral-8x7b", 46.70)])
def test_published_sizes(name: str, billions: float) -> None:
    assert models.get(name).params().total / 1e9 == pytest.approx(billions, abs=0.01)


def test_moe_active_params_and_aliases() -> None:
    m = models.get("mixtral-8x7b")
    assert m.params().active / 1e9 == pytest.approx(12.9, abs=0.05)
    assert models.get("llama3.1-405b") is models.get("llama3-405b")


def test_user_files(tmp_path: Path) -> None:
    keys = {"layers": 4, "hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1536, "vocab": 1000, "seq_len": 256,
            "mlp": "swiglu"}
    (tmp_path / "tiny.json").write_text(json.dumps(keys), encoding="utf-8")
    (tmp_path / "tiny.toml").write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items()),
                                        encoding="utf-8")
    a, b = models.get(str(tmp_path / "tiny.json")), models.load(tmp_path / "tiny.toml")
    assert a.params() == b.params() and a.name == "tiny" and a.g == 2 and a.d == 64


@pytest.mark.parametrize(("text", "key", "words"), [
    ("layers = 4\nhidden = 512\nheads = 8\nvocab = 100", "seq_len", ["missing required key"]),
    ("layers = 4\nhidden = 512\nheads = 8\nvocab = 100\nseq_len = 64\nkv_heads = 3", "kv_heads", ["divide"]),
    ("layers = 4\nhidden = 500\nheads = 8\nvocab = 100\nseq_len = 64", "heads", ["not divisible"]),
    ("layers = 4\nhidden = 512\nheads = 8\nvocab = 100\nseq_len = 64\nmlp = 'relu'", "mlp", ["gelu", "swiglu"]),
    ("layers = 4\nhidden = 512\nheads = 8\nvocab = 100\nseq_len = 64\nlayer = 2", "layer", ["unknown key",
                                                                                            "layers"]),
    ("layers = -4\nhidden = 512\nheads = 8\nvocab = 100\nseq_len = 64", "layers", ["out of range"]),
    ("layers = 4\nhidden = 512\nheads = 8\nvocab = 100\nseq_len = 64\nexperts = 2\ntop_k = 3", "top_k", ["exceeds"]),
])
def test_file_errors_name_file_and_key(tmp_path: Path, text: str, key: str, words: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelError) as err:
        models.load(path)
    message = str(err.value)
    assert f"{path}: {key}" in message
    for word in words:
        assert word in message


def test_unknown_name_suggests() -> None:
    with pytest.raises(ModelError, match="did you mean 'llama3-70b'"):
        models.get("llama3-70")
    with pytest.raises(ModelError, match="cannot read"):
        models.get("/no/such/model.toml")
