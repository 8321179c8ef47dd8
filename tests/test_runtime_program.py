"""Compiled programs as artifacts: the graph's encoding round-trips every program of the JAX zoo bit for bit,
refuses crafted structure tables with an ``ArtifactError``, cache hits decode on first use, and cache keys
ignore source locations."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from test_compiler_programs import CASES
from trnsim.compiler.options import CompileOptions
from trnsim.errors import ArtifactError
from trnsim.ir.graph import Graph, format_graph
from trnsim.ir.serialize import decode_graph, encode_graph
from trnsim.runtime.artifact import pack_arrays, pack_artifact, unpack_artifact
from trnsim.runtime.program import cache_entries, from_bytes, source_digest, to_bytes
from trnsim.runtime.warm import module_source


@pytest.mark.parametrize("name", list(CASES))
def test_every_zoo_program_round_trips(name: str) -> None:
    fn, args = CASES[name]
    program = trnsim.compile(jax.jit(fn).lower(*args), cache=False)
    data = to_bytes(program)
    loaded = from_bytes(data, where=name)
    assert format_graph(loaded.graph) == format_graph(program.graph)
    assert [n.attrs.keys() for n in loaded.graph.walk()] == [n.attrs.keys() for n in program.graph.walk()]
    assert to_bytes(loaded) == data
    for got, want in zip(loaded.run(*args, timing=False), program.run(*args, timing=False), strict=True):
        np.testing.assert_array_equal(got, want)


def _mlp(x: Any, w: Any) -> Any:
    return jnp.sum(jnp.tanh(x @ w), axis=0)


X, W = np.ones((4, 8), np.float32), np.full((8, 3), 0.5, np.float32)


def test_cache_hit_decodes_graph_and_plan_on_first_use(tmp_path: Path) -> None:
    url = "file://" + str(tmp_path)
    first = trnsim.compile(jax.jit(_mlp).lower(X, W), cache=url)
    hit = trnsim.compile(jax.jit(_mlp).lower(X, W), cache=url)
    assert hit.cache_hit and not first.cache_hit
    assert not isinstance(hit.graph_source, Graph) and callable(hit.plan_source)
    np.testing.assert_array_equal(hit.run(X, W)[0], first.run(X, W)[0])
    assert isinstance(hit.graph_source, Graph) and not callable(hit.plan_source)
    assert hit.plan.total_seconds == first.plan.total_seconds
    assert to_bytes(hit) == to_bytes(first)


def _encoded() -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]:
    def step(i: Any, y: Any) -> Any:
        return jnp.tanh(y) + jnp.sum(y)

    def body(x: Any) -> Any:
        return jax.lax.fori_loop(0, 3, step, x)   # a while, with regions

    return encode_graph(trnsim.compile(jax.jit(body).lower(X), cache=False).graph)


def _set(table: str, index: tuple[int, ...], value: int) -> Callable[[Any, dict[str, np.ndarray]], None]:
    def edit(tables: Any, structure: dict[str, np.ndarray]) -> None:
        structure[table] = structure[table].copy()
        structure[table][index] = value
    return edit


def _first_input_is_later_value(tables: Any, structure: dict[str, np.ndarray]) -> None:
    structure["inputs"] = structure["inputs"].copy()
    structure["inputs"][0] = 10 ** 6


def _root_is_its_own_region(tables: Any, structure: dict[str, np.ndarray]) -> None:
    structure["regions"] = structure["regions"].copy()
    structure["regions"][0] = 0


def _drop(key: str) -> Callable[[Any, dict[str, np.ndarray]], None]:
    def edit(tables: Any, structure: dict[str, np.ndarray]) -> None:
        if key in tables:
            del tables[key]
        else:
            del structure[key]
    return edit


def _bad_attrs(tables: Any, structure: dict[str, np.ndarray]) -> None:
    tables["attrs"] = "[{"


@pytest.mark.parametrize("edit, match", [
    (_set("nodes", (0, 0), -1), "negative|out of bounds"),                 # op index
    (_set("nodes", (0, 0), 10 ** 6), "op index .* out of bounds"),
    (_set("nodes", (0, 2), -2), "attrs index .* out of bounds"),
    (_set("nodes", (0, 4), 10 ** 6), "inputs range .* out of bounds"),
    (_set("graphs", (0, 4), 10 ** 6), "members range .* out of bounds"),
    (_set("params", (0,), -1), "out of bounds"),
    (_set("members", (0,), 1), "do not form one tree"),
    (_root_is_its_own_region, "do not form one tree"),
    (_first_input_is_later_value, "used before it is defined"),
    (_drop("ops"), "missing or mistyped table"),
    (_drop("nodes"), "table 'nodes' is missing"),
    (_drop("inputs"), "list 'inputs' is missing"),
    (_bad_attrs, "attributes are not valid JSON"),
])
def test_crafted_structure_is_refused(edit: Callable[[Any, dict[str, np.ndarray]], None], match: str) -> None:
    tables, structure, arrays = _encoded()
    decode_graph(tables, structure, arrays, where="ok")     # the unedited encoding decodes
    edit(tables, structure)
    with pytest.raises(ArtifactError, match=match) as err:
        decode_graph(tables, structure, arrays, where="model.neff")
    assert err.value.where == "model.neff" and "recompile" in str(err.value)


def test_hash_valid_but_malformed_program_fails_at_load_or_first_use() -> None:
    program = trnsim.compile(jax.jit(_mlp).lower(X, W), cache=False)
    art = unpack_artifact(to_bytes(program), where="x")
    _, structure, _ = encode_graph(program.graph)
    structure["inputs"] = structure["inputs"] + 10 ** 6
    sections = dict(art.sections, **{"program.bin": pack_arrays(structure)})
    crafted = pack_artifact(art.meta, sections, target=art.target)
    with pytest.raises(ArtifactError, match="used before it is defined"):
        from_bytes(crafted, where="crafted.neff")
    lazy = from_bytes(crafted, where="crafted.neff", lazy=True)      # what a cache hit does
    with pytest.raises(ArtifactError, match="used before it is defined"):
        lazy.run(X, W)
    no_plan = dict(art.sections)
    del no_plan["plan.json"]
    with pytest.raises(ArtifactError, match=r"no section 'plan\.json'"):
        from_bytes(pack_artifact(art.meta, no_plan, target=art.target), where="x", lazy=True)
    bad_plan = dict(art.sections, **{"plan.json": json.dumps({"target": "trn3", "steps": [{}]}).encode()})
    with pytest.raises(ArtifactError, match="plan is malformed"):
        _ = from_bytes(pack_artifact(art.meta, bad_plan, target=art.target), where="x", lazy=True).plan


def test_cache_key_covers_the_compiler_source_and_jaxlib() -> None:
    """An edited kernel or cost table changes trnsim's programs without a version bump: the key has the
    digest of trnsim's source files, and jaxlib's version (its parser and bytecode writer)."""
    entries = cache_entries(jax.jit(_mlp).lower(X, W), "trn3", CompileOptions())
    assert entries["trnsim_source"] == source_digest() and len(source_digest()) == 64
    assert entries["jaxlib_version"] == importlib.metadata.version("jaxlib")


def _key(module: object) -> str | bytes:
    return cache_entries(module, "trn3", CompileOptions())["module"]


def test_cache_key_of_a_lowered_ignores_locations_and_matches_what_warm_ships() -> None:
    def _mlp_elsewhere(x: Any, w: Any) -> Any:      # the same ops from other source lines

        return jnp.sum(jnp.tanh(x @ w), axis=0)

    _mlp_elsewhere.__name__ = _mlp.__name__         # the module's name comes from the function's
    here = jax.jit(_mlp).lower(X, W)
    elsewhere = jax.jit(_mlp_elsewhere).lower(X, W)
    assert "loc(" in here.as_text(debug_info=True)
    assert _key(here) == _key(elsewhere) == _key(here.compiler_ir("stablehlo"))
    def other(x: Any, w: Any) -> Any:
        return jnp.sum(jnp.tanh(x @ w), axis=1)

    assert _key(jax.jit(other).lower(X, W)) != _key(here)
    assert _key(jax.jit(_mlp).lower(X, W + 1)) == _key(here)                        # values are not traced
    assert _key(jax.jit(_mlp).lower(X[:2], W)) != _key(here)
    assert _key(module_source(here, "script")) == _key(here)
    # the bytecode the workers get compiles to the same program
    shipped = trnsim.compile(module_source(here, "script"), cache=False)
    np.testing.assert_array_equal(shipped.run(X, W)[0], trnsim.compile(here, cache=False).run(X, W)[0])
