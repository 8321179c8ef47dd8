"""The simulator's fast paths (``sim.fastpath``: deferred accumulation groups, the SBUF operand cache) give the
plain path's results: bit-exact on data whose fp32 sums are exact, the same faults at the same instruction,
the same memory after a fault, in functional and functional+timing runs."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any
from unittest.mock import patch

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
from trnsim.errors import SimError
from trnsim.isa import DmaCopy, Matmul, ProgramBuilder, tile
from trnsim.isa.ap import AccessPattern, transposed
from trnsim.isa.elementwise import Activation, Memset, TensorCopy, TensorScalar, TensorTensor
from trnsim.isa.program import Program
from trnsim.isa.reduction import TensorReduce
from trnsim.sim import fastpath
from trnsim.sim.device import Device
from trnsim.sim.harness import tile_program


@pytest.fixture
def plain() -> Iterator[None]:
    """Every ``Device`` created inside runs the plain path."""
    fastpath.ENABLED = False
    try:
        yield
    finally:
        fastpath.ENABLED = True


def both(program: Program, feed: dict[str, np.ndarray], **options: Any) -> list[dict[str, np.ndarray]]:
    """Outputs of the fast path, the plain path and the fast path with timing."""
    runs = [Device(fast_paths=True).run(program, feed, check=False, **options),
            Device(fast_paths=False).run(program, feed, check=False, **options),
            Device(fast_paths=True).run(program, feed, check=False, timing=True, **options)]
    return [r.outputs for r in runs]


def assert_same(runs: list[dict[str, np.ndarray]]) -> None:
    for name in runs[0]:
        for r in runs[1:]:
            assert np.array_equal(r[name].view(np.uint32), runs[0][name].view(np.uint32)), name


# ---------------------------------------------------------------- random programs (DSL, synchronised)
K, M, N, ACCS, TILES = 32, 16, 24, 3, 4

op = st.one_of(
    # acc (+)= tiles[s][:, :M].T @ tiles[v]  (accumulate only onto a written accumulator)
    st.tuples(st.just("mm"), st.integers(0, ACCS - 1), st.integers(0, TILES - 1), st.integers(0, TILES - 1),
              st.booleans()),
    st.tuples(st.just("mm_half"), st.integers(0, ACCS - 1), st.integers(0, TILES - 1), st.integers(0, TILES - 1),
              st.booleans()),  # into the left half of an accumulator: overlaps a pending group, not equal
    st.tuples(st.just("read"), st.integers(0, ACCS - 1)),  # PSUM → SBUF → HBM between accumulations
    st.tuples(st.just("load"), st.integers(0, TILES - 1), st.integers(0, 2)),  # overwrite an operand tile
    st.tuples(st.just("poke"), st.integers(0, ACCS - 1)),  # overwrite a few accumulator columns (VectorE)
    st.tuples(st.just("store"), st.integers(0, ACCS - 1)),
    # every accumulator (+)= one step of a K loop, sharing the moving (or the stationary) tile, as GEMMs do
    st.tuples(st.just("block"), st.integers(0, TILES - 1), st.integers(0, TILES - 1), st.booleans(),
              st.booleans(), st.integers(1, 3)),
)


@trnsim.kernel
def random_matmuls(x, *, ops, dtypes):
    """Matmuls into interleaved PSUM accumulators, mixed with PSUM reads, partial overwrites and operand
    reloads; every accumulator stored at the end (and on ``store`` and ``read``). Operands stay small
    integers, so every fp32 sum is exact whatever its order."""
    out = dsl.hbm_tensor((len(ops) + ACCS, M, N), "fp32")
    tiles = [dsl.sbuf((K, N), dtypes[i % len(dtypes)]) for i in range(TILES)]
    for i, t in enumerate(tiles):
        dsl.load(t, x[(i % 3) * K : (i % 3 + 1) * K, :])
    accs = [dsl.psum((M, N)) for _ in range(ACCS)]
    for a in accs:
        dsl.memset(a, 1.0)
    for step, o in enumerate(ops):
        kind = o[0]
        if kind in ("mm", "mm_half"):
            dst = accs[o[1]] if kind == "mm" else accs[o[1]][:, : N // 2]
            mv = tiles[o[3]] if kind == "mm" else tiles[o[3]][:, : N // 2]
            dsl.matmul(dst, tiles[o[2]][:, :M], mv, accumulate=o[4])
        elif kind == "block":
            for k in range(o[5]):
                for a, acc in enumerate(accs):
                    other = (o[1] + a + k) % TILES
                    s_, v_ = (tiles[other], tiles[o[2]]) if o[4] else (tiles[o[1]], tiles[other])
                    dsl.matmul(acc, s_[:, :M], v_, accumulate=o[3] or k > 0)
        elif kind == "read":
            dsl.store(out[step], dsl.copy(accs[o[1]], engine="scalar"))
        elif kind == "load":
            dsl.load(tiles[o[1]], x[o[2] * K : (o[2] + 1) * K, :])
        elif kind == "poke":
            dsl.memset(accs[o[1]][:, 3:5], 2.0)
        else:
            dsl.store(out[step], accs[o[1]])
    for i, a in enumerate(accs):
        dsl.store(out[len(ops) + i], a)
    return out


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(op, min_size=1, max_size=30).map(tuple),
       dtypes=st.sampled_from([("bf16",), ("fp32",), ("bf16", "fp8_e4m3"), ("fp16", "bf16", "fp32")]),
       seed=st.integers(0, 2**16))
def test_random_matmul_programs_fast_equals_plain(ops: tuple[tuple[object, ...], ...], dtypes: tuple[str, ...],
                                                  seed: int) -> None:
    x = np.random.default_rng(seed).integers(-3, 4, (3 * K, N)).astype(np.float32)  # exact sums in fp32
    program = random_matmuls.compile(x, ops=ops, dtypes=dtypes).program
    runs = both(program, {"x": x})
    assert_same(runs)


# ---------------------------------------------------------------- kernels
def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-4, 5, shape).astype(np.float32)


@pytest.mark.parametrize("dtype,sparsity", [("bf16", None), ("fp8_e4m3", None), ("mxfp8_e4m3", None),
                                            ("mxfp4_e2m1", None), ("bf16", "2:4"), ("mxfp8_e4m3", "4:8")])
def test_matmul_kernel_fast_equals_plain(dtype: str, sparsity: str | None, plain: None) -> None:
    """Several K tiles per accumulator, MX scales, sparse stationaries, ragged tails."""
    rng = np.random.default_rng(0)
    a, b = small_ints(rng, (200, 300)), small_ints(rng, (300, 700))
    fastpath.ENABLED = False
    want = kernels.matmul(a, b, dtype, sparsity=sparsity, out_dtype="fp32")
    fastpath.ENABLED = True
    got = kernels.matmul(a, b, dtype, sparsity=sparsity, out_dtype="fp32")
    assert np.array_equal(got, want)
    if sparsity is None:  # (sparse: b is pruned first)
        assert np.array_equal(got, a.astype(np.float64) @ b)


def test_bf16_matmul_kernel_on_floats_is_within_fp32_rounding(plain: None) -> None:
    """Non-integer data: the group's summation order differs from the plain path's, within K fp32 roundings."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 512)).astype(np.float32)
    fastpath.ENABLED = False
    want = kernels.matmul(a, b, "bf16", out_dtype="fp32")
    fastpath.ENABLED = True
    got = kernels.matmul(a, b, "bf16", out_dtype="fp32")
    bound = 1024 * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b))
    assert np.all(np.abs(got.astype(np.float64) - want) <= 2 * bound)


