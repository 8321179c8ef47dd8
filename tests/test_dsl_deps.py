"""trnsim.dsl synchronisation and allocation: waits per hazard kind, fences on reused memory, and the
property that matters: a traced program computes the same result whatever order the engines run in."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl
from trnsim.dsl.alloc import Allocator
from trnsim.dsl.deps import DependencyTracker, Hazards
from trnsim.isa import ENGINES, Program
from trnsim.sim import Device

FULL = ((0, 8), (0, 8))
LEFT, RIGHT = ((0, 8), (0, 4)), ((0, 8), (4, 8))


def test_waits_per_hazard_kind() -> None:
    t, h = DependencyTracker(), Hazards()
    assert t.record("dma0", [], [(h, FULL, True)]) == 0
    assert t.waits("vector", [(h, LEFT)], []) == (("dma0", 1),)  # RAW
    t.record("vector", [(h, LEFT)], [])
    assert t.waits("dma1", [], [(h, RIGHT, True)]) == (("dma0", 1),)  # WAW only: vector read the other half
    assert t.waits("dma1", [], [(h, LEFT, True)]) == (("dma0", 1), ("vector", 1))  # WAW + WAR
    assert t.waits("dma0", [], [(h, FULL, True)]) == (("vector", 1),)  # same domain: in order, no wait
    assert t.waits("vector", [(h, FULL)], []) == (("dma0", 1),)


def test_implied_waits_are_dropped() -> None:
    t, h, g = DependencyTracker(), Hazards(), Hazards()
    t.record("dma0", [], [(h, FULL, True)])
    w = t.waits("vector", [(h, FULL)], [(g, FULL, True)])
    t.record("vector", [(h, FULL)], [(g, FULL, True)], w)
    assert t.waits("vector", [(h, FULL)], []) == ()  # vector already waited for dma0
    w = t.waits("scalar", [(g, FULL)], [])
    assert w == (("vector", 1),)
    t.record("scalar", [(g, FULL)], [], w)
    assert t.waits("scalar", [(h, FULL)], []) == ()  # transitively: vector[0] waited for dma0


def test_strongest_wait_and_dense_write_retires_accesses() -> None:
    t, h = DependencyTracker(), Hazards()
    for _ in range(3):
        t.record("scalar", [], [(h, LEFT, True)])
    assert t.waits("vector", [(h, FULL)], []) == (("scalar", 3),)
    t.record("tensor", [], [(h, FULL, True)])  # covers all three scalar writes
    assert [a.domain for a in h.writes] == ["tensor"] and h.fence() == {"tensor": 0}
    t.record("vector", [], [(h, LEFT, False)])  # strided: retires nothing
    assert len(h.writes) == 2


def test_allocator_first_fit_fences_and_merging() -> None:
    a = Allocator("sbuf", 128, 1024, 64)
    assert a.allocate(100) == (0, {}) and a.allocate(200) == (128, {}) and a.allocate(64) == (384, {})
    a.release(0, 100, {"vector": 1})
    a.release(128, 200, {"dma3": 7})
    assert a.free_bytes == 1024 - 64 and a.largest_free == 1024 - 448
    assert a.allocate(500) == (448, {})  # never-used memory first
    assert a.allocate(300) == (0, {"vector": 1, "dma3": 7})  # spans both freed ranges: both fences
    assert a.allocate(2000) is None
    a.release(0, 300, {})
    assert a.free[0].fence == {} and a.free[0].hi == 320 and a.free[1].fence == {"dma3": 7}  # kept apart
    a.release(448, 500, {})
    a.release(384, 64, {})
    assert a.allocate(100) == (0, {})  # freed longest ago, though not the lowest fitting address


def offsets_in_loop(n: int) -> list[int]:
    seen: list[int] = []

    @trnsim.kernel
    def k(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        for i in range(n):
            t = dsl.load(x[i : i + 1, :])
            seen.append(t.ap().offset)
            dsl.store(out[i : i + 1, :], t)
        return out

    trnsim.run_kernel(k, np.arange(n * 4, dtype=np.float32).reshape(n, 4))
    return seen


def test_loop_tiles_take_fresh_memory_while_there_is_some() -> None:
    offs = offsets_in_loop(6)
    assert len(set(offs)) == 6


def test_psum_banks_rotate_and_reuse_waits_for_the_old_tiles_readers() -> None:
    @trnsim.kernel
    def k(x):
        out = dsl.hbm_tensor((10 * 4, 4), "fp32")
        t = dsl.load(x)
        for i in range(10):
            acc = dsl.matmul(dsl.psum((4, 4)), t, t)
            dsl.store(out[4 * i : 4 * i + 4, :], dsl.copy(acc))
        return out

    res = trnsim.run_kernel(k, np.eye(4, dtype=np.float32))
    assert np.array_equal(res.outputs[0], np.tile(np.eye(4, dtype=np.float32), (10, 1)))
    mm = res.program.stream("tensor")
    banks = [ins.dst.offset // 2048 for ins in mm]  # type: ignore[attr-defined]
    assert banks == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    assert mm[1].wait == () and ("vector", 1) in mm[8].wait  # the 9th reuses bank 0 after its copy


def run_in_engine_order(program: Program, feed: dict[str, np.ndarray], order: tuple[str, ...]) -> list[np.ndarray]:
    """Run with another engine priority (the simulator runs the first ready engine in stream order)."""
    p = dataclasses.replace(program)
    object.__setattr__(p, "streams", {e: program.streams[e] for e in order if e in program.streams})
    res = Device().run(p, feed, check=False)
    return [res.outputs[n] for n in res.outputs]


ORDERS = (ENGINES, tuple(reversed(ENGINES)), ("sync", "gpsimd", "tensor", "scalar", "vector"),
          ("scalar", "sync", "vector", "tensor", "gpsimd"))
P, F, TILES, SLOTS = 32, 16, 4, 3

op = st.one_of(
    st.tuples(st.just("load"), st.integers(0, TILES - 1), st.integers(0, 2)),
    st.tuples(st.just("add"), st.integers(0, TILES - 1), st.integers(0, TILES - 1), st.integers(0, TILES - 1),
              st.sampled_from(["vector", "gpsimd"])),
    st.tuples(st.just("scale"), st.integers(0, TILES - 1), st.integers(0, TILES - 1),
              st.sampled_from(["vector", "scalar", "gpsimd"])),
    st.tuples(st.just("act"), st.integers(0, TILES - 1), st.integers(0, TILES - 1)),
    st.tuples(st.just("half"), st.integers(0, TILES - 1), st.integers(0, TILES - 1),
              st.sampled_from(["vector", "scalar", "gpsimd"]), st.integers(0, 1), st.integers(0, 1)),
    st.tuples(st.just("temp"), st.integers(0, TILES - 1), st.integers(0, TILES - 1)),
    st.tuples(st.just("matmul"), st.integers(0, TILES - 1), st.integers(0, TILES - 1)),
    st.tuples(st.just("store"), st.integers(0, TILES - 1), st.integers(0, SLOTS - 1)),
)


@trnsim.kernel
def random_kernel(x, *, ops):
    """Apply ``ops`` to fixed tiles (and temporaries), keeping a numpy shadow of every tile."""
    out = dsl.hbm_tensor((SLOTS * P, F), "fp32")
    tiles = [dsl.zeros((P, F)) for _ in range(TILES)]
    shadow = [np.zeros((P, F), np.float32) for _ in range(TILES)]
    ref = np.zeros((SLOTS * P, F), np.float32)
    xs = random_kernel.data  # type: ignore[attr-defined]
    for o in ops:
        kind, i = o[0], o[1]
        if kind == "load":
            dsl.load(tiles[i], x[o[2] * P : (o[2] + 1) * P, :])
            shadow[i] = xs[o[2] * P : (o[2] + 1) * P].copy()
        elif kind == "add":
            dsl.add(tiles[o[2]], tiles[o[3]], out=tiles[i], engine=o[4])
            shadow[i] = shadow[o[2]] + shadow[o[3]]
        elif kind == "scale":
            dsl.tensor_scalar(tiles[o[2]], "mul", 0.5, engine=o[3], out=tiles[i])
            shadow[i] = shadow[o[2]] * np.float32(0.5)
        elif kind == "act":
            dsl.identity(tiles[o[2]], scale=-1.0, bias=1.0, out=tiles[i])
            shadow[i] = 1 - shadow[o[2]]
        elif kind == "half":  # partial writes: a half of tile i from a half of tile j
            d, s = slice(o[4] * F // 2, (o[4] + 1) * F // 2), slice(o[5] * F // 2, (o[5] + 1) * F // 2)
            dsl.copy(tiles[o[2]][:, s], out=tiles[i][:, d], engine=o[3])
            shadow[i][:, d] = shadow[o[2]][:, s]
        elif kind == "temp":  # a temporary tile dropped right away: its memory is reused with a fence
            dsl.copy(dsl.subtract(tiles[o[2]], 1.0), out=tiles[i], engine="scalar")
            shadow[i] = shadow[o[2]] - 1
        elif kind == "matmul":
            acc = dsl.matmul(dsl.psum((F, F)), tiles[i], tiles[o[2]])
            dsl.copy(acc, out=tiles[i][0:F, :])
            shadow[i][:F] = shadow[i].T @ shadow[o[2]]
        else:
            dsl.store(out[o[2] * P : (o[2] + 1) * P, :], tiles[i])
            ref[o[2] * P : (o[2] + 1) * P] = shadow[i]
    random_kernel.ref = ref  # type: ignore[attr-defined]
    return out


def test_disjoint_partial_writes_on_two_engines_both_precede_the_reader() -> None:
    @trnsim.kernel
    def k(x):
        out = dsl.hbm_tensor((P, F), "fp32")
        t = dsl.sbuf((P, F))
        dsl.memset(t[:, : F // 2], 1.0, engine="vector")
        dsl.memset(t[:, F // 2 :], 2.0, engine="gpsimd")  # dense, but does not cover the vector write
        dsl.store(out, t)
        return out

    program = k.compile(np.zeros((1, 1), np.float32)).program
    want = np.repeat([[1.0] * (F // 2) + [2.0] * (F // 2)], P, axis=0)
    for order in ORDERS:
        assert np.array_equal(run_in_engine_order(program, {"x": np.zeros((1, 1))}, order)[0], want)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(op, min_size=1, max_size=25).map(tuple))
def test_programs_give_the_same_result_in_every_engine_order(ops: tuple[tuple[object, ...], ...]) -> None:
    x = np.random.default_rng(len(ops)).integers(-3, 4, (3 * P, F)).astype(np.float32)
    random_kernel.data = x  # type: ignore[attr-defined]
    random_kernel.forget_traces()  # the shadow reference is computed while tracing
    compiled = random_kernel.compile(x, ops=(*ops, ("store", 0, 0)))
    results = [run_in_engine_order(compiled.program, {"x": x}, order)[0] for order in ORDERS]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], random_kernel.ref, rtol=1e-5)  # type: ignore[attr-defined]


def test_a_scatter_into_an_hbm_tensor_waits_for_the_dma_that_filled_it_and_its_reader_waits_for_it() -> None:
    """``dsl.dma_scatter`` writes rows that are data: it is ordered after the copy (another queue) that
    filled the table, and the load that reads the table back after it, in the timeline too."""
    @trnsim.kernel
    def k(x, rows, ids):
        out = dsl.hbm_tensor(x.shape, x.dtype)
        dsl.dma_copy(out, x, queue=0)
        dsl.dma_scatter(out, dsl.load(rows, queue=1), dsl.load(ids, queue=2), queue=3)
        back = dsl.load(out[0:8], queue=4)
        res = dsl.hbm_tensor((8, F), "fp32")
        dsl.store(res, dsl.multiply(back, 2.0), queue=5)
        return out, res

    x = np.arange(16 * F, dtype=np.float32).reshape(16, F)
    rows = -np.ones((3, F), np.float32) * np.arange(1, 4, dtype=np.float32)[:, None]
    ids = np.array([[5], [15], [5]], np.int32)
    result = trnsim.run_kernel(k, x, rows, ids, timing=True)
    want = x.copy()
    want[15], want[5] = rows[1], rows[2]          # index 5 twice: the last partition's row
    assert np.array_equal(result.outputs[0], want) and np.array_equal(result.outputs[1], 2 * want[:8])
    sync = result.program.stream("sync")
    scatter = next(i for i in sync if i.mnemonic == "dma_scatter")
    reader = sync[sync.index(scatter) + 1]
    assert ("dma0", 1) in scatter.wait and ("dma3", 1) in reader.wait
    tl = result.profile.timeline  # type: ignore[union-attr]
    at = {tl.instruction[g].mnemonic + str(getattr(tl.instruction[g], "queue", "")): g
          for g in range(len(tl.instruction))}
    assert tl.start[at["dma_scatter3"]] >= tl.effect[at["dma_copy0"]]
    assert tl.start[at["dma_copy4"]] >= tl.effect[at["dma_scatter3"]]
