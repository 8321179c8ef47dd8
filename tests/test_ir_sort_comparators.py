"""The reference interpreter's ``sort`` (``ir/semantics/sort.py``) against XLA bit for bit: JAX's comparators
(floats canonicalised, then compared in the total order; several keys lexicographic) sort by keys, any other
comparator through the bitonic network, both exactly XLA's stable sort; the network calls the comparator
O(log² n) times."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnsim.frontend.importer import import_module
from trnsim.frontend.mlir import parse
from trnsim.ir.graph import Graph
from trnsim.ir.interp import Interpreter
from trnsim.ir.semantics import sort as sort_semantics

jax.config.update("jax_enable_x64", False)

Fn = Callable[..., Any]


class Counting(Interpreter):
    """Counts the region calls of each region name (the comparator: ``sort.region``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def call(self, region: Graph, args: Sequence[np.ndarray], *, vectorized: bool = False) -> list[np.ndarray]:
        self.calls[region.name] = self.calls.get(region.name, 0) + 1
        return super().call(region, args, vectorized=vectorized)


@contextmanager
def network_only() -> Iterator[None]:
    """Every comparator through the network (as one the key path does not recognise)."""
    saved = sort_semantics._lexicographic  # pyright: ignore[reportPrivateUsage]
    sort_semantics._lexicographic = lambda region: None  # pyright: ignore[reportPrivateUsage]
    try:
        yield
    finally:
        sort_semantics._lexicographic = saved  # pyright: ignore[reportPrivateUsage]


def graph_of(text: str) -> Graph:
    return import_module(parse(text)[0], where="<test>").graph


def interpret(fn: Fn, *args: np.ndarray) -> tuple[list[np.ndarray], Counting]:
    interp = Counting()
    return interp.run(graph_of(jax.jit(fn, keep_unused=True).lower(*args).as_text()), list(args)), interp


def same_bits(got: Sequence[np.ndarray], want: Any) -> bool:
    wants = [np.asarray(w) for w in jax.tree.leaves(want)]
    return len(got) == len(wants) and all(
        g.dtype == w.dtype and g.shape == w.shape and
        np.array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8))
        for g, w in zip(got, wants, strict=True))


DTYPES: dict[str, Any] = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "i32": np.int32,
                          "u8": np.uint8}