# ---------------------------------------------------------------- faults and memory after them
S, V = tile("sbuf", "bf16", (32, 16)), tile("sbuf", "bf16", (32, 8), offset=64)
ACC = tile("psum", "fp32", (16, 8))


def psum_after(program: Program, feed: dict[str, np.ndarray], fast: bool) -> tuple[str, np.ndarray]:
    device = Device(fast_paths=fast)
    with pytest.raises(SimError) as err:
        device.run(program, feed, check=False)
    psum = device.chips[0].core(0).psum
    return f"{err.value.where}: {err.value}", psum._arrays()[0].copy()


def test_fault_mid_group_is_raised_by_its_instruction_with_the_same_memory() -> None:
    rng = np.random.default_rng(2)
    s, v = small_ints(rng, (32, 16)), small_ints(rng, (32, 8))
    outside = tile("sbuf", "bf16", (32, 8), offset=(1 << 18) - 8)  # runs past the end of SBUF
    compute = [("tensor", Matmul(ACC, S, V)), ("tensor", Matmul(ACC, S, V, accumulate=True)),
               ("tensor", Matmul(ACC, S, outside, accumulate=True)), ("tensor", Matmul(ACC, S, V, accumulate=True))]
    program = tile_program(compute, {"s": S, "v": V}, {"o": ACC})
    fast, slow = psum_after(program, {"s": s, "v": v}, True), psum_after(program, {"s": s, "v": v}, False)
    assert fast[0] == slow[0] and "tensor[2]" in fast[0] and "out-of-bounds" in fast[0]
    assert np.array_equal(fast[1], slow[1])
    assert np.array_equal(fast[1][: 16 * (1 << 14)].reshape(16, -1)[:, :32].view(np.float32), 2 * s.T @ v)


