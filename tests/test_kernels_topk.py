"""VectorE's selection instructions (max8, find_index8, match_replace8) and the top-k kernel built on them:
the instructions' semantics on edge cases, the verifier's and the kernel language's errors, the text form,
and top-k against ``jax.lax.top_k`` bit for bit (values and indices) over shapes, dtypes, ties, infinities,
signed zeros and NaNs."""

from __future__ import annotations

import doctest

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, hw
from trnsim.dsl.errors import KernelError
from trnsim.isa import FindIndex8, MatchReplace8, Max8, ProgramBuilder, parse, tile
from trnsim.isa.base import Engine, Instruction
from trnsim.isa.dtypes import VerifyError
from trnsim.kernels import selection as topk_module
from trnsim.kernels import topk, topk_kernel
from trnsim.sim.harness import run_on_tiles

NAN, INF = float("nan"), float("inf")


def select(x: np.ndarray, vals: np.ndarray | None = None, imm: float = -1e9) -> dict[str, np.ndarray]:
    """Run max8 on ``x`` (or take ``vals``), then find_index8 and match_replace8 with those values."""
    p, f = x.shape
    src, v = tile("sbuf", "fp32", (p, f)), tile("sbuf", "fp32", (p, 8), offset=4 * f)
    ix, r = tile("sbuf", "uint32", (p, 8), offset=4 * f + 64), tile("sbuf", "fp32", (p, f), offset=4 * f + 128)
    feed = {"x": (x, src)}
    compute: list[tuple[Engine, Instruction]] = [("vector", FindIndex8(ix, src, v)),
                                                 ("vector", MatchReplace8(r, src, v, imm))]
    if vals is None:
        compute.insert(0, ("vector", Max8(v, src)))
    else:
        feed["vals"] = (vals, v)
    return run_on_tiles(compute, feed, {"v": v, "i": ix, "r": r}).outputs


def test_max8_orders_by_ieee_total_order_and_keeps_ties_in_place() -> None:
    x = np.array([[1.0, NAN, -0.0, 0.0, INF, -INF, 1.0, 2.0, -NAN, 5.0]], np.float32)
    out = select(x)
    assert np.array_equal(out["v"].view(np.uint32), x[0, [1, 4, 9, 7, 0, 6, 3, 2]].view(np.uint32)[None])
    assert out["i"].tolist() == [[1, 4, 9, 7, 0, 6, 3, 2]]
    replaced = np.full(10, -1e9, np.float32)
    replaced[[5, 8]] = x[0, [5, 8]]
    assert np.array_equal(out["r"][0].view(np.uint32), replaced.view(np.uint32))


def test_find_index8_takes_successive_occurrences_and_reports_missing_values() -> None:
    x = np.array([[3.0, 1.0, 3.0, 7.0, 3.0, 0.0, 1.0, 9.0, 9.0]], np.float32)
    vals = np.array([[3.0, 3.0, 42.0, 1.0, 3.0, 3.0, -0.0, 9.0]], np.float32)
    out = select(x, vals)
    not_found = 0xFFFFFFFF
    assert out["i"].astype(np.int64).tolist() == [[0, 2, not_found, 1, 4, not_found, not_found, 7]]
    want = x.copy()
    want[0, [0, 2, 1, 4, 7]] = -1e9  # -0.0 does not match 0.0: the same bits only
    assert np.array_equal(out["r"], want)


def verify_one(ins: object) -> None:
    b = ProgramBuilder()
    b.emit("vector", ins)  # type: ignore[arg-type]
    b.build().verify(hw.get("trn3"))


