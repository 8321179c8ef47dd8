"""The ops of one transformer layer (and of the LM head), with their shapes on one chip.

A layer is a short table of three kinds of op, built once per shape and cached:

- :class:`Gemm` ``C[m,n] = A[m,k] · B[k,n]``, ``batch`` times: ``2·m·n·k·batch`` FLOPs forward. A weight
  GEMM's backward is a data-gradient and a weight-gradient GEMM of the same size (2× forward); attention's
  activation-by-activation GEMMs have two data gradients (also 2×). Flash attention (Dao 2022) recomputes
  the scores in the backward pass: 5 GEMMs for the 2 of the forward, so ``bwd`` is 3 for the score GEMM.
- :class:`Pointwise` memory-bound ops (norms, softmax, dropout, activations, residual adds, the QKV bias, the
  embedding and the fp32 cross-entropy), given as elements and bytes moved per element forward and backward,
  counted from the tensors each kernel reads and writes in the 16-bit training dtype (1-byte dropout masks,
  fp32 norm statistics ignored; table ``NORM`` … ``CROSS_ENTROPY``).
- :class:`Comm` collectives on the tensor-, context- or expert-parallel group.

Shapes per chip (``t`` tensor-parallel, ``c`` context-parallel, ``T = b·s/c`` tokens of a micro-batch):

======================  =========================================  =================================
op                      shape                                      source
======================  =========================================  =================================
qkv projection          m=T, n=(a/t + 2·g_t)·d, k=h                Megatron column-parallel (Shoeybi 2019)
scores / context        m=s/c, n=s, k=d / m=s/c, n=d, k=s; ×b·a/t  attention per head
output projection       m=T, n=h, k=a·d/t                          row-parallel
MLP up (+gate) / down   m=T, n=(1|2)·f/t, k=h / m=T, n=h, k=f/t    column / row-parallel
experts                 m=T·ep·top_k/E, n=(1|2)·f_e/t, k=h; ×E/ep  balanced routing assumed
LM head                 m=T, n=V/t, k=h                            vocab-parallel
======================  =========================================  =================================

``g_t`` is g/t key/value heads when t divides g; when g divides t each rank keeps one (replicated) kv head.
Tensor-parallel collectives carry ``T·h`` 16-bit values: two all-reduces forward and two backward, or with
sequence parallelism (Korthikanti et al. 2022 §4.2.2) an all-gather and a reduce-scatter in their place.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trnsim.cluster.models import ModelSpec

ATTENTION_KINDS: dict[str, str] = {
    "flash": "fused attention (FlashAttention): no s×s tensor in HBM, causal blocks skipped, scores recomputed "
             "in backward",
    "eager": "materialised s×s scores, softmax and dropout as separate memory-bound kernels (Megatron-LM 2021)",
}


# Bytes per element (forward, backward) of the memory-bound ops, counted from the tensors each kernel reads
# and writes in 16-bit (1-byte dropout masks) as eager PyTorch / Megatron-LM runs them:
NORM = (4, 10)  # y = norm(x); backward: a dγ/dβ partial-sum pass (reads dy, x) + a dx pass (dy, x → dx)
RESIDUAL = (6, 6)  # y = x + branch; backward: the residual fan-out sums two gradients (reads 2, writes 1)
RESIDUAL_DROPOUT = (7, 13)  # y = x + dropout(branch + b): reads 2, writes 1, 1-byte mask; backward: dropout
#                             (grad, mask → grad) 5 + bias-gradient read 2 + fan-out sum 6
GELU = (4, 8)  # fused bias-GeLU; backward reads grad and input, writes grad, + bias-gradient read
SWIGLU = (6, 10)  # silu(gate)·up; backward reads grad, gate, up, writes both gradients
# Megatron's causal fused scale-mask-softmax (megatron/fused_kernels/scaled_upper_triang_masked_softmax.h): row i
# loads only its i+1 unmasked scores (``local_seq = blockIdx.x + 1``), about half of S, and writes the whole row
# of P (zeros above the diagonal): 1 + 2; backward loads dP and P on the same half, writes all of dS: 2 + 2.
SOFTMAX = (3, 4)
DROPOUT = (5, 5)  # reads x, writes y and a 1-byte mask; backward reads grad and mask, writes grad
# The QKV projection's bias (Megatron's ColumnParallelLinear passes it to F.linear): PyTorch of 2021 ran
# F.linear on a 3-D input as a matmul, then ``output += bias`` (torch/nn/functional.py ≤ 1.7; at::linear in
# 1.8–1.12): reads 2, writes 2 per output. Later PyTorch folds it into the GEMM epilogue (cuBLASLt bias), free;
# "eager" attention stands for that 2021 software stack, so only it pays the add.
QKV_BIAS_ADD = 4
# The query, key and value are views of the QKV projection's output (Megatron-LM 2021 ParallelAttention:
# mpu.split_tensor_along_last_dim, i.e. torch.split), fed to the score and context bmm's through transposed views
# with no forward copy. PyTorch's autograd formula for split (tools/autograd/derivatives.yaml, split_backward)
# concatenates the three gradients, which arrive in the bmm's [b·heads, s, d] order: one strided copy, reads 2
# and writes 2 per QKV output, backward only.
QKV_SPLIT = (0, 4)
# Vocab-parallel cross-entropy on fp32 logits, per logit (Megatron-LM megatron/mpu/cross_entropy.py,
# _VocabParallelCrossEntropy, on ``output.float()`` from the GPT model; megatron/core/tensor_parallel/
# cross_entropy.py keeps the same passes): forward: cast 16→32-bit (reads 2, writes 4), max (4), in-place
# subtract (4 + 4), in-place exp (4 + 4), sum (4), in-place divide to the saved softmax (4 + 4) = 38;
# backward: in-place multiply by the loss gradient (4 + 4), cast back to 16-bit (4 + 2) = 14.
CROSS_ENTROPY = (38, 14)


@dataclass(frozen=True, slots=True)
class Gemm:
    """``batch`` matmuls of [m,k]·[k,n]. ``frac`` of the m×n output is computed (causal flash ≈ ½);
    ``io`` overrides the HBM elements moved (default m·k + k·n + m·n per matmul)."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    weight: bool = True
    frac: float = 1.0
    bwd: float = 2.0
    io: int | None = None

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch * self.frac

    @property
    def elements(self) -> int:
        """HBM elements read and written."""
        if self.io is not None:
            return self.io
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.batch