def test_bank_overflow_and_strict_accumulate_fault_at_their_instruction() -> None:
    rng = np.random.default_rng(3)
    s, v = small_ints(rng, (32, 16)), small_ints(rng, (32, 8))
    crossing = tile("psum", "fp32", (16, 8), offset=2048 - 16)
    compute = [("tensor", Matmul(ACC, S, V)), ("tensor", Matmul(ACC, S, V, accumulate=True)),
               ("tensor", Matmul(crossing, S, V))]
    program = tile_program(compute, {"s": S, "v": V}, {"o": ACC})
    fast, slow = psum_after(program, {"s": s, "v": v}, True), psum_after(program, {"s": s, "v": v}, False)
    assert fast[0] == slow[0] and "overflow a PSUM bank" in fast[0] and "tensor[2]" in fast[0]
    assert np.array_equal(fast[1], slow[1])
    other = tile("psum", "fp32", (16, 8), offset=4096)
    program = tile_program([("tensor", Matmul(ACC, S, V)), ("tensor", Matmul(other, S, V, accumulate=True))],
                           {"s": S, "v": V}, {"o": ACC})
    errors = []
    for fast_paths in (True, False):
        with pytest.raises(SimError) as err:
            Device(strict_reads=True, fast_paths=fast_paths).run(program, {"s": s, "v": v}, check=False)
        errors.append(f"{err.value.where}: {err.value}")
    assert errors[0] == errors[1] and "never-written" in errors[0]


def test_psum_read_between_accumulations_and_overwrite() -> None:
    rng = np.random.default_rng(4)
    s, v = small_ints(rng, (32, 16)), small_ints(rng, (32, 8))
    snap, half = tile("sbuf", "fp32", (16, 8), offset=1024), tile("psum", "fp32", (16, 4), offset=16)
    compute = [("tensor", Matmul(ACC, S, V)), ("tensor", Matmul(ACC, S, V, accumulate=True)),
               ("vector", TensorCopy(snap, ACC)),  # reads the group: 2 sᵀv
               ("tensor", Matmul(ACC, S, V, accumulate=True)),
               ("gpsimd", Memset(half, 5.0)),  # overwrites part of the accumulator mid-group
               ("tensor", Matmul(ACC, S, V, accumulate=True)), ("tensor", Matmul(ACC, S, V)),
               ("tensor", Matmul(ACC, S, V, accumulate=True))]
    program = tile_program(compute, {"s": S, "v": V}, {"o": ACC, "snap": snap})
    runs = both(program, {"s": s, "v": v})
    assert_same(runs)
    assert np.array_equal(runs[0]["snap"], 2 * s.T @ v) and np.array_equal(runs[0]["o"], 2 * s.T @ v)


