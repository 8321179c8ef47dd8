"""Step time, throughput, MFU/HFU and memory of one training setup: ``estimate(model, spec, chips, config)``.

Pure arithmetic over cached per-layer costs: no file IO after the first call for a model and target, so a
planner can call it thousands of times a second. Per micro-batch and pipeline stage (``L/PP`` layers):

    layer   = forward + backward + recompute          (efficiency.py roofline over ops.py's ops)
            + tensor/expert-parallel collectives      (exposed: Megatron runs them on the critical path)
            + max(0, CP ring − attention compute)     (ring attention overlaps K/V passing with compute)
    stage   = L/PP · layer + LM head and loss (last stage) or embedding (first)
            + 2·V point-to-point activation sends     (scatter/gather over the TP ranks' links,
                                                         Narayanan 2021 §4.1; V chunks when interleaved)
    step    = m · stage + bubble + DP exposed + optimizer,   bubble = (PP−1)/V · stage  (Narayanan 2021 §2.2)

Recompute: selective re-runs the attention core's forward, full the whole layer's forward including its
tensor-parallel collectives. Flash attention's backward recomputes the scores (ops.py).

Data-parallel gradient reduction (ZeRO-0 all-reduce; ZeRO-1/2 reduce-scatter, then an all-gather of the
updated 16-bit weights) runs once per step over the first stage's parameters (the embedding's among them),
``Plan.grad_bytes`` per gradient (fp32 main gradients: 4). Overlap rule, when ``overlap_grad_reduce`` is on: a
layer's gradients are reduced as soon as its backward on the last micro-batch ends, behind the backward of the
layers still to go, so exposed = max(comm / (L/PP), comm − backward of one micro-batch on the stage) — the
last bucket never hides; the weight all-gather likewise hides behind the next step's first forward. Off:
all of it is exposed. ZeRO-3 gathers each layer's weights before its forward and again before its backward
(which also serves the recompute) and reduce-scatters its gradients, every micro-batch, prefetched one layer
ahead: exposed per layer = max(0, comm − that layer's compute) with overlap on, all of it off.

Before the reduction the gradient buffer is scaled by 1/DP in place, one more pass over it (2·grad_bytes per
trained parameter, counted in ``dp_comm``): Megatron-LM's local DDP ``allreduce_gradients`` runs
``buffer_.data /= data_parallel_world_size`` before ``all_reduce`` (megatron/model/distributed.py, 2021), and
Megatron Core's ``ParamAndGradBuffer`` scales each bucket by its ``gradient_scaling_factor`` likewise. ZeRO-3's
per-layer reduce-scatters are left without it.

Without gradient-accumulation fusion (weight-gradient GEMMs accumulating straight into the gradient buffer,
Megatron-LM's ``--gradient-accumulation-fusion``), every micro-batch's weight gradients are added to the
buffer by a separate pass, ``main_grad += grad`` (Megatron-LM's local DDP hook; PyTorch's AccumulateGrad):
it reads the 16-bit gradient and reads and writes the buffer, 2 + 2·grad_bytes per local trained parameter
per micro-batch.

The optimizer step is a few passes over HBM (``OPT_PASSES``, Megatron-LM's MixedPrecisionOptimizer.step):
copy 16-bit gradients to fp32 (if they are 16-bit), unscale them and check for inf/NaN (fp16 loss scaling),
the global gradient norm for clipping, the update itself (Adam reads fp32 gradients, master weights and two
moments and writes three back, 28 B; SGD with momentum 20 B), and the copy of the master weights into the
16-bit ones; ZeRO-1+ divides these parameters by DP·CP. Zeroing the gradient buffer for the next step is one
more write of it (sharded from ZeRO-2).

MFU = model FLOPs / (step time × chips × dense peak of the matmul dtype), model FLOPs per token = 6·N +
12·L·a·d·s (ops.six_nt_flops_per_token; LoRA trains no base weight, so 4·N + 12·L·a·d·s). HFU counts every
FLOP executed: recomputation, flash attention's backward recompute, replicated kv heads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from trnsim.cluster.comm import Communicators, communicators
from trnsim.cluster.config import Plan, TrainingConfig, resolve
from trnsim.cluster.efficiency import Roofline, backward_time, forward_time, pointwise_time, stream_time
from trnsim.cluster.memory import (
    QLORA_BYTES_PER_PARAM,
    MemoryBreakdown,
    lora_params_per_layer,
    memory,
    shard_of,
    stage_weights,
)
from trnsim.cluster.models import ModelSpec
from trnsim.cluster.ops import Shard, head_ops, layer_ops, six_nt_flops_per_token, six_nt_params
from trnsim.hw.spec import ChipSpec

# The optimizer update, bytes per parameter: fp32 gradient in; fp32 master weight and moments read and written.
OPT_STEP_BYTES: dict[str, float] = {"adam": 28.0, "adamw": 28.0, "sgd": 20.0}
# The other passes of a mixed-precision step, bytes per parameter of the optimizer's shard, and when they run
# (Megatron-LM megatron/optimizer/optimizer.py MixedPrecisionOptimizer.step: _copy_model_grads_to_main_grads,
# _unscale_main_grads_and_check_for_nan (torch._amp_foreach_non_finite_check_and_unscale_); clip_grads.py:
# multi_tensor_l2norm; _copy_main_params_to_model_params):
OPT_PASSES: dict[str, tuple[float, Callable[[Plan], bool]]] = {
    "16-bit gradients to fp32": (6.0, lambda p: not p.fp32_grads),  # reads 2, writes 4
    "unscale, inf/NaN check": (8.0, lambda p: p.precision == "fp16"),  # fp16 loss scaling: reads 4, writes 4
    "gradient norm": (4.0, lambda p: True),  # clipping (Megatron's default clip_grad = 1.0): reads 4
    "fp32 weights to 16-bit": (6.0, lambda p: True),  # reads 4, writes 2
}
BREAKDOWN: tuple[str, ...] = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "bubble",
                              "grad_accum", "dp_comm", "optimizer")


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Seconds for one layer and one micro-batch on one chip, and the FLOPs it executes."""

    fwd: float
    bwd: float
    recompute: float
    tp: float
    ep: float
    cp: float
    flops: float


