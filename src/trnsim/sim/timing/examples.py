"""Programs built directly with ``ProgramBuilder`` for the profiler demo, tests and benchmarks.

``matmul_program(m, k, n)`` is ``c[M, N] = aTᵀ @ b`` (``aT[K, M]`` and ``b[K, N]`` in HBM; the stationary
operand is stored K-major, as NKI's matmul takes ``lhsT``), tiled the way a good kernel tiles it
(``reference/neuron.md`` §2.6):

* stationary tiles 128×128, moving tiles 128×512 (one PSUM bank of fp32), K accumulated in PSUM;
* a *row block* of ``m_block`` rows of ``aT`` (all of K) is loaded once and stays in SBUF while every
  column tile of ``b`` streams past it: each stationary tile is reused ``N / 512`` times (two row-block
  buffers: the next block's loads are spread over this block's);
* ``b`` tiles stream through ``b_buffers`` rotating SBUF buffers (loads run ahead of the matmuls);
* PSUM is double-buffered: VectorE evacuates block ``j`` (PSUM → SBUF) while TensorE fills block ``j + 1``,
  and ScalarE issues the stores so the sync engine's prefetching is never held up by an output.

Loads are issued from ``sync`` and stores from ``scalar``, each round-robin over the ``queues`` DMA queues.
Every cross-engine dependency is a semaphore (``a*``/``bi*``/``bf*`` for loads and buffer reuse, ``pd*``
for finished accumulations, ``ev*``/``pf*``/``of*`` for evacuation, PSUM and output-buffer reuse).
"""

from __future__ import annotations

from collections import Counter

from trnsim.errors import ConfigError
from trnsim.hw import ChipSpec
from trnsim.isa.ap import AccessPattern, tile
from trnsim.isa.base import Engine, Instruction, Wait
from trnsim.isa.dma import DmaCopy
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.elementwise import TensorCopy
from trnsim.isa.program import Program, ProgramBuilder
from trnsim.isa.tensor_engine import Matmul

TILE_K = 128  # PE rows: the contraction per matmul (neuron.md §1.2)
TILE_M = 128  # PE columns: the stationary free size
TILE_N = 512  # one PSUM bank of fp32: the moving free size (neuron.md §1.2)


def _rows(tensor: str, dtype: str, row_len: int, r0: int, rows: int, c0: int, cols: int) -> AccessPattern:
    """Rows ``r0..r0+rows`` and columns ``c0..c0+cols`` of a row-major HBM matrix with ``row_len`` columns."""
    return AccessPattern("hbm", dtype, r0, rows, ((1, cols),), c0 * get_dtype(dtype).itemsize, row_len, tensor)


