"""Generated DMA kernels for transposes and slices: the forms chosen, that they move the data exactly on
the functional simulator, and that a transposing copy the DMA-transpose path cannot take costs more."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl
from trnsim.compiler import dmagen, dmaindex
from trnsim.hw import registry
from trnsim.isa.verify import verify


def _program(fn, x):  # type: ignore[no-untyped-def]
    return trnsim.compile(jax.jit(fn).lower(x), cache=False)


@pytest.mark.parametrize(("shape", "perm"), [((16, 64, 4, 32), (0, 2, 1, 3)), ((128, 384), (1, 0)),
                                             ((4, 8, 32, 64), (0, 1, 3, 2)), ((6, 5, 7), (2, 0, 1)),
                                             ((300, 8, 40), (1, 2, 0)), ((3, 4, 5, 6), (3, 1, 0, 2))])
def test_transposes_lower_to_dma_kernels_that_move_the_data_exactly(shape: tuple[int, ...],
                                                                    perm: tuple[int, ...]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    program = _program(lambda v: jax.numpy.transpose(v, perm), x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma" and step.ops == ["transpose"]
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    verify(kernel.compile_specs([(shape, "fp32")], "trn3", {"layout": layout}).program, registry.get("trn3"))
    moved = trnsim.run_kernel(kernel, x, layout=layout).outputs[0]
    np.testing.assert_array_equal(moved, x.transpose(perm))


def test_slices_lower_to_dma_kernels_that_move_the_data_exactly() -> None:
    x = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    program = _program(lambda v: v[3:37:2, 5:29:3], x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    moved = trnsim.run_kernel(kernel, x, layout=layout).outputs[0]
    np.testing.assert_array_equal(moved, x[3:37:2, 5:29:3])


def test_a_batched_inner_transpose_takes_the_dma_transpose_path_and_beats_element_descriptors() -> None:
    inner = dmagen.Layout("transpose", (8, 64, 64), "bf16", perm=(0, 2, 1))        # batched 2-D .T copies
    scattered = dmagen.Layout("transpose", (8, 64, 64), "bf16", perm=(1, 2, 0))    # element-sized runs
    assert dmagen.layout_time("trn3", inner).seconds < dmagen.layout_time("trn3", scattered).seconds


def test_large_batches_are_timed_on_a_sample_and_scaled() -> None:
    n = dmagen.MAX_DMAS
    small = dmagen.layout_time("trn3", dmagen.Layout("transpose", (n, 32, 32), "bf16", perm=(0, 2, 1)))
    big = dmagen.layout_time("trn3", dmagen.Layout("transpose", (4 * n, 32, 32), "bf16", perm=(0, 2, 1)))
    assert big.seconds == pytest.approx(4 * small.seconds)


def test_embedding_lookups_and_their_gradients_lower_to_the_library_kernels() -> None:
    from trnsim.kernels.embeddings import embedding_backward_kernel, embedding_kernel

    rng = np.random.default_rng(0)
    table = rng.standard_normal((64, 48)).astype(np.float32)
    ids = rng.integers(0, 64, (5, 7)).astype(np.int32)
    lookup = trnsim.compile(jax.jit(lambda t, i: t[i]).lower(table, ids), cache=False)
    assert "embedding_lookup" in [s.kernel for s in lookup.plan.steps]     # after jnp's negative-index wrap
    (expected,) = lookup.run(table, ids, timing=False)
    np.testing.assert_array_equal(trnsim.run_kernel(embedding_kernel, table, ids).outputs[0], expected)

    grad = trnsim.compile(jax.jit(jax.grad(lambda t, i: (t[i] * 3.0).sum())).lower(table, ids), cache=False)
    assert "embedding_scatter_add" in [s.kernel for s in grad.plan.steps]
    (dtable,) = grad.run(ids, timing=False)            # jax drops the table: the gradient does not read it
    dout = np.full((5, 7, 48), 3.0, np.float32)
    result = trnsim.run_kernel(embedding_backward_kernel, dout, ids, vocab=64, dtype="fp32").outputs[0]
    np.testing.assert_allclose(result, dtable, rtol=1e-6)


@pytest.mark.parametrize("pads", [((0, 0), (1, 2), (3, 0)), ((2, 1), (0, 0), (0, 0)), ((1, 1), (1, 1), (1, 1))])
def test_pads_lower_to_dma_kernels_that_fill_and_copy_exactly(pads: tuple[tuple[int, int], ...]) -> None:
    x = np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 5, 7)
    program = _program(lambda v: jax.numpy.pad(v, pads, constant_values=-1.5), x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None
    moved = trnsim.run_kernel(dmagen._kernel(), x, layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(moved, np.pad(x, pads, constant_values=-1.5))


def test_concatenations_lower_to_dma_kernels_that_copy_exactly() -> None:
    a = np.arange(2 * 5 * 7, dtype=np.float32).reshape(2, 5, 7)
    b = -a[:, :2]
    program = trnsim.compile(jax.jit(lambda a, b: jax.numpy.concatenate([a, b, a], axis=1)).lower(a, b), cache=False)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None
    moved = trnsim.run_kernel(dmagen._kernel(), a, b, a, layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(moved, np.concatenate([a, b, a], axis=1))


def test_a_concatenation_with_empty_inputs_copies_the_others() -> None:
    """JAX's tridiagonal solve concatenates onto a 0-row tensor: the kernel copies the non-empty inputs."""
    text = ("module @m { func.func public @main(%e: tensor<0x4xf32>, %a: tensor<3x4xf32>, %b: tensor<2x4xf32>) "
            "-> tensor<5x4xf32> { %0 = stablehlo.concatenate %e, %a, %e, %b, dim = 0 : (tensor<0x4xf32>, "
            "tensor<3x4xf32>, tensor<0x4xf32>, tensor<2x4xf32>) -> tensor<5x4xf32>\n return %0 : tensor<5x4xf32> } }")
    program = trnsim.compile(text, cache=False)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None and layout.shape == (3, 4) and layout.others == ((2, 4),)
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), -np.arange(8, dtype=np.float32).reshape(2, 4)
    moved = trnsim.run_kernel(dmagen._kernel(), a, b, layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(moved, np.concatenate([a, b]))
    np.testing.assert_array_equal(program.run(np.zeros((0, 4), np.float32), a, b)[0], np.concatenate([a, b]))


@pytest.mark.parametrize("shape", [(1, 64, 8192), (2, 3, 70000)])
def test_a_fill_keeps_each_dma_within_an_access_patterns_free_sizes(shape: tuple[int, ...]) -> None:
    layout = dmagen.Layout("fill", shape, "fp32", value=-2.0)    # inner runs of 524288 and 70000 elements
    filled = trnsim.run_kernel(dmagen._kernel(), np.zeros((1,), np.float32), layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(filled, np.full(shape, -2.0, np.float32))
    assert dmagen.layout_time("trn3", layout).seconds > 0


def test_a_constant_broadcast_into_a_tensor_is_a_fill_and_an_inserted_unit_axis_is_a_view() -> None:
    x = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)
    program = _program(lambda v: (jax.numpy.full((40, 96), 2.5, np.float32), v[:, None, :]), x)
    kernels = sorted(s.kernel for s in program.plan.steps)
    assert kernels == ["generated_dma", "view"]
    fill = next(s for s in program.plan.steps if s.kernel == "generated_dma")
    layout = dmagen.fill_for([program.graph.nodes[i] for i in fill.nodes])
    assert layout is not None and layout.value == 2.5
    filled = trnsim.run_kernel(dmagen._kernel(), np.zeros((1,), np.float32), layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(filled, np.full((40, 96), 2.5, np.float32))


# ---- one element per row: indirect DMA picks by flat address --------------------------------------------

def _pick(pick: dmaindex.Pick, idx: np.ndarray, x: np.ndarray | None, upd: np.ndarray | None = None) -> np.ndarray:
    """The pick kernel on the functional simulator (x, idx and upd laid flat as [n, 1])."""
    args = [idx.reshape(-1, len(pick.index)), None if pick.zero or x is None else x.reshape(-1, 1),
            None if upd is None else upd.reshape(-1, 1)]
    while args[-1] is None:
        args.pop()
    specs = [None if s is None else (s.shape, s.dtype) for s in dmaindex.pick_specs(pick)][: len(args)]
    verify(dmaindex.pick_kernel().compile_specs(specs, "trn3", {"pick": pick}).program, registry.get("trn3"))
    return trnsim.run_kernel(dmaindex.pick_kernel(), *args, pick=pick).outputs[0]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


# (outer, width, inner): rows and widths that are not multiples of 128; inner > 1 picks along a middle axis
SHAPES = [(300, 1000, 1), (2, 5000, 1), (5, 130, 7), (3, 40, 200)]


DSL_TYPES = {"float32": "fp32", "bfloat16": "bf16", "int32": "int32"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_pick_gather_moves_one_element_per_row_exactly_and_clamps_as_stablehlo(
        shape: tuple[int, int, int], dtype: str) -> None:
    outer, width, inner = shape
    rng = np.random.default_rng(outer * width + inner)
    x = (rng.integers(-2**31, 2**31, shape) if dtype == "int32" else rng.standard_normal(shape)).astype(dtype)
    idx = rng.integers(-3, width + 3, (outer, inner)).astype(np.int32)     # some out of range: clamped
    pick = dmaindex.Pick.along("gather", outer, width, inner, DSL_TYPES[dtype])
    got = _pick(pick, idx, x).reshape(outer, inner)
    want = np.take_along_axis(x, np.clip(idx, 0, width - 1)[:, None, :], axis=1)[:, 0, :]
    if dtype == "int32":             # moved as bytes: integers beyond fp32's exact range too
        np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want.astype(np.int64))
    else:
        np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("zero", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_pick_scatter_add_matches_add_at_bit_for_bit_and_drops_out_of_range_updates(
        shape: tuple[int, int, int], zero: bool, dtype: str) -> None:
    outer, width, inner = shape
    rng = np.random.default_rng(outer + width * inner)
    base = np.zeros(shape, np.float32) if zero else rng.standard_normal(shape).astype(np.float32)
    if not zero:
        base.reshape(-1)[7] = np.nan
    upd = rng.standard_normal((outer, inner)).astype(np.float32)
    upd.reshape(-1)[::5] = -0.0
    idx = rng.integers(-3, width + 3, (outer, inner)).astype(np.int32)
    rows, cols = np.nonzero((idx < 0) | (idx >= width))
    if not zero:           # where a dropped update's clamped address lands: a -0.0 that adding +0.0 would flip
        base[rows, np.clip(idx[rows, cols], 0, width - 1), cols] = -0.0
    base, upd = base.astype(dtype).astype(np.float32), upd.astype(dtype).astype(np.float32)
    pick = dmaindex.Pick.along("scatter_add", outer, width, inner, "fp32" if dtype == "float32" else "bf16", zero=zero)
    got = _pick(pick, idx, base.astype(dtype), upd.astype(dtype)).reshape(shape)
    want = base.copy()
    inside = (idx >= 0) & (idx < width)
    rows, cols = np.nonzero(inside)
    np.add.at(want, (rows, idx[inside], cols), upd[inside])
    np.testing.assert_array_equal(_bits(got), _bits(want.astype(dtype)))


@pytest.mark.parametrize(("index_dtype", "dsl_dtype"), [("uint32", "uint32"), ("int16", "int16"), ("uint8", "uint8")])
def test_a_pick_takes_any_integer_index_type(index_dtype: str, dsl_dtype: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((150, 300)).astype(np.float32)
    idx = rng.integers(0, 300 if index_dtype != "uint8" else 256, (150, 1)).astype(index_dtype)
    idx[:3] = np.iinfo(index_dtype).max                                   # clamped to the last element
    pick = dmaindex.Pick.along("gather", 150, 300, 1, "fp32", dsl_dtype)
    got = _pick(pick, idx, x).reshape(150, 1)
    np.testing.assert_array_equal(got, np.take_along_axis(x, np.minimum(idx.astype(np.int64), 299), axis=1))


@pytest.mark.parametrize("op", ["gather", "scatter_add"])
def test_point_picks_clamp_each_index_component_and_accumulate_repeats_in_order(op: str) -> None:
    rng = np.random.default_rng(8)
    b, h, w, d = 3, 20, 30, 5                      # x [b, h, w, d]: rows (b, d), index vectors into (h, w)
    x = rng.standard_normal((b, h, w, d)).astype(np.float32)
    idx = np.stack([rng.integers(-2, h + 2, (b, d)), rng.integers(-2, w + 2, (b, d))], -1).astype(np.int32)
    batched = dmaindex.Pick(op, x.size, b, d, h * w * d, ((h, w * d), (w, d)), "fp32")
    points = np.stack([rng.integers(-1, h + 1, 400), rng.integers(0, w, 400)], -1).astype(np.int32)
    points[200:] = points[:200]                    # every point twice: scatter-adds accumulate in row order
    flat = dmaindex.Pick(op, h * w, 400, 1, 0, ((h, w), (w, 1)), "fp32")
    table = x[0, :, :, 0].copy()
    ib, idd = np.meshgrid(np.arange(b), np.arange(d), indexing="ij")
    if op == "gather":
        got = _pick(batched, idx, x).reshape(b, d)
        np.testing.assert_array_equal(got, x[ib, np.clip(idx[..., 0], 0, h - 1), np.clip(idx[..., 1], 0, w - 1), idd])
        got = _pick(flat, points, table).reshape(-1)
        np.testing.assert_array_equal(got, table[np.clip(points[:, 0], 0, h - 1), points[:, 1]])
        return
    upd = rng.standard_normal((b, d)).astype(np.float32)
    want = x.copy()
    inside = (idx >= 0).all(-1) & (idx < (h, w)).all(-1)
    np.add.at(want, (ib[inside], idx[..., 0][inside], idx[..., 1][inside], idd[inside]), upd[inside])
    np.testing.assert_array_equal(_bits(_pick(batched, idx, x, upd).reshape(x.shape)), _bits(want))
    upd = rng.standard_normal(400).astype(np.float32)
    want = table.copy()
    inside = (points[:, 0] >= 0) & (points[:, 0] < h)
    np.add.at(want, (points[inside, 0], points[inside, 1]), upd[inside])
    np.testing.assert_array_equal(_bits(_pick(flat, points, table, upd).reshape(h, w)), _bits(want))


def test_pick_tiles_keep_flat_addresses_exact_in_the_fp32_alu() -> None:
    wide = dmaindex.Pick.along("gather", 1000, 2**20, 1, "fp32")
    assert wide.tile_rows == 16 and all(wide.span(p) <= dmaindex.EXACT for _, p, _ in wide.tiles())
    assert dmaindex.Pick.along("gather", 4, 40, 300, "fp32").tiles()[:3] == [(0, 128, 0), (128, 128, 128),
                                                                           (256, 44, 256)]
    assert dmaindex.Pick.along("gather", 2, 2**24 + 1, 1, "fp32").tile_rows == 0


def _index_steps(program: trnsim.CompiledProgram) -> list[Any]:
    return [s for s in program.plan.steps if {"gather", "scatter"} & set(s.ops)]


def _check_pick_step(program: trnsim.CompiledProgram, step: Any, args: list[np.ndarray]) -> dmaindex.Pick:
    """Run the step's pick kernel on the functional simulator with the values the reference interpreter
    gives its inputs; compare bit for bit with the interpreter's result."""
    from trnsim.ir.interp import Env, Interpreter

    node = program.graph.nodes[step.nodes[-1]]
    pick = dmaindex.pick_for(node)
    assert pick is not None
    env, interp = Env(), Interpreter()
    for p, a in zip(program.graph.params, args, strict=True):
        env[p.id] = a
    for n in program.graph.nodes:
        for v, a in zip(n.outputs, interp.run_node(n, [env[u.id] for u in n.inputs], env), strict=True):
            env[v.id] = a
    values = [np.asarray(env[v.id]) for v in node.inputs]
    got = _pick(pick, values[1], values[0], values[2] if len(values) > 2 else None)
    np.testing.assert_array_equal(_bits(got).reshape(-1), _bits(np.asarray(env[node.out.id])).reshape(-1))
    return pick


def test_take_along_a_5000_wide_axis_and_its_gradient_are_generated_dma_picks_that_match_jax() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 70, 5000)).astype(np.float32)             # 210 rows, beyond the one-hot's 4096
    labels = rng.integers(0, 5000, (3, 70, 1)).astype(np.int32)

    def loss(x: jax.Array, labels: jax.Array) -> jax.Array:
        return -jnp.take_along_axis(x, labels, axis=-1).sum()

    for fn in (loss, jax.grad(loss)):
        jitted = trnsim.jit(fn, cache=False)
        got, want = jitted(x, labels), jax.jit(fn)(x, labels)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        program = jitted.last_program
        assert program is not None
        (step,) = _index_steps(program)
        assert step.kernel == "generated_dma" and step.instructions["dma"] > 0 and step.dma_seconds > 0
        node = program.graph.nodes[step.nodes[-1]]
        pick = _check_pick_step(program, step, [x, labels])
        assert pick == dmaindex.Pick.along(pick.op, 210, 5000, 1, "fp32", zero=pick.zero)
        if node.op == "scatter":       # the zero fill it adds into is part of the step, not a step of its own
            assert pick.zero and step.ops == ["broadcast_in_dim", "scatter"]
            np.testing.assert_array_equal(got, jax.grad(loss)(x, labels))


@pytest.mark.parametrize(("shape", "kernel"), [((8, 64, 3000), "generated_dma"),
                                               ((4, 50, 96), "generated_elementwise")])
def test_rows_the_one_hot_select_also_takes_lower_to_the_faster_of_the_two(shape: tuple[int, ...],
                                                                           kernel: str) -> None:
    from trnsim.compiler import tilegen

    x, labels = jax.ShapeDtypeStruct(shape, np.float32), jax.ShapeDtypeStruct((*shape[:-1], 1), np.int32)
    program = trnsim.compile(jax.jit(lambda x, i: jnp.take_along_axis(x, i, axis=-1)).lower(x, labels), cache=False)
    (step,) = _index_steps(program)
    node = program.graph.nodes[step.nodes[0]]
    recipe, pick = tilegen.index_recipe(node), dmaindex.pick_for(node)
    assert recipe is not None and pick is not None and step.kernel == kernel
    one_hot, picked = tilegen.fused_time("trn3", recipe).seconds, dmaindex.pick_time("trn3", pick).seconds
    core = registry.get("trn3").core
    assert core is not None
    assert step.seconds < (one_hot if kernel == "generated_dma" else picked + core.dma.latency)  # DMA steps: + latency


def test_logits_at_arange_and_labels_and_its_gradient_are_point_picks_that_match_jax() -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((300, 5000)).astype(np.float32)
    labels = rng.integers(0, 5000, 300).astype(np.int32)

    def loss(x: jax.Array, labels: jax.Array) -> jax.Array:
        return -x[jnp.arange(300), labels].sum()

    for fn in (loss, jax.grad(loss)):
        jitted = trnsim.jit(fn, cache=False)
        np.testing.assert_allclose(jitted(x, labels), jax.jit(fn)(x, labels), rtol=1e-6, atol=0)
        program = jitted.last_program
        assert program is not None
        (step,) = _index_steps(program)
        pick = _check_pick_step(program, step, [x, labels])
        assert step.kernel == "generated_dma"
        assert (pick.outer, pick.inner, pick.outer_stride, pick.index) == (300, 1, 0, ((300, 5000), (5000, 1)))


def test_other_index_forms_keep_their_kernels_or_fall_back_explicitly() -> None:
    table = np.zeros((64, 48), np.float32)
    ids = np.arange(5, dtype=np.int32)
    rows = np.ones((5, 48), np.float32)
    into_param = trnsim.compile(jax.jit(lambda t, i, r: t.at[i].add(r)).lower(table, ids, rows), cache=False)
    # the embedding kernel adds into a zero table of its own: a table that is an input is not its form, the
    # general scatter kernel takes it (dmascatter)
    assert [s.kernel for s in _index_steps(into_param)] == ["generated_scatter"]
    huge = jax.ShapeDtypeStruct((2, 2**24 + 8), np.float32)             # a flat address beyond fp32's integers
    lab = jax.ShapeDtypeStruct((2, 1), np.int32)
    program = trnsim.compile(jax.jit(lambda x, i: jnp.take_along_axis(x, i, axis=-1)).lower(huge, lab), cache=False)
    (step,) = _index_steps(program)
    assert step.kernel == "dma_gather_scatter" and dmaindex.pick_for(program.graph.nodes[step.nodes[0]]) is None
    half = jax.ShapeDtypeStruct((4, 5000), np.float16)        # DMA read-add-write is BF16/FP32 only
    grad = jax.grad(lambda x, i: jnp.take_along_axis(x, i, axis=-1).astype(np.float32).sum())
    program = trnsim.compile(jax.jit(grad).lower(half, jax.ShapeDtypeStruct((4, 1), np.int32)), cache=False)
    (step,) = _index_steps(program)
    assert step.kernel == "generated_scatter" and dmaindex.pick_for(program.graph.nodes[step.nodes[-1]]) is None


def test_a_generated_kernels_simulated_time_is_its_steps_time() -> None:
    """The kernel's timed run includes its DMAs' fixed latency: the step does not add it again."""
    x = np.zeros((128, 384), np.float32)
    program = _program(lambda v: v.T, x)
    (step,) = program.plan.steps
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert step.kernel == "generated_dma" and layout is not None
    assert step.seconds == dmagen.layout_time("trn3", layout).seconds
    assert program.plan.total_seconds == step.seconds


def test_a_transpose_moving_the_innermost_axis_is_slabs_of_2d_transposes() -> None:
    """[s, heads, d] -> [heads, d, s] (a Llama layer's backward): one [s, d] -> [d, s] DMA transpose per
    head, not one copy with element-sized descriptors (whose free size would exceed an access pattern's)."""
    layout = dmagen.Layout("transpose", (1024, 8, 128), "bf16", perm=(1, 2, 0))
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    program = kernel.compile_specs([((1024, 8, 128), "bf16")], "trn3", {"layout": layout}).program
    verify(program, registry.get("trn3"))
    assert sum(len(s) for s in program.streams.values()) == 8
    assert dmagen.layout_time("trn3", layout).seconds < 50e-6


@pytest.mark.parametrize(("shape", "dims"), [((3, 3, 16, 32), (0, 1)), ((40, 30), (1,)), ((5, 7, 9), (0, 2))])
def test_reverses_lower_to_dma_kernels_through_negatively_strided_views(shape: tuple[int, ...],
                                                                        dims: tuple[int, ...]) -> None:
    """A conv kernel flipped for the input gradient (and any reverse): one copy through a reversed view per
    block of rows, exact on the simulator."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    program = _program(lambda v: jax.lax.rev(v, dims), x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma" and step.ops == ["reverse"]
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None and layout.dims == dims
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    verify(kernel.compile_specs([(shape, "fp32")], "trn3", {"layout": layout}).program, registry.get("trn3"))
    np.testing.assert_array_equal(trnsim.run_kernel(kernel, x, layout=layout).outputs[0], np.flip(x, dims))


# ---- pads with interior and negative padding, a padding value that is data, bools -----------------------

def _lax_pad(x: np.ndarray, value: Any, config: list[tuple[int, int, int]]) -> np.ndarray:
    return np.asarray(jax.lax.pad(jnp.asarray(x), jnp.asarray(value, x.dtype), config))


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data())
def test_pads_with_interior_and_negative_padding_fill_and_copy_exactly(shape: list[int], data: st.DataObject) -> None:
    """Every element lands at ``low + k·(interior + 1)``, cut where ``low``/``high`` are negative; the holes
    and edges hold the value (disjoint fills through strided views)."""
    config = [(data.draw(st.integers(-n, 3)), data.draw(st.integers(-n, 3)), data.draw(st.integers(0, 2)))
              for n in shape]
    assume(all(lo + (n - 1) * (it + 1) + 1 + hi > 0 for n, (lo, hi, it) in zip(shape, config, strict=True)))
    x = np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape)
    want = _lax_pad(x, -1.5, config)
    layout = dmagen.Layout("pad", tuple(shape), "fp32", low=tuple(c[0] for c in config),
                           high=tuple(c[1] for c in config), interior=tuple(c[2] for c in config), value=-1.5)
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(trnsim.run_kernel(kernel, x, layout=layout).outputs[0], want)


def test_jitted_interior_and_negative_pads_are_generated_dma_kernels() -> None:
    x = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    config = [(1, -2, 1), (-1, 2, 2)]
    program = _program(lambda v: jax.lax.pad(v, np.float32(7.0), config), x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None and layout.interior == (1, 2) and layout.value == 7.0
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(trnsim.run_kernel(kernel, x, layout=layout).outputs[0], _lax_pad(x, 7.0, config))


@pytest.mark.parametrize(("dtype", "value"), [("fp32", float("nan")), ("int32", -2**31), ("int32", 2**30 + 7),
                                              ("uint8", 200), ("fp16", -0.0), ("bf16", float("inf"))])
def test_a_padding_value_that_is_data_is_loaded_and_copied_exactly(dtype: str, value: float) -> None:
    """``pad(x, v)`` with ``v`` an argument: DMA'd to every partition, then widened by an engine copy that
    gives every code back (4-byte values as fp32, 2-byte as bf16)."""
    import ml_dtypes

    kind: Any = {"fp32": np.float32, "int32": np.int32, "uint8": np.uint8, "fp16": np.float16,
                 "bf16": ml_dtypes.bfloat16}[dtype]
    x = np.arange(12).reshape(3, 4).astype(kind)
    v = np.array([value]).astype(kind)
    config = [(1, 0, 1), (2, -1, 0)]
    program = trnsim.compile(jax.jit(lambda a, b: jax.lax.pad(a, b[0], config)).lower(x, v), cache=False)
    (step,) = [s for s in program.plan.steps if s.ops == ["pad"]]
    assert step.kernel == "generated_dma"
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None and layout.others == ((1,),)
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    got = trnsim.run_kernel(kernel, dsl.typed(x, dtype), dsl.typed(v, dtype), layout=layout).outputs[0]
    want = _lax_pad(x, v[0], config)
    assert np.array_equal(np.asarray(got).astype(kind).view(np.uint8), want.view(np.uint8))


def test_bools_move_as_bytes() -> None:
    """A reverse, a pad and a slice of a bool tensor are generated DMA kernels (each bool one byte)."""
    x = np.random.default_rng(0).random((5, 7)) < 0.5
    program = _program(lambda v: (jax.lax.rev(v, (1,)), jax.lax.pad(v, True, [(1, 0, 1), (0, 2, 0)]), v[1:4]), x)
    assert {s.kernel for s in program.plan.steps} == {"generated_dma"}
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    for step, want in zip(program.plan.steps, (np.flip(x, 1), _lax_pad(x, True, [(1, 0, 1), (0, 2, 0)]), x[1:4]),
                          strict=True):
        layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
        assert layout is not None and layout.dtype == "uint8"
        got = trnsim.run_kernel(kernel, dsl.typed(x.astype(np.uint8), "uint8"), layout=layout).outputs[0]
        np.testing.assert_array_equal(np.asarray(got).astype(bool), want)


def test_a_large_int32_constant_fill_is_set_through_its_fp32_bits() -> None:
    layout = dmagen.Layout("fill", (70, 33), "int32", value=float(-2**31 + 5))
    filled = trnsim.run_kernel(dmagen._kernel(), np.zeros((1,), np.int32), layout=layout).outputs[0]  # pyright: ignore[reportPrivateUsage]
    np.testing.assert_array_equal(filled, np.full((70, 33), -2**31 + 5, np.int32))


# ---- dynamic slices: row gathers at offsets that are data ------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data(),
       index_dtype=st.sampled_from(["int32", "uint8"]))
def test_dynamic_slices_gather_rows_at_clamped_offsets_exactly(shape: list[int], data: st.DataObject,
                                                               index_dtype: str) -> None:
    """StableHLO clamps each start to ``[0, n - size]`` (jax's negative-index wrap happens before the op)."""
    sizes = tuple(data.draw(st.integers(1, n)) for n in shape)
    assume(sizes != tuple(shape))
    low = 0 if index_dtype == "uint8" else -12
    starts = [data.draw(st.integers(low, 12)) for _ in shape]
    constant = [data.draw(st.booleans()) for _ in shape]
    assume(not all(constant))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    start = tuple(min(max(s, 0), n - z) if c else -1 for s, c, n, z in zip(starts, constant, shape, sizes, strict=True))
    kind: Any = {"int32": np.int32, "uint8": np.uint8}[index_dtype]
    values = [dsl.typed(np.array([s], kind), index_dtype) for s, c in zip(starts, constant, strict=True) if not c]
    layout = dmagen.Layout("dynamic_slice", tuple(shape), "fp32", start=start, sizes=sizes,
                           others=((1,),) * len(values), index_dtype=index_dtype)
    plan = dmaindex.GatherPlan.of(layout)
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    got = trnsim.run_kernel(kernel, x.reshape(plan.table), *values, layout=layout).outputs[0]
    begin = [min(max(s, 0), n - z) for s, n, z in zip(starts, shape, sizes, strict=True)]
    want = x[tuple(slice(b, b + z) for b, z in zip(begin, sizes, strict=True))]
    np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want)


def test_a_jitted_dynamic_slice_is_a_gather_kernel_and_a_dynamic_update_slice_a_scatter_kernel() -> None:
    """An indirect DMA reads rows at offsets that are data; a dynamic_update_slice copies the operand and
    writes the update's rows with indirect DMAs (``DmaScatter``) at such offsets."""
    def fn(x: Any, u: Any, i: Any) -> Any:
        return jax.lax.dynamic_slice(x, (i, 3), (100, 60)), jax.lax.dynamic_update_slice(x, u, (i, 0))

    x, u = np.arange(300 * 64, dtype=np.float32).reshape(300, 64), np.ones((2, 64), np.float32)
    program = trnsim.compile(jax.jit(fn).lower(x, u, np.int32(0)), cache=False)
    kernels = {s.ops[0]: s.kernel for s in program.plan.steps if s.ops[0].startswith("dynamic")}
    assert kernels == {"dynamic_slice": "generated_dma", "dynamic_update_slice": "generated_dma"}
    for op, start in (("dynamic_slice", (-1, 3)), ("dynamic_update_slice", (-1, 0))):
        step = next(s for s in program.plan.steps if s.ops == [op])
        layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
        assert layout is not None and layout.start == start
        assert step.seconds == dmagen.layout_time("trn3", layout).seconds
    for i in (0, 150, 290, -5):
        got, want = trnsim.jit(fn)(x, u, np.int32(i)), fn(x, u, np.int32(i))
        assert all(np.array_equal(np.asarray(g), np.asarray(w)) for g, w in zip(got, want, strict=True))
    step = next(s for s in program.plan.steps if s.ops == ["dynamic_update_slice"])
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert layout is not None
    for i in (0, 150, 299, 1000):        # the kernel against XLA's own clamping (jax on CPU)
        got = _update(layout, x, u, [np.int32(i)], "int32")
        np.testing.assert_array_equal(got, np.asarray(jax.lax.dynamic_update_slice(x, u, (np.int32(i), 0))))


def test_gather_tiles_run_along_the_last_dim_the_slice_takes_several_indices_of() -> None:
    """x[:, i] of a [64, 512, 128] tensor: 64 rows 512 table rows apart, one gather (not one a row)."""
    layout = dmagen.Layout("dynamic_slice", (64, 512, 128), "bf16", start=(0, -1, 0), sizes=(64, 1, 128),
                           others=((1,),), index_dtype="int32")
    plan = dmaindex.GatherPlan.of(layout)
    assert plan.table == (64 * 512, 128) and plan.step == 512 and plan.tiles == ((0, 64, 0),)


def test_a_large_fill_region_goes_round_the_queues() -> None:
    """Interior padding's holes of a [256, 1024] f32 tensor (1 MiB): one DMA a queue, not one DMA."""
    layout = dmagen.Layout("pad", (256, 1024), "fp32", low=(1, 0), high=(2, 0), interior=(1, 0), value=0.0)
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    program = kernel.compile_specs([((256, 1024), "fp32")], "trn3", {"layout": layout}).program
    queues = {ins.queue for ins in program.streams["sync"]}   # type: ignore[attr-defined]
    assert len(queues) == dmagen.QUEUES
    assert dmagen.layout_time("trn3", layout).seconds < 20e-6


# ---- dynamic update slices: the operand copied, the update's rows scattered at offsets that are data ------

def _update(layout: dmagen.Layout, x: np.ndarray, u: np.ndarray, starts: list[Any], index_dtype: str,
            dtype: str | None = None) -> np.ndarray:
    """The generated dynamic update slice run on the functional simulator: the result in ``x``'s dtype."""
    dtype = dtype or layout.dtype
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    values = [_start(s, index_dtype) for s in starts]
    plan = dmaindex.ScatterPlan.of(layout)
    a, b = (x.reshape(plan.table), u.reshape(plan.update)) if starts else (x, u)
    got = np.asarray(trnsim.run_kernel(kernel, dsl.typed(a, dtype), dsl.typed(b, dtype), *values,
                                       layout=layout).outputs[0])
    if dtype == "bf16":           # outputs come back as fp32: a bf16 code is the upper half of its fp32
        return (got.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(x.dtype).reshape(x.shape)
    return got.astype(x.dtype).reshape(x.shape)


def _start(value: Any, index_dtype: str) -> Any:
    """A start as the kernel takes it: a scalar of ``index_dtype``, or a 64-bit one (``int64``/``uint64``) as
    its two 32-bit words, low first, of ``WIDE[index_dtype]``."""
    if index_dtype in WIDE:
        words = np.asarray([int(value)], np.dtype(index_dtype)).view(np.dtype(WIDE[index_dtype]))
        return dsl.typed(words, WIDE[index_dtype])
    return dsl.typed(np.asarray([value]), index_dtype)


WIDE = {"int64": "int32", "uint64": "uint32"}   # a 64-bit start's layout index dtype (its words' dtype)


def _dus_values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Every code of the dtype likely: random bits (NaNs with payloads, -0.0, infinities included)."""
    import ml_dtypes

    n = int(np.prod(shape))
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    kind: Any = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "int32": np.int32, "int8": np.int8}[dtype]
    size = np.dtype(kind).itemsize
    return rng.integers(0, 256, n * size, dtype=np.uint8).view(kind).reshape(shape)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3, 5, 130, 200]), min_size=1, max_size=3), data=st.data(),
       dtype=st.sampled_from(["fp32", "bf16", "int32", "int8", "bool"]),
       index_dtype=st.sampled_from(["int32", "uint8", "int16"]))
def test_dynamic_update_slices_scatter_rows_at_clamped_offsets_bit_for_bit(
        shape: list[int], data: st.DataObject, dtype: str, index_dtype: str) -> None:
    """Any rank, any axis, shapes not multiples of 128, starts far outside ``[0, n - size]`` (StableHLO clamps
    each into it): the generated kernel's result is the operand with the update at the clamped starts, bit
    for bit (bools as bytes)."""
    assume(int(np.prod(shape)) <= 40_000)
    sizes = tuple(data.draw(st.integers(1, n)) for n in shape)
    low = 0 if index_dtype == "uint8" else -300
    starts = [data.draw(st.integers(low, 255)) for _ in shape]
    constant = [data.draw(st.booleans()) for _ in shape]
    rng = np.random.default_rng(len(shape) * 1000 + sum(sizes))
    x, u = _dus_values(dtype, tuple(shape), rng), _dus_values(dtype, sizes, rng)
    layout_dtype = "uint8" if dtype == "bool" else dtype
    start = tuple(min(max(s, 0), n - z) if c else -1 for s, c, n, z in zip(starts, constant, shape, sizes, strict=True))
    data_starts = [s for s, c in zip(starts, constant, strict=True) if not c]
    layout = dmagen.Layout("dynamic_update_slice", tuple(shape), layout_dtype, start=start, sizes=sizes,
                           others=((1,),) * len(data_starts), index_dtype=index_dtype if data_starts else "")
    raw = (lambda a: a.astype(np.uint8)) if dtype == "bool" else (lambda a: a)
    got = _update(layout, raw(x), raw(u), data_starts, index_dtype)
    begin = [min(max(s, 0), n - z) for s, n, z in zip(starts, shape, sizes, strict=True)]
    want = raw(x).copy()
    want[tuple(slice(b, b + z) for b, z in zip(begin, sizes, strict=True))] = raw(u)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32", "i8", "i1"])
def test_jitted_dynamic_update_slices_on_every_axis_are_scatter_kernels_that_match_the_interpreter(dtype: str) -> None:
    """``x.at[i, :, j].set(u)``-style updates of a [130, 3, 129] tensor on each axis and all of them: generated
    DMA kernels whose result, run on the functional simulator, is the StableHLO interpreter's bit for bit."""
    rng = np.random.default_rng(7)
    kinds = {"f32": "fp32", "bf16": "bf16", "i32": "int32", "i8": "int8", "i1": "bool"}
    x = _dus_values(kinds[dtype], (130, 3, 129), rng)
    for sizes in ((1, 3, 129), (130, 2, 129), (130, 3, 5), (7, 1, 100)):
        u = _dus_values(kinds[dtype], sizes, rng)

        def fn(a: Any, b: Any, i: Any, j: Any, k: Any) -> Any:
            return jax.lax.dynamic_update_slice(a, b, (i, j, k))

        starts = [np.int32(v) for v in (129, -2, 77)]
        program = trnsim.compile(jax.jit(fn).lower(x, u, *starts), cache=False)
        (step,) = [s for s in program.plan.steps if s.ops == ["dynamic_update_slice"]]
        assert step.kernel == "generated_dma"
        node = program.graph.nodes[step.nodes[0]]
        layout = dmagen.layout_for(node)
        assert layout is not None
        seen = [int(v) + n if v < 0 else int(v) for v, n in zip(starts, x.shape, strict=True)]  # jax wraps
        data = [v for v, c in zip(seen, layout.start, strict=True) if c < 0]
        raw = (lambda a: a.astype(np.uint8)) if dtype == "i1" else (lambda a: a)
        got = _update(layout, raw(x), raw(u), data, "int32")
        want = raw(np.asarray(program.run(x, u, *starts, timing=False)[0]))       # the StableHLO interpreter
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_constant_start_dynamic_update_slice_is_two_copies_and_64_bit_operands_keep_the_analytic_cost() -> None:
    """Constant starts: the operand and then the update into its box, no indirect DMA. Operands of a type the
    DMA does not move (i64) keep the analytic cost, counted in ``dma_fallbacks``."""
    x, u = np.arange(40 * 6, dtype=np.float32).reshape(40, 6), -np.ones((3, 2), np.float32)
    program = _program(lambda a: jax.lax.dynamic_update_slice(a, u, (38, 1)), x)
    (step,) = [s for s in program.plan.steps if s.ops == ["dynamic_update_slice"]]
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert step.kernel == "generated_dma" and layout is not None and layout.start == (37, 1) and not layout.others
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    compiled = kernel.compile_specs([((40, 6), "fp32"), ((3, 2), "fp32")], "trn3", {"layout": layout})
    assert {i.mnemonic for i in compiled.program.streams["sync"]} == {"dma_copy"}
    want = x.copy()
    want[37:40, 1:3] = u
    np.testing.assert_array_equal(trnsim.run_kernel(kernel, x, u, layout=layout).outputs[0], want)
    text = """func.func @main(%x: tensor<5x3xi64>, %u: tensor<2x3xi64>, %i: tensor<i64>) -> tensor<5x3xi64> {
      %c = stablehlo.constant dense<0> : tensor<i64>
      %r = stablehlo.dynamic_update_slice %x, %u, %i, %c
        : (tensor<5x3xi64>, tensor<2x3xi64>, tensor<i64>, tensor<i64>) -> tensor<5x3xi64>
      return %r : tensor<5x3xi64>
    }"""
    program = trnsim.compile(text, cache=False)
    (step,) = [s for s in program.plan.steps if s.ops == ["dynamic_update_slice"]]
    assert step.kernel == "dma_copy"
    stats = {k: v for r in program.passes for k, v in r.stats.items()}
    assert stats["dma_fallbacks"] == 1


def test_scatter_tiles_write_views_of_the_rows_they_can_reach() -> None:
    """A KV-cache update ``cache[:, :, t] = new`` of a [4, 8, 64, 32] cache: one scatter of 8 rows per batch
    index, each into its own 512-row view of the [2048, 32] table (disjoint views: the scatters overlap)."""
    layout = dmagen.Layout("dynamic_update_slice", (4, 8, 64, 32), "bf16", start=(0, 0, -1, 0),
                           sizes=(4, 8, 1, 32), others=((1,),), index_dtype="int32")
    plan = dmaindex.ScatterPlan.of(layout)
    assert plan.table == (2048, 32) and plan.update == (32, 32) and plan.step == 64 and plan.reach == 63
    assert plan.tiles == tuple((8 * b, 8, 512 * b) for b in range(4)) and plan.span(8) == 512
    kernel = dmagen._kernel()  # pyright: ignore[reportPrivateUsage]
    specs = [(t.shape, t.dtype) for t in dmagen.layout_specs(layout)]
    program = kernel.compile_specs(specs, "trn3", {"layout": layout}).program
    seen: dict[str, int] = {}
    scatters: list[tuple[str, int, Any]] = []     # (domain, index in it, instruction)
    for ins in program.streams["sync"]:
        domain = f"dma{ins.queue}"  # type: ignore[attr-defined]
        if ins.mnemonic == "dma_scatter":
            scatters.append((domain, seen.get(domain, 0), ins))
        seen[domain] = seen.get(domain, 0) + 1
    assert len(scatters) == 4
    for _, _, ins in scatters:       # no scatter waits for another one
        assert not any(d == domain and n > k for d, n in ins.wait for domain, k, _ in scatters)


# ---- 64-bit starts: two 32-bit words, the low one clamped, the high one saturating ------------------------

def _int64_starts(signed: bool) -> st.SearchStrategy[int]:
    """Starts over the whole 64-bit range, weighted to the edges that matter: in range, just outside, a low
    word in range under a high word that is not 0 (``k · 2**32 + small``), and the extremes."""
    lo, hi = (-(2**63), 2**63 - 1) if signed else (0, 2**64 - 1)

    def join(high: int, low: int) -> int:
        return high * 2**32 + low

    small = st.integers(-300 if signed else 0, 300)
    words = st.builds(join, st.integers(-3 if signed else 0, 3), st.integers(0, 300))
    return st.one_of(small, words, st.integers(lo, hi), st.sampled_from([lo, hi, lo + 1, hi - 1]))


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3, 9, 130]), min_size=1, max_size=3), data=st.data(),
       index_dtype=st.sampled_from(["int64", "uint64"]))
