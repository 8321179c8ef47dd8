"""trnsim.sim: Device, DMA, TensorE (dense, MX, sparse), semaphores, faults."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
import trnsim.numerics as tn
from trnsim.errors import SimError
from trnsim.isa import (
    AccessPattern,
    DmaCopy,
    DmaGather,
    DmaScatter,
    DmaScatterAdd,
    Matmul,
    Nop,
    ProgramBuilder,
    TensorCopy,
    TensorScalar,
    TensorTranspose,
    tile,
    transposed,
)
from trnsim.sim import Device
from trnsim.sim.harness import run_on_tiles

RNG = np.random.default_rng(0)


def bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_end_to_end_matmul_bit_exact() -> None:
    """HBM → SBUF by DMA, matmul into PSUM, PSUM → SBUF with a bf16 cast on VectorE, SBUF → HBM."""
    k, m, n = 128, 64, 256
    a = bf16(RNG.standard_normal((k, m), dtype=np.float32))
    b_ = bf16(RNG.standard_normal((k, n), dtype=np.float32))
    bld = ProgramBuilder()
    ta, tb = bld.tensor("a", (k, m), "bf16"), bld.tensor("b", (k, n), "bf16")
    tc = bld.tensor("c", (m, n), "bf16", "output")
    sa, sb = tile("sbuf", "bf16", (k, m)), tile("sbuf", "bf16", (k, n), offset=2 * m)
    acc, out = tile("psum", "fp32", (m, n)), tile("sbuf", "bf16", (m, n), offset=4096)
    bld.emit("sync", DmaCopy(sa, ta.ap(), signal=("ld",)), DmaCopy(sb, tb.ap(), signal=("ld",)))
    bld.emit("tensor", Matmul(acc, sa, sb, wait=(("ld", 2),), signal=("mm",)))
    bld.emit("vector", TensorCopy(out, acc, wait=(("mm", 1),), signal=("cp",)))
    bld.emit("sync", DmaCopy(tc.ap(), out, wait=(("cp", 1),)))
    res = trnsim.Device("trn3").run(bld.build(), {"a": a, "b": b_})
    ref = np.zeros((m, n), np.float32)
    for i in range(k):  # fp32 accumulation in contraction order: what TensorE specifies
        ref = ref + (a[i, :, None] * b_[i, None, :]).astype(np.float32)
    assert np.array_equal(res["c"], bf16(ref))
    assert [e.instruction.mnemonic for e in res.log] == ["dma_copy", "dma_copy", "matmul", "tensor_copy", "dma_copy"]


def test_matmul_small_integers_exact_and_accumulate() -> None:
    s = RNG.integers(-4, 5, (32, 16)).astype(np.float32)
    v = RNG.integers(-4, 5, (32, 8)).astype(np.float32)
    ts, tv = tile("sbuf", "fp8_e4m3", (32, 16)), tile("sbuf", "fp8_e4m3", (32, 8), offset=64)
    acc = tile("psum", "fp32", (16, 8))
    res = run_on_tiles([("tensor", Matmul(acc, ts, tv)), ("tensor", Matmul(acc, ts, tv, accumulate=True))],
                       {"s": (s, ts), "v": (v, tv)}, {"o": acc})
    assert np.array_equal(res["o"], 2 * s.T @ v)


def test_matmul_mx_equals_dequantize_then_matmul() -> None:
    k, m, n = 64, 16, 24
    w = RNG.standard_normal((k, m)).astype(np.float32)
    x = RNG.standard_normal((k, n)).astype(np.float32)
    qw, qx = tn.mx_quantize(w, "mxfp8_e4m3", axis=0), tn.mx_quantize(x, "mxfp4_e2m1", axis=0)
    ts, tv = tile("sbuf", "mxfp8_e4m3", (k, m)), tile("sbuf", "mxfp4_e2m1", (k, n), offset=64)
    # the same scales two ways: e8m0 values (encoded on input) and their raw uint8 codes
    ss, sv = tile("sbuf", "e8m0", (k // 32, m), offset=128), tile("sbuf", "uint8", (k // 32, n), offset=192)
    acc = tile("psum", "fp32", (m, n))
    res = run_on_tiles(
        [("tensor", Matmul(acc, ts, tv, stationary_scale=ss, moving_scale=sv))],
        {"w": (qw.elements, ts), "x": (qx.elements, tv),
         "ws": (np.ldexp(1.0, qw.scale_exponents), ss), "xs": (qx.scale_codes(), sv)},
        {"o": acc})
    dw, dx = qw.dequantize(), qx.dequantize()
    ref = np.zeros((m, n), np.float32)
    for i in range(k):
        ref = ref + (dw[i, :, None].astype(np.float64) * dx[i, None, :]).astype(np.float32)
    assert np.array_equal(res["o"], ref)
    np.testing.assert_allclose(res["o"], dw.T @ dx, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pattern", ["2:4", "4:8"])
def test_sparse_stationary_equals_dense_pruned(pattern: str) -> None:
    nk, mk = map(int, pattern.split(":"))
    k, m, n = 128, 32, 16
    w = tn.prune(bf16(RNG.standard_normal((k, m)).astype(np.float32)), nk, mk, axis=0)
    x = bf16(RNG.standard_normal((k, n)).astype(np.float32))
    values, meta = tn.compress(w, nk, mk, axis=0)
    pos = meta.positions().transpose(1, 2, 0).reshape(k * nk // mk, m)  # (M, groups, n) → [K·n/m, M]
    assert np.array_equal(tn.decompress(values, meta), w)
    ts, ti = tile("sbuf", "bf16", (k * nk // mk, m)), tile("sbuf", "uint8", (k * nk // mk, m), offset=64)
    tv, acc = tile("sbuf", "bf16", (k, n), offset=128), tile("psum", "fp32", (m, n))
    res = run_on_tiles([("tensor", Matmul(acc, ts, tv, sparsity=pattern, stationary_index=ti))],
                       {"v": (values, ts), "i": (pos, ti), "x": (x, tv)}, {"o": acc})
    dense = run_on_tiles([("tensor", Matmul(acc, tile("sbuf", "bf16", (k, m)), tv))],
                         {"w": (w, tile("sbuf", "bf16", (k, m))), "x": (x, tv)}, {"o": acc})
    assert np.array_equal(res["o"], dense["o"])
    np.testing.assert_allclose(res["o"], w.T @ x, rtol=1e-5, atol=1e-4)


def test_tensor_transpose_bit_exact() -> None:
    x = RNG.standard_normal((64, 100)).astype(np.float32)
    x[0, 0], x[1, 1] = np.nan, -np.inf
    src, dst = tile("sbuf", "fp32", (64, 100)), tile("psum", "fp32", (100, 64))
    out = run_on_tiles([("tensor", TensorTranspose(dst, src))], {"x": (x, src)}, {"y": dst})["y"]
    assert np.array_equal(out.view(np.uint32), x.T.copy().view(np.uint32))


# ---------------------------------------------------------------- DMA


@st.composite
def strided(draw: st.DrawFn) -> tuple[AccessPattern, tuple[int, ...]]:
    """A random HBM view of a (16, 64) fp32 tensor that stays in bounds, with its numpy index."""
    rows = draw(st.integers(1, 8))
    row_step = draw(st.integers(1, 2))
    start = draw(st.integers(0, 16 - (rows - 1) * row_step - 1))
    c1, s1 = draw(st.integers(1, 4)), draw(st.integers(1, 16))
    c2 = draw(st.integers(1, min(8, s1)))
    off = draw(st.integers(0, 64 - ((c1 - 1) * s1 + c2)))
    ap = AccessPattern("hbm", "fp32", 0, rows, ((s1, c1), (1, c2)), 4 * (start * 64 + off), 64 * row_step, "x")
    return ap, (start, row_step, off, s1, c1, c2)


@settings(max_examples=40, deadline=None)
@given(strided())
def test_dma_strided_matches_numpy_view(case: tuple[AccessPattern, tuple[int, ...]]) -> None:
    ap, (start, row_step, off, s1, c1, c2) = case
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    flat = x.reshape(-1)
    view = np.lib.stride_tricks.as_strided(
        flat[start * 64 + off:],
        shape=(ap.partitions, c1, c2), strides=(4 * 64 * row_step, 4 * s1, 4))
    bld = ProgramBuilder()
    bld.tensor("x", (16, 64), "fp32")
    y = bld.tensor("y", (ap.partitions, c1 * c2), "fp32", "output")
    t = tile("sbuf", "fp32", (ap.partitions, c1, c2))
    bld.emit("sync", DmaCopy(t, ap), DmaCopy(y.ap(), t))
    out = Device().run(bld.build(), [x])["y"]
    assert np.array_equal(out, view.reshape(ap.partitions, -1))


def test_dma_transpose_and_cast() -> None:
    x = RNG.standard_normal((8, 12)).astype(np.float32)
    bld = ProgramBuilder()
    tx = bld.tensor("x", (8, 12), "fp32")
    y = bld.tensor("y", (12, 8), "bf16", "output")
    t = tile("sbuf", "bf16", (12, 8))
    bld.emit("sync", DmaCopy(t, transposed(tx.ap())), DmaCopy(y.ap(), t))
    assert np.array_equal(Device().run(bld.build(), [x])["y"], bf16(x.T))


def test_dma_gather_and_scatter_add() -> None:
    table = RNG.standard_normal((10, 6)).astype(np.float32)
    idx = np.array([[3], [0], [3], [9]], dtype=np.int32)
    grads = RNG.standard_normal((4, 6)).astype(np.float32)
    bld = ProgramBuilder()
    tt = bld.tensor("table", (10, 6), "fp32")
    ti, tg = bld.tensor("idx", (4, 1), "int32"), bld.tensor("g", (4, 6), "fp32")
    rows = bld.tensor("rows", (4, 6), "fp32", "output")
    acc = bld.tensor("acc", (10, 6), "fp32", "output")
    si = tile("sbuf", "int32", (4, 1))
    sr, sg = tile("sbuf", "fp32", (4, 6), offset=64), tile("sbuf", "fp32", (4, 6), offset=128)
    bld.emit("sync", DmaCopy(si, ti.ap()), DmaCopy(sg, tg.ap()), DmaGather(sr, tt.ap(), si), DmaCopy(rows.ap(), sr),
             DmaCopy(acc.ap(), tt.ap()), DmaScatterAdd(acc.ap(), sg, si))
    res = Device().run(bld.build(), {"table": table, "idx": idx, "g": grads})
    assert np.array_equal(res["rows"], table[idx[:, 0]])
    ref = table.copy()
    for p, r in enumerate(idx[:, 0]):
        ref[r] = ref[r] + grads[p]
    assert np.array_equal(res["acc"], ref)


def test_gather_index_out_of_range_faults() -> None:
    bld = ProgramBuilder()
    tt, ti = bld.tensor("table", (10, 6), "fp32"), bld.tensor("idx", (2, 1), "int32")
    si = tile("sbuf", "int32", (2, 1))
    bld.emit("sync", DmaCopy(si, ti.ap()), DmaGather(tile("sbuf", "fp32", (2, 6), offset=64), tt.ap(), si))
    with pytest.raises(SimError, match=r"sync\[1\] dma_gather.*index\[1\] = 10 is outside the table's 10 rows"):
        Device().run(bld.build(), {"table": np.zeros((10, 6)), "idx": [[1], [10]]})


def _scatter(table: np.ndarray, rows: np.ndarray, idx: np.ndarray, dtype: str = "fp32",
             table_dtype: str | None = None) -> np.ndarray:
    """``DmaScatter`` of ``rows`` into a copy of ``table`` by ``idx`` on the device."""
    n, w = table.shape
    bld = ProgramBuilder()
    tt = bld.tensor("table", (n, w), table_dtype or dtype)
    ti, tr = bld.tensor("idx", (len(idx), 1), "int32"), bld.tensor("rows", rows.shape, dtype)
    out = bld.tensor("out", (n, w), table_dtype or dtype, "output")
    si, sr = tile("sbuf", "int32", (len(idx), 1)), tile("sbuf", dtype, rows.shape, offset=64)
    bld.emit("sync", DmaCopy(si, ti.ap()), DmaCopy(sr, tr.ap()), DmaCopy(out.ap(), tt.ap()),
             DmaScatter(out.ap(), sr, si))
    return Device().run(bld.build(), {"table": table, "idx": idx.reshape(-1, 1), "rows": rows})["out"]


def test_dma_scatter_writes_rows_in_partition_order_and_leaves_the_others() -> None:
    """Repeated indices: the last partition's row wins, as a sequential DMA leaves it."""
    table = RNG.standard_normal((10, 6)).astype(np.float32)
    rows = RNG.standard_normal((4, 6)).astype(np.float32)
    idx = np.array([3, 0, 3, 9], np.int32)
    ref = table.copy()
    for p, r in enumerate(idx):
        ref[r] = rows[p]
    got = _scatter(table, rows, idx)
    assert np.array_equal(got, ref) and np.array_equal(got[3], rows[2])