def test_operand_cache_sees_writes_to_overlapping_bytes_of_another_dtype() -> None:
    """A cached bf16 operand whose bytes are rewritten through an fp32 view of the same SBUF."""
    rng = np.random.default_rng(5)
    s, v = small_ints(rng, (32, 16)), small_ints(rng, (32, 8))
    alias = tile("sbuf", "fp32", (32, 2), offset=64 + 4)  # bf16 columns 2..5 of V
    compute = [("tensor", Matmul(ACC, S, V)), ("vector", Memset(alias, 0.0)),
               ("tensor", Matmul(ACC, S, V, accumulate=True))]
    program = tile_program(compute, {"s": S, "v": V}, {"o": ACC})
    runs = both(program, {"s": s, "v": v})
    assert_same(runs)
    cleared = v.copy()
    cleared[:, 2:6] = 0
    assert np.array_equal(runs[0]["o"], s.T @ v + s.T @ cleared)


# ---------------------------------------------------------------- DMA copies (``Context.copy_raw``)
def test_dma_copies_fast_equals_plain_bit_for_bit() -> None:
    """A transposing load (blocked by ``fastpath.copy_view``, ragged last block), overlapping SBUF → SBUF
    copies both ways (the source must be read before the destination is written) and a reshaping store, on
    fp32 codes of every kind (NaN payloads included)."""
    codes = np.random.default_rng(6).integers(0, 2**32, (200, 128), dtype=np.uint64).astype(np.uint32)
    b = ProgramBuilder()
    x = b.tensor("x", (200, 128), "fp32", "input")
    y = b.tensor("y", (128, 200), "fp32", "output")
    z = b.tensor("z", (64, 400), "fp32", "output")
    t = tile("sbuf", "fp32", (128, 200), offset=64)
    b.emit("sync", DmaCopy(t, transposed(x.ap())),
           DmaCopy(tile("sbuf", "fp32", (128, 150), offset=64 + 12), tile("sbuf", "fp32", (128, 150), offset=64)),
           DmaCopy(tile("sbuf", "fp32", (128, 100), offset=64), tile("sbuf", "fp32", (128, 100), offset=64 + 40)),
           DmaCopy(y.ap(), t), DmaCopy(z.ap(), t))
    program = b.build()
    runs = both(program, {"x": codes.view(np.float32)})
    assert_same(runs)
    want = codes.T.copy()
    want[:, 3:153] = want[:, 0:150].copy()
    want[:, 0:100] = want[:, 10:110].copy()
    assert np.array_equal(runs[0]["y"].view(np.uint32), want)
    assert np.array_equal(runs[0]["z"].view(np.uint32), want.reshape(64, 400))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 70), st.integers(1, 140), st.integers(0, 9), st.integers(0, 3))
