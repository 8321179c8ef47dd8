"""The estimator's physical mechanisms, each against its closed form: GEMM tile and wave quantisation, achieved
link rates, the memory-bound ops' bytes, the optimizer step's passes and the gradient dtype."""

from __future__ import annotations

import pytest

from trnsim import hw
from trnsim.cluster import models
from trnsim.cluster.comm import achieved, link_efficiency, topology
from trnsim.cluster.efficiency import Roofline, gemm_quantisation
from trnsim.cluster.ops import NORM, QKV_BIAS_ADD, Shard, head_ops, layer_ops


def test_wave_quantisation_counts_tiles_over_sms() -> None:
    """One 128×128 tile per SM per wave (A100: 108 SMs): a wave and one tile more runs in two waves."""
    r = Roofline.of(hw.get("a100"), "fp16")
    assert r.wave == 108
    assert gemm_quantisation(r, 128 * 108, 128, 4096) == pytest.approx(1.0)
    assert gemm_quantisation(r, 128 * 109, 128, 4096) == pytest.approx(109 / 216)
    assert gemm_quantisation(r, 128, 128, 64, batch=216) == pytest.approx(1.0)  # batched tiles fill waves too
    # tile quantisation multiplies: 96 of 128 columns are useful
    assert gemm_quantisation(r, 128 * 108, 96, 4096) == pytest.approx(0.75)


def test_no_waves_without_sm_count_or_on_neuroncores() -> None:
    for target in ("trn3", "b200"):  # NeuronCores run one matmul at a time; b200's preset has no SM count
        r = Roofline.of(hw.get(target), "bf16")
        assert r.wave == 0
        assert gemm_quantisation(r, 128 * 109, 128, 128) == pytest.approx(1.0)


def test_achieved_link_rates() -> None:
    a100 = hw.get("a100")
    assert link_efficiency(a100, "nvlink")[0] == pytest.approx(0.8)
    assert link_efficiency(a100, "infiniband")[0] == pytest.approx(0.969)
    assert "line rate" in link_efficiency(hw.get("trn3"), "neuronlink")[1]
    fast = {lk.kind: lk.bandwidth for lk in achieved(a100).links}
    line = {lk.kind: lk.bandwidth for lk in a100.links}
    assert fast["nvlink"] == pytest.approx(0.8 * line["nvlink"])
    assert fast["infiniband"] == pytest.approx(0.969 * line["infiniband"])
    node = topology(a100, 16).levels[0]
    assert node.bandwidth == pytest.approx(12 * 25e9 * 0.8)


def test_memory_bound_bytes_of_the_2021_stack() -> None:
    """fp32 vocab-parallel cross-entropy moves 38 + 14 B per logit; 2021's F.linear adds the QKV bias in a
    separate pass (eager stack only); the final norm is a norm."""
    m = models.get("megatron-1.7b")
    for attention, add in (("eager", QKV_BIAS_ADD), ("flash", 0)):
        sh = Shard(micro_batch=2, seq=m.seq_len, tp=2, attention=attention)
        ce, emb, norm = head_ops(m, sh)[1]
        assert (ce.elements, ce.fwd, ce.bwd) == (2 * m.seq_len * m.vocab // 2, 38, 14)
        assert (norm.fwd, norm.bwd) == NORM and emb.fwd == 4 + 8 + 5
        bias = next(p for p in layer_ops(m, sh).pointwise if p.name == "qkv bias")
        assert (bias.elements, bias.fwd, bias.bwd) == (2 * m.seq_len * 3 * m.hidden // 2, add, 2)