def test_dma_scatter_moves_bits_and_casts_between_dtypes() -> None:
    """Same dtype: the bytes (a NaN payload survives); fp32 rows into a bf16 table: rounded (RNE)."""
    payload = np.array([0x7FC01234, 0xFF800001, 0x00000001, 0x80000000], np.uint32).view(np.float32)
    rows = np.tile(payload, (2, 1))
    got = _scatter(np.zeros((3, 4), np.float32), rows, np.array([2, 0], np.int32))
    assert np.array_equal(got.view(np.uint32)[[0, 2]], rows.view(np.uint32))
    values = RNG.standard_normal((2, 4)).astype(np.float32)
    got = _scatter(np.zeros((3, 4), np.float32), values, np.array([1, 2], np.int32), table_dtype="bf16")
    assert np.array_equal(got[1:], bf16(values)) and not got[0].any()


def test_scatter_index_out_of_range_faults() -> None:
    with pytest.raises(SimError, match=r"sync\[3\] dma_scatter.*index\[1\] = -1 is outside the table's 10 rows"):
        _scatter(np.zeros((10, 6), np.float32), np.zeros((2, 6), np.float32), np.array([4, -1], np.int32))


# ---------------------------------------------------------------- order, semaphores, faults


def producer_consumer(synchronised: bool) -> np.ndarray:
    bld = ProgramBuilder()
    y = bld.tensor("y", (4, 4), "fp32", "output")
    t = tile("sbuf", "fp32", (4, 4))
    u = tile("sbuf", "fp32", (4, 4), offset=64)
    sync = {"signal": ("made",)} if synchronised else {}
    wait = {"wait": (("made", 1),)} if synchronised else {}
    # the consumer is on the lower-numbered engine, so without a semaphore it runs first
    bld.emit("vector", TensorScalar(u, t, "add", 1.0, **wait, signal=("used",)))
    bld.emit("gpsimd", TensorScalar(t, t, "mul", 0.0, op1="add", scalar1=41.0, **sync))
    bld.emit("sync", DmaCopy(y.ap(), u, wait=(("used", 1),)))
    return Device().run(bld.build())["y"]


