"""Generated tile code for float products (``reduce`` with ``multiply``: along rows on VectorE's tensor_reduce,
over the leading axes in a running VectorE tile) and for the chlo decompositions of the conformance corpus
(``igamma``, ``igammac``: a while loop's ``i < n and any(x)``, constant math folded): which groups take a recipe,
and that the kernel on the functional simulator gives the interpreter's values."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from test_compiler_tilegen import _compile, _run_step
from trnsim.compiler import lowering, tilegen

CORPUS = Path("/work/shared/conformance/stablehlo")
FLOATS = {"float32": 23, "bfloat16": 7, "float16": 10}          # mantissa bits
AXES = [(0,), (1,), (0, 1)]                                       # leading, last, all


def _steps(program: trnsim.CompiledProgram) -> list[int]:
    return [s.index for s in program.plan.steps if s.kernel == "generated_elementwise"]


def _factors(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> np.ndarray:
    """Factors whose products stay far from overflow and underflow: ±(1 + t) with |t| ≤ 1/n, n the most factors
    one result has."""
    n = shape[0] * shape[1]
    x = np.exp(rng.uniform(-1.0, 1.0, shape) / n) * rng.choice([-1.0, 1.0], shape)
    return x.astype(jnp.bfloat16 if dtype == "bfloat16" else dtype)


def _tolerance(dtype: str, factors: int) -> float:
    """Relative: both the interpreter and the kernel multiply in some order, each product rounded once to
    nearest (unit roundoff ``u = 2**-(mantissa + 1)``: the interpreter in the dtype, the kernel in the dtype
    (a leading-axis running tile) or in fp32 (tensor_reduce, the partition reduce)), so each is within
    ``(1 + u)**(n - 1) - 1 ≤ 1.01 (n - 1) u`` of the exact product for ``(n - 1) u ≤ 0.01``; the last rounding to
    the dtype adds ``u``. Their difference: at most ``2.02 n u`` relative."""
    u = 2.0 ** -(FLOATS[dtype] + 1)
    return 2.02 * factors * u


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 160), axes=st.sampled_from(AXES),
       dtype=st.sampled_from(list(FLOATS)), seed=st.integers(0, 2**16))
def test_products_compute_the_group(rows: int, cols: int, axes: tuple[int, ...], dtype: str, seed: int) -> None:
    """Rows not a multiple of 128 (a ragged last tile, fewer than 128 lanes), columns of any width."""
    x = _factors(np.random.default_rng(seed), (rows, cols), dtype)
    program = _compile(lambda x: jnp.prod(x, axis=axes, dtype=x.dtype), x)
    factors = int(np.prod([x.shape[a] for a in axes]))
    if factors == 1:
        return                           # a product of one factor: a view
    (step,) = _steps(program)
    recipe, pairs = _run_step(program, [x], step)
    assert any(s[1] == "mul" for s in recipe.steps)
    for got, want in pairs:
        g, w = got[:want.size].astype(np.float64), want.astype(np.float64)
        assert np.all(np.abs(g - w) <= _tolerance(dtype, factors) * np.abs(w)), (g, w)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16, np.int32])
def test_integer_products_are_the_exact_integer_kernel(dtype: type) -> None:
    """StableHLO wraps an integer product in its type; the tile recipe's fp32 product gives that only below
    2**24, so integer products are ``compiler.intreduce``'s (byte limbs, exact)."""
    x = np.ones((4, 8), dtype)
    program = _compile(lambda x: jnp.prod(x, axis=0, dtype=x.dtype), x)
    assert [s.kernel for s in program.plan.steps] == ["int_reduce"]


def _analytic(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ops of the file's fused groups that ``recipe_for`` gives no recipe."""
    from trnsim.compiler.api import compile_graph
    from trnsim.frontend.importer import import_module
    from trnsim.frontend.mlir import parse

    refused: list[list[str]] = []
    original = tilegen.recipe_for

    def spy(nodes, external, outputs):  # type: ignore[no-untyped-def]
        recipe = original(nodes, external, outputs)
        if recipe is None:
            refused.append([n.op for n in nodes])
        return recipe

    monkeypatch.setattr(lowering.tilegen, "recipe_for", spy)
    imported = import_module(parse(path.read_text())[0], where=str(path), lift="inputs", collect_checks=True)
    imported.graph.results = [x for c in imported.checks for x in (c.actual, c.expected)]
    compile_graph(imported.graph, target="trn3")
    return refused


NAMES = ["reduce_prod_float16_2_3", "reduce_prod_float32_2_3", "igamma_float32_20_20_float32_1_20_chlo",
         "igammac_bfloat16_20_20_bfloat16_20_20_chlo",
         "igammac_float32_1_20_float32_20_20_chlo", "igammac_float32_20_20_float32_1_20_chlo",
         "igammac_float32_20_20_float32_20_20_chlo"]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no conformance corpus")
@pytest.mark.parametrize("name", NAMES)
def test_corpus_groups_get_a_recipe(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused groups that kept the analytic cost (issue 5): float products, a while loop's ``i < n and
    any(x)``, an igamma loop body of 13 inputs with ``1 / eps`` folded."""
    assert _analytic(CORPUS / f"{name}.mlir", monkeypatch) == []