def test_transposing_copy_view_moves_every_code(itemsize: int, rows: int, cols: int, col0: int, row0: int) -> None:
    """``fastpath.copy_view`` of ``m.T`` into a strided destination equals numpy's assignment for every code
    width, row count (a multiple of the 8-byte word's codes or not), and source offset (word-aligned or not):
    the word-by-word transpose where it applies, the blocked or plain copy elsewhere (the size below which
    copies are plain is lowered to 0 so that these small views take the other paths too)."""
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    rng = np.random.default_rng(itemsize * 1000 + rows * 7 + cols)
    big = rng.integers(0, 2 ** (8 * itemsize) - 1, (cols + 3, rows + col0 + 5), dtype=np.uint64).astype(dtype)
    src = big[row0 : row0 + cols, col0 : col0 + rows].T  # [rows, cols], a transposed view
    memory = np.zeros((rows, cols * 3 + 7), dtype=dtype)
    dst = memory[:, 5 : 5 + cols]
    with patch.object(fastpath, "COPY_BLOCKED_BYTES", 0):
        fastpath.copy_view(dst, src)
    assert np.array_equal(dst, src)
    assert not memory[:, :5].any() and not memory[:, 5 + cols :].any()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_word_transpose_takes_aligned_tiles_of_a_transposed_matrix(dtype: type) -> None:
    """The [128, 512] tiles of ``a.T`` that a matmul loads go word by word (and land exactly); a source that
    is not word-aligned, or a row count the word's codes do not divide, is left to the other copies."""
    a = np.random.default_rng(3).integers(0, 200, (1024, 384), dtype=np.uint64).astype(dtype)
    sbuf = np.zeros((128, 4096), dtype=dtype)
    dst = sbuf[:, 512:1024]
    assert fastpath._transpose_words(dst, a[256:768, 128:256].T)
    assert np.array_equal(dst, a[256:768, 128:256].T) and not sbuf[:, :512].any() and not sbuf[:, 1024:].any()
    assert not fastpath._transpose_words(dst, a[256:768, 129:257].T)  # starts mid-word
    assert not fastpath._transpose_words(sbuf[:127, :512], a[256:768, 128:255].T)  # 127 rows


def test_tensor_copies_fast_equals_plain_bit_for_bit() -> None:
    """``Context.copy_values``: fp32 → bf16 rounded view to view (ties, overflow, subnormals, NaNs of both
    signs and every payload kind), same-dtype copies as codes (bf16 and fp32, NaN payloads kept), a cast
    onto its own source bytes and a reshaping copy (both the plain path's)."""
    codes = np.random.default_rng(7).integers(0, 2**32, (128, 64), dtype=np.uint64).astype(np.uint32)
    codes[0, :12] = [0x7F800001, 0xFF800001, 0x7FC00000, 0xFFFFFFFF, 0x7F7FFFFF, 0x3F808000, 0x3F818000,
                     0x00000001, 0x80008000, 0x7F800000, 0x7FFF8000, 0x477FF000]
    src = tile("sbuf", "fp32", (128, 64), offset=0)
    rounded, copied = tile("sbuf", "bf16", (128, 64), offset=1024), tile("sbuf", "fp32", (128, 64), offset=2048)
    again, inplace = tile("sbuf", "bf16", (128, 64), offset=4096), tile("sbuf", "bf16", (128, 64), offset=0)
    reshaped = AccessPattern("sbuf", "bf16", 0, 128, ((32, 2), (1, 32)), offset=6144)
    compute = [("vector", TensorCopy(rounded, src)), ("vector", TensorCopy(copied, src)),
               ("scalar", TensorCopy(again, rounded)), ("vector", TensorCopy(reshaped, src)),
               ("gpsimd", TensorCopy(inplace, src))]
    program = tile_program(compute, {"x": src}, {"r": rounded, "f": copied, "h": again, "i": inplace,
                                                 "s": tile("sbuf", "bf16", (128, 64), offset=6144)})
    runs = both(program, {"x": codes.view(np.float32)})
    assert_same(runs)
    assert np.array_equal(runs[0]["f"].view(np.uint32), codes)
    for name in ("r", "h", "s", "i"):
        assert np.array_equal(runs[0][name].view(np.uint32), runs[0]["r"].view(np.uint32)), name


