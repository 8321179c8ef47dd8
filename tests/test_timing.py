"""Timing model: closed forms of the cost rules (TensorE, Vector/Scalar/GpSimd, DMA), SCALE-Sim's fold
formula, DMA bandwidth sharing, and the physics a timeline must obey."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hw
from trnsim.errors import SimError
from trnsim.hw import ChipSpec
from trnsim.isa import (
    Activation,
    DmaCopy,
    DmaGather,
    DmaScatter,
    DmaScatterAdd,
    Instruction,
    Matmul,
    Nop,
    ProgramBuilder,
    TensorCopy,
    TensorTensor,
    tile,
    transposed,
)
from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Engine
from trnsim.sim.profile import Profile, build_profile
from trnsim.sim.timing import costs, matmul_program, simulate

SPEC = hw.get("trn3")
CORE = SPEC.core
assert CORE is not None
TE, DMA = CORE.tensor, CORE.dma
DRAIN = (TE.rows - 1) + (TE.cols - 1)


def timed(streams: dict[Engine, list[Instruction]], spec: ChipSpec = SPEC, tensors: int = 0) -> Profile:
    b = ProgramBuilder()
    for i in range(tensors):
        b.tensor(f"t{i}", (4096, 4096), "bf16")
    for engine, instructions in streams.items():
        b.emit(engine, *instructions)
    program = b.build()
    program.verify(spec)
    return build_profile(simulate(program, spec))


def mm(n: int, dtype: str = "bf16", *, m: int = 128, s_off: int = 0, **kw: object) -> Matmul:
    stationary = tile("sbuf", dtype, (128, m), offset=s_off)
    moving = tile("sbuf", dtype, (128, n), offset=65536)
    return Matmul(tile("psum", "fp32", (m, n)), stationary, moving, **kw)  # type: ignore[arg-type]


# --- TensorE -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "cycles"), [
    ("bf16", lambda n: max(n, 64)),  # neuron.md §1.2: max(N, 64)
    ("fp32", lambda n: 4 * max(n, 64)),  # ¼ rate: everything 4×
    ("fp8_e4m3", lambda n: max(n / 4, 64)),  # 4× rate: N/4, never below MM_INIT_LATENCY
])
def test_matmul_sequence_follows_max_n_64(dtype: str, cycles: object) -> None:
    ns = [1, 32, 64, 100, 256, 512, 512]
    p = timed({"tensor": [mm(n, dtype) for n in ns]})
    rate = TE.rate[dtype]
    load = max(128, 64) / costs.FAST_LS_SPEEDUP / min(rate, 1)  # one LoadStationary: the stationary never changes
    expect = (load + sum(cycles(n) for n in ns) + DRAIN) / TE.clock  # type: ignore[operator]
    assert p.total_seconds == pytest.approx(expect, rel=1e-12)
    assert p.engine_busy["tensor"] == pytest.approx((load + sum(cycles(n) for n in ns)) / TE.clock)  # type: ignore[operator]


def test_sparse_stationary_runs_at_the_sparse_multiplier() -> None:
    dense = mm(512, "fp8_e4m3")
    idx = tile("sbuf", "uint8", (64, 128), offset=131072)
    sparse = Matmul(tile("psum", "fp32", (128, 512)), tile("sbuf", "fp8_e4m3", (64, 128)),
                    tile("sbuf", "fp8_e4m3", (128, 512), offset=65536), sparsity="2:4", stationary_index=idx)
    t_dense = timed({"tensor": [dense] * 8}).engine_busy["tensor"]
    p = timed({"tensor": [sparse] * 8})
    load = 128 / costs.FAST_LS_SPEEDUP / TE.clock
    assert p.engine_busy["tensor"] - load == pytest.approx((t_dense - load) / TE.sparse_multiplier["fp8_e4m3"])
    assert p.flops == 8 * 2 * 128 * 128 * 512  # dense K counted
    assert p.hfu == pytest.approx(p.flops / TE.flops("fp8_e4m3", sparse=True) / p.total_seconds)


def test_background_load_stationary_is_hidden_back_to_back_and_exposed_after_a_wait() -> None:
    alternating = [mm(512, s_off=(i % 2) * 256) for i in range(6)]  # the stationary changes every time
    p = timed({"tensor": alternating})
    load = 128 / costs.FAST_LS_SPEEDUP
    assert p.total_seconds == pytest.approx((load + 6 * 512 + DRAIN) / TE.clock)  # only the first is exposed
    copy = TensorCopy(tile("sbuf", "fp32", (128, 512), offset=4096), tile("sbuf", "fp32", (128, 512)), signal=("v",))
    waited = timed({"vector": [copy], "tensor": [mm(512, s_off=0), mm(512, s_off=256, wait=(("v", 1),))]})
    assert waited.exposed_load_seconds == pytest.approx(2 * load / TE.clock)  # the first, and the one after the wait


def test_scale_sim_ws_fold_formula() -> None:
    """peers.md §1: SCALE-Sim WS takes folds·(2R + C + T − 2) − 1 cycles without stalls. Mapping our GEMM
    (Sr = K contraction, Sc = M stationary columns, T = N moving columns), each fold one matmul: with a plain
    (not fast) LoadStationary of R cycles and folds that do not overlap (each waits for the previous result),
    our timeline is that formula + 1 (SCALE-Sim reports the last cycle's index). Pipelined, as the NeuronCore
    runs them, the loads hide behind the previous matmul and only one drain remains."""
    k, m, t = 256, 384, 512
    r, c = TE.rows, TE.cols
    folds = math.ceil(k / r) * math.ceil(m / c)
    chain = [mm(t, s_off=f * 256, wait=(("f", f),) if f else (), signal=("f",)) for f in range(folds)]
    scale_sim = folds * (2 * r + c + t - 2) - 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(costs, "FAST_LS_SPEEDUP", 1)  # a LoadStationary of max(M, 64) = R cycles
        isolated = timed({"tensor": chain})
    assert isolated.total_seconds * TE.clock == pytest.approx(scale_sim + 1, abs=1e-6)
    pipelined = timed({"tensor": [mm(t, s_off=f * 256) for f in range(folds)]})
    fast_ls = 128 / costs.FAST_LS_SPEEDUP
    assert pipelined.total_seconds * TE.clock == pytest.approx(fast_ls + folds * t + DRAIN)


# --- VectorE / ScalarE / GpSimd ----------------------------------------------------------------------------------


def _sb(dtype: str, parts: int, free: int, offset: int = 0, stride: int = 1) -> AccessPattern:
    return AccessPattern("sbuf", dtype, 0, parts, ((stride, free),), offset)


@pytest.mark.parametrize(("engine", "ins", "cycles"), [
    ("vector", TensorCopy(_sb("fp32", 128, 512, 8192), _sb("fp32", 128, 512)), 100 + 512 * 128 / 256),
    ("vector", TensorCopy(_sb("bf16", 128, 512, 8192), _sb("bf16", 128, 512)), 100 + 512 * 128 / 512),
    ("vector", TensorCopy(_sb("bf16", 128, 512, 8192), _sb("fp32", 128, 512)), 100 + 512 * 128 / 256),
    ("vector", TensorCopy(_sb("fp32", 32, 512, 8192), _sb("fp32", 32, 512)), 100 + 512 * 128 / 256),  # lanes
    ("vector", TensorTensor(_sb("fp32", 128, 256, 8192), _sb("fp32", 128, 256), _sb("fp32", 128, 256, 2048), "add"),
     100 + 2 * 256 * 128 / 256),  # two inputs: 2N
    ("vector", TensorCopy(_sb("fp32", 128, 64, 8192), _sb("fp32", 128, 64, stride=4)), 100 + 64 * 128 / 256),
    ("vector", TensorCopy(_sb("fp32", 128, 64, 8192), _sb("fp32", 128, 64, stride=8)), 100 + 2 * 64 * 128 / 256),
    # a contiguous [P, 4, 128] view is one run: no penalty for its outer 512-byte stride
    ("vector", TensorCopy(_sb("fp32", 128, 512, 8192), AccessPattern("sbuf", "fp32", 0, 128, ((128, 4), (1, 128)))),
     100 + 512 * 128 / 256),
    # runs of 2 fp32 (8 B) with 256-byte jumps between them: penalised
    ("vector", TensorCopy(_sb("fp32", 128, 128, 8192), AccessPattern("sbuf", "fp32", 0, 128, ((64, 64), (1, 2)))),
     100 + 2 * 128 * 128 / 256),
    ("scalar", Activation(_sb("bf16", 128, 512, 8192), _sb("bf16", 128, 512), "exp"), 100 + 512 * 128 / 256),
    ("scalar", Activation(_sb("fp32", 128, 512, 8192), _sb("fp32", 128, 512), "exp",
                          accumulate=_sb("fp32", 128, 1, 16384)), 100 + 512 * 128 / 128 + 64),
    ("gpsimd", TensorCopy(_sb("fp32", 128, 512, 8192), _sb("fp32", 128, 512)), 100 + 512 * 128 / 128),
])
def test_engine_cost_closed_forms(engine: Engine, ins: Instruction, cycles: float) -> None:
    eng = getattr(CORE, engine)
    p = timed({engine: [ins, ins, ins]})
    assert p.total_seconds == pytest.approx(3 * cycles / eng.clock)
    assert p.engine_utilization[engine] == pytest.approx(1.0)


# --- DMA ----------------------------------------------------------------------------------------------------------


def load(row: int, cols: int, queue: int = 0, **kw: object) -> DmaCopy:
    """128 rows of t0 (4096 bf16 columns per row) into SBUF: 128 descriptors of ``cols`` elements."""
    src = AccessPattern("hbm", "bf16", row, 128, ((1, cols),), 0, 4096, "t0")
    return DmaCopy(tile("sbuf", "bf16", (128, cols)), src, queue, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("cols", [16, 128, 1024, 4096])
def test_dma_is_latency_plus_bytes_and_descriptors_over_queue_bandwidth(cols: int) -> None:
    p = timed({"sync": [load(0, cols), load(128, cols)]}, tensors=1)  # one queue: back to back
    nbytes = 128 * cols * 2
    one = DMA.latency + (nbytes + 128 * costs.DMA_DESCRIPTOR_OVERHEAD_BYTES) / DMA.queue_bandwidth
    assert p.total_seconds == pytest.approx(2 * one)
    assert p.dma_bytes == p.hbm_bytes == 2 * nbytes
    assert p.queue_utilization[0] == pytest.approx(1.0)


def test_dma_efficiency_thresholds() -> None:
    """neuron.md §1.2: ≥ 2 KiB per partition is efficient, < 256 B severely overhead-bound."""
    eff = {c: costs.dma_cost(load(0, c), CORE).efficiency for c in (64, 128, 1024, 2048)}
    assert eff[1024] > 0.85 and eff[2048] > 0.9  # 2 KiB, 4 KiB per partition (bf16)
    assert eff[128] == pytest.approx(0.5)  # 256 B
    assert eff[64] < 0.34


def test_transposed_dma_uses_the_transpose_path() -> None:
    """neuron.md §1.3: DMA transpose of 2-/4-byte types runs at up to 90 % (HBM→SBUF) of DMA throughput,
    not one descriptor per element."""
    src = transposed(AccessPattern("hbm", "bf16", 0, 128, ((1, 128),), 0, 4096, "t0"))
    cost = costs.dma_cost(DmaCopy(tile("sbuf", "bf16", (128, 128)), src), CORE)
    assert cost.transpose and cost.efficiency == pytest.approx(costs.DMA_TRANSPOSE_EFFICIENCY["hbm"])
    strided = AccessPattern("hbm", "bf16", 0, 128, ((2, 128),), 0, 4096, "t0")  # every other element: not one
    cost = costs.dma_cost(DmaCopy(tile("sbuf", "bf16", (128, 128)), strided), CORE)
    assert not cost.transpose and cost.descriptors == 128 * 128


def test_gather_and_scatter_move_only_their_rows() -> None:
    table = AccessPattern("hbm", "fp32", 0, 4096, ((1, 256),), 0, 256, "t0")
    rows, index = tile("sbuf", "fp32", (128, 256)), tile("sbuf", "int32", (128, 1), offset=4096)
    gather = costs.dma_cost(DmaGather(rows, table, index), CORE)
    assert gather.nbytes == gather.hbm_bytes == 128 * 256 * 4 and gather.descriptors == 128
    scatter = costs.dma_cost(DmaScatterAdd(table, rows, index), CORE)
    assert scatter.nbytes == 128 * 256 * 4 and scatter.hbm_bytes == 2 * scatter.nbytes  # read-add-write
    write = costs.dma_cost(DmaScatter(table, rows, index, queue=5), CORE)
    assert write.nbytes == write.hbm_bytes == 128 * 256 * 4 and write.descriptors == 128 and write.queue == 5
    assert write.work == gather.work and CORE.dma.latency == write.latency   # a plain write: the gather's cost


def test_dma_bound_program_takes_bytes_over_bandwidth() -> None:
    n, cols = 64, 2048
    p = timed({"sync": [load(128 * (i % 32), cols, queue=i % DMA.queues) for i in range(n)]}, tensors=1)
    per = costs.dma_cost(load(0, cols), CORE)
    assert p.total_seconds == pytest.approx(n // DMA.queues * (DMA.latency + per.work / DMA.queue_bandwidth))
    peak = DMA.queues * DMA.queue_bandwidth
    assert p.dma_bytes / peak < p.total_seconds < 1.2 * (p.dma_bytes / peak / per.efficiency + DMA.latency * 4)
    assert p.critical_path().bound == "dma"


def _with(spec: ChipSpec, *, hbm: float | None = None, **core_fields: dict[str, float]) -> ChipSpec:
    core = spec.core
    assert core is not None
    core = dataclasses.replace(core, **{name: dataclasses.replace(getattr(core, name), **vals)
                                        for name, vals in core_fields.items()})
    memory = spec.memory if hbm is None else dataclasses.replace(spec.memory, bandwidth=hbm)
    return dataclasses.replace(spec, core=core, memory=memory)


def test_concurrent_transfers_share_hbm_bandwidth() -> None:
    slow = _with(SPEC, hbm=DMA.queue_bandwidth / 2)  # HBM at half a queue's bandwidth
    cols = 4096
    nbytes = 128 * cols * 2
    p = timed({"sync": [load(128 * q, cols, queue=q) for q in range(4)]}, slow, tensors=1)
    # four transfers move data together, each at HBM / 4 (below the queue's own peak)
    assert p.total_seconds == pytest.approx(DMA.latency + 4 * nbytes / slow.hbm_bandwidth)
    on_chip = DmaCopy(tile("sbuf", "bf16", (128, cols), offset=65536), tile("sbuf", "bf16", (128, cols)), 1)
    mixed = timed({"sync": [load(0, cols, queue=0), on_chip]}, slow, tensors=1)
    per = costs.dma_cost(on_chip, CORE)
    assert mixed.total_seconds == pytest.approx(DMA.latency + nbytes / slow.hbm_bandwidth)  # all of HBM: alone on it
    assert mixed.timeline.end[1] == pytest.approx(DMA.latency + per.work / DMA.queue_bandwidth)  # no HBM: full speed


# --- physics of the timeline ---------------------------------------------------------------------------------------


def test_compute_bound_matmul_approaches_peak() -> None:
    p = build_profile(simulate(matmul_program(2048, 4096, 2048), SPEC))
    assert p.flops == 2 * 2048 * 4096 * 2048
    assert 0.9 < p.hfu <= 1.0 and p.hfu == p.mfu
    assert p.total_seconds >= p.flops / TE.flops("bf16")
    assert p.critical_path().bound == "tensor"


def _double_buffer(tiles: int, buffers: int, matmuls: int) -> Profile:
    """Each tile: one load on queue 0, then ``matmuls`` matmuls on it; ``buffers`` SBUF slots."""
    sync: list[Instruction] = []
    tensor: list[Instruction] = []
    for t in range(tiles):
        slot = t % buffers
        free = ((f"free{slot}", t // buffers),) if t >= buffers else ()
        dst = tile("sbuf", "bf16", (128, 2048), offset=slot * 4096)
        src = AccessPattern("hbm", "bf16", 128 * (t % 32), 128, ((1, 2048),), 0, 4096, "t0")
        sync.append(DmaCopy(dst, src, 0, wait=free, signal=(f"in{slot}",)))
        for i in range(matmuls):
            mov = tile("sbuf", "bf16", (128, 512), offset=slot * 4096 + (i % 4) * 1024)
            tensor.append(Matmul(tile("psum", "fp32", (128, 512)), tile("sbuf", "bf16", (128, 128), offset=65536),
                                 mov, wait=((f"in{slot}", t // buffers + 1),) if i == 0 else (),
                                 signal=(f"free{slot}",) if i == matmuls - 1 else ()))
    return timed({"sync": sync, "tensor": tensor}, tensors=1)


def test_double_buffering_takes_the_max_not_the_sum() -> None:
    tiles, matmuls = 16, 64  # 64 × 512 cycles ≈ 13.7 us of compute per tile, ≈ 17 us of DMA
    double, single = _double_buffer(tiles, 2, matmuls), _double_buffer(tiles, 1, matmuls)
    dma, compute = double.queue_busy[0], double.engine_busy["tensor"]
    assert double.total_seconds < 1.1 * max(dma, compute) + compute / tiles
    assert single.total_seconds == pytest.approx(dma + compute, rel=0.02)


FASTER = [
    {"tensor": {"clock": 2 * TE.clock}},
    {"dma": {"queue_bandwidth": 2 * DMA.queue_bandwidth}},
    {"dma": {"latency": DMA.latency / 4}},
    {"vector": {"clock": 2 * CORE.vector.clock}},
]


@pytest.mark.parametrize("faster", FASTER)
@pytest.mark.parametrize("mkn", [(256, 512, 1024), (1024, 1024, 1024), (640, 384, 700)])
def test_more_bandwidth_or_a_faster_clock_is_never_slower(faster: dict[str, dict[str, float]],
                                                          mkn: tuple[int, int, int]) -> None:
    program = matmul_program(*mkn)
    base = simulate(program, SPEC).total_seconds
    assert simulate(program, _with(SPEC, **faster)).total_seconds <= base
    assert simulate(program, _with(SPEC, hbm=SPEC.hbm_bandwidth * 4)).total_seconds <= base


@settings(max_examples=15, deadline=None)
@given(st.tuples(*[st.integers(1, 3)] * 3), st.tuples(*[st.integers(0, 2)] * 3), st.sampled_from([1, 100, 128]))
def test_a_larger_problem_is_never_faster(base: tuple[int, int, int], extra: tuple[int, int, int], edge: int) -> None:
    small = tuple(128 * b + edge for b in base)
    large = tuple(s + 128 * e for s, e in zip(small, extra, strict=True))
    t_small = simulate(matmul_program(*small), SPEC).total_seconds
    assert simulate(matmul_program(*large), SPEC).total_seconds >= t_small


def test_same_program_same_profile() -> None:
    program = matmul_program(512, 640, 1024)
    a, b = build_profile(simulate(program, SPEC)), build_profile(simulate(program, SPEC))
    assert a == b
    assert (a.timeline.start, a.timeline.end, a.timeline.effect) == (b.timeline.start, b.timeline.end,
                                                                     b.timeline.effect)
    assert a.to_chrome_trace() == b.to_chrome_trace()


def test_deadlock_is_reported() -> None:
    b = ProgramBuilder()
    b.emit("vector", Nop(wait=(("never", 1),)))
    with pytest.raises(SimError, match="deadlock"):
        simulate(b.build(), SPEC)