@pytest.mark.parametrize("ins,pattern", [
    (Max8(tile("sbuf", "fp32", (4, 8)), tile("sbuf", "fp32", (4, 7), offset=64)), "over 7 values"),
    (Max8(tile("sbuf", "fp32", (4, 4)), tile("sbuf", "fp32", (4, 16), offset=64)), r"\(4, 4\) for 8 values"),
    (Max8(tile("sbuf", "fp32", (4, 8)), tile("sbuf", "int32", (4, 16), offset=64)), "on int32 data"),
    (FindIndex8(tile("sbuf", "fp32", (4, 8)), tile("sbuf", "fp32", (4, 16), offset=64),
                tile("sbuf", "fp32", (4, 8), offset=128)), "writes fp32 indices"),
    (FindIndex8(tile("sbuf", "uint32", (4, 8)), tile("sbuf", "fp32", (4, 16), offset=64),
                tile("sbuf", "fp32", (2, 8), offset=128)), "vals"),
    (MatchReplace8(tile("sbuf", "fp32", (4, 15)), tile("sbuf", "fp32", (4, 16), offset=64),
                   tile("sbuf", "fp32", (4, 8), offset=128)), "dst/data"),
    (Max8(tile("sbuf", "fp32", (4, 8)), tile("sbuf", "fp32", (4, 16), offset=64)).__class__(
        tile("sbuf", "fp32", (4, 8)), tile("sbuf", "fp32", (4, 16), offset=64)), None),
])
def test_verifier_checks_selection_shapes_and_types(ins: object, pattern: str | None) -> None:
    if pattern is None:
        verify_one(ins)
        return
    with pytest.raises(VerifyError, match=pattern) as err:
        verify_one(ins)
    assert "vector[0]" in str(err.value) and "hint:" in str(err.value)


def test_selection_instructions_round_trip_through_text_with_a_negative_nan() -> None:
    b = ProgramBuilder()
    b.emit("vector", Max8(tile("sbuf", "fp32", (4, 8)), tile("sbuf", "bf16", (4, 40), offset=64)),
           FindIndex8(tile("sbuf", "int32", (4, 8)), tile("sbuf", "bf16", (4, 40), offset=64),
                      tile("sbuf", "fp32", (4, 8))),
           MatchReplace8(tile("sbuf", "bf16", (4, 40), offset=64), tile("sbuf", "bf16", (4, 40), offset=64),
                         tile("sbuf", "fp32", (4, 8)), imm=float("-nan")))
    p = b.build()
    back = parse(str(p))
    assert str(back) == str(p) and "imm=-nan" in str(p)
    imm = back.streams["vector"][2].imm  # type: ignore[attr-defined]
    assert np.isnan(imm) and np.signbit(imm)


def _reference(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    v, i = jax.lax.top_k(x, k)
    return np.asarray(v), np.asarray(i)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.astype(np.float32).view(np.uint32),
                                                 b.astype(np.float32).view(np.uint32))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 700), k_frac=st.floats(0.0, 1.0),
       dtype=st.sampled_from(["fp32", "bf16"]), spread=st.sampled_from([3, 1000]), seed=st.integers(0, 2**16))
def test_topk_equals_jax_top_k(rows: int, cols: int, k_frac: float, dtype: str, spread: int, seed: int) -> None:
    """Values and indices bit for bit; ``spread`` 3 makes long runs of ties across rounds."""
    k = max(1, min(cols, round(k_frac * min(cols, 40))))
    rng = np.random.default_rng(seed)
    x = rng.integers(-spread, spread + 1, (rows, cols)).astype(np.float32) / 4
    specials = np.array([INF, -INF, -0.0, 0.0, NAN], np.float32)
    hits = rng.random((rows, cols)) < 0.05
    x[hits] = specials[rng.integers(0, len(specials), hits.sum())]
    stored = x.astype(ml_dtypes.bfloat16).astype(np.float32) if dtype == "bf16" else x
    v, i = topk(x, k, dtype)
    rv, ri = _reference(stored, k)
    assert _same_bits(v, rv) and np.array_equal(i, ri)


def test_topk_keeps_leading_axes_and_rejects_bad_k() -> None:
    x = np.arange(2 * 3 * 10, dtype=np.float32).reshape(2, 3, 10)[..., ::-1].copy()
    v, i = topk(x, 3)
    assert v.shape == i.shape == (2, 3, 3) and i[0, 0].tolist() == [0, 1, 2]
    for k in (0, 11):
        with pytest.raises(KernelError, match=f"top-{k} of rows of 10"):
            topk(x, k)
    for empty in (np.float32(1.0), np.zeros((3, 0), np.float32)):
        with pytest.raises(KernelError, match="top-1 of an array of shape"):
            topk(empty, 1)
    with pytest.raises(KernelError, match="at most 16384 values"):
        topk_kernel.compile(np.zeros((2, 16385), np.float32), k=2)


