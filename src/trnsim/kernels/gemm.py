"""Matrix multiply in the kernel language: any M, K, N, every TensorE operand format, N:M-sparse weights,
and a fused ``activation(scale · (a @ b) + bias)`` epilogue.

``matmul_kernel`` computes ``O = S.T @ V`` tile by tile for a stationary operand ``S [K, Ms]`` and a moving
operand ``V [K, Nv]``, both HBM views, and writes the epilogue of each ``O`` tile to an HBM view. Two
orientations map ``c = a @ b`` onto it:

* dense: ``S = a.T`` (loaded through a transposed view: a DMA transpose), ``V = b``, ``O = c``; a bias runs
  along ``O``'s free axis, so it is loaded once per column chunk broadcast over the partitions and added
  on VectorE before the activation on ScalarE;
* sparse weights (``sparsity="2:4"/"4:8"``, which TensorE supports on its *stationary* operand, along K):
  ``S = b`` (compressed: K·n/m rows plus the kept positions), ``V = a.T``, ``O = c.T``; the bias is then
  per partition and the whole epilogue is one ScalarE instruction, ``func(acc * scale + bias)``; the
  output tiles are stored through a transposed view of ``c``.

Tiling (``reference/neuron.md`` §2.6): stationary tiles ``[128 (K), 128]``, moving tiles ``[128 (K), 512]``,
one fp32 PSUM bank per output tile, accumulating over all of K with ``accumulate=k > 0``. The loops, outer
to inner (``Plan`` chooses the sizes from the shapes and the SBUF):

* *chunks* of up to ``chunk`` columns of ``V``; when the chunk is a *panel* its tiles of all of K are loaded
  once and stay in SBUF across the chunk's groups (else they stream: loaded for each use; the panel is
  chosen when it moves fewer bytes);
* *groups* of up to 4 stationary tiles (512 columns of ``S``): one DMA per K tile loads a group's
  ``[128, 512]``, which stays in SBUF for the whole chunk (two groups are resident: the next group's K
  tiles load during this one's last matmuls);
* *blocks* of 4 PSUM banks (4 stationary tiles × 1 moving tile, or 2 × 2, or 1 × 4): half of the 8
  banks, so one block's epilogue (VectorE/ScalarE, PSUM → SBUF, then a store) overlaps the next block's
  matmuls. When K is too long for two resident groups, a group's K tiles are loaded for each block
  instead, and a block takes all 8 banks (4 × 2): each stationary load then feeds 8 matmuls, and the
  epilogue TensorE waits for is short beside a block of that many K tiles;
* *steps*: one K tile of a block, its matmuls back to back.

DMAs issue from the sync engine in program order (``dsl.data``), so a store placed before a load holds the
load until the store's data is computed. Each step's loads are therefore issued ``depth`` steps ahead of
its matmuls (``layout.prefetch``) and each block's stores ``STORE_LAG`` steps after its last matmul, when
its epilogue is done: the queues stay busy while TensorE computes. One bank in four is evacuated on
ScalarE (short-K blocks would otherwise wait for VectorE), and the last block's stores are cut by rows so
the kernel's tail runs on all queues; a product of at most ``SMALL_TILES`` output tiles is all tail and cuts
every store (else the tail's pieces, round-robin, land behind the block before's whole-tile stores: 512×267×572
took 19.5 µs against 17.1 µs for 617 rows; now 15.8). A transposed load of a 1-byte type cannot use the
DMA-transpose path (neuron.md §1.3) and moves element by element: it is cut into one DMA per 128 columns, so the queues
share it. Ragged tails in M, K and N are smaller tiles, never padding.

At 2048³ and [4096 × 8192] × [8192 × 8192] in bf16 TensorE is busy 95% and 99.8% of the time on the
timing model (``benchmarks/timing.py``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.isa.base import Engine
from trnsim.isa.tensor_engine import MX_BLOCK, SPARSE_PATTERNS
from trnsim.kernels.layout import prefetch
from trnsim.kernels.operands import prepare_matmul

GROUP_TILES = 4  # stationary tiles per group: one DMA of [128 (K), 512] pays the fixed DMA cost once for 4
BLOCK_BANKS = 4  # PSUM banks of one output block: half of the 8, so two blocks are in flight
LONG_BLOCK_BANKS = 8  # ... or all 8 when K is too long for resident groups: a block's epilogue is then short
SCALAR_EVERY = 4  # one bank in this many leaves PSUM on ScalarE
STREAM_CHUNK = 2048  # moving columns per chunk when they stream (the stationary group is reused across it)
RESIDENT_SHARE = 0.5  # of the SBUF, what the two resident stationary groups may take
STREAM_BYTES = 32 * 1024  # SBUF bytes per partition of tiles loaded ahead (what fixes ``Plan.depth``)
MAX_DEPTH = 64  # steps a step's loads are issued ahead at most
STORE_LAG = 2  # steps between a block's last matmul and its stores in program order (its epilogue runs)
SMALL_TILES = 16  # output tiles of a product whose stores are all cut like the tail's (one tile per queue)
TAIL_PIECES = 4  # row pieces per store of the last block (4 banks → 16 DMAs, one per queue)
TRANSPOSE_ITEMSIZES = (2, 4)  # neuron.md §1.3: DMA transpose works for 2- and 4-byte types
ELEMENTWISE_COLUMNS = 128  # columns per DMA of a transposed load of other types (moved element by element)


def blocks(n: int, size: int, start: int = 0) -> list[tuple[int, int]]:
    """(offset, length) of consecutive blocks of at most ``size`` covering ``start .. start + n``."""
    return [(start + i, min(size, n - i)) for i in range(0, n, size)]


Tiles = tuple[Tensor, Tensor | None, Tensor | None]  # SBUF data, MX scales, sparse index


@dataclass(frozen=True)
class Operand:
    """A matmul operand in HBM as ``[K, cols]`` (a view, so ``a.T`` works), with its MX scales
    ``[ceil(K/32), cols]`` and, for a compressed sparse stationary, the kept positions and ``(n, m)``."""

    data: Tensor
    scale: Tensor | None = None
    index: Tensor | None = None
    ratio: tuple[int, int] = (1, 1)

    def load(self, k0: int, kk: int, c0: int, cc: int) -> Tiles:
        """The SBUF tiles of dense rows ``k0 .. k0+kk`` and columns ``c0 .. c0+cc``: (data, scale, index)."""
        n, m = self.ratio
        rows = slice(k0 * n // m, (k0 + kk) * n // m)
        view = self.data[rows, c0 : c0 + cc]
        if self.elementwise:
            # NOTE: one element per descriptor: the DMA is long, so it is split for the queues to share
            data = dsl.sbuf(view.shape, view.dtype)
            for p0, pw in blocks(cc, ELEMENTWISE_COLUMNS):
                dsl.load(data[:, p0 : p0 + pw], view[:, p0 : p0 + pw])
        else:
            data = dsl.load(view)
        scale = None if self.scale is None else dsl.load(
            self.scale[k0 // MX_BLOCK : -(-(k0 + kk) // MX_BLOCK), c0 : c0 + cc])
        index = None if self.index is None else dsl.load(self.index[rows, c0 : c0 + cc])
        return data, scale, index

    @property
    def elementwise(self) -> bool:
        """A transposed view (``a.T``) of a type the DMA-transpose path does not take."""
        d = self.data
        return d.dims[0].axis > d.dims[1].axis and d.ap().itemsize not in TRANSPOSE_ITEMSIZES

    def column_bytes(self) -> int:
        """SBUF bytes per partition that one column of one K tile takes (data, scales, index)."""
        return sum(t.ap().itemsize for t in (self.data, self.scale, self.index) if t is not None)


def columns(tiles: Tiles, c0: int, cc: int) -> Tiles:
    """Columns ``c0 .. c0+cc`` of loaded tiles (views)."""
    data, scale, index = tiles
    return (data[:, c0 : c0 + cc], None if scale is None else scale[:, c0 : c0 + cc],
            None if index is None else index[:, c0 : c0 + cc])


@dataclass(frozen=True)
class Plan:
    """How ``gemm`` tiles one product (module docstring)."""

    group: int  # stationary columns per group (a multiple of 128, ≤ GROUP_TILES tiles)
    resident: bool  # a group's K tiles stay in SBUF while the chunk runs (else loaded for each step)
    chunk: int  # moving columns per chunk (a multiple of 512)
    panel: bool  # a chunk's moving tiles stay in SBUF across its groups (else loaded for each use)
    depth: int  # steps whose loads are issued ahead of the matmuls
    banks: int = BLOCK_BANKS  # PSUM banks of one output block


def plan(ms: int, nv: int, k_tiles: int, s_col: int, v_col: int, sbuf: int, *, s_tile: int = 128,
         v_tile: int = 512, row_bytes: int = 0) -> Plan:
    """Sizes for ``S [K, ms]`` and ``V [K, nv]`` in ``k_tiles`` K tiles whose columns take ``s_col`` and
    ``v_col`` bytes per partition per K tile, in ``sbuf`` bytes per partition; ``row_bytes`` per moving
    column of a chunk for a bias row. Two resident groups take at most ``RESIDENT_SHARE`` of it, the
    tiles loaded ahead ``STREAM_BYTES``, a reserve the epilogue tiles, and a panel what is left; a panel
    is used when it moves fewer bytes than streaming (``S`` reloaded per chunk, ``V`` per group)."""
    most = RESIDENT_SHARE * sbuf
    tiles = min(GROUP_TILES, -(-ms // s_tile))
    group = tiles * s_tile
    resident = 2 * k_tiles * group * s_col <= most
    banks = BLOCK_BANKS if resident else LONG_BLOCK_BANKS
    per_step = max(1, banks // tiles) * v_tile * v_col + (0 if resident else group * s_col)
    depth = max(1, min(MAX_DEPTH, STREAM_BYTES // per_step - 2))
    reserve = (STORE_LAG + 2) * banks * v_tile * 4  # output tiles (fp32 at most) until stored
    left = max(0, sbuf - (2 * k_tiles * group * s_col if resident else 0) - STREAM_BYTES - reserve)
    width = min(-(-nv // v_tile) * v_tile, left // (k_tiles * v_col + row_bytes) // v_tile * v_tile)
    groups = -(-ms // group)
    streamed = ms * s_col * -(-nv // STREAM_CHUNK) + nv * v_col * groups  # bytes moved per K row, each way
    if width >= v_tile and nv * v_col + ms * s_col * -(-nv // width) < streamed:
        return Plan(group, resident, width, True, depth, banks)
    return Plan(group, resident, STREAM_CHUNK, False, depth, banks)


@dataclass(frozen=True)
class Step:
    """One K tile of one output block: stationary group ``group`` × moving columns ``cols`` of chunk
    ``chunk`` (global indices into ``Schedule``'s lists)."""

    chunk: int
    group: int
    k: int
    cols: tuple[tuple[int, int], ...]  # (offset, width) of the block's moving tiles


@dataclass
class Schedule:
    """The steps of one product in program order, and where each chunk and group starts and ends."""

    chunks: list[tuple[int, int]]  # (first column, width)
    groups: list[tuple[int, int, int]]  # (chunk, first stationary column, width)
    steps: list[Step]


def schedule(ms: int, nv: int, k_tiles: int, p: Plan, s_tile: int, v_tile: int) -> Schedule:
    sch = Schedule(blocks(nv, p.chunk), [], [])
    for ci, (c0, cw) in enumerate(sch.chunks):
        for r0, rw in blocks(ms, p.group):
            gi = len(sch.groups)
            sch.groups.append((ci, r0, rw))
            per = max(1, p.banks // -(-rw // s_tile))
            v_cols = blocks(cw, v_tile, c0)
            for b in range(0, len(v_cols), per):
                sch.steps += [Step(ci, gi, ki, tuple(v_cols[b : b + per])) for ki in range(k_tiles)]
    return sch


class Loader:
    """The SBUF tiles of each step, loaded by ``step(i)`` (called ``depth`` steps ahead of step ``i``'s
    matmuls, so the next group's K tiles load while this group's last steps run): resident groups and
    panels are kept until ``drop_group`` / ``drop_chunk``."""

    def __init__(self, s: Operand, v: Operand, k_blocks: list[tuple[int, int]], sch: Schedule, p: Plan) -> None:
        self.s, self.v, self.k_blocks, self.sch, self.p = s, v, k_blocks, sch, p
        self.s_tiles: dict[tuple[int, int], Tiles] = {}
        self.v_tiles: dict[tuple[int, int, int], Tiles] = {}

    def stationary(self, gi: int, ki: int) -> Tiles:
        tiles = self.s_tiles.get((gi, ki))
        if tiles is None:
            (k0, kk), (_, r0, rw) = self.k_blocks[ki], self.sch.groups[gi]
            tiles = self.s.load(k0, kk, r0, rw)
            if self.p.resident:
                self.s_tiles[(gi, ki)] = tiles
        return tiles

    def moving(self, ci: int, ki: int, n0: int, nn: int) -> Tiles:
        tiles = self.v_tiles.get((ci, ki, n0))
        if tiles is None:
            k0, kk = self.k_blocks[ki]
            tiles = self.v.load(k0, kk, n0, nn)
            if self.p.panel:
                self.v_tiles[(ci, ki, n0)] = tiles
        return tiles

    def step(self, i: int) -> tuple[Tiles, list[Tiles]]:
        st = self.sch.steps[i]
        return self.stationary(st.group, st.k), [self.moving(st.chunk, st.k, n0, nn) for n0, nn in st.cols]

    def drop_group(self, gi: int) -> None:
        for ki in range(len(self.k_blocks)):
            self.s_tiles.pop((gi, ki), None)

    def drop_chunk(self, ci: int) -> None:
        for key in [key for key in self.v_tiles if key[0] == ci]:
            del self.v_tiles[key]


def epilogue(acc: Tensor, dtype: str, scale: float, func: str | None, bias_row: Tensor | None,
             bias_col: Tensor | None, engine: Engine = "vector") -> Tensor:
    """``func(acc * scale + bias)`` rounded to ``dtype``: ``bias_row`` [P, n] runs along the free axis
    (VectorE add first), ``bias_col`` [P, 1] per partition (fused into ScalarE's activation); a plain
    copy out of PSUM runs on ``engine``."""
    if bias_row is not None:
        scaled = acc if scale == 1.0 else dsl.multiply(acc, scale)
        acc = dsl.add(scaled, bias_row, dtype=dtype if func is None else "fp32")
        if func is None:
            return acc
        scale = 1.0
    if func is None and scale == 1.0 and bias_col is None:
        return dsl.copy(acc, dtype=dtype, engine=engine)
    return dsl.activation(func or "identity", acc, scale=scale, bias=bias_col, dtype=dtype)


def gemm(s: Operand, v: Operand, out: Tensor, k: int, *, scale: float = 1.0, func: str | None = None,
         bias: Tensor | None = None, bias_along_free: bool = True) -> None:
    """``out = func(scale · s.T @ v + bias)`` (module docstring); ``k`` is the dense contraction length."""
    ts = dsl.tile_size()
    s_tile, v_tile = ts.gemm_stationary_fmax, ts.gemm_moving_fmax
    ms, nv = out.shape
    k_blocks = blocks(k, ts.pmax)
    p = plan(ms, nv, len(k_blocks), s.column_bytes(), v.column_bytes(), ts.sbuf_bytes_per_partition,
             s_tile=s_tile, v_tile=v_tile, row_bytes=4 if bias is not None and bias_along_free else 0)
    sch = schedule(ms, nv, len(k_blocks), p, s_tile, v_tile)
    loader = Loader(s, v, k_blocks, sch, p)
    sparsity = None if s.ratio == (1, 1) else f"{s.ratio[0]}:{s.ratio[1]}"
    bias_rows: dict[int, Tensor] = {}  # per moving tile of the chunk: bias[n0 : n0+nn] on every partition
    bias_cols: list[Tensor] = []  # per stationary tile of the group: its bias, one value per partition
    pending: deque[tuple[int, Tensor, Tensor]] = deque()  # (step it is stored after, HBM view, SBUF tile)
    accs: list[list[Tensor]] = []
    last_k = len(k_blocks) - 1
    loads = [partial(loader.step, i) for i in range(len(sch.steps))]
    # a product of few output tiles is all tail: every store is cut by rows, as the last block's are (only
    # those, round-robin, would share queues with the block before's whole-tile stores, still running)
    small = sum(len(st.cols) * -(-sch.groups[st.group][2] // s_tile) for st in sch.steps if st.k == 0) <= SMALL_TILES
    for i, (st, (s_tiles, moving)) in enumerate(zip(sch.steps, prefetch(loads, p.depth), strict=True)):
        _, r0, rw = sch.groups[st.group]
        s_cols = blocks(rw, s_tile)
        if st.k == 0:
            accs = [[dsl.psum((sw, nn)) for _, nn in st.cols] for _, sw in s_cols]
            if bias is not None and bias_along_free and not bias_rows:
                c0, cw = sch.chunks[st.chunk]
                bias_rows = {n0: dsl.load(bias[n0 : n0 + nn].broadcast_to((s_tile, nn)), dtype="fp32")
                             for n0, nn in blocks(cw, v_tile, c0)}
            if bias is not None and not bias_along_free and not bias_cols:
                bias_cols = [dsl.load(bias[r0 + a0 : r0 + a0 + sw, None], dtype="fp32") for a0, sw in s_cols]
        for si, (a0, sw) in enumerate(s_cols):
            stn, stn_scale, stn_index = columns(s_tiles, a0, sw)
            for acc, (mv, mv_scale, _) in zip(accs[si], moving, strict=True):
                dsl.matmul(acc, stn, mv, accumulate=st.k > 0, stationary_scale=stn_scale, moving_scale=mv_scale,
                           sparsity=sparsity, stationary_index=stn_index)
        if st.k == last_k:
            for si, (a0, sw) in enumerate(s_cols):
                col = bias_cols[si] if bias_cols else None
                for vi, (acc, (n0, nn)) in enumerate(zip(accs[si], st.cols, strict=True)):
                    # NOTE: VectorE alone would take longer than a block of short K
                    engine: Engine = "scalar" if (si * len(st.cols) + vi) % SCALAR_EVERY == SCALAR_EVERY - 1 \
                        else "vector"
                    y = epilogue(acc, out.dtype, scale, func, bias_rows[n0][:sw] if bias_rows else None, col, engine)
                    pending.append((i + STORE_LAG, out[r0 + a0 : r0 + a0 + sw, n0 : n0 + nn], y))
            dsl.release(*(acc for row in accs for acc in row))  # the next block may need all 8 banks
            accs = []
            nxt = sch.steps[i + 1] if i + 1 < len(sch.steps) else None
            if nxt is None or nxt.group != st.group:
                loader.drop_group(st.group)
                bias_cols = []
            if nxt is None or nxt.chunk != st.chunk:
                loader.drop_chunk(st.chunk)
                bias_rows = {}
        while pending and pending[0][0] <= i:
            _, dst, y = pending.popleft()
            for r, n in blocks(dst.shape[0], -(-dst.shape[0] // (TAIL_PIECES if small else 1))):
                dsl.store(dst[r : r + n], y[r : r + n])
    # the last block's stores are the kernel's tail: cut by rows, they run on more queues at once
    for due, dst, y in pending:
        pieces = TAIL_PIECES if small or due == len(sch.steps) - 1 + STORE_LAG else 1
        for r, n in blocks(dst.shape[0], -(-dst.shape[0] // pieces)):
            dsl.store(dst[r : r + n], y[r : r + n])


@dsl.kernel
def matmul_kernel(a: Tensor, b: Tensor, a_scale: Tensor | None = None, b_scale: Tensor | None = None,
                  b_index: Tensor | None = None, bias: Tensor | None = None, *, out_dtype: str = "bf16",
                  activation: str | None = None, scale: float = 1.0, sparsity: str | None = None) -> Tensor:
    """``c[M, N] = activation(scale · (a @ b) + bias)``, rounded to ``out_dtype``.

    ``a [M, K]`` and ``b [K, N]`` in any TensorE dtype; MX operands come with E8M0 scale codes
    ``a_scale [ceil(K/32), M]`` and ``b_scale [ceil(K/32), N]``; with ``sparsity="n:m"``, ``b`` is the
    compressed ``[K·n/m, N]`` and ``b_index`` its kept positions (uint8, same shape). ``bias`` is ``[N]``.
    """
    if len(a.shape) != 2 or len(b.shape) != 2:
        fail(f"matmul of a {a.shape} and b {b.shape}", "a is [M, K] and b is [K, N] (2-D each)")
    m, k = a.shape
    n = b.shape[1]
    if sparsity is not None and sparsity not in SPARSE_PATTERNS:
        fail(f"unknown sparsity {sparsity!r}", f"use one of: {', '.join(SPARSE_PATTERNS)}, or None (dense)")
    keep, every = SPARSE_PATTERNS[sparsity] if sparsity is not None else (1, 1)
    if k % every or b.shape[0] != k * keep // every:
        fail(f"matmul of a {a.shape} and b {b.shape}: b has {b.shape[0]} rows for K = {k}",
             f"a {sparsity}-sparse b is the compressed [K·{keep}/{every}, N], K a multiple of {every} "
             "(kernels.prepare_matmul makes it)" if sparsity is not None else f"b is [K, N]: give it K = {k} rows")
    if bias is not None and bias.shape != (n,):
        fail(f"a bias of shape {bias.shape} for an output of {n} columns",
             f"pass a bias of shape ({n},): one value per output column")
    c = dsl.hbm_tensor((m, n), out_dtype, name="c")
    func = dsl.ACTIVATION_FUNCS.get(activation, activation) if activation is not None else None
    if sparsity is None:
        gemm(Operand(a.T, a_scale), Operand(b, b_scale), c, k, scale=scale, func=func,
             bias=bias, bias_along_free=True)
    else:
        stationary = Operand(b, b_scale, b_index, (keep, every))
        gemm(stationary, Operand(a.T, a_scale), c.T, k, scale=scale, func=func, bias=bias, bias_along_free=False)
    return c


def matmul(
    a: ArrayLike, b: ArrayLike, dtype: str = "bf16", sparsity: str | None = None, bias: ArrayLike | None = None,
    activation: str | None = None, *, out_dtype: str | None = None, target: str = "trn3",
) -> NDArray[np.float32]:
    """``activation(a @ b + bias)`` on a simulated NeuronCore, operands quantized to ``dtype``.

    ``a [M, K]``, ``b [K, N]`` and ``bias [N]`` are float arrays; ``dtype`` is any TensorE operand dtype
    (bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, mxfp8_*, mxfp6_*, mxfp4_e2m1, int8, int4; see ``operands``);
    ``sparsity`` ("2:4"/"4:8") prunes ``b`` along K to that pattern and runs it as a sparse stationary;
    ``activation`` is a ``dsl`` activation name (gelu, silu, relu, …). The result is rounded to
    ``out_dtype`` (default bf16, fp32 for fp32 operands) and returned as float32 values.

        >>> import numpy as np
        >>> matmul(np.ones((3, 200)), np.ones((200, 5)), "fp8_e4m3").tolist()[0]
        [200.0, 200.0, 200.0, 200.0, 200.0]
    """
    ops = prepare_matmul(a, b, dtype, sparsity)
    if out_dtype is None:
        out_dtype = "fp32" if dtype == "fp32" else "bf16"
    bias_arr = None if bias is None else np.asarray(bias, np.float32)  # [N]: matmul_kernel checks its shape
    res = dsl.run_kernel(matmul_kernel, ops.a, ops.b, ops.a_scale, ops.b_scale, ops.b_index, bias_arr,
                         target=target, out_dtype=out_dtype, activation=activation, scale=ops.scale,
                         sparsity=sparsity)
    return res.outputs[0]
