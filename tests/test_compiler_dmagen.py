"""Generated DMA kernels for transposes and slices: the forms chosen, that they move the data exactly on
the functional simulator, and that a transposing copy the DMA-transpose path cannot take costs more."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import trnsim
from trnsim.compiler import dmagen
from trnsim.hw import registry
from trnsim.isa.verify import verify


def _program(fn, x):  # type: ignore[no-untyped-def]
    return trnsim.compile(jax.jit(fn).lower(x), cache=False)


@pytest.mark.parametrize(("shape", "perm"), [((16, 64, 4, 32), (0, 2, 1, 3)), ((128, 384), (1, 0)),
                                             ((4, 8, 32, 64), (0, 1, 3, 2)), ((6, 5, 7), (2, 0, 1))])
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
