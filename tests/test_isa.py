"""trnsim.isa: access patterns, text form (golden + round trip), verifier messages."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hw
from trnsim.isa import (
    AccessPattern,
    Activation,
    DmaCopy,
    DmaScatter,
    Matmul,
    Memset,
    Nop,
    Program,
    ProgramBuilder,
    TensorScalar,
    TensorTensor,
    VerifyError,
    hbm,
    parse,
    parse_ap,
    tile,
    transposed,
)

SPEC = hw.get("trn3")


def test_ap_shape_and_span() -> None:
    ap = AccessPattern("sbuf", "bf16", 32, 32, ((64, 4), (1, 16)), offset=128)
    assert ap.shape == (32, 4, 16) and ap.free_size == 64 and ap.itemsize == 2
    assert ap.byte_span() == (128, 128 + 2 * (3 * 64 + 15 + 1))
    h = hbm("w", "fp32", (256, 512), rows=(128, 256))
    assert h.shape == (128, 512) and h.byte_span() == (128 * 512 * 4, 256 * 512 * 4)
    t = transposed(hbm("w", "fp32", (4, 6)))
    assert t.shape == (6, 4) and t.partition_stride == 1 and t.free == ((6, 4),)


def test_ap_text() -> None:
    ap = hbm("a", "bf16", (128, 64))
    assert str(ap) == "hbm:a:bf16[0:128/64,+0,64x1]"
    assert parse_ap(str(ap)) == ap
    neg = AccessPattern("psum", "fp32", 0, 4, ((-1, 8),), offset=28)
    assert str(neg) == "psum:fp32[0:4,+28,8x-1]" and parse_ap(str(neg)) == neg
    with pytest.raises(VerifyError, match="cannot parse"):
        parse_ap("sbuf[0:4]")


aps = st.builds(
    AccessPattern,
    memory=st.sampled_from(["sbuf", "psum"]),
    dtype=st.sampled_from(["fp32", "bf16", "fp8_e4m3", "int32"]),
    partition_start=st.integers(0, 127),
    partitions=st.integers(1, 128),
    free=st.lists(st.tuples(st.integers(-300, 300), st.integers(1, 600)), min_size=1, max_size=4).map(tuple),
    offset=st.integers(0, 4096),
) | st.builds(
    lambda t, d, p0, n, ps, free, off: AccessPattern("hbm", d, p0, n, free, off, ps, t),
    st.sampled_from(["a", "w_1", None]), st.sampled_from(["fp32", "bf16"]), st.integers(0, 9), st.integers(1, 9),
    st.integers(0, 999), st.lists(st.tuples(st.integers(-9, 9), st.integers(1, 9)), min_size=1, max_size=4).map(tuple),
    st.integers(0, 99),
)


@given(aps)
def test_ap_text_round_trip(ap: AccessPattern) -> None:
    assert parse_ap(str(ap)) == ap


def small_program() -> Program:
    b = ProgramBuilder()
    a = b.tensor("a", (128, 64), "bf16", "input")
    out = b.tensor("out", (128, 64), "fp32", "output")
    t = tile("sbuf", "bf16", (128, 64))
    r = tile("sbuf", "fp32", (128, 64), offset=128)
    b.emit("sync", DmaCopy(t, a.ap(), signal=("loaded",)))
    b.emit("scalar", Activation(r, t, "exp", scale=0.5, wait=(("loaded", 1),), signal=("done",)))
    b.emit("sync", DmaCopy(out.ap(), r, queue=1, wait=(("done", 1),)))
    return b.build()


GOLDEN = """\
# trnsim program
program rounding=rne seed=0
tensor a (128,64) bf16 input
tensor out (128,64) fp32 output
engine scalar
  activation dst=sbuf:fp32[0:128,+128,64x1] src=sbuf:bf16[0:128,+0,64x1] func=exp scale=0.5 wait=loaded>=1 signal=done