def test_topk_kernel_runs_on_vectore_and_times_per_round() -> None:
    """⌈k/8⌉ max8 + find_index8 rounds per row tile, k > 8 with match_replace8 between: more time."""
    x = np.zeros((256, 1024), np.float32)
    one, three = topk_kernel.compile(x, k=8).program, topk_kernel.compile(x, k=24).program
    kinds = [type(i).__name__ for i in three.streams["vector"]]
    assert kinds.count("Max8") == 6 and kinds.count("FindIndex8") == 6 and kinds.count("MatchReplace8") == 4
    device = trnsim.Device("trn3")
    t1 = device.run(one, timing_only=True, check=False)
    t3 = device.run(three, timing_only=True, check=False)
    assert t3.total_seconds > t1.total_seconds > 0


def test_docstrings() -> None:
    assert doctest.testmod(topk_module).failed == 0
    assert dsl.max8 is not None


def test_topk_takes_negative_infinities_after_replaced_values_in_later_rounds() -> None:
    """Rounds 2 and 3 must find the row's own -inf values, not the slots rounds 1 and 2 took out (-NaN)."""
    x = np.array([[1.0, NAN, -0.0, 0.0, INF, -INF, 1.0, 2.0, -INF, -INF, 3, 3, 3, 3, 3, 3, 3, 3, 3, -1]], np.float32)
    v, i = topk(x, 20)
    rv, ri = _reference(x, 20)
    assert _same_bits(v, rv) and np.array_equal(i, ri) and i[0, -3:].tolist() == [5, 8, 9]


INT_RANGES = {"int32": (-2**31, 2**31), "uint32": (0, 2**32), "int16": (-2**15, 2**15), "uint8": (0, 2**8)}


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 200), cols=st.integers(1, 300), k_frac=st.floats(0.0, 1.0),
       dtype=st.sampled_from(list(INT_RANGES)), near=st.booleans(), seed=st.integers(0, 2**16))
def test_integer_topk_equals_jax_top_k(rows: int, cols: int, k_frac: float, dtype: str, near: bool, seed: int) -> None:
    """Values and indices exactly, over the whole range with many ties; ``near``: values a few apart above
    2**24 (and at the type's ends), which fp32 cannot tell apart, and equal halves with different low halves."""
    k = max(1, min(cols, round(k_frac * min(cols, 30))))
    rng = np.random.default_rng(seed)
    lo, hi = INT_RANGES[dtype]
    base = rng.integers(lo, hi, 5, dtype=np.int64)
    if near:
        base = np.concatenate([base, base + 1, base - 1, base + 65536, [lo, hi - 1, 2**24, 2**24 + 1, -1, 0]])
    x = np.clip(rng.choice(base, (rows, cols)), lo, hi - 1).astype(np.dtype(dtype))
    v, i = topk(x, k)
    rv, ri = _reference(x, k)
    assert np.array_equal(v, rv.astype(np.int64)) and np.array_equal(i, ri)


def test_int32_topk_rounds_and_limits() -> None:
    """32-bit rows take more instructions a round (the key), k > 8 replaces between rounds; long rows fail."""
    x = np.zeros((128, 512), np.int32)
    program = topk_kernel.compile(x, k=20).program
    kinds = [type(i).__name__ for i in program.streams["vector"]]
    assert kinds.count("Max8") == 6 and kinds.count("FindIndex8") == 3 and kinds.count("MatchReplace8") == 2
    with pytest.raises(KernelError, match=f"at most {topk_module.MAX_SPLIT_ROW} values"):
        topk_kernel.compile(np.zeros((2, topk_module.MAX_SPLIT_ROW + 1), np.int32), k=2)
