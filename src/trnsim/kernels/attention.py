"""Flash attention, forward and backward (FlashAttention-2), in the kernel language.

Shapes: ``q`` is ``[batch, heads, seq_q, d]`` or ``[heads, seq_q, d]``; ``k`` and ``v`` share ``q``'s leading
dimensions with ``seq_k`` rows (``v`` may have its own head dimension ``dv``); ``d, dv ≤ 128``, any sequence
lengths (a ragged last tile is a partial tile, not padding). Inputs are bf16, fp16 or fp32, all three of one
dtype. ``causal`` masks key ``j > i`` for query ``i`` (it needs ``seq_q == seq_k``). ``scale`` defaults to
``1/sqrt(d)``.

    o, lse = flash_attention(q, k, v, causal=True)                  # numpy in and out (host functions)
    dq, dk, dv = flash_attention_backward(q, k, v, o, do, lse, causal=True)
    o, lse = trnsim.run_kernel(flash_attention_kernel, q, k, v, causal=True).outputs   # the kernels

``o`` has the inputs' dtype; ``lse[..., i] = log Σ_j exp(scale · q_i·k_j)`` (fp32, shape ``[..., seq_q]``)
is what the backward recomputes the probabilities from; the gradients have the inputs' dtype. The backward
keeps dQ's fp32 accumulators in SBUF (``seq_q · d · 4 / 128`` bytes per partition, so ``seq_q`` up to
~48K at d = 128); the forward has no length limit.

Forward tiling and engine mapping, per head and per query tile of 128 rows (NKI's ``flash_fwd``):

    Qᵀ [d, 128]           DMA transpose on the way in from HBM (K is loaded as Kᵀ [d, seq_k] the same way)
    for each key tile of ``kv_tile`` (≤ 2048) keys:              online softmax, one step per key tile
        S  = Qᵀ.T @ Kᵀ     TensorE, ≤ 512 keys per matmul (one PSUM bank each) into [128, kv_tile] fp32 PSUM
        S += mask          VectorE, only the tile on the diagonal (causal; a -inf mask built once by
                           affine_select on GpSimd); key tiles past the diagonal are never computed
        m' = max(m, rowmax S)                          VectorE (reads PSUM)
        P  = exp(scale·S − scale·m'), l_t = Σ P        ScalarE: the max folded into the bias, the row sum
                                                       fused as the activation's reduce; P in the input dtype
        α  = exp(scale·(m − m')); l = α·l + l_t        ScalarE, VectorE ([128, 1] columns)
        Pᵀ                 TensorE transposes, 128 keys each, into PSUM; one copy to SBUF
        O_t = Pᵀ.T @ V     TensorE, accumulating the key chunks in one PSUM bank
        O  = α·O + O_t     VectorE
    O / l → HBM (input dtype), lse = scale·m + log l → HBM (fp32)

NOTE: P is rounded to the input dtype before P·V (TensorE operands are bf16 for bf16 inputs), while the
row sum l is taken of P before rounding (the activation's fused reduce); both are fp32-accumulated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor, typed
from trnsim.dsl.errors import KernelError, fail

P = 128  # partitions: rows of a query tile, keys per transpose and per contraction chunk
BANK_N = 512  # fp32 values per PSUM bank: the widest matmul output
KV_TILE = 2048  # keys per online-softmax step (NKI flash_fwd's default seq_tile_size)
MAX_KV_TILE = 4 * BANK_N  # S of one step spans at most 4 of PSUM's 8 banks
CACHE_BYTES = 96 * 1024  # per partition: a head's K/V stay in SBUF when they need at most this much
INPUT_DTYPES = ("bf16", "fp16", "fp32")


def check_inputs(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None,
                 kv_tile: int = KV_TILE) -> float:
    """Validate shapes and options; the softmax scale."""
    if len(q.shape) not in (3, 4):
        fail(f"q has shape {q.shape}", "pass [batch, heads, seq, d] or [heads, seq, d]")
    lead, d = q.shape[:-2], q.shape[-1]
    if k.shape[:-2] != lead or v.shape[:-2] != lead or len(k.shape) != len(q.shape) or k.shape[-1] != d:
        fail(f"q {q.shape}, k {k.shape}, v {v.shape}", "k is [..., seq_k, d] and v [..., seq_k, dv] with q's "
             "leading dimensions")
    if v.shape[-2] != k.shape[-2]:
        fail(f"k has {k.shape[-2]} rows, v {v.shape[-2]}", "one value row per key")
    if d > P or v.shape[-1] > P:
        fail(f"head dimensions d={d}, dv={v.shape[-1]}", f"d and dv are at most {P} (one contraction tile)")
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        fail(f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype}", f"use one of {', '.join(INPUT_DTYPES)} for all three")
    if causal and q.shape[-2] != k.shape[-2]:
        fail(f"causal attention of {q.shape[-2]} queries over {k.shape[-2]} keys", "causal needs seq_q == seq_k")
    if kv_tile % P or not P <= kv_tile <= MAX_KV_TILE:
        fail(f"kv_tile={kv_tile}", f"use a multiple of {P} up to {MAX_KV_TILE}")
    sm = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not sm > 0:
        fail(f"scale={scale}", "the softmax scale is positive")
    return sm


def heads(x: Tensor) -> Iterator[tuple[int, ...]]:
    """Leading (batch, head) indices of an attention operand."""
    return itertools.product(*(range(n) for n in x.shape[:-2]))


def rows(x: Tensor, head: tuple[int, ...], r0: int, r1: int) -> Tensor:
    """Rows ``r0:r1`` of one head: a 2-D HBM view ``[r1 - r0, d]``."""
    return x[(*head, slice(r0, r1), slice(None))]


def causal_mask() -> Tensor:
    """[128, 128] fp32: 0 where key ≤ query (free index ≤ partition), else -inf (affine_select on GpSimd)."""
    return dsl.affine_select(dsl.zeros((P, P)), "ge", -math.inf, channel_multiplier=1, steps=[-1])


def chunks(width: int, size: int = P) -> Iterator[tuple[int, int, int]]:
    """(index, start, length) of the ``size``-wide chunks of ``width``."""
    for j, c0 in enumerate(range(0, width, size)):
        yield j, c0, min(size, width - c0)


class KeySource:
    """Kᵀ [d, keys] and V ([128, chunk, dv], keys on partitions) of one head: held in SBUF for the whole head
    when they fit in ``CACHE_BYTES`` per partition, else loaded per key tile."""

    def __init__(self, k: Tensor, v: Tensor, head: tuple[int, ...]) -> None:
        self.k, self.v, self.head = k, v, head
        seq_k, dv, itemsize = k.shape[-2], v.shape[-1], 4 if k.dtype == "fp32" else 2
        self.whole: tuple[Tensor, Tensor] | None = None
        if (seq_k + -(-seq_k // P) * dv) * itemsize <= CACHE_BYTES:
            self.whole = self._load(0, seq_k)

    def _load(self, k0: int, w: int) -> tuple[Tensor, Tensor]:
        kt = dsl.load(rows(self.k, self.head, k0, k0 + w).T)  # DMA transpose: [d, w]
        vt = dsl.sbuf((P, -(-w // P), self.v.shape[-1]), self.v.dtype)
        for j, c0, kc in chunks(w):
            dsl.load(vt[:kc, j, :], rows(self.v, self.head, k0 + c0, k0 + c0 + kc))
        return kt, vt

    def get(self, k0: int, w: int) -> tuple[Tensor, Tensor]:
        """Kᵀ [d, w] and V chunks [128, ceil(w/128), dv] of keys ``k0:k0+w`` (``k0`` a multiple of 128)."""
        if self.whole is None:
            return self._load(k0, w)
        kt, vt = self.whole
        return kt[:, k0 : k0 + w], vt[:, k0 // P : k0 // P + -(-w // P), :]


def transpose_chunks(x: Tensor, width: int) -> Tensor:
    """``x[n, width]`` → SBUF ``[128, ceil(width/128), n]`` holding ``x[:, 128j:128j+128].T`` at ``[:, j, :]``:
    TensorE transposes into one PSUM tile, then (at most) two copies out."""
    n, nch = x.shape[0], -(-width // P)
    ps = dsl.psum((P, nch, n), x.dtype)
    for j, c0, kc in chunks(width):
        dsl.transpose(x[:, c0 : c0 + kc], out=ps[:kc, j, :])
    out = dsl.sbuf((P, nch, n), x.dtype)
    full = width // P
    if full:
        dsl.copy(ps[:, :full, :], out=out[:, :full, :])
    if full < nch:
        dsl.copy(ps[: width - full * P, full, :], out=out[: width - full * P, full, :])
    dsl.release(ps)
    return out


def query_tile(q: Tensor, o: Tensor, lse: Tensor, keys: KeySource, head: tuple[int, ...], q0: int, kv_end: int,
               sm: float, kv_tile: int, mask: Tensor | None) -> None:
    """Rows ``q0 .. q0+128`` of one head's ``o`` and ``lse`` from keys ``0 .. kv_end`` (module docstring)."""
    n, dv = min(P, q.shape[-2] - q0), o.shape[-1]
    qt = dsl.load(rows(q, head, q0, q0 + n).T)  # DMA transpose: [d, n]
    run_max = run_sum = acc = neg_bias = None
    for k0 in range(0, kv_end, kv_tile):
        w = min(kv_tile, kv_end - k0)
        kt, vt = keys.get(k0, w)
        s = dsl.psum((n, w))
        for _, c0, cw in chunks(w, BANK_N):
            dsl.matmul(s[:, c0 : c0 + cw], qt, kt[:, c0 : c0 + cw])
        if mask is not None and k0 + w == kv_end:  # the tile holding the diagonal
            diag = s[:, q0 - k0 : q0 - k0 + n]
            dsl.add(diag, mask[:n, :n], out=diag)
        tile_max = dsl.reduce_max(s)
        new_max = tile_max if run_max is None else dsl.maximum(run_max, tile_max)
        neg_bias = dsl.multiply(new_max, -sm)
        p, tile_sum = dsl.activation_reduce("exp", s, scale=sm, bias=neg_bias, dtype=q.dtype)
        dsl.release(s)
        pt = transpose_chunks(p, w)
        o_t = dsl.psum((n, dv))
        for j, _, kc in chunks(w):
            dsl.matmul(o_t, pt[:kc, j, :], vt[:kc, j, :], accumulate=j > 0)
        if run_max is None or run_sum is None or acc is None:
            run_sum, acc = tile_sum, o_t
        else:
            alpha = dsl.exp(run_max, scale=sm, bias=neg_bias)  # exp(scale · (old max − new max))
            run_sum = dsl.tensor_scalar(run_sum, "mul", alpha, "add", tile_sum)
            acc = dsl.add(dsl.multiply(acc, alpha), o_t)
        run_max = new_max
    assert run_sum is not None and acc is not None and neg_bias is not None  # kv_end ≥ 1: one key tile at least
    dsl.store(rows(o, head, q0, q0 + n), dsl.divide(acc, run_sum, dtype=o.dtype))
    dsl.dma_copy(lse[(*head, slice(q0, q0 + n))], dsl.subtract(dsl.log(run_sum), neg_bias))