@functools.lru_cache(maxsize=8192)
def layer_cost(model: ModelSpec, r: Roofline, sh: Shard, recompute: str, finetune: str, lora_rank: int,
               comms: Communicators) -> LayerCost:
    ops = layer_ops(model, sh)
    frozen = finetune != "full"
    gemms = ops.gemms + ops.core
    fwd = sum(forward_time(r, g) for g in gemms) + sum(pointwise_time(r, p) for p in ops.pointwise + ops.core_pointwise)
    bwd = sum(backward_time(r, g, weight_grad=not frozen) for g in gemms) \
        + sum(pointwise_time(r, p, backward=True) for p in ops.pointwise + ops.core_pointwise)
    flops = sum(g.flops * (1 + (g.bwd if (g.weight and not frozen) or not g.weight else g.bwd / 2)) for g in gemms)
    if frozen:  # adapters: forward and two backward GEMMs of 2·tokens·params; QLoRA also dequantises
        tokens = sh.micro_batch * sh.seq // sh.cp
        adapter = 2.0 * tokens * lora_params_per_layer(model, lora_rank, sh.tp)
        fwd += adapter / r.matmul_rate
        bwd += 2 * adapter / r.matmul_rate
        flops += 3 * adapter
        if finetune == "qlora":  # read 4-bit weights, write 16-bit, before the forward and the data gradient
            deq = stream_time(r, ops.weights * (QLORA_BYTES_PER_PARAM + 2.0))
            fwd, bwd = fwd + deq, bwd + deq
    core_fwd = sum(forward_time(r, g) for g in ops.core) + sum(pointwise_time(r, p) for p in ops.core_pointwise)
    core_bwd = sum(backward_time(r, g) for g in ops.core) \
        + sum(pointwise_time(r, p, backward=True) for p in ops.core_pointwise)
    rec = {"none": 0.0, "selective": core_fwd, "full": fwd}[recompute]
    flops += {"none": 0.0, "selective": sum(g.flops for g in ops.core), "full": ops.flops}[recompute]
    passes = 1 + (recompute == "full")  # full recomputation repeats the forward's collectives
    comm_t = {"tp": 0.0, "ep": 0.0}
    cp_t = 0.0
    for c in ops.comms:
        if c.group == "cp":
            one = comms.time(c.op, c.nbytes, "cp")
            cp_t += max(0.0, c.count_fwd * one - core_fwd) + max(0.0, c.count_bwd * one - core_bwd)
            continue
        one = comms.time(c.op, c.nbytes, c.group)
        comm_t[c.group] += (passes * c.count_fwd + c.count_bwd) * one
    return LayerCost(fwd, bwd, rec, comm_t["tp"], comm_t["ep"], cp_t, flops)


