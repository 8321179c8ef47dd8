"""Device memory per chip: model states, activations, buffers, and whether they fit in HBM.

Model states (ZeRO, Rajbhandari et al. 2020 §3.1): 16-bit weights (2 B/param), gradients (``Plan.grad_bytes``:
4 B as fp32 main gradients, else 2 B) plus ``OPTIMIZERS[opt]`` bytes of fp32 master weights and moments (Adam:
12), and with 16-bit gradients the fp32 copy the update reads (4 B; Megatron-LM's table of 20 B/param for fp16
parameters and gradients, 18 B for bf16 parameters with fp32 gradients). ZeRO-1 shards the optimizer states
over the DP·CP ranks, ZeRO-2 also the gradients, ZeRO-3 (FSDP) also the weights; expert weights shard over
DP·CP/EP (their data-parallel group). LoRA/QLoRA freeze the base (2 B, or 4-bit NF4 with double-quantised
scales ≈ 0.516 B, Dettmers 2023) and train rank-r adapters on every attention and MLP matrix.

Activations of one layer and one micro-batch, in bytes (Korthikanti et al. 2022, §4; ``rows`` = tokens on the
chip for norms and residuals, T/t with sequence parallelism, else T)::

    norm inputs 2·2·rows·h, QKV and MLP inputs 2·2·rows·h (replicated without SP)
    Q, K, V 2·T·(a_t + 2·g_t)·d;  output-projection input 2·T·a_t·d
    MLP: GeLU input + FC2 input 2·2·T·f_t, SwiGLU gate/up/product 3·2·T·f_t
    dropout masks 1·rows·h after each projection (if the model has dropout)
    eager attention: softmax output 2, dropout mask 1, dropout output 2 bytes per score (b·a_t·s_q·s_k)
    flash attention: fp32 log-sum-exp 4·b·a_t·s_q

For Megatron's GPT (t = 1) this is s·b·h·(34 + 5·a·s/h); with TP and SP s·b·h·(34 + 5·a·s/h)/t. Selective
recomputation drops the attention core's tensors (the 5·a·s/h term); full recomputation keeps only the layer
input, 2·rows·h; either way the layer being rebuilt during backward holds all its activations (one layer of
the stage is counted in full). The first pipeline stage holds
min(PP, m) micro-batches in flight under 1F1B, × (1 + (PP−1)/(PP·V)) when interleaved (Narayanan 2021
§2.2.2; Korthikanti 2022 §4.2.3); the last stage one, plus fp32 and 16-bit logits 6·T·V/t.

A setup fits when the total is at most ``1 − RESERVED_FRACTION`` of ``spec.hbm_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.cluster.config import Plan
from trnsim.cluster.models import ModelSpec
from trnsim.cluster.ops import Shard, kv_local
from trnsim.hw.spec import ChipSpec

# Assumption: HBM the training job cannot use: runtime context, collective-library buffers, and allocator
# fragmentation (PyTorch's caching allocator typically strands 5-15%). Not measured in reference/.
RESERVED_FRACTION = 0.10
QLORA_BYTES_PER_PARAM = 0.5 + 0.127 / 8  # NF4 4 bits + double-quantised block scales (Dettmers 2023 §3)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per chip on the binding pipeline stage (``stage``: "first" or "last")."""

    stage: str
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    buffers: float
    capacity: int

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.buffers

    @property
    def usable(self) -> float:
        return (1.0 - RESERVED_FRACTION) * self.capacity

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def to_dict(self) -> dict[str, float | int | str | bool]:
        return {"stage": self.stage, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations, "logits": self.logits,
                "buffers": self.buffers, "total": self.total, "capacity": self.capacity,
                "usable": self.usable, "reserved_fraction": RESERVED_FRACTION, "fits": self.fits}


def shard_of(plan: Plan) -> Shard:
    return Shard(micro_batch=plan.micro_batch, seq=plan.seq_len, tp=plan.tp, cp=plan.cp, ep=plan.ep,
                 sp=plan.sp, attention=plan.attention)


def layer_activation_bytes(model: ModelSpec, sh: Shard, recompute: str) -> float:
    """Stored activations of one layer for one micro-batch on one chip (module docstring)."""
    t, h, d = sh.tp, model.hidden, model.d
    tokens = sh.micro_batch * sh.seq // sh.cp
    rows = tokens // t if sh.sp else tokens
    if recompute == "full":
        return 2.0 * rows * h
    heads, kv = model.heads // t, kv_local(model, t)
    mask = 1.0 if model.dropout else 0.0
    f_t = (model.f_moe * model.top_k if model.moe else model.f) // t
    total = (8 + 2 * mask) * rows * h + 2.0 * tokens * (heads + 2 * kv) * d + 2.0 * tokens * heads * d
    total += (6 if model.gated else 4) * tokens * f_t
    total += 2.0 * tokens * model.top_k * h if model.moe else 0.0  # permuted tokens
    return total + (0.0 if recompute == "selective" else attention_core_bytes(model, sh))