@dsl.kernel
def flash_attention_kernel(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: float | None = None, kv_tile: int = KV_TILE
) -> tuple[Tensor, Tensor]:
    """``o = softmax(scale · q kᵀ) v`` per head and ``lse``, the log-sum-exp of each row of scores (module
    docstring): HBM tensors ``[..., seq_q, dv]`` (the inputs' dtype) and ``[..., seq_q]`` (fp32)."""
    sm = check_inputs(q, k, v, causal, scale, kv_tile)
    o = dsl.hbm_tensor((*q.shape[:-1], v.shape[-1]), q.dtype, name="o")
    lse = dsl.hbm_tensor(q.shape[:-1], "fp32", name="lse")
    mask = causal_mask() if causal else None
    for head in heads(q):
        keys = KeySource(k, v, head)
        for q0 in range(0, q.shape[-2], P):
            # NOTE: causal attention never computes the key tiles past the diagonal
            kv_end = min(q0 + P, q.shape[-2]) if causal else k.shape[-2]
            query_tile(q, o, lse, keys, head, q0, kv_end, sm, kv_tile, mask)
    return o, lse


class QuerySource:
    """Per query tile of one head, what the backward reads for it: Qᵀ [d, n], Q [n, d], dO [n, dv],
    dOᵀ [dv, n], -lse [n, 1] and D = rowsum(dO ∘ O) [n, 1] (fp32). Held in SBUF for the whole head when
    they fit in ``CACHE_BYTES`` per partition, else loaded (and D recomputed) per use."""

    def __init__(self, q: Tensor, o: Tensor, do: Tensor, lse: Tensor, head: tuple[int, ...]) -> None:
        self.q, self.o, self.do, self.lse, self.head = q, o, do, lse, head
        seq, d, dv, itemsize = q.shape[-2], q.shape[-1], do.shape[-1], 4 if q.dtype == "fp32" else 2
        tiles = -(-seq // P)
        self.cache: list[tuple[Tensor, ...]] | None = None
        if (2 * seq + tiles * (d + dv)) * itemsize + tiles * 8 <= CACHE_BYTES:
            self.cache = [self._load(i) for i in range(tiles)]

    def _load(self, i: int) -> tuple[Tensor, ...]:
        q0 = i * P
        n = min(P, self.q.shape[-2] - q0)
        q_rows, do_rows = rows(self.q, self.head, q0, q0 + n), rows(self.do, self.head, q0, q0 + n)
        qt, qn, dot, don = dsl.load(q_rows.T), dsl.load(q_rows), dsl.load(do_rows.T), dsl.load(do_rows)
        lse = dsl.sbuf((n, 1))
        dsl.dma_copy(lse, self.lse[(*self.head, slice(q0, q0 + n))])
        prod = dsl.multiply(don, dsl.load(rows(self.o, self.head, q0, q0 + n)), dtype="fp32")
        return qt, qn, dot, don, dsl.negative(lse), dsl.reduce_sum(prod)

    def get(self, i: int) -> tuple[Tensor, ...]:
        return self.cache[i] if self.cache is not None else self._load(i)


@dsl.kernel
def flash_attention_backward_kernel(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, *, causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients dQ, dK, dV of ``flash_attention`` given its ``o`` and ``lse`` and the output gradient ``do``
    (FlashAttention-2): per key tile of 512 keys (outer) and query tile of 128 rows (inner),

        S = Q Kᵀ; P = exp(scale·S − lse)      TensorE; ScalarE (lse folded into the bias)
        dV += Pᵀ dO                           TensorE, P [q, k] is the stationary as it comes
        dP = dO Vᵀ                            TensorE (dOᵀ, Vᵀ by DMA transpose)
        dS = P ∘ (dP − D)                     VectorE, D = rowsum(dO ∘ O) per query row
        dK += dSᵀ Q;  dQ += dS K              TensorE; dSᵀ by TensorE transposes
        dK, dQ ×= scale at the end

    dV and dK accumulate in PSUM over the query tiles; dQ in SBUF (fp32) over the key tiles. P and dS are
    rounded to the input dtype before their matmuls."""
    sm = check_inputs(q, k, v, causal, scale)
    seq_q, seq_k, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if o.shape != (*q.shape[:-1], dv) or do.shape != o.shape or lse.shape != q.shape[:-1]:
        fail(f"o {o.shape}, do {do.shape}, lse {lse.shape} for q {q.shape}, v {v.shape}",
             "pass flash_attention's o and lse, and do of o's shape")
    dq = dsl.hbm_tensor(q.shape, q.dtype, name="dq")
    dk = dsl.hbm_tensor(k.shape, q.dtype, name="dk")
    dvo = dsl.hbm_tensor(v.shape, q.dtype, name="dv")
    mask = causal_mask() if causal else None
    n_tiles = -(-seq_q // P)
    for head in heads(q):
        queries = QuerySource(q, o, do, lse, head)
        dq_acc: list[Tensor | None] = [None] * n_tiles
        for k0 in range(0, seq_k, BANK_N):
            w = min(BANK_N, seq_k - k0)
            kt = dsl.load(rows(k, head, k0, k0 + w).T)  # [d, w]
            vt = dsl.load(rows(v, head, k0, k0 + w).T)  # [dv, w]
            kn = dsl.sbuf((P, -(-w // P), d), k.dtype)  # K with keys on partitions: dQ's moving operand
            for j, c0, kc in chunks(w):
                dsl.load(kn[:kc, j, :], rows(k, head, k0 + c0, k0 + c0 + kc))
            dk_ps, dv_ps = dsl.psum((P, -(-w // P), d)), dsl.psum((P, -(-w // P), dv))
            started = [False] * -(-w // P)
            for i in range(k0 // P if causal else 0, n_tiles):
                q0 = i * P
                n = min(P, seq_q - q0)
                wi = min(w, q0 + n - k0) if causal else w  # NOTE: causal: keys past the diagonal are skipped
                qt, qn, dot, don, neg_lse, dsum = queries.get(i)
                s = dsl.matmul(dsl.psum((n, wi)), qt, kt[:, :wi])
                if mask is not None and k0 <= q0 < k0 + wi:
                    diag = s[:, q0 - k0 : q0 - k0 + n]
                    dsl.add(diag, mask[:n, :n], out=diag)
                p = dsl.exp(s, scale=sm, bias=neg_lse, dtype=q.dtype)
                dp = dsl.matmul(dsl.psum((n, wi)), dot, vt[:, :wi])
                ds = dsl.multiply(dsl.subtract(dp, dsum), p, dtype=q.dtype)
                for j, c0, kc in chunks(wi):
                    dsl.matmul(dv_ps[:kc, j, :], p[:, c0 : c0 + kc], don, accumulate=started[j])
                    dsl.matmul(dk_ps[:kc, j, :], ds[:, c0 : c0 + kc], qn, accumulate=started[j])
                    started[j] = True
                dst = transpose_chunks(ds, wi)
                dq_ps = dsl.psum((n, d))
                for j, _, kc in chunks(wi):
                    dsl.matmul(dq_ps, dst[:kc, j, :], kn[:kc, j, :], accumulate=j > 0)
                prev = dq_acc[i]
                dq_acc[i] = dsl.copy(dq_ps) if prev is None else dsl.add(prev, dq_ps)
            for j, c0, kc in chunks(w):
                dsl.store(rows(dk, head, k0 + c0, k0 + c0 + kc), dsl.multiply(dk_ps[:kc, j, :], sm, dtype=q.dtype))
                dsl.store(rows(dvo, head, k0 + c0, k0 + c0 + kc), dsl.copy(dv_ps[:kc, j, :], dtype=q.dtype))
        for i, acc in enumerate(dq_acc):
            assert acc is not None  # every query tile sees key tile 0
            n = min(P, seq_q - i * P)
            dsl.store(rows(dq, head, i * P, i * P + n), dsl.multiply(acc, sm, dtype=q.dtype))
    return dq, dk, dvo


F32 = NDArray[np.float32]
HOST_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp32"}


def operand_dtype(x: ArrayLike, dtype: str | None) -> str:
    """``dtype``, or the ISA dtype of ``x``'s numpy dtype (bfloat16 → bf16, float16 → fp16, float32/64 → fp32)."""
    if dtype is None:
        name = np.asarray(x).dtype.name
        if name not in HOST_DTYPES:
            raise KernelError(f"attention inputs of numpy dtype {name}", hint="pass float arrays, or dtype='bf16'")
        dtype = HOST_DTYPES[name]
    if dtype not in INPUT_DTYPES:
        raise KernelError(f"attention in {dtype}", hint=f"use one of: {', '.join(INPUT_DTYPES)}")
    return dtype


def _inputs(dtype: str, *arrays: ArrayLike) -> list[dsl.Typed]:
    # NOTE: float32 values in, rounded to dtype by the device on the way into HBM (its fast path)
    return [typed(np.asarray(a, np.float32), dtype) for a in arrays]


def flash_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, causal: bool = False, scale: float | None = None,
    dtype: str | None = None, *, kv_tile: int = KV_TILE, target: str = "trn3",
) -> tuple[F32, F32]:
    """``(o, lse)``: attention ``softmax(scale · q kᵀ) v`` on a simulated NeuronCore, and the row log-sum-exp.

    ``q [batch, heads, seq_q, d]`` (or ``[heads, seq_q, d]``), ``k [.., seq_k, d]``, ``v [.., seq_k, dv]``;
    the inputs are rounded to ``dtype`` (bf16, fp16 or fp32; default: ``q``'s own, e.g. an ml_dtypes
    bfloat16 array runs in bf16). ``o`` holds ``dtype`` values, ``lse`` fp32; both as float32 arrays.

        >>> o, lse = flash_attention(np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.arange(10.0).reshape(2, 5, 1))
        >>> o[0, :, 0].tolist(), round(float(lse[0, 0]), 4)  # uniform weights over 5 keys; log 5 + 4 / 2
        ([2.0, 2.0, 2.0], 3.6094)
    """
    dt = operand_dtype(q, dtype)
    res = dsl.run_kernel(flash_attention_kernel, *_inputs(dt, q, k, v), target=target, causal=causal, scale=scale,
                         kv_tile=kv_tile)
    return res.outputs[0], res.outputs[1]


def flash_attention_backward(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, o: ArrayLike, do: ArrayLike, lse: ArrayLike, causal: bool = False,
    scale: float | None = None, dtype: str | None = None, *, target: str = "trn3",
) -> tuple[F32, F32, F32]:
    """``(dq, dk, dv)`` of ``flash_attention`` for the output gradient ``do`` (``o``'s shape), given the
    forward's ``o`` and ``lse``; ``q, k, v, o, do`` are rounded to ``dtype`` (as in ``flash_attention``),
    ``lse`` is fp32, the gradients hold ``dtype`` values."""
    dt = operand_dtype(q, dtype)
    res = dsl.run_kernel(flash_attention_backward_kernel, *_inputs(dt, q, k, v, o, do), np.asarray(lse, np.float32),
                         target=target, causal=causal, scale=scale)
    return res.outputs[0], res.outputs[1], res.outputs[2]