def test_semaphores_order_producer_and_consumer() -> None:
    assert (producer_consumer(True) == 42.0).all()
    assert not (producer_consumer(False) == 42.0).all()


def test_runtime_deadlock_names_blocked_instructions() -> None:
    bld = ProgramBuilder()
    bld.emit("vector", Nop(wait=(("b", 1),)), Nop(signal=("a",)))
    bld.emit("scalar", Nop(wait=(("a", 1),)), Nop(signal=("b",)))
    with pytest.raises(SimError, match=r"deadlock: vector\[0\] nop wait=b>=1 waits for b>=1 \(at 0\); scalar\[0\]"):
        Device().run(bld.build(), check=False)


def test_strict_reads_fault_on_uninitialised_sbuf() -> None:
    t = tile("sbuf", "fp32", (4, 4))
    prog = ProgramBuilder()
    prog.emit("vector", TensorCopy(tile("sbuf", "fp32", (4, 4), offset=64), t))
    Device().run(prog.build())  # lenient: unwritten bytes read as zero
    with pytest.raises(SimError, match=r"vector\[0\] tensor_copy.*never-written core0.sbuf at partition 0, byte 0"):
        Device(strict_reads=True).run(prog.build())


def test_out_of_bounds_faults_at_run_time() -> None:
    prog = ProgramBuilder()
    prog.emit("vector", TensorCopy(tile("sbuf", "fp32", (4, 4)), tile("sbuf", "fp32", (4, 4), offset=262140)))
    with pytest.raises(SimError, match=r"vector\[0\].*out-of-bounds core0.sbuf access.*bytes 262140\.\.262155"):
        Device().run(prog.build(), check=False)


def test_hbm_is_sparse() -> None:
    dev = Device("trn3")
    bld = ProgramBuilder()
    bld.tensor("x", (4, 4), "fp32")
    dev.run(bld.build(), [np.ones((4, 4))])
    assert dev.chips[0].hbm.allocated_bytes == 4096 and dev.chips[0].hbm.size == dev.spec.hbm_bytes  # one 4 KiB segment


def test_inputs_are_checked() -> None:
    bld = ProgramBuilder()
    bld.tensor("x", (4, 4), "fp32")
    with pytest.raises(SimError, match="input x: shape"):
        Device().run(bld.build(), [np.ones(3)])
    with pytest.raises(SimError, match="no tensor named 'z'"):
        Device().run(bld.build(), {"z": np.ones(3)})
