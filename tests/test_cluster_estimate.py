"""The estimator: runs everywhere, and behaves as physics says it must (hypothesis where useful)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hw
from trnsim.cluster import BREAKDOWN, TrainingConfig, estimate, memory, models, resolve
from trnsim.cluster.memory import layer_activation_bytes
from trnsim.cluster.ops import Shard
from trnsim.hw.spec import ChipSpec

TARGETS = ["trn3", "trn2", "h100", "h200", "b200", "tpu-v5p", "mi300x"]


def faster_links(spec: ChipSpec, factor: float = 2.0) -> ChipSpec:
    links = tuple(dataclasses.replace(lk, bandwidth=lk.bandwidth * factor) for lk in spec.links)
    return dataclasses.replace(spec, links=links)


@pytest.mark.parametrize("target", TARGETS)
def test_every_model_on_every_target(target: str) -> None:
    spec = hw.get(target)
    for name in models.names():
        est = estimate(models.get(name), spec, 512)
        assert est.step_time_s > 0 and math.isfinite(est.step_time_s)
        assert sum(est.breakdown.values()) == pytest.approx(est.step_time_s)
        assert set(est.breakdown) == set(BREAKDOWN) and min(est.breakdown.values()) >= 0
        assert 0 < est.mfu < 1 and 0 < est.hfu < 1, (name, est.mfu, est.hfu)
        assert est.tokens_per_s == pytest.approx(est.plan.tokens_per_step / est.step_time_s)
        assert est.model_tflops_per_chip == pytest.approx(est.mfu * est.peak_flops / 1e12)
        assert est.time_to_train(1e12) == pytest.approx(1e12 / est.tokens_per_s)
        assert est.memory_per_chip_bytes == est.memory.total > 0


PLANS = st.sampled_from([
    ("llama3-8b", "trn3", 256, TrainingConfig(tp=4, pp=1, micro_batch=1)),
    ("llama3-70b", "h100", 512, TrainingConfig(tp=8, pp=4, interleave=2, global_batch=512)),
    ("llama2-70b", "trn2", 256, TrainingConfig(tp=4, pp=2, cp=2, zero=3)),
    ("mixtral-8x7b", "b200", 128, TrainingConfig(tp=2, pp=1, ep=8)),
    ("megatron-18.4b", "a100", 256, TrainingConfig(tp=8, pp=1, sp=False, recompute="full", attention="eager",
                                                  zero=0, overlap_grad_reduce=False)),
    ("gpt3-175b", "tpu-v5p", 1024, TrainingConfig(tp=4, pp=8, zero=1, recompute="full")),
    ("llama3-405b", "trn3", 1792, TrainingConfig(tp=16, pp=7, cp=2, global_batch=1024)),
])


@settings(max_examples=25, deadline=None)
@given(PLANS, st.floats(1.1, 10.0))
def test_faster_links_never_slow_a_step(case: tuple[str, str, int, TrainingConfig], factor: float) -> None:
    name, target, chips, cfg = case
    model, spec = models.get(name), hw.get(target)
    base = estimate(model, spec, chips, cfg)
    fast = estimate(model, faster_links(spec, factor), chips, cfg)
    assert fast.step_time_s <= base.step_time_s * (1 + 1e-12)
    comm = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")
    assert all(fast.breakdown[k] <= base.breakdown[k] * (1 + 1e-12) for k in comm)


@settings(max_examples=40, deadline=None)
@given(PLANS, st.sampled_from(["flash", "eager"]), st.sampled_from([1, 2, 4]))
def test_more_recompute_never_raises_activation_memory(case: tuple[str, str, int, TrainingConfig],
                                                       attention: str, micro: int) -> None:
    name, target, chips, cfg = case
    model, spec = models.get(name), hw.get(target)
    acts = []
    for rec in ("none", "selective", "full"):
        plan = resolve(model, spec, chips, dataclasses.replace(cfg, recompute=rec, attention=attention,
                                                               micro_batch=micro, global_batch=None))
        acts.append(memory(model, spec, plan).activations)
    assert acts[0] >= acts[1] >= acts[2]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]), st.integers(1, 12))
def test_more_micro_batches_shrink_the_bubble(pp: int, v: int, k: int) -> None:
    model, spec = models.get("llama3-70b"), hw.get("h100")
    fractions = []
    for m in (k * pp, (k + 1) * pp):
        cfg = TrainingConfig(tp=8, pp=pp, interleave=v, global_batch=m * 8, micro_batch=1)
        est = estimate(model, spec, 64 * pp, cfg)
        stage = est.breakdown["bubble"] * v / (pp - 1)
        assert est.breakdown["bubble"] / (m * stage) == pytest.approx((pp - 1) / (m * v))
        fractions.append(est.breakdown["bubble"] / est.step_time_s)
    assert fractions[1] < fractions[0]


def test_korthikanti_activation_formula() -> None:
    """Per-layer activations equal s·b·h·(34 + 5·a·s/h) (no parallelism), /t with TP+SP, (10 + 24/t + 5as/(ht))
    with TP alone; selective drops the 5as/h term; full keeps 2·s·b·h/t (Korthikanti et al. 2022)."""
    m = models.get("megatron-18.4b")
    s, h, a = m.seq_len, m.hidden, m.heads
    for b in (1, 4):
        base = s * b * h * (34 + 5 * a * s / h)
        assert layer_activation_bytes(m, Shard(b, s, attention="eager"), "none") == pytest.approx(base)
        for t in (2, 8):
            sp = Shard(b, s, tp=t, sp=True, attention="eager")
            tp_only = Shard(b, s, tp=t, sp=False, attention="eager")
            assert layer_activation_bytes(m, sp, "none") == pytest.approx(base / t)
            assert layer_activation_bytes(m, tp_only, "none") == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s
                                                                                           / (h * t)))
            assert layer_activation_bytes(m, sp, "selective") == pytest.approx(s * b * h * 34 / t)
            assert layer_activation_bytes(m, sp, "full") == pytest.approx(2 * s * b * h / t)


def test_pipeline_in_flight_and_interleave_factor() -> None:
    model, spec = models.get("llama3-70b"), hw.get("h100")
    cfg = TrainingConfig(tp=8, pp=8, global_batch=64, recompute="full")
    one = memory(model, spec, resolve(model, spec, 512, cfg))
    two = memory(model, spec, resolve(model, spec, 512, dataclasses.replace(cfg, interleave=2)))
    plan = resolve(model, spec, 512, cfg)
    layer = layer_activation_bytes(model, Shard(1, plan.seq_len, tp=8, sp=True), "full")
    rebuilt = layer_activation_bytes(model, Shard(1, plan.seq_len, tp=8, sp=True), "none")
    mask = (1 if model.dropout else 0) * plan.seq_len // 8 * model.hidden  # the embedding's dropout mask
    assert one.activations == pytest.approx(layer * (10 * 8 - 1) + rebuilt + mask * 8)
    factor = 1 + 7 / (8 * 2)
    assert two.activations == pytest.approx(layer * (10 * 8 * factor - 1) + rebuilt + mask * 8 * factor)


def test_zero_stages_shrink_model_states() -> None:
    model, spec = models.get("llama3-8b"), hw.get("h100")
    states = []
    for z in range(4):
        mb = memory(model, spec, resolve(model, spec, 64, TrainingConfig(tp=1, pp=1, zero=z)))
        states.append((mb.weights, mb.gradients, mb.optimizer))
    assert states[0][2] > states[1][2] and states[1][1] > states[2][1] and states[2][0] > states[3][0]
    assert states[0][2] == pytest.approx(12 * states[0][0] / 2)


def test_lora_and_qlora_memory_and_flops() -> None:
    model, spec = models.get("llama2-70b"), hw.get("h100")
    full = estimate(model, spec, 64, TrainingConfig(tp=8, pp=1, zero=3))
    lora = estimate(model, spec, 64, TrainingConfig(tp=8, pp=1, finetune="lora", lora_rank=16))
    qlora = estimate(model, spec, 64, TrainingConfig(tp=8, pp=1, finetune="qlora", lora_rank=16))
    assert qlora.memory.weights < lora.memory.weights
    assert lora.memory.optimizer < 0.01 * full.memory.optimizer
    assert lora.step_time_s < full.step_time_s and qlora.step_time_s > lora.step_time_s


def test_precision_uses_the_matching_peak() -> None:
    model, spec = models.get("llama3-70b"), hw.get("trn3")
    bf16 = estimate(model, spec, 256, TrainingConfig(tp=8, pp=1))
    fp8 = estimate(model, spec, 256, TrainingConfig(tp=8, pp=1, precision="mxfp8"))
    assert bf16.peak_dtype == "bf16" and fp8.peak_dtype == "mxfp8_e4m3"
    assert fp8.peak_flops == spec.peak_flops("mxfp8") and fp8.step_time_s < bf16.step_time_s


def test_mamf_source_is_reported() -> None:
    model = models.get("llama3-8b")
    assert estimate(model, hw.get("h100"), 8).mamf == 0.803
    trn3 = estimate(model, hw.get("trn3"), 16)
    assert "assumption" in trn3.mamf_source and trn3.mamf == pytest.approx(0.769)