def test_engine_ops_fast_equal_plain_bit_for_bit() -> None:
    """Engine ops reading fp32 in place (``Context.peek32``) and rounding into bf16 or storing into fp32
    memory directly (``Context.write``'s fast path) leave what the plain path does: an activation with a
    per-partition bias and an accumulate, a two-op tensor_scalar with a reversed operand, reductions, a
    tensor_tensor, one op onto its own source bytes; over every fp32 code kind (NaN payloads, infinities,
    subnormals, ties)."""
    codes = np.random.default_rng(11).integers(0, 2**32, (128, 64), dtype=np.uint64).astype(np.uint32)
    codes[:, :12] = [0x7F800001, 0xFF800001, 0x7FC00000, 0xFFFFFFFF, 0x7F7FFFFF, 0x3F808000, 0x3F818000,
                     0x00000001, 0x80008000, 0x7F800000, 0x7FFF8000, 0x477FF000]
    x = tile("sbuf", "fp32", (128, 64), offset=0)
    y = tile("sbuf", "fp32", (128, 64), offset=256)
    col = tile("sbuf", "fp32", (128, 1), offset=512)
    outs = {"a": tile("sbuf", "bf16", (128, 64), offset=1024), "s": tile("sbuf", "fp32", (128, 1), offset=1280),
            "t": tile("sbuf", "bf16", (128, 64), offset=1536), "m": tile("sbuf", "fp32", (128, 1), offset=1792),
            "r": tile("sbuf", "bf16", (128, 1), offset=2048), "u": tile("sbuf", "fp32", (128, 64), offset=2304),
            "e": tile("sbuf", "fp32", (128, 64), offset=2560)}
    compute = [("vector", TensorReduce(col, y, "max", axes=(0,))),
               ("scalar", Activation(outs["a"], x, "exp", scale=0.125, bias=col, accumulate=outs["s"])),
               ("vector", TensorScalar(outs["t"], x, "mul", col, "sub", 3.0, reverse1=True)),
               ("vector", TensorReduce(outs["m"], x, "add", axes=(0,))),
               ("vector", TensorReduce(outs["r"], x, "max", axes=(0,), negate=True)),
               ("vector", TensorTensor(outs["u"], x, y, "add")),
               ("scalar", Activation(outs["e"], y, "tanh")),
               ("vector", TensorScalar(y, y, "mul", 0.5))]  # onto its own source: the plain write
    program = tile_program(compute, {"x": x, "y": y}, {**outs, "y": y})
    feed = {"x": codes.view(np.float32), "y": np.random.default_rng(12).standard_normal((128, 64), dtype=np.float32)}
    assert_same(both(program, feed))


# ---------------------------------------------------------------- access patterns' cached values
def test_access_pattern_caches_are_per_pattern_and_not_pickled() -> None:
    a = tile("sbuf", "bf16", (128, 64), offset=256)
    same = AccessPattern("sbuf", "bf16", 0, 128, ((1, 64),), 256)
    assert (hash(a), a.byte_span(), a.size, a.shape) == (hash(same), (256, 384), 128 * 64, (128, 64))
    moved = replace(a, offset=512)
    assert moved.byte_span() == (512, 640) and moved != a and a.byte_span() == (256, 384)
    assert set(a.__getstate__()) == {f.name for f in fields(AccessPattern)}  # no hash carried across processes
    copy = pickle.loads(pickle.dumps(a))
    assert copy == a and hash(copy) == hash(a) and {a: 1}[copy] == 1
    assert a == same and a is not same and a != (a.memory, a.dtype) and a != None  # noqa: E711
    for f in fields(AccessPattern):  # every field takes part in equality
        other = replace(a, **{f.name: {"memory": "psum", "dtype": "fp16", "free": ((2, 64),), "tensor": "t"}.get(
            f.name, getattr(a, f.name) + 1 if isinstance(getattr(a, f.name), int) else None)})
        assert other != a and a != other, f.name