def test_dynamic_slices_clamp_64_bit_starts_exactly_from_their_two_words(shape: list[int], data: st.DataObject,
                                                                         index_dtype: str) -> None:
    """Negative, huge and in-range 64-bit starts: the gather reads the slice at StableHLO's clamp of each."""
    sizes = tuple(data.draw(st.integers(1, n)) for n in shape)
    assume(sizes != tuple(shape))
    starts = [data.draw(_int64_starts(index_dtype == "int64")) for _ in shape]
    constant = [data.draw(st.booleans()) for _ in shape]
    assume(not all(constant))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    begin = [min(max(s, 0), n - z) for s, n, z in zip(starts, shape, sizes, strict=True)]
    start = tuple(b if c else -1 for b, c in zip(begin, constant, strict=True))
    values = [_start(s, index_dtype) for s, c in zip(starts, constant, strict=True) if not c]
    layout = dmagen.Layout("dynamic_slice", tuple(shape), "fp32", start=start, sizes=sizes,
                           others=((2,),) * len(values), index_dtype=WIDE[index_dtype])
    plan = dmaindex.GatherPlan.of(layout)
    got = trnsim.run_kernel(dmagen._kernel(), x.reshape(plan.table), *values,  # pyright: ignore[reportPrivateUsage]
                            layout=layout).outputs[0]
    want = x[tuple(slice(b, b + z) for b, z in zip(begin, sizes, strict=True))]
    assert np.array_equal(np.asarray(got).reshape(want.shape), want)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3, 9, 130]), min_size=1, max_size=3), data=st.data(),
       dtype=st.sampled_from(["fp32", "bf16", "int8"]), index_dtype=st.sampled_from(["int64", "uint64"]))