@dataclass(frozen=True, slots=True)
class Pointwise:
    """A memory-bound op over ``elements``, moving ``fwd``/``bwd`` bytes per element."""

    name: str
    elements: int
    fwd: float
    bwd: float


@dataclass(frozen=True, slots=True)
class Comm:
    """``count_fwd``/``count_bwd`` collectives ``op`` of ``nbytes`` (nccl-tests size) on ``group``."""

    name: str
    op: str
    nbytes: int
    group: str
    count_fwd: int
    count_bwd: int


@dataclass(frozen=True, slots=True)
class Shard:
    """How one micro-batch of one layer is split over chips."""

    micro_batch: int
    seq: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    attention: str = "flash"


@dataclass(frozen=True, slots=True)
class LayerOps:
    """One layer's ops; ``core`` is the attention core (what selective recomputation recomputes)."""

    gemms: tuple[Gemm, ...]
    core: tuple[Gemm, ...]
    pointwise: tuple[Pointwise, ...]
    core_pointwise: tuple[Pointwise, ...]
    comms: tuple[Comm, ...]
    weights: int

    @property
    def flops(self) -> float:
        return sum(g.flops for g in self.gemms) + sum(g.flops for g in self.core)


def kv_local(model: ModelSpec, tp: int) -> int:
    """Key/value heads per tensor-parallel rank: sharded when tp divides them, else one replicated head."""
    return model.g // tp if model.g % tp == 0 else 1


