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
is what the backward (``attention_backward``) recomputes the probabilities from; the gradients have the
inputs' dtype.

Forward tiling and engine mapping, per head and per query tile of 128 rows (NKI's ``flash_fwd``):

    Qᵀ [d, 128]           DMA transpose on the way in from HBM (K is loaded as Kᵀ [d, seq_k] the same way)
    for each key tile of ``kv_tile`` (≤ 2048) keys:              online softmax, one step per key tile
        S  = Qᵀ.T @ Kᵀ     TensorE, ≤ 512 keys per matmul (one PSUM bank each) into [128, kv_tile] fp32 PSUM
        S += mask          VectorE, only the tile on the diagonal (causal; a -inf mask built once by
                           affine_select on GpSimd); key tiles past the diagonal are never computed
        m' = max(m, rowmax S)                          VectorE (reads PSUM)
        P  = exp(scale·S − scale·m'), l_t = Σ P        ScalarE: the max folded into the bias, the row sum
                                                       fused as the activation's reduce; P in the input dtype
        α  = exp(scale·(m − m'))                       ScalarE ([128, 1])
        Pᵀ                 TensorE transposes, 128 keys each, into PSUM; one copy to SBUF
        O_t = Pᵀ.T @ V     TensorE, accumulating the key chunks in one PSUM bank
        l = α·l + l_t;  O = α·O + O_t                  VectorE
    O / l → HBM (input dtype), lse = scale·m + log l → HBM (fp32)

Software pipelining: the steps (query tile, key tile) are emitted in two halves, scores (S to P) and
accumulation (Pᵀ to O), with step t+1's scores before step t's accumulation, so TensorE computes the next
scores while ScalarE and VectorE work on the current ones; DMAs are issued a step ahead (``query_tiles``).
In PSUM a step needs S (``kv_tile/512`` banks) while the previous step holds Pᵀ, O_t and O: the default
``kv_tile`` is the largest that fits the 8 banks (2048 keys for 2-byte inputs, 1536 for fp32).

NOTE: P is rounded to the input dtype before P·V (TensorE operands are bf16 for bf16 inputs), while the
row sum l is taken of P before rounding (the activation's fused reduce); both are fp32-accumulated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor, typed
from trnsim.dsl.errors import KernelError, fail
from trnsim.kernels import attention_tiles as tiles
from trnsim.kernels.attention_backward import flash_attention_backward_kernel
from trnsim.kernels.attention_tiles import BANK_N, INPUT_DTYPES, PSUM_BANKS, P, chunks, rows, transpose_chunks


def max_kv_tile(dtype: str) -> int:
    """The widest key tile whose S (``kv_tile/512`` banks) fits PSUM beside the previous step's Pᵀ
    (``kv_tile · itemsize / 2 KiB`` banks), O_t and O (a bank each)."""
    best = P
    for kv in range(P, 4 * BANK_N + 1, P):
        if -(-kv // BANK_N) + -(-kv * tiles.itemsize(dtype) // (4 * BANK_N)) + 2 <= PSUM_BANKS:
            best = kv
    return best


class KeySource:
    """Kᵀ [d, keys] and V ([128, chunk, dv], keys on partitions) of one head: held in SBUF for the whole head
    when they fit in ``CACHE_BYTES`` per partition, else loaded per key tile."""

    def __init__(self, k: Tensor, v: Tensor, head: tuple[int, ...]) -> None:
        self.k, self.v, self.head = k, v, head
        seq_k = k.shape[-2]
        self.whole: tuple[Tensor, Tensor] | None = None
        if (seq_k + -(-seq_k // P) * v.shape[-1]) * tiles.itemsize(k.dtype) <= tiles.CACHE_BYTES:
            self.whole = self._load(0, seq_k)

    def _load(self, k0: int, w: int) -> tuple[Tensor, Tensor]:
        kt = tiles.load_transposed(self.k, self.head, k0, w)
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


class QuerySource:
    """Qᵀ [d, seq_q] of one head: one DMA (transposing) when it fits in half of ``CACHE_BYTES`` per
    partition, else one per query tile."""

    def __init__(self, q: Tensor, head: tuple[int, ...]) -> None:
        self.q, self.head = q, head
        seq_q = q.shape[-2]
        fits = seq_q * tiles.itemsize(q.dtype) <= tiles.CACHE_BYTES // 2
        self.whole = tiles.load_transposed(q, head, 0, seq_q) if fits else None

    def get(self, q0: int, n: int) -> Tensor:
        """Qᵀ [d, n] of queries ``q0:q0+n``."""
        if self.whole is None:
            return dsl.load(rows(self.q, self.head, q0, q0 + n).T)
        return self.whole[:, q0 : q0 + n]


def query_tiles(q: Tensor, k: Tensor, v: Tensor) -> Iterator[tuple[tuple[int, ...], KeySource, int, Tensor]]:
    """(head, its keys, q0, Qᵀ [d, n]) for every query tile, in order.

    NOTE: one engine issues all DMAs, in program order, so a load emitted after a tile's stores would wait
    for that tile's computation: a head's Q and K/V are loaded whole, and the next head's are emitted
    halfway through the current head, so their DMAs overlap its second half."""
    seq_q, order = q.shape[-2], tiles.heads(q)
    halfway = (-(-seq_q // P) - 1) // 2 * P
    sources = (KeySource(k, v, order[0]), QuerySource(q, order[0]))
    for h, head in enumerate(order):
        keys, queries = sources
        for q0 in range(0, seq_q, P):
            if q0 == halfway and h + 1 < len(order):
                sources = (KeySource(k, v, order[h + 1]), QuerySource(q, order[h + 1]))
            yield head, keys, q0, queries.get(q0, min(P, seq_q - q0))


@dataclass
class Row:
    """Online-softmax state of one query tile: running max, its bias ``-scale · max``, running sum, O."""

    head: tuple[int, ...]
    q0: int
    run_max: Tensor | None = None
    neg_bias: Tensor | None = None
    run_sum: Tensor | None = None
    acc: Tensor | None = None


@dataclass
class Scores:
    """The first half of a step, for the second: P [n, w], its row sums, the rescale α of the earlier
    steps (None for a query tile's first), V of the key tile, and whether the step is the tile's last."""

    row: Row
    p: Tensor
    tile_sum: Tensor
    alpha: Tensor | None
    vt: Tensor
    last: bool


def scores(row: Row, qt: Tensor, kt: Tensor, vt: Tensor, last: bool, diag: int | None, sm: float,
           mask: Tensor | None) -> Scores:
    """S = Q Kᵀ of one key tile, ``mask`` added where the diagonal starts (key ``diag`` of the tile, causal),
    the running max, and P = exp(scale·S − scale·max) with its row sums."""
    n, w = qt.shape[1], kt.shape[1]
    s = dsl.psum((n, w))
    for _, c0, cw in chunks(w, BANK_N):
        dsl.matmul(s[:, c0 : c0 + cw], qt, kt[:, c0 : c0 + cw])
    if mask is not None and diag is not None:
        dsl.add(s[:, diag : diag + n], mask[:n, :n], out=s[:, diag : diag + n])
    tile_max = dsl.reduce_max(s)
    new_max = tile_max if row.run_max is None else dsl.maximum(row.run_max, tile_max)
    neg_bias = dsl.multiply(new_max, -sm)
    p, tile_sum = dsl.activation_reduce("exp", s, scale=sm, bias=neg_bias, dtype=qt.dtype)
    dsl.release(s)
    alpha = None if row.run_max is None else dsl.exp(row.run_max, scale=sm, bias=neg_bias)  # exp(scale·(m − m'))
    row.run_max, row.neg_bias = new_max, neg_bias
    return Scores(row, p, tile_sum, alpha, vt, last)


def accumulate(st: Scores, o: Tensor, lse: Tensor) -> None:
    """O_t = P V into the row's running sum and output; after its last step, O / l and lse to HBM."""
    n, w, row = st.p.shape[0], st.p.shape[1], st.row
    pt = transpose_chunks(st.p, w)
    o_t = dsl.psum((n, o.shape[-1]))
    for j, _, kc in chunks(w):
        dsl.matmul(o_t, pt[:kc, j, :], st.vt[:kc, j, :], accumulate=j > 0)
    if st.alpha is None or row.run_sum is None or row.acc is None:
        row.run_sum, row.acc = st.tile_sum, o_t
    else:
        row.run_sum = dsl.tensor_scalar(row.run_sum, "mul", st.alpha, "add", st.tile_sum)
        row.acc = dsl.add(dsl.multiply(row.acc, st.alpha), o_t)
    if st.last:
        assert row.neg_bias is not None
        dsl.store(rows(o, row.head, row.q0, row.q0 + n), dsl.divide(row.acc, row.run_sum, dtype=o.dtype))
        dsl.dma_copy(lse[(*row.head, slice(row.q0, row.q0 + n))],
                     dsl.subtract(dsl.log(row.run_sum), row.neg_bias))


@dsl.kernel
def flash_attention_kernel(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: float | None = None, kv_tile: int | None = None
) -> tuple[Tensor, Tensor]:
    """``o = softmax(scale · q kᵀ) v`` per head and ``lse``, the log-sum-exp of each row of scores (module
    docstring): HBM tensors ``[..., seq_q, dv]`` (the inputs' dtype) and ``[..., seq_q]`` (fp32).
    ``kv_tile`` is the keys per online-softmax step, a multiple of 128 up to ``max_kv_tile`` (the default)."""
    sm = tiles.check_inputs(q, k, v, causal, scale)
    limit = max_kv_tile(q.dtype)
    kv_tile = limit if kv_tile is None else kv_tile
    if kv_tile % P or not P <= kv_tile <= limit:
        fail(f"kv_tile={kv_tile}", f"use a multiple of {P} up to {limit} for {q.dtype} (PSUM holds two steps)")
    o = dsl.hbm_tensor((*q.shape[:-1], v.shape[-1]), q.dtype, name="o")
    lse = dsl.hbm_tensor(q.shape[:-1], "fp32", name="lse")
    mask = tiles.causal_mask() if causal else None
    pending: Scores | None = None
    for head, keys, q0, qt in query_tiles(q, k, v):
        # NOTE: causal attention never computes the key tiles past the diagonal
        kv_end = q0 + qt.shape[1] if causal else k.shape[-2]
        row = Row(head, q0)
        for k0 in range(0, kv_end, kv_tile):
            w = min(kv_tile, kv_end - k0)
            kt, vt = keys.get(k0, w)
            last = k0 + w == kv_end
            st = scores(row, qt, kt, vt, last, q0 - k0 if causal and last else None, sm, mask)
            if pending is not None:
                accumulate(pending, o, lse)
            pending = st
    assert pending is not None  # at least one step
    accumulate(pending, o, lse)
    return o, lse


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
    dtype: str | None = None, *, kv_tile: int | None = None, target: str = "trn3",
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