# ---------------------------------------------------------------- scratch arena (``fastpath.Scratch``)
@pytest.mark.parametrize("chunk,most", [(fastpath.SCRATCH_CHUNK, fastpath.SCRATCH_BYTES), (1 << 16, 1 << 18)])
def test_runs_reusing_scratch_equal_plain(chunk: int, most: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-to-back runs (each reusing the chunks the last one returned, a fault between them) give the plain
    results; with a tiny arena most arrays overflow it (and operands larger than a chunk bypass it)."""
    monkeypatch.setattr(fastpath, "SCRATCH_CHUNK", chunk)
    monkeypatch.setattr(fastpath, "SCRATCH_BYTES", most)
    monkeypatch.setattr(fastpath, "_POOL", [])
    rng = np.random.default_rng(7)
    a, b = small_ints(rng, (256, 384)), small_ints(rng, (384, 1024))
    want = a.astype(np.float64) @ b
    s, v = small_ints(rng, (32, 16)), small_ints(rng, (32, 8))
    faulty = tile_program([("tensor", Matmul(ACC, S, V)),
                           ("tensor", Matmul(ACC, S, tile("sbuf", "bf16", (32, 8), offset=(1 << 18) - 8)))],
                          {"s": S, "v": V}, {"o": ACC})
    for _ in range(2):
        assert np.array_equal(kernels.matmul(a, b, "bf16", out_dtype="fp32"), want)
        fast, slow = psum_after(faulty, {"s": s, "v": v}, True), psum_after(faulty, {"s": s, "v": v}, False)
        assert fast[0] == slow[0] and np.array_equal(fast[1], slow[1])
        assert_same(both(random_matmuls.compile(a[:96, :N], ops=(("block", 0, 1, False, True, 3),),
                                                dtypes=("bf16",)).program, {"x": a[:96, :N]}))


# ---------------------------------------------------------------- inputs
def test_bfloat16_inputs_go_into_hbm_code_for_code() -> None:
    """ml_dtypes bfloat16 arrays for bf16 tensors are copied as codes (``values.encode_into``), NaN payloads
    included: the codes their fp32 values encode to."""
    codes = np.arange(2**16, dtype=np.uint16).reshape(128, 512)
    t = tile("sbuf", "bf16", (128, 512))
    program = tile_program([], {"x": t}, {"y": t})
    got = Device().run(program, {"x": codes.view(ml_dtypes.bfloat16)}).outputs["y"]
    want = Device().run(program, {"x": codes.view(ml_dtypes.bfloat16).astype(np.float32)}).outputs["y"]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(got.view(np.uint32) >> 16, codes)


def test_placed_operands_stack_in_place_and_others_are_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices decoded in TensorE's order lie as the blocks of the stacked matrix (``Scratch.place``): the stack
    is a view of them, equal to the concatenation; parts out of place are copied."""
    monkeypatch.setattr(fastpath, "SLAB_COLUMNS", 6)
    scratch = fastpath.Scratch()
    rng = np.random.default_rng(3)
    parts = [[scratch.place(4, 2) for _ in range(3)] for _ in range(4)]  # [k][column], in decode order
    for row in parts:
        for p in row:
            p[...] = rng.standard_normal(p.shape)
            p.flags.writeable = False
    columns = [[parts[k][c] for k in range(4)] for c in range(3)]
    want = np.concatenate([np.concatenate(col) for col in columns], axis=1)
    got = fastpath.DeferredMatmuls(scratch)._stack(columns)
    assert np.array_equal(got, want) and np.shares_memory(got, parts[0][0])
    swapped = [columns[1], columns[0]]
    got = fastpath.DeferredMatmuls(scratch)._stack(swapped)
    assert np.array_equal(got, np.concatenate([np.concatenate(col) for col in swapped], axis=1))
    assert not np.shares_memory(got, parts[0][0])
    scratch.release()


def test_a_column_copied_once_is_laid_out_top_to_bottom_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """K tiles of one stationary decoded in turn (flash attention's Pᵀ tiles) lie side by side in a tiled
    slab, so their column is copied; after that miss the shape is laid out top to bottom
    (``Scratch.stack_down``) and the next column stacks as a view."""
    monkeypatch.setattr(fastpath, "SLAB_COLUMNS", 6)
    scratch = fastpath.Scratch()
    deferred = fastpath.DeferredMatmuls(scratch)
    rng = np.random.default_rng(5)

    def column() -> list[np.ndarray]:
        parts = [scratch.place(4, 2) for _ in range(5)]
        for p in parts:
            p[...] = rng.standard_normal(p.shape)
            p.flags.writeable = False
        return parts

    first = column()
    got = deferred._stack([first])
    assert np.array_equal(got, np.concatenate(first)) and not np.shares_memory(got, first[0])
    second = column()
    got = deferred._stack([second])
    assert np.array_equal(got, np.concatenate(second)) and np.shares_memory(got, second[0])
    scratch.release()


def test_a_run_that_fills_the_arena_starts_it_over_and_equals_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run needing more scratch than the arena holds applies what is pending between two instructions and
    starts the arena over (``Context.between``), several times, with the plain path's results bit for bit."""
    monkeypatch.setattr(fastpath, "SCRATCH_CHUNK", 1 << 18)
    monkeypatch.setattr(fastpath, "SCRATCH_BYTES", 1 << 19)
    monkeypatch.setattr(fastpath, "_POOL", [])
    restarts = []
    release = fastpath.Scratch.release
    monkeypatch.setattr(fastpath.Scratch, "release", lambda self: (restarts.append(self.full), release(self)))
    rng = np.random.default_rng(11)
    # zero scores: P = 1, so O and lse are sums of small integers, exact in any order of the additions
    q = k = np.zeros((2, 384, 64), dtype=ml_dtypes.bfloat16)
    v = small_ints(rng, (2, 384, 64)).astype(ml_dtypes.bfloat16)
    program = kernels.flash_attention_kernel.compile(*(dsl.typed(x, "bf16") for x in (q, k, v))).program
    feed = {name: x for name, x in zip(("q", "k", "v"), (q, k, v), strict=True)}
    fast = Device(fast_paths=True).run(program, feed, check=False).outputs
    assert sum(restarts) >= 2  # releases of a full arena, mid-run
    slow = Device(fast_paths=False).run(program, feed, check=False).outputs
    for name in fast:
        assert np.array_equal(fast[name].view(np.uint32), slow[name].view(np.uint32)), name


def test_tensor_transposes_fast_equal_plain_bit_for_bit() -> None:
    """TensorE transposes on the fast path move the codes the plain path does: bf16 and
    fp32, a [128, 128] and a ragged [100, 36] tile, a destination with two free dimensions, NaN payloads."""
    from trnsim.isa import TensorTranspose

    codes = np.random.default_rng(13).integers(0, 2**32, (128, 128), dtype=np.uint64).astype(np.uint32)
    codes[0, :3] = [0x7F800001, 0xFFC00001, 0x00000001]
    x = tile("sbuf", "fp32", (128, 128))
    h = tile("sbuf", "bf16", (128, 128), offset=1024)
    outs = {"t": tile("psum", "fp32", (128, 128)), "b": tile("psum", "bf16", (128, 128), offset=2048),
            "r": tile("psum", "fp32", (36, 100), offset=4096),
            "w": AccessPattern("psum", "bf16", 0, 128, ((64, 2), (1, 64)), 8192)}
    ragged = AccessPattern("sbuf", "fp32", 0, 100, ((1, 36),), 0)
    compute = [("vector", TensorCopy(h, x)),
               ("tensor", TensorTranspose(outs["t"], x)), ("tensor", TensorTranspose(outs["b"], h)),
               ("tensor", TensorTranspose(outs["r"], ragged)), ("tensor", TensorTranspose(outs["w"], h))]
    program = tile_program(compute, {"x": x}, outs)
    runs = both(program, {"x": codes.view(np.float32)})
    assert_same(runs)
    assert np.array_equal(runs[0]["t"].view(np.uint32), codes.T)
