"""Shared pieces of the attention kernels (``attention``, ``attention_backward``): input checks, per-head
views of ``[batch, heads, seq, d]`` operands, the causal mask, and TensorE transposes of 128-key chunks."""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.isa.base import Engine

P = 128  # partitions: rows of a query tile, keys per transpose and per contraction chunk
BANK_N = 512  # fp32 values per PSUM bank: the widest matmul output
PSUM_BANKS = 8
CACHE_BYTES = 64 * 1024  # per partition: what one head's resident operands may take in SBUF
INPUT_DTYPES = ("bf16", "fp16", "fp32")


def itemsize(dtype: str) -> int:
    return 4 if dtype == "fp32" else 2


def check_inputs(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None) -> float:
    """Validate shapes, dtypes and options (errors at the caller's kernel line); the softmax scale."""
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
    sm = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not (math.isfinite(sm) and sm > 0):
        fail(f"scale={scale}", "the softmax scale is positive and finite (default 1/sqrt(d))")
    return sm


def heads(x: Tensor) -> list[tuple[int, ...]]:
    """Leading (batch, head) indices of an attention operand."""
    return list(itertools.product(*(range(n) for n in x.shape[:-2])))


def rows(x: Tensor, head: tuple[int, ...], r0: int, r1: int) -> Tensor:
    """Rows ``r0:r1`` of one head: a 2-D HBM view ``[r1 - r0, d]``."""
    return x[(*head, slice(r0, r1), slice(None))]


def load_transposed(x: Tensor, head: tuple[int, ...], r0: int, n: int) -> Tensor:
    """Rows ``r0:r0+n`` of one head as ``[d, n]`` (DMA transposes), 512 rows per DMA: the pieces go to
    different DMA queues and move in parallel."""
    out = dsl.sbuf((x.shape[-1], n), x.dtype)
    for _, c0, cw in chunks(n, BANK_N):
        dsl.load(out[:, c0 : c0 + cw], rows(x, head, r0 + c0, r0 + c0 + cw).T)
    return out


def causal_mask() -> Tensor:
    """[128, 128] fp32: 0 where key ≤ query (free index ≤ partition), else -inf (affine_select on GpSimd).
    Added to the one [queries, keys] block on the diagonal of a causal score tile."""
    return dsl.affine_select(dsl.zeros((P, P)), "ge", -math.inf, channel_multiplier=1, steps=[-1])


def chunks(width: int, size: int = P) -> Iterator[tuple[int, int, int]]:
    """(index, start, length) of the ``size``-wide chunks of ``width``."""
    for j, c0 in enumerate(range(0, width, size)):
        yield j, c0, min(size, width - c0)


def transpose_chunks(x: Tensor, width: int, engine: Engine = "vector") -> Tensor:
    """``x[n, width]`` → SBUF ``[128, ceil(width/128), n]`` holding ``x[:, 128j:128j+128].T`` at ``[:, j, :]``:
    TensorE transposes into one PSUM tile, then (at most) two copies out on ``engine``."""
    n, nch = x.shape[0], -(-width // P)
    ps = dsl.psum((P, nch, n), x.dtype)
    for j, c0, kc in chunks(width):
        dsl.transpose(x[:, c0 : c0 + kc], out=ps[:kc, j, :])
    out = dsl.sbuf((P, nch, n), x.dtype)
    full = width // P
    if full:
        dsl.copy(ps[:, :full, :], out=out[:, :full, :], engine=engine)
    if full < nch:
        dsl.copy(ps[: width - full * P, full, :], out=out[: width - full * P, full, :], engine=engine)
    dsl.release(ps)
    return out


def software_pipeline(items: Iterable[Any], stages: Sequence[Callable[[Any], Any]]) -> None:
    """Emit each item through ``stages`` (each maps an item's state to the next), skewed: in each round every
    item in flight runs its next stage, the newest first, so stage s of item t is emitted after stage 0 of
    item t + s. Each engine's stream then holds work of several items, and an engine waiting on one item's
    result is never queued behind another's. ``items`` is consumed lazily (loads it emits stay in step)."""
    flight: deque[tuple[int, Any]] = deque()  # (next stage, state), newest first

    def advance() -> None:
        for i, (s, state) in enumerate(flight):
            flight[i] = (s + 1, stages[s](state))
        while flight and flight[-1][0] == len(stages):
            flight.pop()

    for item in items:
        flight.appendleft((0, item))
        advance()
    while flight:
        advance()
