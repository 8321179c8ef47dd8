"""The exact integer reduction kernel (``compiler.intreduce``): integer products (``jnp.prod``) and window
reductions along one axis (``jnp.cumprod``, ``jnp.cumsum``, ``lax.cummax``/``cummin`` of 32-bit integers)
run on the functional simulator match the reference interpreter and jax bit for bit, wrapping modulo 2**N as
StableHLO does though VectorE computes in fp32; compiled programs lower them to the kernel instead of the
analytic cost, and forms it does not take keep their kernels.

Why bit-exactness holds: integer add and multiply modulo 2**N, max and min are associative and commutative,
so the kernel's trees combine in any order to the same bits, and each combine is exact (``compiler.intmath``:
16-bit halves, byte limbs, int32 then a mask). The data mixes full-range values, the type's limits, small
values and large odd ones, so products overflow and wrap without all becoming 0 (a test checks that an fp32
product of the data would differ)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim.compiler import intreduce
from trnsim.frontend.importer import import_module
from trnsim.frontend.mlir import parse
from trnsim.hw import registry
from trnsim.ir.graph import Graph, Node
from trnsim.ir.interp import Interpreter
from trnsim.isa.verify import verify

Fn = Callable[[Any], Any]
INTS = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)
WORDS = (np.int32, np.uint32)


def _values(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    """Full-range values, the type's limits (and 0xFFFF..., -1, 0, 1), small ones and large odd ones."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    full = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
    small = rng.integers(max(lo, -3), 4, size=shape)
    odd = full | 1
    edges = rng.choice(np.array(sorted({lo, hi, 0, 1, max(lo, -1), hi // 2 + 1}), dtype=np.int64), size=shape)
    pick = rng.choice(4, size=shape, p=[0.2, 0.3, 0.4, 0.1])
    return np.choose(pick, [full, small, odd, edges]).astype(dtype)


def _graph(fn: Fn, x: np.ndarray) -> tuple[Graph, Node]:
    mod, _ = parse(jax.jit(fn).lower(x).as_text())
    graph = import_module(mod, where="<test>").graph
    return graph, next(n for n in graph.nodes if n.op in ("reduce", "reduce_window"))


def _kernel(plan: intreduce.IntReduce, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    got = trnsim.run_kernel(intreduce.int_reduce_kernel(), x.reshape(plan.shape), plan=plan).outputs[0]
    return np.asarray(got).astype(np.int64).reshape(shape)


def _check(fn: Fn, shape: tuple[int, ...], dtype: Any, seed: int = 0) -> tuple[intreduce.IntReduce, np.ndarray]:
    """The kernel's result for ``fn(x)`` is the interpreter's and jax's, bit for bit."""
    x = _values(shape, dtype, seed)
    graph, node = _graph(fn, x)
    plan = intreduce.int_reduce_for(node)
    assert plan is not None, f"{node.op} of {shape} {np.dtype(dtype).name} is not the kernel's"
    (want,) = Interpreter().run(graph, [x])
    want = np.asarray(want)
    ref = np.asarray(jax.jit(fn)(x))
    assert ref.dtype == x.dtype and np.array_equal(want, ref)
    got = _kernel(plan, x, want.shape)
    bad = got != want.astype(np.int64)
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} differ, first at {np.argwhere(bad)[0]}: " \
                          f"{got[bad][0]} vs {want[bad][0]}"
    return plan, x


def prod(axis: Any) -> Fn:
    return lambda x: jnp.prod(x, axis=axis, dtype=x.dtype)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((6, 9), 1), ((3, 4, 5), (0, 2)), ((5, 7), None)])
def test_products_wrap_bit_for_bit(dtype: Any, shape: tuple[int, ...], axis: Any) -> None:
    _check(prod(axis), shape, dtype, seed=hash((shape, str(axis))) % 1000)


@pytest.mark.parametrize("dtype", WORDS)
def test_a_product_overflows_an_fp32_product(dtype: Any) -> None:
    """The data makes products an fp32 ALU would get wrong: the kernel's exactness is tested, not assumed."""
    plan, x = _check(prod(0), (6, 40), dtype, seed=3)
    assert plan.op == "mul"
    with np.errstate(all="ignore"):
        naive = np.prod(x.astype(np.float32), axis=0, dtype=np.float32).astype(np.float64)
    wrapped = np.prod(x, axis=0, dtype=dtype).astype(np.float64)
    assert (naive != wrapped).sum() >= 20
    assert (wrapped != 0).sum() >= 20                   # (and not every product wrapped to 0)


@pytest.mark.parametrize("shape,axis", [((64, 64), None), ((3, 5000), 1), ((257,), None), ((130, 3, 2), (0, 2))])
def test_large_and_whole_products(shape: tuple[int, ...], axis: Any) -> None:
    """A whole reduction split over partitions and combined through a row, chunks of a long reduced axis, a
    prime length that does not split, more than 128 kept rows."""
    plan, _ = _check(prod(axis), shape, np.int32, seed=7)
    assert plan.split == (shape == (64, 64))


@pytest.mark.parametrize("dtype", WORDS)
@pytest.mark.parametrize("name", ["sum", "max", "min"])
@pytest.mark.parametrize("shape,axis", [((6, 9), 1), ((3, 4, 5), (0, 2)), ((64, 64), None)])
def test_word_sums_maxima_and_minima_bit_for_bit(name: str, dtype: Any, shape: tuple[int, ...], axis: Any) -> None:
    """``jnp.sum`` / ``max`` / ``min`` of 32-bit integers of any values (full range: sums wrap, maxima differ
    beyond 2**24, where the tile recipes' fp32 would round them)."""
    fn = getattr(jnp, name)
    _check(lambda x: fn(x, axis=axis, **({"dtype": x.dtype} if name == "sum" else {})), shape, dtype,
           seed=len(shape) + len(name))


CUMULATIVE: dict[str, Callable[..., Any]] = {
    "cumprod": jax.lax.cumprod, "cumsum": jax.lax.cumsum, "cummax": jax.lax.cummax, "cummin": jax.lax.cummin}


@pytest.mark.parametrize("name,dtype", [*(("cumprod", t) for t in INTS),
                                        *((n, t) for n in ("cumsum", "cummax", "cummin") for t in WORDS)])
@pytest.mark.parametrize("shape,axis,reverse", [((8, 9), 0, False), ((4, 6, 5), 1, True), ((37,), 0, False)])
def test_cumulative_reductions_bit_for_bit(name: str, dtype: Any, shape: tuple[int, ...], axis: int,
                                           reverse: bool) -> None:
    """``jnp.cumprod`` and the others on the CPU lowering: a window of the whole axis, padded before it (after
    it, reversed)."""
    op = CUMULATIVE[name]
    plan, _ = _check(lambda x: op(x, axis=axis, reverse=reverse), shape, dtype, seed=len(shape) * 10 + axis)
    assert plan.window is not None and plan.window[0] == shape[axis]
    assert plan.window[2:] == ((0, shape[axis] - 1) if reverse else (shape[axis] - 1, 0))


@pytest.mark.parametrize("fn,shape,dtype", [
    (lambda x: jax.lax.reduce_window(x, np.int32(-2**31), jax.lax.max, (1, 3), (1, 2), ((0, 0), (1, 2))), (4, 11),
     np.int32),                                                 # strided, padded on both sides
    (lambda x: jax.lax.reduce_window(x, np.uint32(5), jax.lax.max, (4, 1), (1, 1), ((3, 0), (0, 0))), (6, 5),
     np.uint32),                                                # a max from an init that is not its identity
    (lambda x: jax.lax.reduce_window(x, np.int16(1), jax.lax.mul, (5,), (3,), ((2, 2),)), (20,), np.int16),
    (lambda x: jax.lax.reduce(x, np.int32(3), jax.lax.mul, (1,)), (7, 6), np.int32),   # init folded in
    (lambda x: jnp.cumsum(x, axis=1, dtype=x.dtype), (4, 300, 40), np.int32),          # chunks of the kept axis
])
def test_other_window_and_init_forms(fn: Fn, shape: tuple[int, ...], dtype: Any) -> None:
    _check(fn, shape, dtype, seed=11)


@pytest.mark.parametrize("shape,axis", [((1, 3), 0), ((3, 1, 4), 1), ((5, 1), 1), ((1,), 0), ((2, 1, 1, 4), 2)])
def test_a_window_along_a_size_one_axis_keeps_the_axes_around_it(shape: tuple[int, ...], axis: int) -> None:
    """A size-1 windowed axis whose padding makes the windows stays between the kept axes around it (a fuzzer
    found it moved last, which transposed the result when kept axes followed it)."""
    size, pads = [1] * len(shape), [(0, 0)] * len(shape)
    size[axis], pads[axis] = 2, (1, 1)
    _check(lambda x: jax.lax.reduce_window(x, np.int32(0), jax.lax.add, tuple(size), (1,) * len(shape), pads),
           shape, np.int32, seed=5)


def test_the_program_verifies() -> None:
    x = _values((8, 9), np.uint32, 0)
    _, node = _graph(lambda v: jnp.cumprod(v, axis=0, dtype=v.dtype), x)
    plan = intreduce.int_reduce_for(node)
    assert plan is not None
    program = intreduce.int_reduce_kernel().compile_specs([(plan.shape, plan.dtype)], "trn3", {"plan": plan}).program
    verify(program, registry.get("trn3"))


@pytest.mark.parametrize("fn,shape,dtype", [
    (prod(1), (16, 33), np.int32),
    (prod(None), (32, 32), np.uint16),
    (lambda x: jnp.cumprod(x, axis=0, dtype=x.dtype), (8, 9), np.int8),
    (lambda x: jnp.cumsum(x, axis=1, dtype=x.dtype), (8, 9), np.uint32),
    (lambda x: jax.lax.cummin(x, axis=0), (8, 9), np.int32),
    (lambda x: jax.lax.reduce_window(x, np.int32(-2**31), jax.lax.max, (1, 2), (1, 2), "VALID"), (4, 6), np.int32),
    (lambda x: jnp.sum(x, axis=1, dtype=x.dtype), (4, 8), np.int32),   # 32-bit sums and maxima of any values
    (lambda x: jnp.max(x, axis=0), (5, 3), np.uint32),
])
def test_compiled_programs_use_the_kernel(fn: Fn, shape: tuple[int, ...], dtype: Any) -> None:
    program = trnsim.compile(jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype)), cache=False)
    steps = [s for s in program.plan.steps if any(op in ("reduce", "reduce_window") for op in s.ops)]
    assert [s.kernel for s in steps] == ["int_reduce"]
    assert steps[0].seconds > 0 and steps[0].instructions.get("vector", 0) > 0
    x = _values(shape, dtype, 5)
    np.testing.assert_array_equal(np.asarray(trnsim.jit(fn)(x)), np.asarray(jax.jit(fn)(x)))


@pytest.mark.parametrize("fn,shape,dtype", [
    (prod(1), (4, 8), np.float32),                                      # a float product: tile code
    (lambda x: jnp.cumsum(x, axis=0, dtype=x.dtype), (8, 9), np.int8),  # an 8-bit sum: the pool kernel
    (lambda x: jnp.sum(x, axis=1, dtype=x.dtype), (4, 8), np.int16),    # a 16-bit sum: tile code
    (lambda x: jax.lax.reduce_window(x, np.int32(1), jax.lax.add, (3,), (1,), ((2, 0),)), (9,), np.int32),
    (lambda x: jax.lax.reduce_window(x, np.int32(1), jax.lax.mul, (2, 2), (1, 1), "VALID"), (4, 4), np.int32),
])
def test_other_forms_are_not_the_kernels(fn: Fn, shape: tuple[int, ...], dtype: Any) -> None:
    """Forms with a kernel of their own; an add window padded with an init that is not 0 (each padding element
    would count it once more); a window along two axes."""
    _, node = _graph(fn, np.ones(shape, dtype))
    assert intreduce.int_reduce_for(node) is None