SPECIALS = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0], np.float32)


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Few distinct values (ties), floats with NaNs of both signs, ±0 and ±inf."""
    if dtype in ("i32", "u8"):
        low = 0 if dtype == "u8" else -4
        return rng.integers(low, low + 8, shape).astype(DTYPES[dtype])
    x = rng.integers(-4, 4, shape).astype(np.float32) / 2
    special = rng.random(shape) < 0.3
    x[special] = rng.choice(SPECIALS, int(special.sum()))
    return x.astype(DTYPES[dtype])


SORTS: dict[str, Fn] = {
    "sort": lambda x, y, axis: jnp.sort(x, axis=axis),
    "argsort": lambda x, y, axis: jnp.argsort(x, axis=axis),
    "sort descending": lambda x, y, axis: jnp.sort(x, axis=axis, descending=True),
    "argsort descending": lambda x, y, axis: jnp.argsort(x, axis=axis, descending=True),
    "num_keys=2": lambda x, y, axis: jax.lax.sort((x, y), dimension=axis, num_keys=2),
    "sort_key_val": lambda x, y, axis: jax.lax.sort_key_val(x, y, dimension=axis),
    "num_keys=1 of 3": lambda x, y, axis: jax.lax.sort((x, y, x), dimension=axis, num_keys=1),
}


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, np.ndarray, np.ndarray, int, bool]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.one_of(st.integers(1, 40), st.integers(41, 3000)))
    rows = draw(st.integers(1, 3))
    axis = draw(st.integers(0, 1))
    shape = (n, rows) if axis == 0 else (rows, n)
    x = values(rng, shape, draw(st.sampled_from(list(DTYPES))))
    y = values(rng, shape, draw(st.sampled_from(list(DTYPES))))
    return draw(st.sampled_from(list(SORTS))), x, y, axis, draw(st.booleans())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_sorts_match_xla_bit_for_bit(case: tuple[str, np.ndarray, np.ndarray, int, bool]) -> None:
    name, x, y, axis, network = case

    def fn(a: Any, b: Any) -> Any:
        return SORTS[name](a, b, axis)

    want = jax.jit(fn)(x, y)
    if network:
        with network_only():
            got, interp = interpret(fn, x, y)
    else:
        got, interp = interpret(fn, x, y)
        assert "sort.region" not in interp.calls    # JAX's comparators sort by keys
    assert same_bits(got, want)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32"])
def test_top_k_descending_comparator_sorts_by_keys(dtype: str) -> None:
    x = values(np.random.default_rng(1), (4, 257), dtype)
    got, interp = interpret(lambda a: jax.lax.top_k(a, 257), x)
    assert same_bits(got, jax.jit(lambda a: jax.lax.top_k(a, 257))(x))
    assert interp.calls == {"sort_keys": 1}


def test_the_network_calls_the_comparator_log2_n_squared_times() -> None:
    n = 4096
    x = values(np.random.default_rng(2), (3, n), "f32")
    with network_only():
        got, interp = interpret(jnp.argsort, x)
    assert same_bits(got, jax.jit(jnp.argsort)(x))
    lg = int(math.log2(n))
    assert interp.calls == {"sort.region": lg * (lg + 1) // 2}      # 78 stages, each all pairs of all rows


def test_a_row_not_a_power_of_two_pads_past_the_end() -> None:
    x = values(np.random.default_rng(3), (2, 4097), "bf16")
    with network_only():
        got, interp = interpret(jnp.argsort, x)
    assert same_bits(got, jax.jit(jnp.argsort)(x))
    assert interp.calls == {"sort.region": 13 * 14 // 2}


def _abs_sort(compare: str) -> str:
    """A sort by |x| whose two sides are computed differently (|a| against |-b|): not keys, the network."""
    t = "tensor<5x300xf32>"
    return (f"func.func @main(%x: {t}) -> {t} {{\n"
            f'  %0 = "stablehlo.sort"(%x) <{{dimension = 1 : i64, is_stable = true}}> ({{\n'
            f"  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
            f"    %1 = stablehlo.abs %a : tensor<f32>\n"
            f"    %2 = stablehlo.negate %b : tensor<f32>\n"
            f"    %3 = stablehlo.abs %2 : tensor<f32>\n"
            f"    %4 = {compare} : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
            f"    stablehlo.return %4 : tensor<i1>\n"
            f"  }}) : ({t}) -> {t}\n"
            f"  return %0 : {t}\n}}\n")


@pytest.mark.parametrize("compare", ["stablehlo.compare LT, %1, %3, FLOAT", "stablehlo.compare GT, %3, %1, FLOAT"])
def test_any_strict_weak_order_sorts_stably(compare: str) -> None:
    x = np.random.default_rng(4).integers(-3, 4, (5, 300)).astype(np.float32)
    x[x == 0] = np.where(np.arange((x == 0).sum()) % 2, 0.0, -0.0)
    interp = Counting()
    (got,) = interp.run(graph_of(_abs_sort(compare)), [x])
    want = np.take_along_axis(x, np.argsort(np.abs(x), axis=1, kind="stable"), axis=1)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert interp.calls == {"sort.region": 9 * 10 // 2}      # 300 → 512 wires


def _two_keys(eq: str) -> Graph:
    t, u = "tensor<8xi32>", "tensor<8xui8>"
    return graph_of(
        f"func.func @main(%x: {t}, %y: {u}) -> ({t}, {u}) {{\n"
        f'  %0:2 = "stablehlo.sort"(%x, %y) <{{dimension = 0 : i64, is_stable = true}}> ({{\n'
        f"  ^bb0(%a: tensor<i32>, %b: tensor<i32>, %c: tensor<ui8>, %d: tensor<ui8>):\n"
        f"    %1 = stablehlo.compare LT, %c, %d, UNSIGNED : (tensor<ui8>, tensor<ui8>) -> tensor<i1>\n"
        f"    %2 = stablehlo.compare LT, %a, %b, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        f"    %3 = stablehlo.compare {eq} : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        f"    %4 = stablehlo.and %3, %1 : tensor<i1>\n"
        f"    %5 = stablehlo.or %4, %2 : tensor<i1>\n"
        f"    stablehlo.return %5 : tensor<i1>\n"
        f"  }}) : ({t}, {u}) -> ({t}, {u})\n"
        f"  return %0#0, %0#1 : {t}, {u}\n}}\n")


def _comparator(graph: Graph) -> Graph:
    (node,) = [n for n in graph.nodes if n.op == "sort"]
    return node.regions[0]


def test_keys_are_recognised_only_in_the_lexicographic_form() -> None:
    keys = sort_semantics._lexicographic(_comparator(_two_keys("EQ, %b, %a, SIGNED")))  # pyright: ignore[reportPrivateUsage]
    assert keys is not None and [(k.direction, k.compare_type) for k in keys] == [("LT", "SIGNED"),
                                                                                  ("LT", "UNSIGNED")]
    for eq in ("NE, %a, %b, SIGNED", "EQ, %a, %a, SIGNED", "EQ, %a, %b, UNSIGNED"):
        assert sort_semantics._lexicographic(_comparator(_two_keys(eq))) is None  # pyright: ignore[reportPrivateUsage]
    x = np.array([3, 1, 3, 1, 2, 3, 1, 2], np.int32)
    y = np.array([9, 8, 7, 6, 5, 4, 3, 2], np.uint8)
    got = Interpreter().run(_two_keys("EQ, %b, %a, SIGNED"), [x, y])
    assert same_bits(got, jax.lax.sort((jnp.asarray(x), jnp.asarray(y)), num_keys=2))
