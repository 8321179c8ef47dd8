"""Generated tile code for groups with a broadcast along middle axes (an attention mask over heads ``[B, S] →
[B, H, S]``, a GQA head repeat ``[B, T, kv, d] → [B, T, kv, rep, d]``, a per-channel table over space ``[N, C] →
[N, H, W, C]``, a value per row ``[B] → [B, H, S]``): the table's rows reach the tile by DMAs through a stride-0
source (``recipe.repeat_runs``), and the kernel on the functional simulator gives the interpreter's values bit
for bit."""

from __future__ import annotations

from math import prod

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_compiler_tilegen import _bit_exact, _check_step, _compile, _recipe
from trnsim.compiler import tilegen
from trnsim.compiler.tilegen.recipe import repeat_runs
from trnsim.isa.dma import DmaCopy

DTYPES = ["float32", "bfloat16", "int32"]


def _table(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "int32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:4] = [-0.0, 0.0, np.inf, -np.inf][: x.size]       # signed zeros and infinities stay exact
    return x.astype(jnp.bfloat16) if dtype == "bfloat16" else x


@pytest.mark.parametrize("repeats", [1, 2, 3, 5])
@pytest.mark.parametrize("q", [1, 2, 3, 4])
def test_repeat_runs_cover_every_row_once_with_its_table_row(repeats: int, q: int) -> None:
    """Exhaustive over small tables: the DMAs of any block of rows, read in index order, are the rows of the
    broadcast in order (row ``(o · R + m) · q + i`` of the space is table row ``o``, piece ``i``)."""
    width, outer = 2, 4
    table = np.arange(outer * q * width).reshape(outer, q * width)
    space = np.broadcast_to(table.reshape(outer, 1, q * width), (outer, repeats, q * width)).reshape(-1, width)
    for r0 in range(len(space)):
        for n in range(1, len(space) - r0 + 1):
            for ways in (1, 3):
                got = np.zeros((n, width), table.dtype)
                row = 0
                for at, o, k_o, k_m, c0, c1 in repeat_runs(r0, n, repeats, q, width, ways):
                    assert at == row and k_o * k_m * (c1 - c0) % width == 0
                    src = np.broadcast_to(table[o:o + k_o, None, c0:c1], (k_o, k_m, c1 - c0))
                    rows = src.size // width
                    got[at:at + rows] = src.reshape(rows, width)
                    row += rows
                assert row == n
                np.testing.assert_array_equal(got, space[r0:r0 + n])


def _broadcast(t: jax.Array, outer: tuple[int, ...], middle: tuple[int, ...], inner: tuple[int, ...]) -> jax.Array:
    """``t[*outer, *inner]`` broadcast along new middle axes: ``[*outer, *middle, *inner]``."""
    dims = (*range(len(outer)), *range(len(outer) + len(middle), len(outer) + len(middle) + len(inner)))
    return jax.lax.broadcast_in_dim(t, (*outer, *middle, *inner), dims)


@settings(max_examples=30, deadline=None)
@given(outer=st.sampled_from([(1,), (3,), (2, 3)]), middle=st.sampled_from([(1,), (3,), (2, 5), (130,)]),
       inner=st.sampled_from([(7,), (64,), (3, 40), (200,)]), dtype=st.sampled_from(DTYPES),
       form=st.sampled_from(["alone", "add", "chain", "row"]), seed=st.integers(0, 2**16))
def test_middle_axis_broadcasts_are_generated_and_bit_exact(outer: tuple[int, ...], middle: tuple[int, ...],
                                                             inner: tuple[int, ...], dtype: str, form: str,
                                                             seed: int) -> None:
    """Tables broadcast along middle axes, alone or followed by elementwise ops; rows that 128 does not divide,
    middle axes of 1 and of more than 128 rows; a value per row (``row``: the table lacks the last axis)."""
    rng = np.random.default_rng(seed)
    full = (*outer, *middle, *inner)
    x = _table(rng, full, dtype)
    if form == "row":
        t = _table(rng, (*outer, *inner[:-1]), dtype)

        def fn(t: jax.Array, x: jax.Array) -> jax.Array:
            spread = _broadcast(t[..., None], outer, middle, (*inner[:-1], 1))
            return x * jnp.broadcast_to(spread, full)
    else:
        t = _table(rng, (*outer, *inner), dtype)

        def fn(t: jax.Array, x: jax.Array) -> jax.Array:
            spread = _broadcast(t, outer, middle, inner)
            if form == "alone":
                return spread
            if form == "add":
                return x + spread
            return jnp.where(x > spread, jnp.maximum(x, spread) * 2, spread - x)

    args = [t] if form == "alone" else [t, x]
    program = _compile(fn if form != "alone" else lambda t: fn(t, jnp.zeros(())), *args)
    recipes = _bit_exact(program, args)
    if prod(middle) > 1 and prod(outer) > 1:
        kinds = {k for r in recipes for _, k in r.inputs}
        assert kinds & {"rep", "rep_row"}, kinds


def test_an_attention_mask_over_heads_before_a_softmax_is_one_generated_kernel() -> None:
    """``softmax(scores + mask[:, None, None, :])`` over [B, H, T, S]: the mask's row repeated H · T times, one
    DMA per table row a tile holds, the softmax along the rows as before."""
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((2, 4, 40, 96)).astype(np.float32)
    mask = np.where(rng.random((2, 96)) < 0.2, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0                                                # every row keeps a key
    program = _compile(lambda s, m: jax.nn.softmax(s + m[:, None, None, :], axis=-1), scores, mask)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [scores, mask], 0, 2e-6)
    assert ("fp32", "rep") in recipe.inputs and recipe.repeats[recipe.inputs.index(("fp32", "rep"))] == 160
    program = tilegen.kernel_program("trn3", recipe)
    spread = [ins for _, _, ins in program.instructions() if isinstance(ins, DmaCopy) and not ins.src.on_chip
              and any(stride == 0 for stride, _ in ins.src.free)]
    assert len(spread) == 4          # 320 rows, 160 per mask row: one DMA per tile, two where a tile spans two


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_gqa_head_repeat_is_a_generated_copy_through_a_stride_0_source(dtype: str) -> None:
    """``jnp.repeat`` of key/value heads ([B, T, kv, d] → [B, T, kv · rep, d]): no instruction but DMAs, a few per
    tile (period 3 rows does not divide a tile), exact."""
    k = _table(np.random.default_rng(6), (2, 40, 2, 64), dtype)
    program = _compile(lambda k: jnp.repeat(k, 3, axis=2), k)
    (recipe,) = _bit_exact(program, [k])
    assert recipe.steps == () and recipe.inputs == (("bf16" if dtype == "bfloat16" else "fp32", "rep"),)
    assert recipe.repeats == (3,) and tilegen.input_shapes(recipe) == ((160, 64),)


def test_broadcasts_along_two_separate_blocks_of_middle_axes_keep_the_analytic_cost() -> None:
    """``[A, C, E] → [A, B, C, D, E]``: two gaps (one stride-0 level per DMA) is not a table of rows."""
    t = np.ones((2, 3, 8), np.float32)
    x = np.ones((2, 4, 3, 5, 8), np.float32)
    program = _compile(lambda t, x: x + t[:, None, :, None, :], t, x)
    assert _recipe(program) is None
    assert program.plan.steps[0].kernel == "fused_elementwise"
