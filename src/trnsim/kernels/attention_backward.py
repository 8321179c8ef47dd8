"""Flash attention backward (FlashAttention-2) in the kernel language: dQ, dK, dV from Q, K, V, the forward's
O and log-sum-exp, and dO (shapes and dtypes as in ``attention``).

Tiling and engine mapping, per head: key tiles of 512 keys (outer), query tiles of 128 rows (inner):

    S  = Q Kᵀ;  P = exp(scale·S − lse)     TensorE (Qᵀ, Kᵀ by DMA transpose); ScalarE, lse in the bias
    dV += Pᵀ dO                            TensorE: P [q, k] is the stationary as it comes, per 128 keys
    dP = dO Vᵀ                             TensorE (dOᵀ, Vᵀ by DMA transpose)
    dS = P ∘ (dP − D)                      VectorE; D = rowsum(dO ∘ O), once per query tile
    dK += dSᵀ Q                            TensorE, dS as the stationary
    dQ += dS K                             TensorE on dSᵀ (TensorE transposes), K with keys on partitions
    dK, dQ ×= scale on the way out

dV and dK accumulate in PSUM over the query tiles (one bank each per key tile), dQ in SBUF (fp32) over the
key tiles; P and dS are rounded to the input dtype before their matmuls. Causal attention skips the blocks
past the diagonal and masks the diagonal block as the forward does. As in the forward, the key tile's
loads are issued a step ahead, and the blocks of a key tile go through a three-stage software pipeline
(S, P, dP, dS | dSᵀ, dV, dK | dQ; ``attention_tiles.software_pipeline``), so that no engine waits in its
stream for work another engine is doing on the same block.

The per-query-tile operands of a head stay in SBUF when they fit in ``CACHE_BYTES`` per partition (else
they are loaded, and D recomputed, per use), and dQ's fp32 accumulators always do
(``seq_q · d · 4 / 128`` bytes per partition: ``seq_q`` up to ~48K at d = 128).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.kernels import attention_tiles as tiles
from trnsim.kernels.attention_tiles import BANK_N, P, chunks, rows, transpose_chunks

KEY_TILE = BANK_N  # keys per outer step: a query tile's S and dP are one PSUM bank each


@dataclass(frozen=True)
class QueryTile:
    """What the backward reads for one query tile: Qᵀ [d, n], Q [n, d], dO [n, dv], dOᵀ [dv, n], -lse and
    D = rowsum(dO ∘ O) ([n, 1] fp32)."""

    q0: int
    qt: Tensor
    q: Tensor
    do: Tensor
    dot: Tensor
    neg_lse: Tensor
    dsum: Tensor


class QuerySource:
    """The query tiles of one head. Their loads are held in SBUF for the whole head when they fit in
    ``CACHE_BYTES`` per partition (Qᵀ and dOᵀ in one transposing DMA per 512 rows), else issued per use;
    -lse and D are computed at a tile's first use, so that loading ahead never puts work in an engine's
    stream that would wait for the DMAs."""

    def __init__(self, q: Tensor, o: Tensor, do: Tensor, lse: Tensor, head: tuple[int, ...]) -> None:
        self.q, self.o, self.do, self.lse, self.head = q, o, do, lse, head
        seq, d, dv = q.shape[-2], q.shape[-1], do.shape[-1]
        count = -(-seq // P)
        self.ready: dict[int, QueryTile] = {}
        self.loaded: list[tuple[Tensor, ...]] | None = None
        if (2 * seq + count * (d + 2 * dv)) * tiles.itemsize(q.dtype) + count * 4 <= tiles.CACHE_BYTES:
            qt, dot = tiles.load_transposed(q, head, 0, seq), tiles.load_transposed(do, head, 0, seq)
            self.loaded = [self._load(i, qt[:, c0 : c0 + w], dot[:, c0 : c0 + w]) for i, c0, w in chunks(seq)]

    def _load(self, i: int, qt: Tensor | None = None, dot: Tensor | None = None) -> tuple[Tensor, ...]:
        """Qᵀ, Q, dOᵀ, dO, O [n, dv] and lse [n, 1] of query tile ``i``."""
        q0, q1 = i * P, min(i * P + P, self.q.shape[-2])
        q_rows, do_rows = rows(self.q, self.head, q0, q1), rows(self.do, self.head, q0, q1)
        lse = dsl.sbuf((q1 - q0, 1))
        dsl.dma_copy(lse, self.lse[(*self.head, slice(q0, q1))])
        return (dsl.load(q_rows.T) if qt is None else qt, dsl.load(q_rows), dsl.load(do_rows.T) if dot is None
                else dot, dsl.load(do_rows), dsl.load(rows(self.o, self.head, q0, q1)), lse)

    def get(self, i: int) -> QueryTile:
        if i in self.ready:
            return self.ready[i]
        qt, qn, dot, don, on, lse = self._load(i) if self.loaded is None else self.loaded[i]
        tile = QueryTile(i * P, qt, qn, don, dot, dsl.negative(lse),
                         dsl.reduce_sum(dsl.multiply(don, on, dtype="fp32")))  # D = rowsum(dO ∘ O)
        if self.loaded is not None:
            self.ready[i] = tile
        return tile


@dataclass(frozen=True)
class KeyTile:
    """One key tile of a head: Kᵀ [d, w], Vᵀ [dv, w], K [128, chunk, d] (keys on partitions)."""

    head: tuple[int, ...]
    k0: int
    kt: Tensor
    vt: Tensor
    kn: Tensor

    @property
    def width(self) -> int:
        return self.kt.shape[1]


def key_tiles(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor
              ) -> Iterator[tuple[KeyTile, QuerySource, bool]]:
    """(key tile, its head's query tiles, whether it is the head's last) in order. Each key tile's loads are
    emitted a step ahead, the next head's query tiles halfway through the current head (see
    ``attention.query_tiles``: one engine issues all DMAs, in program order)."""
    seq_k, head_list = k.shape[-2], tiles.heads(q)
    starts = list(range(0, seq_k, KEY_TILE))
    order = [(head, k0) for head in head_list for k0 in starts]

    def load(head: tuple[int, ...], k0: int) -> KeyTile:
        k1 = min(k0 + KEY_TILE, seq_k)
        kn = dsl.sbuf((P, -(-(k1 - k0) // P), k.shape[-1]), k.dtype)
        for j, c0, kc in chunks(k1 - k0):
            dsl.load(kn[:kc, j, :], rows(k, head, k0 + c0, k0 + c0 + kc))
        return KeyTile(head, k0, dsl.load(rows(k, head, k0, k1).T), dsl.load(rows(v, head, k0, k1).T), kn)

    queries, upcoming, key = QuerySource(q, o, do, lse, head_list[0]), None, load(*order[0])
    for i, (head, k0) in enumerate(order):
        h = head_list.index(head)
        if k0 == starts[(len(starts) - 1) // 2] and h + 1 < len(head_list):
            upcoming = QuerySource(q, o, do, lse, head_list[h + 1])
        current, key = key, load(*order[i + 1]) if i + 1 < len(order) else key
        yield current, queries, k0 == starts[-1]
        if k0 == starts[-1] and upcoming is not None:
            queries, upcoming = upcoming, None


@dataclass(frozen=True)
class Step:
    """One (key tile, query tile) block: the query tile ``i``, its operands and how many keys it sees."""

    i: int
    qt: QueryTile
    w: int


@dataclass(frozen=True)
class Probs:
    """A block after its first stage: P and dS [n, w] in the input dtype (and dSᵀ, after the second)."""

    step: Step
    p: Tensor
    ds: Tensor
    dst: Tensor | None = None


class KeyTileWork:
    """The blocks of one key tile as three pipeline stages (``probs``, ``key_gradients``, ``query_gradient``),
    dK and dV accumulating in PSUM ([128, chunk, d]) over them, dQ into the head's fp32 accumulators."""

    def __init__(self, key: KeyTile, queries: QuerySource, dq_acc: list[Tensor | None], sm: float,
                 mask: Tensor | None) -> None:
        self.key, self.queries, self.dq_acc, self.sm, self.mask = key, queries, dq_acc, sm, mask
        nch, q = -(-key.width // P), queries.q
        self.dk, self.dv = dsl.psum((P, nch, q.shape[-1])), dsl.psum((P, nch, queries.do.shape[-1]))
        self.started = [False] * nch  # chunk j of dK/dV has had its first (overwriting) matmul

    def blocks(self) -> Iterator[Step]:
        key, seq_q = self.key, self.queries.q.shape[-2]
        first = key.k0 // P if self.mask is not None else 0  # NOTE: causal skips the blocks past the diagonal
        for i in range(first, -(-seq_q // P)):
            qt = self.queries.get(i)
            yield Step(i, qt, key.width if self.mask is None else min(key.width, qt.q0 + qt.q.shape[0] - key.k0))

    def probs(self, step: Step) -> Probs:
        """P = exp(scale · Q Kᵀ − lse) (the diagonal masked, causal) and dS = P ∘ (dO Vᵀ − D)."""
        key, qt, w = self.key, step.qt, step.w
        n = qt.q.shape[0]
        s = dsl.matmul(dsl.psum((n, w)), qt.qt, key.kt[:, :w])
        if self.mask is not None and key.k0 <= qt.q0 < key.k0 + w:
            diag = s[:, qt.q0 - key.k0 : qt.q0 - key.k0 + n]
            dsl.add(diag, self.mask[:n, :n], out=diag)
        p = dsl.exp(s, scale=self.sm, bias=qt.neg_lse, dtype=qt.q.dtype)
        dsl.release(s)
        dp = dsl.matmul(dsl.psum((n, w)), qt.dot, key.vt[:, :w])
        ds = dsl.multiply(dsl.subtract(dp, qt.dsum), p, dtype=qt.q.dtype)
        dsl.release(dp)
        return Probs(step, p, ds)

    def key_gradients(self, pr: Probs) -> Probs:
        """dSᵀ (TensorE transposes), then dV += Pᵀ dO and dK += dSᵀ Q per 128 keys."""
        qt, w = pr.step.qt, pr.step.w
        dst = transpose_chunks(pr.ds, w)
        for j, c0, kc in chunks(w):
            dsl.matmul(self.dv[:kc, j, :], pr.p[:, c0 : c0 + kc], qt.do, accumulate=self.started[j])
            dsl.matmul(self.dk[:kc, j, :], pr.ds[:, c0 : c0 + kc], qt.q, accumulate=self.started[j])
            self.started[j] = True
        return Probs(pr.step, pr.p, pr.ds, dst)

    def query_gradient(self, pr: Probs) -> None:
        """dQ += dS K into the query tile's accumulator."""
        assert pr.dst is not None
        n, d = pr.step.qt.q.shape
        dq = dsl.psum((n, d))
        for j, _, kc in chunks(pr.step.w):
            dsl.matmul(dq, pr.dst[:kc, j, :], self.key.kn[:kc, j, :], accumulate=j > 0)
        prev = self.dq_acc[pr.step.i]
        self.dq_acc[pr.step.i] = dsl.copy(dq) if prev is None else dsl.add(prev, dq)

    def store(self, dk: Tensor, dv: Tensor) -> None:
        """dK · scale and dV of the key tile to HBM."""
        key = self.key
        for j, c0, kc in chunks(key.width):
            at = (key.head, key.k0 + c0, key.k0 + c0 + kc)
            dsl.store(rows(dk, *at), dsl.multiply(self.dk[:kc, j, :], self.sm, dtype=dk.dtype))
            dsl.store(rows(dv, *at), dsl.copy(self.dv[:kc, j, :], dtype=dv.dtype))


@dsl.kernel
def flash_attention_backward_kernel(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, *, causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients dQ, dK, dV (the inputs' dtype) of ``flash_attention`` given its ``o`` and ``lse`` and the
    output gradient ``do`` (module docstring)."""
    sm = tiles.check_inputs(q, k, v, causal, scale)
    seq_q, dv = q.shape[-2], v.shape[-1]
    if o.shape != (*q.shape[:-1], dv) or do.shape != o.shape or lse.shape != q.shape[:-1]:
        fail(f"o {o.shape}, do {do.shape}, lse {lse.shape} for q {q.shape}, v {v.shape}",
             "pass flash_attention's o and lse, and do of o's shape")
    if o.dtype != q.dtype or do.dtype != q.dtype or lse.dtype != "fp32":
        fail(f"dtypes o {o.dtype}, do {do.dtype}, lse {lse.dtype} for q {q.dtype}",
             f"o and do are {q.dtype} (q's dtype, as flash_attention's o), lse is fp32")
    dq = dsl.hbm_tensor(q.shape, q.dtype, name="dq")
    dk = dsl.hbm_tensor(k.shape, q.dtype, name="dk")
    dvo = dsl.hbm_tensor(v.shape, q.dtype, name="dv")
    mask = tiles.causal_mask() if causal else None
    dq_acc: list[Tensor | None] = [None] * -(-seq_q // P)
    for key, queries, head_done in key_tiles(q, k, v, o, do, lse):
        work = KeyTileWork(key, queries, dq_acc, sm, mask)
        tiles.software_pipeline(work.blocks(), [work.probs, work.key_gradients, work.query_gradient])
        work.store(dk, dvo)
        if head_done:
            for i, acc in enumerate(dq_acc):
                assert acc is not None  # every query tile sees key tile 0
                dsl.store(rows(dq, key.head, i * P, min(i * P + P, seq_q)), dsl.multiply(acc, sm, dtype=q.dtype))
            dq_acc[:] = [None] * len(dq_acc)
    return dq, dk, dvo