@functools.lru_cache(maxsize=4096)
def _end_costs(model: ModelSpec, r: Roofline, sh: Shard, train_head: bool) -> tuple[float, float]:
    """Seconds per micro-batch of the LM head with its loss and final norm, and of the embedding."""
    head_g, (ce, emb, norm) = head_ops(model, sh)
    head = sum(forward_time(r, x) + backward_time(r, x, train_head) for x in head_g) \
        + sum(pointwise_time(r, p) + pointwise_time(r, p, True) for p in (ce, norm))
    return head, pointwise_time(r, emb) + pointwise_time(r, emb, True)


@dataclass(frozen=True)
class Estimate:
    """One training setup on one target. Times in seconds, memory in bytes per chip."""

    model: str
    target: str
    plan: Plan
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_chip: float
    hardware_tflops_per_chip: float
    peak_flops: float
    peak_dtype: str
    mamf: float
    mamf_source: str
    memory: MemoryBreakdown
    breakdown: dict[str, float] = field(compare=False)

    @property
    def memory_per_chip_bytes(self) -> float:
        return self.memory.total

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def time_to_train(self, tokens: float) -> float:
        """Seconds to train on ``tokens`` tokens at this throughput (no failures or restarts)."""
        return tokens / self.tokens_per_s

    def to_dict(self) -> dict[str, object]:
        p = self.plan
        return {"model": self.model, "target": self.target, "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "hfu": self.hfu,
                "model_tflops_per_chip": self.model_tflops_per_chip,
                "hardware_tflops_per_chip": self.hardware_tflops_per_chip,
                "peak": {"flops": self.peak_flops, "dtype": self.peak_dtype, "sparse": False},
                "mamf": {"fraction": self.mamf, "source": self.mamf_source},
                "memory_per_chip_bytes": self.memory_per_chip_bytes, "fits": self.fits,
                "memory": self.memory.to_dict(), "breakdown": dict(self.breakdown),
                "plan": {k: getattr(p, k) for k in p.__slots__} | {"schedule": p.schedule}}


def estimate(model: ModelSpec, spec: ChipSpec, chips: int, config: TrainingConfig | None = None) -> Estimate:
    """Resolve ``config`` (raising ``ClusterConfigError`` on an impossible setup; unset TP/PP are chosen to
    fit in memory) and estimate it."""
    def fit(plan: Plan) -> float:
        mb = memory(model, spec, plan)
        return mb.total / mb.usable

    return estimate_plan(model, spec, resolve(model, spec, chips, config, fit=fit))


