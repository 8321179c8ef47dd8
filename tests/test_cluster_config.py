"""Training setups: defaults, and one error that lists every broken rule with what to change."""

from __future__ import annotations

import pytest

from trnsim import hw
from trnsim.cluster import ClusterConfigError, TrainingConfig, models, resolve


def problems(name: str, target: str, chips: int, cfg: TrainingConfig) -> tuple[str, ...]:
    with pytest.raises(ClusterConfigError) as err:
        resolve(models.get(name), hw.get(target), chips, cfg)
    assert str(err.value).count("\n  - ") == len(err.value.problems)
    return err.value.problems


def test_defaults() -> None:
    plan = resolve(models.get("llama3-70b"), hw.get("h100"), 1024)
    assert plan.tp * plan.pp * plan.dp * plan.cp == 1024
    assert plan.tp <= 8 and plan.sp and plan.micro_batch == 1 and plan.cp == 1
    assert plan.global_batch % (plan.dp * plan.micro_batch) == 0
    assert plan.global_batch * plan.seq_len >= 4 * 2**20
    small = resolve(models.get("gpt3-125m"), hw.get("trn3"), 16)
    assert (small.tp, small.pp, small.dp, small.sp) == (1, 1, 16, False)
    moe = resolve(models.get("mixtral-8x7b"), hw.get("h100"), 64, TrainingConfig(tp=2, pp=1))
    assert moe.ep == 8


def test_impossible_setup_lists_every_problem() -> None:
    found = problems("llama3-70b", "h100", 1004, TrainingConfig(tp=3, pp=7, interleave=3, global_batch=100,
                                                               micro_batch=3, precision="mxfp6", ep=2))
    text = "\n".join(found)
    for words in ("whole number of 8-chip", "TP 3 must divide heads 64", "PP 7 does not divide 80 layers",
                  "interleave 3", "≠ 1004 chips", "EP 2 needs a mixture-of-experts", "no mxfp6_e2m3 matmul rate",
                  "use --precision bf16 | fp16 | fp8"):
        assert words in text, words
    assert len(found) >= 7


def test_batch_cp_and_ep_rules() -> None:
    found = problems("mixtral-8x7b", "h100", 64, TrainingConfig(tp=2, pp=1, global_batch=105, ep=3, cp=3,
                                                                seq_len=4096))
    text = "\n".join(found)
    assert "EP 3 must divide experts 8" in text and "divisible by 2·CP = 6" in text
    assert "not a multiple of DP" in text
    assert "interleaved schedule needs micro-batches" in "\n".join(
        problems("llama3-8b", "h100", 64, TrainingConfig(tp=8, pp=4, interleave=2, global_batch=6)))


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    plan = resolve(models.get("llama3-405b"), hw.get("trn3"), 256, TrainingConfig(tp=16, pp=1))
    assert plan.tp == 16  # 8 kv heads, each on 2 ranks
    assert "kv_heads 8" in "\n".join(problems("llama3-405b", "trn3", 192, TrainingConfig(tp=12, pp=1)))


@pytest.mark.parametrize(("field", "value"), [("recompute", "some"), ("optimizer", "lamb"), ("finetune", "dora"),
                                              ("attention", "sparse")])
def test_unknown_choices(field: str, value: str) -> None:
    found = problems("llama3-8b", "h100", 8, TrainingConfig(**{field: value}))  # type: ignore[arg-type]
    assert f"{field} {value!r} is not one of" in found[0]


def test_non_positive_and_zero_stage() -> None:
    assert "must be a positive integer" in problems("llama3-8b", "h100", 8, TrainingConfig(tp=0))[0]
    assert "ZeRO stages" in problems("llama3-8b", "h100", 8, TrainingConfig(zero=4))[0]


def test_default_split_fits_in_memory() -> None:
    """Unset TP/PP: the smallest PP, then the smallest TP within a node, whose memory fits."""
    from trnsim.cluster import estimate

    est = estimate(models.get("llama3-8b"), hw.get("h100"), 64)
    assert est.fits and est.plan.tp > 1 and est.plan.pp == 1  # TP 1 holds states but not 8k-token activations
    big = estimate(models.get("llama3-70b"), hw.get("h100"), 256, TrainingConfig(zero=0))
    assert big.fits and big.plan.tp == 8 and big.plan.pp > 1
    # no memory model: model states only (16-bit gradients: 4 + 12/64 B per parameter, under half of HBM)
    plan = resolve(models.get("llama3-8b"), hw.get("h100"), 64, TrainingConfig(fp32_grads=False))
    assert plan.tp == 1
    # fp32 main gradients (bf16's default) take 6 + 12/64 B per parameter: over half of HBM at TP 1
    assert resolve(models.get("llama3-8b"), hw.get("h100"), 64).tp == 2


def test_expert_parallelism_must_divide_data_parallelism() -> None:
    """EP groups take adjacent data-parallel ranks, so EP > DP cannot be laid out (was accepted when EP divided
    DP·CP, then failed inside the fabric)."""
    from trnsim.cluster import estimate

    model, spec = models.get("mixtral-8x7b"), hw.get("trn3")
    with pytest.raises(ClusterConfigError, match=r"EP 8 must divide .*DP 4"):
        estimate(model, spec, 256, TrainingConfig(tp=4, cp=16, ep=8, pp=1))
    ok = estimate(model, spec, 256, TrainingConfig(tp=4, cp=8, ep=8, pp=1))  # DP 8: EP 8 fits
    assert ok.plan.ep == 8 and ok.step_time_s > 0