def matmul_program(m: int, k: int, n: int, dtype: str = "bf16", *, out_dtype: str = "bf16", m_block: int = 512,
                   b_buffers: int = 16, queues: int = 16, spec: ChipSpec | None = None) -> Program:
    """The tiled matmul described in the module docstring (any positive sizes; edge tiles are smaller)."""
    if min(m, k, n) < 1 or m_block < TILE_M or m_block % TILE_M or b_buffers < 1:
        raise ConfigError(f"matmul {m}x{k}x{n}, m_block {m_block}, b_buffers {b_buffers}",
                          hint="sizes are positive; m_block is a multiple of 128; at least one b buffer")
    isz, osz = get_dtype(dtype).itemsize, get_dtype(out_dtype).itemsize
    kt_n, mt_n, nt_n = -(-k // TILE_K), -(-m // TILE_M), -(-n // TILE_N)
    mi_n = m_block // TILE_M  # m-tiles per row block
    mb_n = -(-mt_n // mi_n)
    a_bytes = kt_n * m_block * isz  # one row block of aT, per partition
    b_base = 2 * a_bytes
    o_base = b_base + b_buffers * TILE_N * isz
    o_bytes = mi_n * TILE_N * osz
    per_partition = (spec.core.sbuf.bytes_per_partition if spec is not None and spec.core is not None
                     else 256 * 1024)
    if o_base + 2 * o_bytes > per_partition:
        raise ConfigError(f"the tiles need {o_base + 2 * o_bytes} bytes per SBUF partition, more than "
                          f"{per_partition}", hint="use a smaller m_block (or K)")
    bld = ProgramBuilder()
    bld.tensor("aT", (k, m), dtype)
    bld.tensor("b", (k, n), dtype)
    bld.tensor("c", (m, n), out_dtype, "output")
    sent: Counter[str] = Counter()  # signals emitted so far: a wait for "everything so far" waits for this

    def signal(*names: str) -> tuple[str, ...]:
        sent.update(names)
        return names

    def after(*names: str) -> tuple[Wait, ...]:
        return tuple((s, sent[s]) for s in names if sent[s])

    streams: dict[Engine, list[Instruction]] = {"sync": [], "tensor": [], "vector": [], "scalar": []}
    issued = {"sync": 0, "scalar": queues // 2}  # each issuing engine goes round the queues from its own start

    def dma(engine: Engine, dst: AccessPattern, src: AccessPattern, wait: tuple[Wait, ...], sig: str) -> None:
        streams[engine].append(DmaCopy(dst, src, issued[engine] % queues, wait=wait, signal=signal(sig)))
        issued[engine] += 1

    def a_tile(slot: int, kt: int, mi: int, kw: int, mw: int) -> AccessPattern:
        return tile("sbuf", dtype, (kw, mw), offset=slot * a_bytes + (kt * m_block + mi * TILE_M) * isz)

    def load_a(mb: int, kts: range) -> None:
        slot, m0 = mb % 2, mb * m_block
        cols = min(m_block, m - m0)
        wait = after(f"af{slot}")  # the row block that used this buffer is done
        for kt in kts:
            kw = min(TILE_K, k - kt * TILE_K)
            dma("sync", a_tile(slot, kt, 0, kw, cols), _rows("aT", dtype, m, kt * TILE_K, kw, m0, cols),
                wait, f"a{slot}_{kt}")

    load_a(0, range(kt_n))
    blk = j = 0  # output block (row block, column tile) and b tile counters
    for mb in range(mb_n):
        slot, m0 = mb % 2, mb * m_block
        mis = [(mi, min(TILE_M, m - m0 - mi * TILE_M)) for mi in range(mi_n) if m0 + mi * TILE_M < m]
        # the next row block's loads: spread over this block's b loads after the first b_buffers of them (so
        # this block's first matmuls are fed first and the queues never see one burst)
        loads, a_sent, a_due = 0, 0, (kt_n if mb + 1 < mb_n else 0)
        spread = max(1, nt_n * kt_n - b_buffers)
        for nt in range(nt_n):
            n0, nw = nt * TILE_N, min(TILE_N, n - nt * TILE_N)
            pb = blk % 2
            done: list[Wait] = []
            for kt in range(kt_n):
                kw, bs = min(TILE_K, k - kt * TILE_K), j % b_buffers
                b_tile = tile("sbuf", dtype, (kw, nw), offset=b_base + bs * TILE_N * isz)
                dma("sync", b_tile, _rows("b", dtype, n, kt * TILE_K, kw, n0, nw), after(f"bf{bs}"), f"bi{bs}")
                loads += 1
                if a_sent < a_due and loads >= b_buffers:
                    target = min(a_due, -(-(loads - b_buffers + 1) * a_due // spread))
                    load_a(mb + 1, range(a_sent, target))
                    a_sent = target
                for idx, (mi, mw) in enumerate(mis):
                    waits = after(f"bi{bs}") if idx == 0 else ()
                    if idx == 0 and nt == 0:
                        waits += after(f"a{slot}_{kt}")
                    if idx == 0 and kt == 0:
                        waits += after(f"pf{pb}")  # evacuation of the block that used these banks
                    sigs: list[str] = []
                    if idx == len(mis) - 1:
                        sigs.append(f"bf{bs}")
                        if nt == nt_n - 1 and kt == kt_n - 1:
                            sigs.append(f"af{slot}")
                    if kt == kt_n - 1:
                        sigs.append(f"pd{pb}")
                    psum = tile("psum", "fp32", (mw, nw), offset=(pb * mi_n + mi) * TILE_N * 4)
                    streams["tensor"].append(Matmul(psum, a_tile(slot, kt, mi, kw, mw), b_tile, accumulate=kt > 0,
                                                    wait=waits, signal=signal(*sigs)))
                    if kt == kt_n - 1:
                        done.append((f"pd{pb}", sent[f"pd{pb}"]))
                j += 1
            if nt == nt_n - 1 and a_sent < a_due:
                load_a(mb + 1, range(a_sent, a_due))
                a_sent = a_due
            for idx, (mi, mw) in enumerate(mis):
                psum = tile("psum", "fp32", (mw, nw), offset=(pb * mi_n + mi) * TILE_N * 4)
                out = tile("sbuf", out_dtype, (mw, nw), offset=o_base + pb * o_bytes + mi * TILE_N * osz)
                waits = (done[idx], *(after(f"of{pb}") if idx == 0 else ()))  # stores from this buffer done
                last = idx == len(mis) - 1
                streams["vector"].append(TensorCopy(out, psum, wait=waits,
                                                    signal=signal(f"ev{pb}", *([f"pf{pb}"] if last else []))))
                dma("scalar", _rows("c", out_dtype, n, m0 + mi * TILE_M, mw, n0, nw), out, after(f"ev{pb}"),
                    f"of{pb}")
            blk += 1
    for engine, stream in streams.items():
        bld.emit(engine, *stream)
    return bld.build()