def estimate_plan(model: ModelSpec, spec: ChipSpec, plan: Plan) -> Estimate:
    """Estimate an already resolved plan (the planner's inner loop)."""
    r = Roofline.of(spec, plan.dtype)
    g = communicators(spec, plan)
    sh = shard_of(plan)
    lc = layer_cost(model, r, sh, plan.recompute, plan.finetune, plan.lora_rank, g)
    layers, m, v = model.layers // plan.pp, plan.micro_batches, plan.interleave
    layer_t = lc.fwd + lc.bwd + lc.recompute + lc.tp + lc.ep + lc.cp

    head_g = head_ops(model, sh)[0]
    head_c, emb_c = _end_costs(model, r, sh, plan.finetune == "full")
    tokens = plan.micro_batch * plan.seq_len // plan.cp
    act_bytes = tokens * model.hidden * 2
    tp_op = "reduce-scatter" if plan.sp else "all-reduce"
    # vocab-parallel embedding output (first stage) and LM-head input gradient (last stage)
    head_tp = (2 if plan.pp == 1 else 1) * g.time(tp_op, act_bytes, "tp")
    p2p = 0.0
    if plan.pp > 1:
        p2p = g.time("send-recv", act_bytes / plan.tp, "pp")
        if plan.tp > 1 and not plan.sp:  # scatter/gather: re-assemble the full activation over NVLink
            p2p += g.time("all-gather", act_bytes, "tp")
        p2p *= 2 * v
    first = emb_c if plan.pp > 1 else emb_c + head_c
    last = head_c
    stage_extra = max(first, last)
    stage = layers * layer_t + stage_extra + head_tp + p2p

    bd: dict[str, float] = dict.fromkeys(BREAKDOWN, 0.0)
    bd["compute"] = m * (layers * (lc.fwd + lc.bwd) + stage_extra)
    bd["recompute"] = m * layers * lc.recompute
    bd["tp_comm"] = m * (layers * lc.tp + head_tp)
    bd["cp_comm"] = m * layers * lc.cp
    bd["ep_comm"] = m * layers * lc.ep
    bd["pp_comm"] = m * p2p
    bd["bubble"] = (plan.pp - 1) / v * stage
    if plan.pp > 1 and model.tied_embeddings:  # first and last stage sum the shared embedding's gradients
        bd["pp_comm"] += g.time("all-reduce", plan.grad_bytes * model.vocab * model.hidden / plan.tp, "pp")
    dense, expert = stage_weights(model, plan, "first")
    trained = dense + expert if plan.finetune == "full" else lora_params_per_layer(model, plan.lora_rank,
                                                                                   plan.tp) * layers
    bd["dp_comm"] = _dp_exposed(model, plan, g, lc, layers)
    if plan.dp * plan.cp > 1 and plan.zero < 3:  # the 1/DP pre-scaling pass over the buffer (module docstring)
        bd["dp_comm"] += stream_time(r, trained * 2.0 * plan.grad_bytes)
    local = trained / (plan.dp * plan.cp) if plan.zero >= 1 else trained
    passes = OPT_STEP_BYTES[plan.optimizer] + sum(b for b, when in OPT_PASSES.values() if when(plan))
    zero_grads = (trained / (plan.dp * plan.cp) if plan.zero >= 2 else trained) * plan.grad_bytes
    bd["optimizer"] = stream_time(r, local * passes + zero_grads)
    if not plan.grad_accumulation_fusion:
        bd["grad_accum"] = m * stream_time(r, trained * (2.0 + 2.0 * plan.grad_bytes))
    step = sum(bd.values())

    tokens_step = plan.tokens_per_step
    per_token = six_nt_flops_per_token(model, plan.seq_len)
    if plan.finetune != "full":
        per_token -= 2.0 * six_nt_params(model)
    model_flops = per_token * tokens_step
    head_flops = sum((1 + (2 if plan.finetune == "full" else 1)) * x.flops for x in head_g)
    hw_flops = m * plan.dp * plan.cp * plan.tp * (model.layers * lc.flops + head_flops)
    peak = r.peak
    chips = plan.chips
    return Estimate(model=model.name, target=spec.name, plan=plan, step_time_s=step,
                    tokens_per_s=tokens_step / step, mfu=model_flops / (step * chips * peak),
                    hfu=hw_flops / (step * chips * peak), model_tflops_per_chip=model_flops / step / chips / 1e12,
                    hardware_tflops_per_chip=hw_flops / step / chips / 1e12, peak_flops=peak,
                    peak_dtype=plan.dtype, mamf=r.mamf, mamf_source=r.mamf_source, memory=memory(model, spec, plan),
                    breakdown=bd)


def _dp_exposed(model: ModelSpec, plan: Plan, g: Communicators, lc: LayerCost, layers: int) -> float:
    """Exposed data-parallel communication per step (module docstring)."""
    dense, expert = stage_weights(model, plan, "first")
    if plan.finetune != "full":
        dense, expert = lora_params_per_layer(model, plan.lora_rank, plan.tp) * layers, 0.0
    parts = ((dense, "dp"), (expert, "edp"))
    if plan.zero >= 3:
        per_layer = 0.0
        for params, grp in parts:
            gather = g.time("all-gather", 2.0 * params / layers, grp)
            scatter = g.time("reduce-scatter", plan.grad_bytes * params / layers, grp)
            # one gather before the forward, one before the backward (it also serves the recompute)
            if plan.overlap_grad_reduce:
                per_layer += max(0.0, gather - lc.fwd) + max(0.0, gather + scatter - lc.bwd - lc.recompute)
            else:
                per_layer += 2 * gather + scatter
        return per_layer * layers * plan.micro_batches
    exposed = 0.0
    for params, grp in parts:
        nbytes = plan.grad_bytes * params
        if plan.zero == 0:
            reduce, gather = g.time("all-reduce", nbytes, grp), 0.0
        else:
            reduce = g.time("reduce-scatter", nbytes, grp)
            gather = g.time("all-gather", 2.0 * params, grp)  # the updated 16-bit weights
        if plan.overlap_grad_reduce:
            behind_bwd = layers * (lc.bwd + lc.recompute + lc.tp / 2)
            exposed += max(reduce / layers, reduce - behind_bwd) + (max(gather / layers, gather - layers * lc.fwd)
                                                                     if gather else 0.0)
        else:
            exposed += reduce + gather
    return exposed