def test_dynamic_update_slices_clamp_64_bit_starts_exactly_from_their_two_words(
        shape: list[int], data: st.DataObject, dtype: str, index_dtype: str) -> None:
    """The scatter writes the update at StableHLO's clamp of each 64-bit start, bit for bit."""
    sizes = tuple(data.draw(st.integers(1, n)) for n in shape)
    starts = [data.draw(_int64_starts(index_dtype == "int64")) for _ in shape]
    constant = [data.draw(st.booleans()) for _ in shape]
    assume(not all(constant))
    rng = np.random.default_rng(len(shape) * 1000 + sum(sizes))
    x, u = _dus_values(dtype, tuple(shape), rng), _dus_values(dtype, sizes, rng)
    begin = [min(max(s, 0), n - z) for s, n, z in zip(starts, shape, sizes, strict=True)]
    start = tuple(b if c else -1 for b, c in zip(begin, constant, strict=True))
    data_starts = [s for s, c in zip(starts, constant, strict=True) if not c]
    layout = dmagen.Layout("dynamic_update_slice", tuple(shape), dtype, start=start, sizes=sizes,
                           others=((2,),) * len(data_starts), index_dtype=WIDE[index_dtype])
    got = _update(layout, x, u, data_starts, index_dtype)
    want = x.copy()
    want[tuple(slice(b, b + z) for b, z in zip(begin, sizes, strict=True))] = u
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("op", ["dynamic_slice", "dynamic_update_slice"])
def test_64_bit_starts_that_are_data_get_the_generated_kernel_which_matches_the_interpreter(op: str) -> None:
    """A StableHLO program with i64 starts (jax's default with x64, the conformance corpus's): the step is the
    generated kernel, whose inputs are each start's two words, and it agrees with the StableHLO interpreter
    for starts whose low word alone would land elsewhere."""
    x, u = np.arange(40 * 6, dtype=np.float32).reshape(40, 6), -np.ones((3, 6), np.float32)
    if op == "dynamic_slice":
        body = """%r = stablehlo.dynamic_slice %x, %i, %c, sizes = [3, 6]
        : (tensor<40x6xf32>, tensor<i64>, tensor<i64>) -> tensor<3x6xf32>"""
        result = "tensor<3x6xf32>"
    else:
        body = """%r = stablehlo.dynamic_update_slice %x, %u, %i, %c
        : (tensor<40x6xf32>, tensor<3x6xf32>, tensor<i64>, tensor<i64>) -> tensor<40x6xf32>"""
        result = "tensor<40x6xf32>"
    text = f"""func.func @main(%x: tensor<40x6xf32>, %u: tensor<3x6xf32>, %i: tensor<i64>) -> {result} {{
      %c = stablehlo.constant dense<0> : tensor<i64>
      {body}
      return %r : {result}
    }}"""
    program = trnsim.compile(text, cache=False)
    (step,) = [s for s in program.plan.steps if s.ops == [op]]
    layout = dmagen.layout_for(program.graph.nodes[step.nodes[0]])
    assert step.kernel == "generated_dma" and layout is not None
    assert layout.others == ((2,),) and layout.index_dtype == "int32" and layout.start == (-1, 0)
    for i in (5, 37, 2**32 + 5, -(2**32) + 5, 2**63 - 1, -(2**63), -1):
        want = np.asarray(program.run(x, u, np.int64(i), timing=False)[0])      # the StableHLO interpreter
        if op == "dynamic_slice":
            got = trnsim.run_kernel(dmagen._kernel(), x, _start(i, "int64"),  # pyright: ignore[reportPrivateUsage]
                                    layout=layout).outputs[0]
        else:
            got = _update(layout, x, u, [i], "int64")
        b = min(max(i, 0), 37)
        assert np.array_equal(np.asarray(want), x[b : b + 3] if op == "dynamic_slice" else
                              np.concatenate([x[:b], u, x[b + 3 :]]))
        assert np.array_equal(np.asarray(got).reshape(want.shape), want)
