"""The training setup: what the user asks for (:class:`TrainingConfig`) and what is run (:class:`Plan`).

``resolve(model, spec, chips, config)`` fills unset options with defaults and checks every rule at once;
a setup that breaks several rules raises one :class:`ClusterConfigError` listing each problem and what to
change. Rules (Megatron-LM's, Shoeybi et al. 2019 / Narayanan et al. 2021 / Korthikanti et al. 2022):

- DP · TP · PP · CP = chips; EP divides DP · CP (experts are spread over data-parallel ranks) and the experts;
- TP divides the query heads and the MLP width; TP divides the key/value heads, or the kv heads divide TP
  and each rank keeps one *replicated* kv head (Megatron requires the first; replication is what inference
  engines do, and costs memory and compute that the estimate counts);
- PP divides the layers; interleaving V virtual stages needs V | layers/PP and micro-batches divisible by PP;
- CP > 1 needs the sequence divisible by 2·CP (load-balanced causal chunks); SP needs the micro-batch's
  tokens divisible by TP;
- the global batch is a multiple of DP × micro-batch; the precision is one the target's matmul units run.

Defaults: micro-batch 1; CP 1; EP = the largest divisor of the experts that divides DP; SP on when TP > 1;
fp32 gradients (accumulated across micro-batches and reduced over DP in fp32) unless the precision is fp16, as
Megatron-LM does (arguments.py, megatron/ then megatron/training/: bf16 turns on
``--accumulate-allreduce-grads-in-fp32``, fp16 leaves it off);
TP and PP: the first of :func:`_candidates` (smallest PP, then the smallest TP within a node) that fits in
memory; global batch ≈ 4 Mi tokens (Llama 2's 4M-token batches, Touvron 2023 §2.2) and at least
4·PP micro-batches per replica.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from trnsim.cluster._cache import per_spec
from trnsim.cluster.models import ModelSpec
from trnsim.cluster.ops import ATTENTION_KINDS
from trnsim.errors import ConfigError
from trnsim.fabric.topology import MAX_CHIPS
from trnsim.hw.spec import ChipSpec

# CLI precision name → the dtype passed to ChipSpec.peak_flops (trnsim.numerics names).
PRECISIONS: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8_e4m3", "mxfp8": "mxfp8_e4m3",
                              "mxfp6": "mxfp6_e2m3", "mxfp4": "mxfp4_e2m1"}
# Optimizer state bytes per trained parameter beyond 16-bit weights and gradients: fp32 master copy plus
# moments (ZeRO, Rajbhandari et al. 2020 §3.1: K = 12 for mixed-precision Adam; SGD with momentum: 4 + 4).
OPTIMIZERS: dict[str, int] = {"adam": 12, "adamw": 12, "sgd": 8}
# Bytes per gradient element: fp32 main gradients, or the 16-bit training dtype. With 16-bit gradients the fp32
# update reads an fp32 copy of them, FP32_GRAD_COPY more bytes per parameter (Megatron-LM
# docs/source/distrib_optimizer.md: 20 B/parameter for fp16 parameters and gradients, 18 for bf16 parameters
# with fp32 gradients, without the distributed optimizer; 16-bit copy made in MixedPrecisionOptimizer).
GRAD_BYTES: dict[bool, int] = {True: 4, False: 2}
FP32_GRAD_COPY = 4
RECOMPUTE: dict[str, str] = {"none": "keep every activation", "selective": "recompute the attention core "
                             "(Korthikanti 2022 §5)", "full": "keep only each layer's input, recompute the layer"}
SCHEDULES: dict[str, str] = {"1f1b": "one-forward-one-backward (PipeDream-Flush)",
                             "interleaved": "1F1B with V virtual stages per chip (Narayanan 2021 §2.2.2)"}
FINETUNE: dict[str, str] = {"full": "train every weight", "lora": "frozen 16-bit base + rank-r adapters",
                            "qlora": "frozen 4-bit NF4 base + rank-r adapters (Dettmers 2023)"}
TOKENS_PER_BATCH = 4 * 2**20


class ClusterConfigError(ConfigError):
    """An impossible training setup; ``problems`` lists every broken rule with what to change."""

    def __init__(self, problems: list[str], *, where: str) -> None:
        self.problems = tuple(problems)
        text = f"{len(problems)} problem{'s' * (len(problems) > 1)} with the training setup:\n" + \
            "\n".join(f"  - {p}" for p in problems)
        super().__init__(text, where=where, hint="change the options named above (see `trnsim estimate --help`)")


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """Options as given; ``None`` means "choose a default" (see the module docstring)."""

    global_batch: int | None = None
    micro_batch: int | None = None
    seq_len: int | None = None
    precision: str = "bf16"
    optimizer: str = "adamw"
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    sp: bool | None = None
    interleave: int = 1
    zero: int = 1
    recompute: str = "selective"
    overlap_grad_reduce: bool = True
    grad_accumulation_fusion: bool = True
    finetune: str = "full"
    lora_rank: int = 16
    attention: str = "flash"
    fp32_grads: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A complete, checked setup: every option concrete. ``micro_batches`` is per data-parallel replica."""

    chips: int
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    sp: bool
    interleave: int
    zero: int
    recompute: str
    overlap_grad_reduce: bool
    grad_accumulation_fusion: bool
    global_batch: int
    micro_batch: int
    micro_batches: int
    seq_len: int
    precision: str
    dtype: str
    optimizer: str
    finetune: str
    lora_rank: int
    attention: str
    fp32_grads: bool = True

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element in the accumulation buffer and the data-parallel reduction."""
        return GRAD_BYTES[self.fp32_grads]

    @property
    def optimizer_bytes(self) -> int:
        """Optimizer-held bytes per trained parameter: states, plus the fp32 copy of 16-bit gradients."""
        return OPTIMIZERS[self.optimizer] + (0 if self.fp32_grads else FP32_GRAD_COPY)

    @property
    def schedule(self) -> str:
        return "interleaved" if self.interleave > 1 else "1f1b"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def describe(self) -> str:
        par = f"DP {self.dp} × TP {self.tp}{' +SP' if self.sp else ''} × PP {self.pp}"
        par += f" (interleaved V={self.interleave})" if self.interleave > 1 else ""
        par += f" × CP {self.cp}" if self.cp > 1 else ""
        par += f", EP {self.ep}" if self.ep > 1 else ""
        return (f"{par}; batch {self.global_batch} × {self.seq_len} tokens, micro-batch {self.micro_batch} "
                f"({self.micro_batches} per replica); {self.precision}, {self.optimizer}, ZeRO-{self.zero}, "
                f"recompute {self.recompute}, {self.attention} attention, {'fp32' if self.fp32_grads else '16-bit'} "
                "gradients"
                + (f", {self.finetune} r={self.lora_rank}" if self.finetune != "full" else ""))


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (a loop to sqrt(n): layer counts come from user files)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def tp_ok(model: ModelSpec, tp: int) -> bool:
    return model.heads % tp == 0 and model.f % tp == 0 and (model.g % tp == 0 or tp % model.g == 0)


def _candidates(model: ModelSpec, spec: ChipSpec, chips: int, cfg: TrainingConfig) -> list[tuple[int, int]]:
    """(TP, PP) to try when either is unset, in order of preference: PP as small as possible, and for each PP
    the smallest TP, a power of two within a node (TP's all-reduces want the fastest links)."""
    cp = cfg.cp or 1
    tps = [cfg.tp] if cfg.tp else [t for t in (1, 2, 4, 8, 16, 32, 64)
                                   if t <= spec.topology.chips_per_node and tp_ok(model, t)] or [1]
    pps = [cfg.pp] if cfg.pp else _divisors(model.layers)
    return [(tp, pp) for pp in pps for tp in tps
            if chips % (tp * pp * cp) == 0 and (not cfg.dp or cfg.dp * tp * pp * cp == chips)]


def static_fit(model: ModelSpec, spec: ChipSpec, plan: Plan) -> float:
    """Model states (16-bit weights, gradients, ZeRO-sharded optimizer states) over half of HBM: a quick
    fit test for callers without the memory model (``estimate`` passes the full one)."""
    per_param = 2.0 + plan.grad_bytes + plan.optimizer_bytes / (plan.dp * plan.cp if plan.zero >= 1 else 1)
    return model.params().total / (plan.tp * plan.pp) * per_param / (0.5 * spec.hbm_bytes)


def resolve(model: ModelSpec, spec: ChipSpec, chips: int, cfg: TrainingConfig | None = None, *,
            fit: Callable[[Plan], float] | None = None) -> Plan:
    """Fill defaults and check every rule; raise :class:`ClusterConfigError` listing all problems.

    When TP or PP is unset, the candidates of :func:`_candidates` are tried in order and the first whose
    ``fit(plan)`` (memory needed / memory usable; default :func:`static_fit`) is at most 1 is taken, else the
    one that comes closest."""
    cfg = cfg or TrainingConfig()
    where = f"{model.name} on {chips} × {spec.name}"
    problems = _option_problems(model, spec, chips, cfg)
    if (cfg.tp and cfg.pp) or problems:  # nothing to choose, or options already wrong: check as given
        plan, split = _build(model, spec, chips, cfg, cfg.tp or 1, cfg.pp or 1)
    else:
        measure: Callable[[Plan], float] = fit or (lambda p: static_fit(model, spec, p))
        best: tuple[float, Plan] | None = None
        for tp, pp in _candidates(model, spec, chips, cfg):
            candidate, errors = _build(model, spec, chips, cfg, tp, pp)
            if candidate is None or errors:
                continue
            ratio = measure(candidate)
            if best is None or ratio < best[0]:
                best = (ratio, candidate)
            if ratio <= 1:
                break
        if best is None:  # nothing valid: report the problems of the simplest split
            plan, split = _build(model, spec, chips, cfg, cfg.tp or 1, cfg.pp or 1)
        else:
            plan, split = best[1], []
    problems += split
    if problems or plan is None:
        raise ClusterConfigError(problems, where=where)
    return plan


def _option_problems(model: ModelSpec, spec: ChipSpec, chips: int, cfg: TrainingConfig) -> list[str]:
    """Rules on single options (values, names, precision, whole nodes)."""
    problems: list[str] = []
    for name, value in (("micro_batch", cfg.micro_batch), ("global_batch", cfg.global_batch),
                        ("seq_len", cfg.seq_len), ("dp", cfg.dp), ("tp", cfg.tp), ("pp", cfg.pp), ("cp", cfg.cp),
                        ("ep", cfg.ep), ("interleave", cfg.interleave), ("lora_rank", cfg.lora_rank)):
        if value is not None and value < 1:
            problems.append(f"{name} = {value}: must be a positive integer")
    if chips < 1:
        problems.append(f"chips = {chips}: must be at least 1")
    elif chips > MAX_CHIPS:
        problems.append(f"chips = {chips:,}: trnsim models clusters of at most {MAX_CHIPS:,} chips")
    if problems:
        raise ClusterConfigError(problems, where=f"{model.name} on {chips} × {spec.name}")
    for name, value, table in (("precision", cfg.precision, PRECISIONS), ("optimizer", cfg.optimizer, OPTIMIZERS),
                               ("recompute", cfg.recompute, RECOMPUTE), ("finetune", cfg.finetune, FINETUNE),
                               ("attention", cfg.attention, ATTENTION_KINDS)):
        if value not in table:
            problems.append(f"{name} {value!r} is not one of: {', '.join(table)}")
    if cfg.zero not in (0, 1, 2, 3):
        problems.append(f"zero = {cfg.zero}: ZeRO stages are 0, 1, 2 or 3 (3 = FSDP)")
    dtype = PRECISIONS.get(cfg.precision, "bf16")
    if cfg.precision in PRECISIONS and not per_spec(spec, "supports:" + dtype, lambda: spec.supports(dtype)):
        have = [p for p, d in PRECISIONS.items() if spec.supports(d)]
        problems.append(f"{spec.name} has no {dtype} matmul rate: use --precision {' | '.join(have)}")
    per_node = spec.topology.chips_per_node
    if chips > per_node and chips % per_node:
        problems.append(f"{chips} chips is not a whole number of {per_node}-chip {spec.name} nodes: "
                        f"use a multiple of {per_node}")
    return problems


def _build(model: ModelSpec, spec: ChipSpec, chips: int, cfg: TrainingConfig, tp: int,
           pp: int) -> tuple[Plan | None, list[str]]:
    """The plan for one (TP, PP), or the rules it breaks."""
    problems: list[str] = []
    cp = cfg.cp or 1
    mp = tp * pp * cp
    dp = cfg.dp or max(1, chips // mp)
    if dp * mp != chips:
        problems.append(f"DP {dp} × TP {tp} × PP {pp} × CP {cp} = {dp * mp} ≠ {chips} chips: "
                        + (f"use dp = {chips // mp}" if chips % mp == 0 else f"choose TP·PP·CP dividing {chips}"))
    if not tp_ok(model, tp):
        good = [t for t in _divisors(model.heads) if tp_ok(model, t)]
        problems.append(f"TP {tp} must divide heads {model.heads} and ffn {model.f}, and divide (or be a "
                        f"multiple of) kv_heads {model.g}: use tp in {{{', '.join(map(str, good))}}}")
    if model.layers % pp:
        problems.append(f"PP {pp} does not divide {model.layers} layers: use pp in "
                        f"{{{', '.join(map(str, _divisors(model.layers)))}}}")
    v = cfg.interleave
    if v > 1 and (pp == 1 or (model.layers // pp) % v):
        problems.append(f"interleave {v} needs PP > 1 and {model.layers} / PP {pp} layers divisible by {v}")
    seq = cfg.seq_len or model.seq_len
    if cp > 1 and seq % (2 * cp):
        problems.append(f"CP {cp} needs seq_len {seq} divisible by 2·CP = {2 * cp} (load-balanced causal chunks)")
    # NOTE: expert parallelism takes adjacent data-parallel ranks (stride TP·CP, comm.py's "tp-cp-ep-dp-pp"
    # layout), so EP must divide DP itself, not DP·CP
    ep = cfg.ep or (max(e for e in _divisors(model.experts) if dp % e == 0) if model.moe else 1)
    if ep > 1 and not model.moe:
        problems.append(f"EP {ep} needs a mixture-of-experts model; {model.name} is dense: use ep = 1")
    elif model.moe and (model.experts % ep or dp % ep):
        problems.append(f"EP {ep} must divide experts {model.experts} and DP {dp} (expert-parallel ranks are "
                        "data-parallel ranks): lower ep, or raise dp")
    sp = cfg.sp if cfg.sp is not None else tp > 1
    sp = sp and tp > 1  # sequence parallelism splits the TP group's work; without TP it is a no-op
    micro = cfg.micro_batch or 1
    if sp and (micro * seq // cp) % tp:
        problems.append(f"SP: micro-batch tokens {micro * seq // cp} not divisible by TP {tp}")
    replica = dp * micro
    gb = cfg.global_batch or replica * max(-(-TOKENS_PER_BATCH // (seq * replica)), 4 * pp if pp > 1 else 1)
    if gb % replica:
        near = sorted({max(replica, gb // replica * replica), (gb // replica + 1) * replica})
        problems.append(f"global batch {gb} is not a multiple of DP {dp} × micro-batch {micro} = {replica}: "
                        f"use {' or '.join(map(str, near))}")
    m = max(1, gb // replica)
    if v > 1 and m % pp:
        problems.append(f"the interleaved schedule needs micro-batches per replica ({m}) divisible by PP {pp}")
    if problems:
        return None, problems
    return Plan(chips=chips, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sp=sp, interleave=v, zero=cfg.zero,
                recompute=cfg.recompute, overlap_grad_reduce=cfg.overlap_grad_reduce,
                grad_accumulation_fusion=cfg.grad_accumulation_fusion, global_batch=gb, micro_batch=micro,
                micro_batches=m, seq_len=seq, precision=cfg.precision, dtype=PRECISIONS.get(cfg.precision, "bf16"),
                optimizer=cfg.optimizer, finetune=cfg.finetune, lora_rank=cfg.lora_rank,
                attention=cfg.attention,
                fp32_grads=cfg.fp32_grads if cfg.fp32_grads is not None else cfg.precision != "fp16"), []
