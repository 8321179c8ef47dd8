"""trnsim.kernels embedding / embedding_backward: the lookup is DMA only and must be bit-exact; the scatter-add
accumulates in index order in fp32, so it must match numpy's sequential ``np.add.at`` bit for bit."""

from __future__ import annotations

import doctest
import itertools
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl, kernels
from trnsim.errors import SimError
from trnsim.isa.dma import DmaGather, DmaScatterAdd
from trnsim.kernels import embeddings

SHAPES = st.one_of(st.tuples(st.integers(1, 400)), st.tuples(st.integers(1, 20), st.integers(1, 150)),
                   st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 40)))


def run_strict(compiled: dsl.Compiled, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled kernel on a device that faults on reads of memory nothing wrote."""
    feed = {name: a for name, a in zip(compiled.inputs, arrays, strict=True) if name is not None}
    return trnsim.Device("trn3", strict_reads=True).run(compiled.program, feed).outputs


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(1, 1000), d=st.integers(1, 300), ids_shape=SHAPES, dtype=st.sampled_from(["fp32", "bf16"]),
       seed=st.integers(0, 2**16))
def test_embedding_bit_exact(vocab: int, d: int, ids_shape: tuple[int, ...], dtype: str, seed: int) -> None:
    """Any vocabulary, width and ids shape (1-D runs of 128, 2-D row blocks or per-row runs, 3-D): the
    gathered rows are the table's, bit for bit (a DMA copies without rounding when the dtypes agree)."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, d)).astype(np.float32)
    if dtype == "bf16":
        table = table.astype(ml_dtypes.bfloat16).astype(np.float32)
    ids = rng.integers(0, vocab, ids_shape)
    got = kernels.embedding(table, ids, dtype=dtype)
    assert got.shape == (*ids_shape, d)
    assert np.array_equal(got, table[ids])


def sequential_scatter_add(dout: np.ndarray, ids: np.ndarray, vocab: int, out_dtype: str) -> np.ndarray:
    """Row i of dout added to row ids[i] in order, each sum computed in fp32 and rounded to ``out_dtype``
    (DmaScatterAdd's semantics)."""
    d = dout.shape[-1]
    if out_dtype == "fp32":
        table = np.zeros((vocab, d), np.float32)
        np.add.at(table, ids.reshape(-1), dout.reshape(-1, d).astype(np.float32))  # unbuffered, in order
        return table
    table = np.zeros((vocab, d), ml_dtypes.bfloat16)
    for i, row in zip(ids.reshape(-1), dout.reshape(-1, d).astype(np.float32), strict=True):
        table[i] = (table[i].astype(np.float32) + row).astype(ml_dtypes.bfloat16)
    return table.astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(1, 600), d=st.integers(1, 200), ids_shape=SHAPES, out_dtype=st.sampled_from(["fp32", "bf16"]),
       integers=st.booleans(), seed=st.integers(0, 2**16))
def test_embedding_backward_accumulates_in_order(vocab: int, d: int, ids_shape: tuple[int, ...], out_dtype: str,
                                                 integers: bool, seed: int) -> None:
    """Duplicate ids accumulate: with small integers every sum is exact (bit-exact against np.add.at), and
    with random floats the fp32 (or bf16) roundings happen in the same order as the sequential reference."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, min(vocab, 1 + rng.integers(1, 50)), ids_shape)  # few distinct ids: many duplicates
    if integers:
        dout = rng.integers(-8, 9, (*ids_shape, d)).astype(np.float32)
    else:
        dout = rng.standard_normal((*ids_shape, d)).astype(np.float32)
    got = kernels.embedding_backward(dout, ids, vocab, out_dtype=out_dtype)
    assert got.shape == (vocab, d)
    assert np.array_equal(got, sequential_scatter_add(dout, ids, vocab, out_dtype))


def test_wide_rows_in_column_slices_and_bf16_gradient_input() -> None:
    """D = 20000 fp32 (80 KB a row) moves in column slices of ROW_BYTES; bf16 dout is exact in fp32 sums of
    a few terms."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 20000)).astype(np.float32)
    ids = np.array([3, 49, 3, 0, 7])
    assert np.array_equal(kernels.embedding(table, ids), table[ids])
    dout = rng.integers(-100, 100, (5, 20000)).astype(np.float32)
    got = kernels.embedding_backward(dout, ids, 50, dtype="bf16")
    assert np.array_equal(got, sequential_scatter_add(dout, ids, 50, "fp32"))


def test_out_of_range_id_faults_at_the_gather() -> None:
    with pytest.raises(SimError, match="outside the table's 4 rows"):
        kernels.embedding(np.zeros((4, 2), np.float32), [1, 4])
    with pytest.raises(SimError, match="outside the table's 4 rows"):
        kernels.embedding_backward(np.zeros((2, 2), np.float32), [-1, 0], 4)


def test_dsl_gather_scatter_and_queues() -> None:
    """dsl.dma_gather / dma_scatter_add (the DSL addition): DMA instructions on the sync engine; successive
    scatter-adds into one table wait for each other even on different queues."""
    compiled = embeddings.embedding_backward_kernel.compile(np.zeros((300, 8), np.float32),
                                                            np.zeros(300, np.int32), vocab=1000)
    scatters = [i for i in compiled.program.streams["sync"] if isinstance(i, DmaScatterAdd)]
    assert len(scatters) == 3 and len({i.queue for i in scatters}) == 3
    for before, after in itertools.pairwise(scatters):
        assert any(sem == f"dma{before.queue}" for sem, _ in after.wait)
    program = embeddings.embedding_kernel.compile(np.zeros((10, 8), np.float32), np.zeros(200, np.int32)).program
    gathers = [i for i in program.streams["sync"] if isinstance(i, DmaGather)]
    assert [g.dst.partitions for g in gathers] == [128, 72]
    assert all(g.src.partitions == 10 and g.index.dtype == "int32" for g in gathers)


def test_strict_reads_zeroed_table_and_docstrings() -> None:
    """The gradient table is zeroed by DMA before anything reads it (strict reads fault otherwise), with
    a vocabulary that is not a multiple of 128."""
    dout = np.ones((70, 5), np.float32)
    ids = np.arange(70, dtype=np.int32) % 3
    compiled = embeddings.embedding_backward_kernel.compile(dout, ids, vocab=300)
    outputs = run_strict(compiled, (dout, ids))
    expect = np.zeros((300, 5), np.float32)
    expect[:3] = [[24.0] * 5, [23.0] * 5, [23.0] * 5]
    assert np.array_equal(outputs["dtable"], expect)
    assert doctest.testmod(embeddings).failed == 0
    assert dsl.dma_gather.__module__ == "trnsim.dsl.data"
