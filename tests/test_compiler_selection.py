"""Selection steps: the sort ``jax.lax.top_k`` becomes is lowered to the library's top-k kernel, other sorts of
JAX's comparators to the sort kernel, argmax reduces to the argmax kernel, all timed by the instruction-level
model; large kernels are sampled; what the kernels cannot take keeps the analytic cost."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim import kernels
from trnsim.compiler import selection


def _plan(fn, *shapes):  # type: ignore[no-untyped-def]
    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    return trnsim.compile(jax.jit(fn).lower(*args), cache=False)


@pytest.mark.parametrize("dtype,dsl", [(jnp.float32, "fp32"), (jnp.bfloat16, "bf16")])
def test_top_k_sort_is_the_topk_kernel(dtype: object, dsl: str) -> None:
    program = _plan(lambda x: jax.lax.top_k(x, 5), ((4, 100, 64), dtype))
    (step,) = [s for s in program.plan.steps if "sort" in s.ops]
    assert step.kernel == "topk" and step.ops == ["iota", "sort"]
    want = selection.topk_time("trn3", selection.TopK(400, 64, 5, dsl))
    assert step.seconds == want.seconds and step.busy == want.busy and step.busy["vector"] > 0
    x = np.random.default_rng(0).integers(-3, 4, (4, 100, 64)).astype(dtype)  # ties
    got = trnsim.jit(lambda v: jax.lax.top_k(v, 5))(x)
    ref = jax.lax.top_k(x, 5)
    assert all(np.array_equal(np.asarray(g), np.asarray(r)) for g, r in zip(got, ref, strict=True))


@pytest.mark.parametrize("fn,kernels", [
    (lambda x: jnp.sort(x, axis=-1), {"sort"}),                   # no index operand
    (lambda x: jnp.argsort(x, axis=-1)[..., :3], {"sort"}),       # ascending
    (lambda x: jax.lax.top_k(x, 3)[0] + jnp.sort(x)[..., :3], {"topk", "sort"}),
    (lambda x: jax.lax.top_k(x.T, 3), {"topk"}),                  # a transpose, then the last axis
])
def test_only_top_k_sorts_lower_to_the_topk_kernel(fn: object, kernels: set[str]) -> None:
    program = _plan(fn, ((64, 48), jnp.float32))
    assert {s.kernel for s in program.plan.steps if "sort" in s.ops} == kernels


def test_topk_for_requires_every_read_to_be_a_leading_slice() -> None:
    program = _plan(lambda x: jax.lax.sort((x, jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)), num_keys=1,
                                           is_stable=True), ((64, 48), jnp.float32))
    (step,) = [s for s in program.plan.steps if "sort" in s.ops]
    assert step.kernel == "sort"  # ascending, and its whole results are returned: the sort kernel


def test_many_row_tiles_are_sampled_within_two_percent() -> None:
    top = selection.TopK(128 * 48, 256, 12, "fp32")
    sampled = selection.topk_time("trn3", top)
    whole = selection._timed("trn3", top)  # pyright: ignore[reportPrivateUsage]
    assert abs(sampled.seconds - whole.seconds) <= 0.02 * whole.seconds


@pytest.mark.parametrize("fn,shape,dtype", [
    (lambda x: jnp.argmax(x, axis=-1), (300, 77), jnp.float32),
    (lambda x: jnp.argmin(x, axis=0), (50, 130), jnp.bfloat16),
    (lambda x: jnp.argmax(x), (1000,), jnp.float16),
    (lambda x: jax.lax.argmin(x, 1, jnp.int32), (6, 40, 3), jnp.int16),     # strided views of [40, 3] slabs
    (lambda x: jnp.argmax(x, axis=1), (3, 40, 300), jnp.float32),              # transposed loads
    (lambda x: jnp.argmax(x, axis=-1), (64, 48), jnp.int32),
    (lambda x: jnp.argmin(x), (50_000,), jnp.float32),        # one row over the partitions
])
def test_argmax_reduce_is_the_argmax_kernel(fn: Any, shape: tuple[int, ...], dtype: Any) -> None:
    program = _plan(fn, (shape, dtype))
    kernels = {s.kernel for s in program.plan.steps if "reduce" in s.ops}
    assert kernels == {"argmax"}
    (step,) = [s for s in program.plan.steps if "reduce" in s.ops]
    assert step.busy["vector"] > 0 and step.instructions["vector"] > 0
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, shape).astype(dtype)   # ties
    if dtype == jnp.int32:
        x[:, ::5] = rng.integers(2**24, 2**24 + 3, x[:, ::5].shape)   # beyond fp32's integers
    if jnp.issubdtype(dtype, jnp.floating):
        x[..., 0] = np.nan
        x.reshape(-1)[::7] = np.nan
    got = trnsim.jit(fn)(x)
    assert np.array_equal(np.asarray(got), np.asarray(fn(x)))


def test_argmax_time_matches_the_kernel_and_is_sampled_for_many_rows() -> None:
    program = _plan(lambda x: jnp.argmax(x, axis=-1), ((512, 1000), jnp.float32))
    (step,) = [s for s in program.plan.steps if "reduce" in s.ops]
    want = selection.argmax_time("trn3", selection.ArgMax(512, 1000, 1, "fp32", False))
    assert step.seconds == want.seconds and step.dma_bytes == want.hbm_bytes
    for arg in (selection.ArgMax(128 * 48, 256, 1, "fp32", True),      # 128 rows a tile
                selection.ArgMax(5120, 30, 40, "bf16", False),          # strided views, 128 o a tile
                selection.ArgMax(1500, 300, 40, "fp32", False)):        # transposed loads, 3 o a tile
        sampled = selection.argmax_time("trn3", arg)
        whole = selection._arg_timed("trn3", arg)  # pyright: ignore[reportPrivateUsage]
        assert abs(sampled.seconds - whole.seconds) <= 0.02 * whole.seconds


def _mixing(a: Any, b: Any) -> tuple[Any, Any]:
    """A variadic reducer whose second result depends on both operands (an argmax with the last of equal
    values, not jax's first): neither the argmax kernel's form nor one a canonicalisation splits."""
    return jnp.maximum(a[0], b[0]), jnp.where(a[0] > b[0], a[1], b[1])


@pytest.mark.parametrize("fn,dtype", [
    (lambda x: jax.lax.reduce((x, jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)), (-jnp.inf, 0), _mixing, (1,))[1],
     jnp.float32),                                            # another variadic body
])
def test_other_variadic_reduces_keep_the_analytic_cost(fn: Any, dtype: Any) -> None:
    program = _plan(fn, ((64, 48), dtype))
    assert {s.kernel for s in program.plan.steps if "reduce" in s.ops} == {"vector_reduce"}


def test_the_positions_iota_is_absorbed_unless_something_else_reads_it() -> None:
    """The argmax and top-k kernels make positions themselves: the iota they pair with the values is not a
    step of its own (nor written to HBM); another variadic reduce reads its iota from HBM."""
    program = _plan(lambda x: (jnp.argmax(x, axis=-1), jax.lax.top_k(x, 3)), ((64, 48), jnp.float32))
    ops = sorted(s.ops for s in program.plan.steps if s.kernel in ("argmax", "topk"))
    assert ops == [["iota", "reduce"], ["iota", "sort"]]
    assert not [s for s in program.plan.steps if s.ops == ["iota"]]
    shared = _plan(lambda x: jax.lax.reduce((x, jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)), (-jnp.inf, 0),
                                            _mixing, (1,)), ((64, 48), jnp.float32))
    assert all(s.ops != ["iota", "reduce"] for s in shared.plan.steps)


# ---- general sorts --------------------------------------------------------------------------------------

SORTS: list[tuple[Any, list[tuple[tuple[int, ...], Any]]]] = [
    (lambda x: jnp.sort(x), [((64, 100), jnp.float32)]),
    (lambda x: jnp.argsort(x, axis=0), [((37, 6), jnp.bfloat16)]),                       # transposed rows
    (lambda x: jnp.argsort(x, descending=True), [((130, 300), jnp.int32)]),              # reverse, sort, reverse
    (lambda x: jnp.sort(x, axis=1, descending=True), [((3, 50, 4), jnp.float16)]),
    (lambda x, y: jax.lax.sort((x, y), num_keys=2), [((20, 33), jnp.bfloat16), ((20, 33), jnp.uint32)]),
    (lambda x, y: jax.lax.sort_key_val(x, y), [((128, 1000), jnp.int16), ((128, 1000), jnp.float32)]),
    (lambda x, y, z: jax.lax.sort((x, y, z), num_keys=1, is_stable=True),
     [((8, 17), jnp.uint8), ((8, 17), jnp.int8), ((8, 17), jnp.uint16)]),
]


@pytest.mark.parametrize("fn,shapes", SORTS)
def test_jax_sorts_are_the_sort_kernel_and_match_jax(fn: Any, shapes: list[tuple[tuple[int, ...], Any]]) -> None:
    program = _plan(fn, *shapes)
    steps = [s for s in program.plan.steps if "sort" in s.ops]
    assert {s.kernel for s in steps} == {"sort"}
    assert all(s.busy["vector"] > 0 and s.instructions["vector"] > 0 for s in steps)
    rng = np.random.default_rng(2)
    args = []
    for shape, dtype in shapes:
        x = rng.integers(-3, 4, shape).astype(np.float32)   # ties
        if jnp.issubdtype(dtype, jnp.floating):
            x.reshape(-1)[::7] = np.nan
            x.reshape(-1)[::5] = -0.0
        args.append(np.asarray(x).astype(dtype) if jnp.issubdtype(dtype, jnp.floating) else
                    rng.integers(0, 4, shape).astype(dtype))
    got = trnsim.jit(fn)(*args)
    want = fn(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert np.array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8))


def test_sort_time_matches_the_kernel_and_is_sampled_for_many_rows() -> None:
    program = _plan(lambda x: jnp.argsort(x, axis=-1), ((300, 64), jnp.float32))
    (step,) = [s for s in program.plan.steps if "sort" in s.ops]
    want = selection.sort_time("trn3", selection.Sort(300, 64, 1, ("fp32",), 1, False, (), True))
    assert step.seconds == want.seconds and step.dma_bytes == want.hbm_bytes
    for srt in (selection.Sort(128 * 34, 20, 1, ("fp32",), 1, False, (), True),
                selection.Sort(17, 12, 200, ("bf16", "int32"), 1, False, (0, 1), False),
                selection.Sort(1, 8, 128 * 34, ("fp32",), 1, True, (0,), False)):   # the tiles of one o
        sampled = selection.sort_time("trn3", srt)
        whole = selection._sort_timed("trn3", srt)  # pyright: ignore[reportPrivateUsage]
        assert abs(sampled.seconds - whole.seconds) <= 0.02 * whole.seconds


def test_short_rows_pack_a_partition_and_are_sampled_by_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of 20 go 128 a partition (``pack``): 5 tiles of 128 · 128 rows, sampled on 2 and 4."""
    monkeypatch.setattr(selection, "SAMPLE_TILES", 2)
    srt = selection.Sort(5 * 128 * 128, 20, 1, ("fp32",), 1, False, (0,), True)
    assert srt.tiles_per_outer == 1 / (128 * 128)
    sampled = selection.sort_time("trn3", srt)
    whole = selection._sort_timed("trn3", srt)  # pyright: ignore[reportPrivateUsage]
    assert abs(sampled.seconds - whole.seconds) <= 0.02 * whole.seconds


@pytest.mark.parametrize("fn,shape,dtype", [
    (lambda x: jnp.sort(x), (2, 2**22), jnp.float32),                    # positions beyond the kernel's
    (lambda x: sum(jax.lax.sort((x, x + 1, x + 2, x + 3, x + 4), num_keys=1)), (4, 40), jnp.float32),  # 5 read
    (lambda x: jax.lax.sort(x, is_stable=True), (4, 40), jnp.bool_),
    (lambda x: jnp.sort(x), (2, 9000), jnp.float32),                     # few long rows (FEW_ROWS_MAX_COLS)
    (lambda x: jnp.sort(x), (5000,), jnp.float32),
])
def test_other_sorts_keep_the_analytic_cost(fn: Any, shape: tuple[int, ...], dtype: Any) -> None:
    program = _plan(fn, (shape, dtype))
    assert {s.kernel for s in program.plan.steps if "sort" in s.ops} == {"gpsimd_sort"}


@pytest.mark.parametrize("dtype,dsl", [(jnp.int32, "int32"), (jnp.uint32, "uint32"), (jnp.int16, "int16"),
                                       (jnp.uint8, "uint8")])
def test_integer_top_k_is_the_topk_kernel(dtype: Any, dsl: str) -> None:
    """The legalized sort compares integers GT as their type orders (no TOTALORDER): still the top-k kernel,
    exact for 32-bit values fp32 cannot tell apart."""
    program = _plan(lambda x: jax.lax.top_k(x, 5), ((4, 30, 64), dtype))
    (step,) = [s for s in program.plan.steps if "sort" in s.ops]
    assert step.kernel == "topk" and step.ops == ["iota", "sort"]
    assert step.seconds == selection.topk_time("trn3", selection.TopK(120, 64, 5, dsl)).seconds
    info = jnp.iinfo(dtype)
    rng = np.random.default_rng(1)
    base = np.array([info.min, info.max, 2**24 % (int(info.max) + 1), 0, 1, 7], np.int64)
    x = rng.choice(np.concatenate([base, base + 1]).clip(int(info.min), int(info.max)), (4, 30, 64)).astype(dtype)
    got = trnsim.jit(lambda v: jax.lax.top_k(v, 5))(x)
    ref = jax.lax.top_k(x, 5)
    assert all(np.array_equal(np.asarray(g), np.asarray(r)) for g, r in zip(got, ref, strict=True))


def test_long_int32_rows_keep_the_analytic_cost() -> None:
    from trnsim.kernels.selection import MAX_SPLIT_ROW

    program = _plan(lambda x: jax.lax.top_k(x, 5), ((2, MAX_SPLIT_ROW + 1), jnp.int32))
    assert [s.kernel for s in program.plan.steps if "sort" in s.ops] != ["topk"]


def test_bool_top_k_is_the_topk_kernel_on_the_bytes() -> None:
    """A bool is its byte (0 or 1), false < true as unsigned bytes: the uint8 top-k kernel, run on the
    bytes, gives lax.top_k's values and indices (ties lowest index first)."""
    program = _plan(lambda x: jax.lax.top_k(x, 3), ((130, 9), jnp.bool_))
    (step,) = [s for s in program.plan.steps if "sort" in s.ops]
    assert step.kernel == "topk"
    x = np.random.default_rng(5).random((130, 9)) > 0.6
    values, indices = kernels.topk(x.astype(np.uint8), 3, "uint8")
    ref = jax.lax.top_k(x, 3)
    assert np.array_equal(values.astype(bool), np.asarray(ref[0])) and np.array_equal(indices, np.asarray(ref[1]))