def attention_core_bytes(model: ModelSpec, sh: Shard) -> float:
    """What selective recomputation drops: 5 bytes per score (eager), or flash's fp32 log-sum-exp."""
    heads, sq = model.heads // sh.tp, sh.seq // sh.cp
    if sh.attention == "flash":
        return 4.0 * sh.micro_batch * heads * sq
    per_score = 5.0 if model.dropout else 2.0
    return per_score * sh.micro_batch * heads * sq * sh.seq


def in_flight(plan: Plan) -> float:
    """Micro-batch-equivalents of activations the first stage holds (1F1B; interleaved factor)."""
    if plan.pp == 1:
        return 1.0
    factor = 1.0 + (plan.pp - 1) / (plan.pp * plan.interleave) if plan.interleave > 1 else 1.0
    return min(plan.pp, plan.micro_batches) * factor


def lora_params_per_layer(model: ModelSpec, rank: int, tp: int) -> float:
    """Rank-r adapters A[in,r], B[r,out] on every attention and MLP matrix, per TP rank."""
    h, a, g, d = model.hidden, model.heads, model.g, model.d
    f = model.f_moe if model.moe else model.f
    mats = [(h, (a + 2 * g) * d), (a * d, h)] + [(h, f)] * (2 if model.gated else 1) + [(f, h)]
    experts = model.experts if model.moe else 1
    attn, mlp = mats[:2], mats[2:]
    return (sum(rank * (i + o) for i, o in attn) + experts * sum(rank * (i + o) for i, o in mlp)) / tp


def stage_weights(model: ModelSpec, plan: Plan, stage: str) -> tuple[float, float]:
    """(dense, expert) parameters on one chip of the first or last pipeline stage."""
    p, t = model.params(), plan.tp
    layers = model.layers // plan.pp
    expert = (p.mlp if model.moe else 0) * layers / (t * plan.ep)
    dense = (p.per_layer - (p.mlp if model.moe else 0)) * layers / t
    first, last = stage == "first", stage == "last" or plan.pp == 1
    if first:
        dense += p.embedding / t
    if last:  # Megatron keeps a copy of a tied embedding on the last stage as the LM head
        dense += (p.head if not model.tied_embeddings else (model.vocab * model.hidden if plan.pp > 1 else 0)) / t
    return dense, expert


def memory(model: ModelSpec, spec: ChipSpec, plan: Plan) -> MemoryBreakdown:
    """Per-chip memory on the binding stage (the larger of the first and the last)."""
    stages = ("first",) if plan.pp == 1 else ("first", "last")
    return max((_stage_memory(model, spec, plan, s) for s in stages), key=lambda mb: mb.total)


def _stage_memory(model: ModelSpec, spec: ChipSpec, plan: Plan, stage: str) -> MemoryBreakdown:
    sh = shard_of(plan)
    dense, expert = stage_weights(model, plan, stage)
    shard = plan.dp * plan.cp
    eshard = max(1, shard // plan.ep)
    opt_bytes = plan.optimizer_bytes
    layers = model.layers // plan.pp
    if plan.finetune == "full":
        base, trained_d, trained_e = 0.0, dense, expert
    else:
        per_base = 2.0 if plan.finetune == "lora" else QLORA_BYTES_PER_PARAM
        base = (dense + expert) * per_base / (shard if plan.zero >= 3 else 1)
        trained_d, trained_e = lora_params_per_layer(model, plan.lora_rank, plan.tp) * layers, 0.0

    def sharded(bytes_per: float, level: int) -> float:
        """Bytes of the trained parameters' state; ZeRO stage ``level`` and up shards it."""
        if plan.zero >= level:
            return bytes_per * (trained_d / shard + trained_e / eshard)
        return bytes_per * (trained_d + trained_e)

    weights = base + sharded(2.0, 3)
    gradients, optimizer = sharded(float(plan.grad_bytes), 2), sharded(float(opt_bytes), 1)

    per_layer = layer_activation_bytes(model, sh, plan.recompute)
    tokens = plan.micro_batch * plan.seq_len // plan.cp
    rows = tokens // plan.tp if plan.sp else tokens
    # NOTE: the layer being rebuilt during backward holds all its activations (its input among them), so
    # under recomputation one of the stored layers is counted in full instead of as its checkpoint.
    rebuilt = layer_activation_bytes(model, sh, "none")
    flight = in_flight(plan) if stage == "first" else 1.0
    acts = per_layer * (layers * flight - 1) + rebuilt
    if stage == "first":  # the embedding's dropout mask (Korthikanti 2022 §4.3); its output is layer 0's input
        acts += (1.0 if model.dropout else 0.0) * rows * model.hidden * flight
        logits = 0.0 if plan.pp > 1 else 6.0 * tokens * model.vocab / plan.tp
    else:
        logits = 6.0 * tokens * model.vocab / plan.tp + 2.0 * rows * model.hidden
    buffers = 2.0 * tokens * model.hidden * (2 if plan.tp > 1 else 0) + (8.0 * rows * model.hidden if plan.pp > 1
                                                                          else 0.0)
    if plan.zero >= 3:  # FSDP: the gathered weights of the current and the prefetched next layer
        buffers += 2 * 2.0 * (dense + expert) / max(1, layers)
    return MemoryBreakdown(stage=stage, weights=weights, gradients=gradients, optimizer=optimizer,
                           activations=acts, logits=logits, buffers=buffers, capacity=spec.hbm_bytes)