engine sync
  dma_copy dst=sbuf:bf16[0:128,+0,64x1] src=hbm:a:bf16[0:128/64,+0,64x1] signal=loaded
  dma_copy dst=hbm:out:fp32[0:128/64,+0,64x1] src=sbuf:fp32[0:128,+128,64x1] queue=1 wait=done>=1
"""


def test_golden_text() -> None:
    p = small_program()
    assert str(p) == GOLDEN
    assert parse(GOLDEN) == p
    p.verify(SPEC)


def test_parse_errors_name_the_line() -> None:
    with pytest.raises(VerifyError, match=r"line 3.*unknown instruction 'frobnicate'"):
        parse("program rounding=rne seed=0\nengine vector\n  frobnicate dst=x\n")
    with pytest.raises(VerifyError, match=r"line 2.*has no field 'colour'"):
        parse("engine vector\n  memset dst=sbuf:fp32[0:1,+0,1x1] value=1.0 colour=red\n")


onchip = st.builds(lambda p, n, o: tile("sbuf", "fp32", (p, n), offset=4 * o), st.sampled_from([32, 64, 128]),
                   st.integers(1, 64), st.integers(0, 100))
finite = st.floats(allow_nan=False, width=32)
sems = st.sampled_from(["s0", "s1", "dep"])
sync_kw = st.fixed_dictionaries({"wait": st.lists(st.tuples(sems, st.integers(1, 3)), max_size=2).map(tuple),
                                 "signal": st.lists(sems, max_size=2).map(tuple)})
instructions = st.one_of(
    st.builds(lambda d, v, kw: ("vector", Memset(d, v, **kw)), onchip, finite, sync_kw),
    st.builds(lambda d, s, op, x, kw: ("scalar", TensorScalar(d, s, op, x, op1="max", scalar1=0.0, **kw)),
              onchip, onchip, st.sampled_from(["add", "mul", "pow"]), finite | onchip, sync_kw),
    st.builds(lambda d, a, b, kw: ("gpsimd", TensorTensor(d, a, b, "sub", **kw)), onchip, onchip, onchip, sync_kw),
    st.builds(lambda d, s, f, acc, kw: ("scalar", Activation(d, s, f, bias=-1.5, accumulate=acc, **kw)),
              onchip, onchip, st.sampled_from(["gelu", "silu"]), st.none() | onchip, sync_kw),
    st.builds(lambda kw: ("tensor", Nop(**kw)), sync_kw),
)


@settings(max_examples=60)
@given(st.lists(instructions, max_size=8), st.sampled_from(["rne", "stochastic"]), st.integers(0, 2**31))
def test_program_text_round_trip(items: list[tuple[str, object]], rounding: str, seed: int) -> None:
    b = ProgramBuilder()
    b.tensor("x", (4, 8), "bf16", "input")
    for engine, ins in items:
        b.emit(engine, ins)  # type: ignore[arg-type]
    p = b.build(rounding, seed)
    assert parse(str(p)) == p


# ---------------------------------------------------------------- verifier


def verify_one(engine: str, ins: object) -> None:
    b = ProgramBuilder()
    b.tensor("x", (128, 64), "fp32", "input")
    b.emit(engine, ins)  # type: ignore[arg-type]
    b.build().verify(SPEC)


def mm(**kw: object) -> Matmul:
    base = Matmul(tile("psum", "fp32", (128, 512)), tile("sbuf", "bf16", (128, 128)), tile("sbuf", "bf16", (128, 512)))
    return replace(base, **kw)  # type: ignore[arg-type]


def test_legal_matmul_passes() -> None:
    verify_one("tensor", mm())


@pytest.mark.parametrize(
    "engine,ins,pattern",
    [
        ("vector", mm(), r"vector\[0\] matmul .*cannot run on vector"),
        ("vector", Activation(tile("sbuf", "fp32", (4, 4)), tile("sbuf", "fp32", (4, 4)), "exp"),
         "activation cannot run on vector"),
        ("tensor", mm(moving=tile("sbuf", "bf16", (128, 513))), "moving free size 513 > 512"),
        ("tensor", mm(dst=tile("psum", "fp32", (128, 512), offset=1024)), "cross a PSUM bank"),
        ("tensor", mm(stationary=tile("sbuf", "fp32", (128, 128)), moving=tile("sbuf", "int32", (128, 512))),
         "int32 is not a TensorE input"),
        ("tensor", mm(stationary=tile("sbuf", "mxfp8_e4m3", (128, 128))), "needs scale"),
        ("tensor", mm(sparsity="2:4", stationary=tile("sbuf", "bf16", (64, 128))), "needs stationary_index"),
        ("vector", Memset(tile("sbuf", "fp32", (64, 4), partition_start=32), 0.0),
         "64 partitions may not start at partition 32"),
        ("vector", Memset(tile("sbuf", "fp32", (16, 4), partition_start=16), 0.0),
         "16 partitions may not start at partition 16"),
        ("vector", Memset(hbm("x", "fp32", (128, 64)), 0.0), "compute engines cannot access HBM"),
        ("vector", Memset(tile("sbuf", "fp32", (128, 8), offset=SPEC.core.sbuf.bytes_per_partition - 16), 0.0),  # type: ignore[union-attr]
         "outside sbuf"),
        ("vector", Memset(tile("sbuf", "fp32", (128, 8), offset=2), 0.0), "not aligned"),
        ("sync", DmaCopy(tile("sbuf", "fp32", (128, 65)), hbm("x", "fp32", (128, 64))), "sizes differ"),
        ("sync", DmaCopy(tile("sbuf", "fp32", (128, 64)), hbm("x", "fp32", (128, 64), offset=4)), "outside tensor x"),
        ("sync", DmaCopy(tile("sbuf", "fp32", (128, 64)), hbm("nope", "fp32", (128, 64))), "'nope' is not declared"),
        ("sync", DmaScatter(hbm("x", "fp32", (128, 64)), tile("sbuf", "fp32", (4, 64)),
                            tile("sbuf", "fp32", (4, 1), offset=512)), r"index is \(4, 1\) fp32"),
        ("sync", DmaScatter(hbm("x", "fp32", (128, 64)), tile("sbuf", "fp32", (4, 64)),
                            tile("sbuf", "int32", (8, 1), offset=512)), r"index is \(8, 1\) int32"),
        ("sync", DmaScatter(hbm("x", "fp32", (128, 64)), tile("sbuf", "fp32", (4, 32)),
                            tile("sbuf", "int32", (4, 1), offset=512)), "row sizes differ: table 64, tile 32"),
        ("vector", TensorTensor(*[tile("sbuf", "fp32", (4, 4))] * 3, op="xor"), "bitwise op xor on float"),
        ("vector", TensorScalar(tile("sbuf", "fp32", (4, 4)), tile("sbuf", "fp32", (4, 4)), "add",
                                tile("sbuf", "fp32", (4, 2))), "per-partition scalar"),
    ],
)
def test_verifier_rejects(engine: str, ins: object, pattern: str) -> None:
    with pytest.raises(VerifyError, match=pattern) as err:
        verify_one(engine, ins)
    assert f"{engine}[0]" in str(err.value) and "hint:" in str(err.value)


def test_dangling_wait() -> None:
    b = ProgramBuilder()
    b.emit("vector", Nop(signal=("s",)))
    b.emit("scalar", Nop(wait=(("s", 2),)))
    with pytest.raises(VerifyError, match=r"scalar\[0\] nop wait=s>=2.*dangling wait.*signals s 1 time"):
        b.build().verify(SPEC)


def test_circular_wait() -> None:
    b = ProgramBuilder()
    b.emit("vector", Nop(wait=(("b", 1),)), Nop(signal=("a",)))
    b.emit("scalar", Nop(wait=(("a", 1),)), Nop(signal=("b",)))
    with pytest.raises(VerifyError, match=r"circular wait.*vector\[0\].*b>=1 \(at 0\).*scalar\[0\]"):
        b.build().verify(SPEC)


def test_semaphores_that_resolve_pass() -> None:
    b = ProgramBuilder()
    b.emit("vector", Nop(wait=(("b", 1),)), Nop(signal=("a",)))
    b.emit("scalar", Nop(signal=("b",)), Nop(wait=(("a", 1),)))
    b.build().verify(SPEC)


def test_matmul_text_round_trip_and_operands() -> None:
    s, v = tile("sbuf", "mxfp8_e4m3", (64, 32)), tile("sbuf", "mxfp4_e2m1", (64, 16), offset=64)
    ss, vs = tile("sbuf", "e8m0", (2, 32), offset=128), tile("sbuf", "e8m0", (2, 16), offset=192)
    acc = tile("psum", "fp32", (32, 16))
    ins = Matmul(acc, s, v, accumulate=True, stationary_scale=ss, moving_scale=vs, wait=(("ld", 2),), signal=("mm",))
    b = ProgramBuilder()
    b.emit("tensor", ins)
    p = b.build()
    assert parse(str(p)) == p
    verify_one("tensor", replace(ins, wait=()))  # alone, its wait would be dangling
    assert ins.writes() == (acc,) and set(ins.reads()) == {s, v, ss, vs, acc}  # accumulate reads PSUM too
    sparse = Matmul(acc, tile("sbuf", "bf16", (32, 32)), tile("sbuf", "bf16", (64, 16), offset=64), sparsity="2:4",
                    stationary_index=tile("sbuf", "uint8", (32, 32), offset=256))
    assert sparse.contraction == 64
    assert parse(str(replace(p, streams={"tensor": (sparse,)}))).stream("tensor") == (sparse,)
    verify_one("tensor", sparse)


@pytest.mark.parametrize("func", ["sin", "cos", "tan", "arctan", "log1p", "expm1", "cbrt"])
def test_scalar_engine_maths_functions_verify_and_round_trip_the_text_form(func: str) -> None:
    b = ProgramBuilder()
    src, dst = tile("sbuf", "fp32", (128, 64)), tile("sbuf", "bf16", (128, 64), offset=256)
    b.emit("scalar", Activation(dst, src, func, scale=2.0, bias=-0.5))
    p = b.build()
    assert f"func={func} " in str(p)
    assert parse(str(p)) == p
    p.verify(SPEC)
    with pytest.raises(VerifyError, match=r"(?s)unknown function 'atan2'.*use one of: .*arctan"):
        verify_one("scalar", Activation(dst, src, "atan2"))    # composed by the compiler, not a ScalarE function


def test_dma_scatter_verifies_round_trips_the_text_form_and_names_its_operands() -> None:
    """The indirect write: ``dst`` is the table (read by nothing), ``src`` the rows, ``index`` one int32 per row."""
    table, rows, index = hbm("x", "fp32", (128, 64)), tile("sbuf", "fp32", (4, 64)), tile("sbuf", "int32", (4, 1),
                                                                                          offset=512)
    ins = DmaScatter(table, rows, index, queue=3, wait=(("ld", 1),), signal=("sc",))
    b = ProgramBuilder()
    b.tensor("x", (128, 64), "fp32", "input")
    b.emit("vector", Nop(signal=("ld",)))
    b.emit("sync", ins)
    p = b.build()
    assert "dma_scatter dst=hbm:x:fp32[0:128/64,+0,64x1] src=sbuf:fp32[0:4,+0,64x1]" in str(p)
    assert parse(str(p)) == p
    p.verify(SPEC)
    assert ins.writes() == (table,) and set(ins.reads()) == {rows, index}