def _attention_core(model: ModelSpec, sh: Shard, heads: int) -> tuple[tuple[Gemm, ...], tuple[Pointwise, ...]]:
    b, d, sq, sk = sh.micro_batch, model.d, sh.seq // sh.cp, sh.seq
    batch = b * heads
    if sh.attention == "flash":
        frac = 0.5 * (1 + 1 / sk)  # causal: the lower triangle incl. the diagonal
        scores = Gemm("attention scores", sq, sk, d, batch, weight=False, frac=frac, bwd=3.0,
                      io=(sq * d + sk * d) * batch)  # Q and K read; S stays on chip
        context = Gemm("attention context", sq, d, sk, batch, weight=False, frac=frac,
                       io=(sk * d + sq * d) * batch)  # V read, O written; P stays on chip
        return (scores, context), ()
    scores = Gemm("attention scores", sq, sk, d, batch, weight=False)
    context = Gemm("attention context", sq, d, sk, batch, weight=False)
    probs = batch * sq * sk
    point = [Pointwise("scale-mask-softmax", probs, *SOFTMAX)]
    if model.dropout:
        point.append(Pointwise("attention dropout", probs, *DROPOUT))
    return (scores, context), tuple(point)


@functools.lru_cache(maxsize=4096)
def layer_ops(model: ModelSpec, sh: Shard) -> LayerOps:
    """The ops of one transformer layer for one micro-batch on one chip (see the module table)."""
    t, h, d = sh.tp, model.hidden, model.d
    tokens = sh.micro_batch * sh.seq // sh.cp
    rows = tokens // t if sh.sp else tokens  # norms and residuals: sharded by sequence parallelism only
    heads, kv = model.heads // t, kv_local(model, t)
    mats = 2 if model.gated else 1
    gemms = [Gemm("qkv projection", tokens, (heads + 2 * kv) * d, h),
             Gemm("output projection", tokens, h, heads * d)]
    core, core_point = _attention_core(model, sh, heads)
    point = [Pointwise("norm (attention)", rows * h, *NORM)]
    if model.position == "rope":
        point.append(Pointwise("rotary embedding", tokens * (heads + kv) * d, 4, 4))
    if model.bias:  # the QKV bias gradient is a reduction over the output gradient; see QKV_BIAS_ADD
        add = QKV_BIAS_ADD if sh.attention == "eager" else 0
        point.append(Pointwise("qkv bias", tokens * (heads + 2 * kv) * d, add, 2))
    if sh.attention == "eager":  # [b, heads, s, d] → [s, b, heads·d] before the output projection
        point.append(Pointwise("context transpose", tokens * heads * d, 4, 4))
        point.append(Pointwise("qkv split backward", tokens * (heads + 2 * kv) * d, *QKV_SPLIT))
    residual = RESIDUAL_DROPOUT if model.dropout else RESIDUAL
    point += [Pointwise("residual add (attention)", rows * h, *residual), Pointwise("norm (MLP)", rows * h, *NORM)]
    act = SWIGLU if model.gated else GELU
    comms: list[Comm] = []
    if model.moe:
        local = model.experts // sh.ep
        routed = tokens * sh.ep * model.top_k
        f_loc = model.f_moe // t
        gemms += [Gemm("router", tokens, model.experts, h),
                  Gemm("expert up", routed // model.experts, mats * f_loc, h, local),
                  Gemm("expert down", routed // model.experts, h, f_loc, local)]
        point += [Pointwise("expert activation", tokens * model.top_k * f_loc, *act),
                  Pointwise("token permute/unpermute", 2 * tokens * model.top_k * h, 4, 4)]
        if sh.ep > 1:
            comms.append(Comm("expert all-to-all", "all-to-all", tokens * model.top_k * h * 2, "ep", 2, 2))
        weights = model.params().mlp // t // sh.ep
    else:
        f_loc = model.f // t
        gemms += [Gemm("MLP up", tokens, mats * f_loc, h), Gemm("MLP down", tokens, h, f_loc)]
        point.append(Pointwise("MLP activation", tokens * f_loc, *act))
        weights = model.params().mlp // t
    point.append(Pointwise("residual add (MLP)", rows * h, *residual))
    if t > 1:
        nbytes = tokens * h * 2
        if sh.sp:
            comms += [Comm("TP all-gather", "all-gather", nbytes, "tp", 2, 2),
                      Comm("TP reduce-scatter", "reduce-scatter", nbytes, "tp", 2, 2)]
        else:
            comms.append(Comm("TP all-reduce", "all-reduce", nbytes, "tp", 2, 2))
    if sh.cp > 1:  # ring attention: K and V chunks pass around the ring, c-1 hops; backward also sends dK, dV
        kv_bytes = 2 * tokens * kv * d * 2
        comms.append(Comm("CP K/V ring", "send-recv", kv_bytes, "cp", sh.cp - 1, 2 * (sh.cp - 1)))
    weights += model.params().attention // t
    return LayerOps(tuple(gemms), core, tuple(point), core_point, tuple(comms), weights)


@functools.lru_cache(maxsize=1024)
def head_ops(model: ModelSpec, sh: Shard) -> tuple[tuple[Gemm, ...], tuple[Pointwise, ...]]:
    """LM head and loss (last pipeline stage) and embedding lookup (first): vocab-parallel over ``tp``."""
    tokens = sh.micro_batch * sh.seq // sh.cp
    rows = tokens // sh.tp if sh.sp else tokens
    vocab = -(-model.vocab // sh.tp)
    logits = Gemm("LM head", tokens, vocab, model.hidden)
    # Embedding (Megatron-LM's Embedding.forward): lookup (reads 2, writes 2; backward scatters the gradient,
    # 2 + 2), learned positions (lookup writes 2 and the add reads 4, writes 2; backward 2 + 2), dropout.
    learned = model.position == "learned"
    emb_fwd = 4 + (8 if learned else 0) + (DROPOUT[0] if model.dropout else 0)
    emb_bwd = 4 + (4 if learned else 0) + (DROPOUT[1] if model.dropout else 0)
    return (logits,), (Pointwise("cross-entropy", tokens * vocab, *CROSS_ENTROPY),
                       Pointwise("embedding lookup", rows * model.hidden, emb_fwd, emb_bwd),
                       Pointwise("final norm", rows * model.hidden, *NORM))


def forward_flops_per_token(model: ModelSpec, seq: int | None = None, causal: bool = False) -> float:
    """Forward FLOPs per token from the op-level shapes (layers + LM head). ``causal=False`` counts the full
    s×s attention, the convention of MFU (PaLM, Chowdhery et al. 2022, App. B) and of Megatron's eq. 3."""
    s = seq or model.seq_len
    sh = Shard(micro_batch=1, seq=s, attention="flash" if causal else "eager")
    ops = layer_ops(model, sh)
    return (model.layers * ops.flops + head_ops(model, sh)[0][0].flops) / s


def six_nt_params(model: ModelSpec) -> int:
    """N of the 6·N·T rule: active parameters without the input-embedding and position tables (looked up,
    never multiplied); a tied embedding counts once, as the LM head. Biases and norms stay in (≈13h per
    layer against 12h² of weights: under 0.1% for h ≥ 1024)."""
    p = model.params()
    lookup = p.embedding - (model.vocab * model.hidden if model.tied_embeddings else 0)
    return p.active - lookup


def six_nt_flops_per_token(model: ModelSpec, seq: int | None = None) -> float:
    """Training FLOPs per token by the 6·N·T rule plus the attention term 12·L·a·d·s (PaLM, Chowdhery et al.
    2022, App. B: full s×s scores, forward and backward)."""
    s = seq or model.seq_len
    return 6.0 * six_nt_params(model) + 12.0 * model.layers * model.heads * model.d * s
