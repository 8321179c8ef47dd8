"""The estimator's physical mechanisms, each against its closed form: GEMM tile and wave quantisation, achieved
link rates, the memory-bound ops' bytes, the optimizer step's passes and the gradient dtype."""

from __future__ import annotations

import dataclasses

import pytest

from trnsim import hw
from trnsim.cluster import Estimate, TrainingConfig, estimate, models, resolve
from trnsim.cluster.comm import achieved, communicators, link_efficiency, topology
from trnsim.cluster.efficiency import Roofline, gemm_quantisation, pointwise_time, stream_time
from trnsim.cluster.memory import stage_weights
from trnsim.cluster.ops import NORM, QKV_BIAS_ADD, QKV_SPLIT, Shard, head_ops, layer_ops


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


def _a100_plan(model: str, chips: int, **options: object) -> Estimate:
    cfg = TrainingConfig(tp=8, pp=1, micro_batch=1, precision="fp16", recompute="full", attention="eager", sp=False,
                         zero=0, overlap_grad_reduce=False, grad_accumulation_fusion=False)
    return estimate(models.get(model), hw.get("a100"), chips, dataclasses.replace(cfg, **options))  # type: ignore[arg-type]


def test_gradient_dtype_sets_bytes_and_memory() -> None:
    """fp32 main gradients: 4 B in the buffer and in the DP reduction, no fp32 copy for the update (Megatron-LM's
    18 B/param for bf16 + fp32 gradients vs 20 B for fp16 parameters and gradients, without ZeRO)."""
    wide, narrow = _a100_plan("megatron-18.4b", 64, fp32_grads=True), _a100_plan("megatron-18.4b", 64, fp32_grads=False)
    for est, per_param in ((wide, 18), (narrow, 20)):
        mb = est.memory
        assert (mb.weights + mb.gradients + mb.optimizer) / (mb.weights / 2) == pytest.approx(per_param)
    assert wide.breakdown["grad_accum"] / narrow.breakdown["grad_accum"] == pytest.approx(10 / 6)
    assert wide.breakdown["dp_comm"] > 1.9 * narrow.breakdown["dp_comm"]
    assert resolve(models.get("llama3-8b"), hw.get("h100"), 8).fp32_grads  # bf16 default
    assert not resolve(models.get("llama3-8b"), hw.get("h100"), 8, TrainingConfig(precision="fp16")).fp32_grads


def test_optimizer_step_passes() -> None:
    """Per shard parameter: update 28 + unscale 8 (fp16) + norm 4 + 16-bit copy 6 (+ 6 fp32 copy of 16-bit
    gradients), and a write of the gradient buffer to zero it."""
    spec = hw.get("a100")
    r = Roofline.of(spec, "fp16")
    for fp32, per_param in ((True, 28 + 8 + 4 + 6 + 4), (False, 28 + 8 + 4 + 6 + 6 + 2)):
        est = _a100_plan("megatron-18.4b", 64, fp32_grads=fp32)
        params = sum(stage_weights(models.get("megatron-18.4b"), est.plan, "first"))
        assert est.breakdown["optimizer"] == pytest.approx(params * per_param / r.memory_rate)
    bf16 = _a100_plan("megatron-18.4b", 64, precision="bf16")  # no loss scaling: no unscale pass
    params = sum(stage_weights(models.get("megatron-18.4b"), bf16.plan, "first"))
    assert bf16.breakdown["optimizer"] == pytest.approx(params * (28 + 4 + 6 + 4) / r.memory_rate)


def test_qkv_split_backward_copy() -> None:
    """The eager stack's q/k/v are views of the QKV output: their gradients are concatenated back (reads 2,
    writes 2 per QKV output), in the backward only; flash attention's stack is left without it."""
    m = models.get("megatron-1.7b")
    r = Roofline.of(hw.get("a100"), "fp16")
    sh = Shard(micro_batch=2, seq=m.seq_len, tp=2, attention="eager")
    split = next(p for p in layer_ops(m, sh).pointwise if p.name == "qkv split backward")
    assert QKV_SPLIT == (0, 4)
    assert (split.elements, split.fwd, split.bwd) == (2 * m.seq_len * 3 * m.hidden // 2, 0, 4)
    assert pointwise_time(r, split) == 0.0 and pointwise_time(r, split, backward=True) > 0.0
    flash = dataclasses.replace(sh, attention="flash")
    assert all(p.name != "qkv split backward" for p in layer_ops(m, flash).pointwise)


def test_gradient_prescaling_pass() -> None:
    """The gradient buffer is divided by DP in place before its reduction: 2·grad_bytes per trained parameter,
    in dp_comm; nothing on one data-parallel rank."""
    r = Roofline.of(hw.get("a100"), "fp16")
    m = models.get("megatron-18.4b")
    for fp32 in (True, False):
        est = _a100_plan("megatron-18.4b", 64, fp32_grads=fp32)
        params = sum(stage_weights(m, est.plan, "first"))
        grad_bytes = 4 if fp32 else 2
        reduce = est.breakdown["dp_comm"] - stream_time(r, params * 2 * grad_bytes)
        comms = communicators(hw.get("a100"), est.plan)
        assert reduce == pytest.approx(comms.time("all-reduce", grad_bytes * params, "dp"))
    assert _a100_plan("megatron-18.4b", 8).breakdown["dp_comm"] == 0.0
