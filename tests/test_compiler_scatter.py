"""The general scatter kernel (``compiler.dmascatter``): random scatter forms run on the functional simulator
match the reference interpreter bit for bit, updates apply in order (duplicates included, the ordering made
by semaphores in the program), the corpus's scatters lower to it, and the forms it cannot compute exactly
keep the analytic cost.

Why bit-exactness holds (the interpreter applies each update in row-major order, rounding in the operand's
dtype after each application):
- replace: the values move by DMA and an exact select (fp32/bf16/f16 and ≤ 16-bit integers widen exactly to
  fp32; 32-bit integers are selected by bits), and duplicates resolve as the interpreter's: a read-modify-write
  tile holds one window (distinct addresses), tiles run in row-major order.
- add of fp32/bf16: the DMA's read-add-write computes one fp32 add and rounds once per application, in
  partition then tile order: the interpreter's ``np.add.at`` in the same order, so duplicates add in the same
  order (no reassociation, hence no bound needed). Dropped windows add -0.0, which changes no value.
- add/mul of f16 (and mul of fp32/bf16): one fp32 operation rounded once to the dtype; an f16 or bf16
  product is exact in fp32, and a sum's double rounding (fp32 then f16) is innocuous as 24 ≥ 2·11 + 2 (numpy's
  half arithmetic rounds through fp32 as well).
- max/min: exact selections; signed zeros made IEEE (``dmascatter._apply``); ≤ 16-bit integers are exact in fp32.
- add of 8- and 16-bit integers, multiply of 8-bit ones: exact in int32 through fp32 (below 2**17 and 2**16),
  then wrapped to the type's bits as StableHLO's integer arithmetic wraps.
- add, max and min of 32-bit integers: two exact 16-bit halves (a carry between them; compared high then low),
  multiply of 16- and 32-bit ones: byte limbs whose column sums stay below 2**19, wrapped by bitwise ops on
  exact integers (``dmascatter._split_add``, ``_split_pick``, ``_limb_mul``).
NaNs compare as NaNs (payloads may be quieted on the way through fp32), everything else by bits.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim.compiler import dmascatter
from trnsim.frontend.importer import import_module
from trnsim.frontend.mlir import parse
from trnsim.hw import registry
from trnsim.ir.graph import Graph, Node
from trnsim.ir.interp import Interpreter
from trnsim.isa.verify import verify

NP: dict[str, Any] = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "i8": np.int8,
                      "i16": np.int16, "i32": np.int32, "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
                      "i64": np.int64, "ui64": np.uint64}
FLOATS = ("f32", "bf16", "f16")
COMBINERS: dict[str, tuple[str, ...]] = {
    **{t: ("replace", "add", "maximum", "minimum", "multiply") for t in FLOATS},
    **{t: ("replace", "maximum", "minimum", "add", "multiply") for t in ("i8", "ui8", "i16", "ui16", "i32", "ui32")},
}
SPECIALS = [0.0, -0.0, 1.0, -1.5, 2.0, 0.5, 3.25, -7.0, float("inf"), float("-inf"), float("nan")]


def _ttype(shape: tuple[int, ...], t: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + t + ">"


def _module(form: dict[str, Any]) -> str:
    """A ``func.func @main(operand, indices, updates)`` of one scatter (generic MLIR form)."""
    t, it = form["dtype"], form["index_dtype"]
    tt, idt, ut, s = (_ttype(form["shape"], t), _ttype(form["idx_shape"], it), _ttype(form["upd_shape"], t),
                      _ttype((), t))
    if form["combiner"] == "replace":
        body = f'    "stablehlo.return"(%x1) : ({s}) -> ()'
    else:
        body = (f'    %r = "stablehlo.{form["combiner"]}"(%x0, %x1) : ({s}, {s}) -> {s}\n'
                f'    "stablehlo.return"(%r) : ({s}) -> ()')
    fields = [(name, form[name]) for name in ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                                              "scatter_indices_batching_dims", "scatter_dims_to_operand_dims")]
    numbers = ", ".join(f"{name} = [{', '.join(map(str, v))}]" for name, v in fields if v)
    numbers += (", " if numbers else "") + f"index_vector_dim = {form['index_vector_dim']}"
    return (f"func.func @main(%a0: {tt}, %a1: {idt}, %a2: {ut}) -> ({tt}) {{\n"
            f'  %s = "stablehlo.scatter"(%a0, %a1, %a2) ({{\n  ^bb0(%x0: {s}, %x1: {s}):\n{body}\n  }}) '
            f"{{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<{numbers}>, "
            f"unique_indices = false}} : ({tt}, {idt}, {ut}) -> {tt}\n  func.return %s : {tt}\n}}\n")


def _graph(text: str) -> tuple[Graph, Node]:
    mod, _ = parse(text)
    graph = import_module(mod, where="<test>").graph
    return graph, next(n for n in graph.nodes if n.op == "scatter")


@st.composite
def forms(draw: st.DrawFn) -> dict[str, Any]:
    """A random scatter: operand rank 1-4 (sizes 1-7), batching, inserted and window dims, a permuted map of
    index components, any index vector dim (implicit when one component), 32- and 64-bit indices."""
    dtype = draw(st.sampled_from(sorted(COMBINERS)))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(rank))
    dims = draw(st.permutations(range(rank)))
    batching = sorted(dims[: draw(st.integers(0, min(2, rank - 1)))])
    rest = [d for d in range(rank) if d not in batching]
    inserted = sorted(d for d in rest if draw(st.booleans()))
    window_operand = [d for d in rest if d not in inserted]
    to_operand = list(draw(st.permutations(rest)))[: draw(st.integers(1, len(rest)))]
    k = len(to_operand)
    n_scatter = draw(st.integers(len(batching), len(batching) + 2))
    sizes = [draw(st.integers(1, 4)) for _ in range(n_scatter)]
    paired = list(draw(st.permutations(range(n_scatter))))[: len(batching)]
    for op_dim, i in zip(batching, paired, strict=True):
        sizes[i] = shape[op_dim]
    implicit = k == 1 and draw(st.booleans())
    vec = n_scatter if implicit else draw(st.integers(0, n_scatter))
    idx_shape = list(sizes)
    if not implicit:
        idx_shape.insert(vec, k)
    window = {d: draw(st.integers(1, shape[d])) for d in window_operand}
    upd_rank = n_scatter + len(window_operand)
    window_dims = sorted(draw(st.permutations(range(upd_rank)))[: len(window_operand)])
    scatter_sizes, window_sizes = iter(sizes), iter(window[d] for d in window_operand)
    upd_shape = tuple(next(window_sizes) if j in window_dims else next(scatter_sizes) for j in range(upd_rank))
    return {"dtype": dtype, "combiner": draw(st.sampled_from(COMBINERS[dtype])),
            "index_dtype": draw(st.sampled_from(["i32", "i64", "i64", "ui32", "i8"])), "shape": shape,
            "idx_shape": tuple(idx_shape), "upd_shape": upd_shape, "update_window_dims": window_dims,
            "inserted_window_dims": inserted, "input_batching_dims": batching,
            "scatter_indices_batching_dims": [i if i < vec else i + 1 for i in paired],
            "scatter_dims_to_operand_dims": to_operand, "index_vector_dim": vec,
            "limits": [shape[d] - window.get(d, 1) for d in to_operand]}


def _values(draw: Callable[[Any], Any], t: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if t in FLOATS:
        pool = st.one_of(st.sampled_from(SPECIALS), st.floats(-100, 100, width=32))
        return np.array(draw(st.lists(pool, min_size=n, max_size=n)), np.float32).astype(NP[t]).reshape(shape)
    info = np.iinfo(NP[t])
    lo, hi = int(info.min), int(info.max)
    edges = st.sampled_from([lo, lo + 1, hi, hi - 1, 0xFFFF, 0x10000, -0x10000, 2**24 + 1])
    pool = st.one_of(st.integers(max(-3, lo), 3), st.integers(lo, hi), edges.filter(lambda v: lo <= v <= hi))
    return np.array(draw(st.lists(pool, min_size=n, max_size=n)), NP[t]).reshape(shape)


def _indices(draw: Callable[[Any], Any], form: dict[str, Any]) -> np.ndarray:
    """In-range values and a few just outside (negative, too large), duplicates likely; extremes of the type
    (for 64-bit: beyond 32 bits, whose low word alone would look in range)."""
    t, shape, vec = form["index_dtype"], form["idx_shape"], form["index_vector_dim"]
    k = len(form["limits"])
    info = np.iinfo(NP[t])
    batch = tuple(n for d, n in enumerate(shape) if d != vec) if len(shape) > vec else shape
    n = int(np.prod(batch))
    extremes = [int(info.min), int(info.max)] + ([2**32 + 1, -(2**32) + 2, 2**40] if t == "i64" else [])
    comps = []
    for limit in form["limits"]:
        pool = st.one_of(st.integers(-2, limit + 2), st.integers(0, limit), st.sampled_from(extremes))
        comps.append([min(max(v, int(info.min)), int(info.max)) for v in draw(st.lists(pool, min_size=n, max_size=n))])
    arr = np.array(comps, dtype=NP[t]).reshape((k, *batch))
    if len(shape) == len(batch):               # implicit index vector dim (one component)
        return arr[0]
    return np.moveaxis(arr, 0, vec)


def _bits(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Comparable codes and a NaN mask (floats widened exactly to fp32)."""
    if a.dtype.kind in "iu":
        return a.astype(np.int64), np.zeros(a.shape, bool)
    f = np.asarray(a).astype(np.float32)
    return f.view(np.uint32), np.isnan(f)


def run_scatter(plan: dmascatter.WindowScatter, x: np.ndarray, idx: np.ndarray, upd: np.ndarray,
                check: bool = False) -> np.ndarray:
    """The kernel on the functional simulator: ``x`` and ``upd`` flat, ``idx`` as ``plan.layout`` (a 64-bit
    index as its two 32-bit words, low first)."""
    flat = np.ascontiguousarray(idx).reshape(-1)
    words = flat.view(np.uint32 if idx.dtype == np.uint64 else np.int32) if idx.itemsize == 8 else flat
    args = [x.reshape(-1, 1), words.reshape(plan.layout), upd.reshape(-1, 1)]
    if check:
        specs = [(a.shape, str(s.dtype)) for a, s in zip(args, dmascatter.scatter_specs(plan), strict=True)]
        verify(dmascatter.scatter_kernel().compile_specs(specs, "trn3", {"plan": plan}).program, registry.get("trn3"))
    got = trnsim.run_kernel(dmascatter.scatter_kernel(), *args, plan=plan).outputs[0]
    return np.asarray(got).astype(x.dtype).reshape(x.shape)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    (g, gn), (w, wn) = _bits(got), _bits(want)
    bad = ~((g == w) | (gn & wn))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} differ, first at {np.argwhere(bad)[0]}: " \
                          f"{got.reshape(-1)[np.flatnonzero(bad)[0]]} vs {want.reshape(-1)[np.flatnonzero(bad)[0]]}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=forms(), data=st.data())
def test_random_scatters_match_the_interpreter_bit_for_bit(form: dict[str, Any], data: st.DataObject) -> None:
    graph, node = _graph(_module(form))
    plan = dmascatter.window_scatter_for(node)
    assume(plan is not None)        # (a read-modify-write of more than MAX_PICK_TILES tiles keeps the analytic cost)
    x = _values(data.draw, form["dtype"], form["shape"])
    upd = _values(data.draw, form["dtype"], form["upd_shape"])
    idx = _indices(data.draw, form)
    (want,) = Interpreter().run(graph, [x, idx, upd])
    assert plan is not None
    assert_same(run_scatter(plan, x, idx, upd), np.asarray(want))


def _form(dtype: str, combiner: str, shape: tuple[int, ...], idx_shape: tuple[int, ...], upd_shape: tuple[int, ...],
          window: list[int], inserted: list[int], to_operand: list[int], vec: int,
          index_dtype: str = "i64") -> dict[str, Any]:
    return {"dtype": dtype, "combiner": combiner, "index_dtype": index_dtype, "shape": shape, "idx_shape": idx_shape,
            "upd_shape": upd_shape, "update_window_dims": window, "inserted_window_dims": inserted,
            "input_batching_dims": [], "scatter_indices_batching_dims": [], "scatter_dims_to_operand_dims": to_operand,
            "index_vector_dim": vec}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("combiner", ["maximum", "minimum"])
def test_max_and_min_give_ieee_signed_zeros_as_the_interpreter(dtype: str, combiner: str) -> None:
    form = _form(dtype, combiner, (8,), (8, 1), (8,), [], [0], [0], 1)
    graph, node = _graph(_module(form))
    plan = dmascatter.window_scatter_for(node)
    assert plan is not None and plan.combiner == combiner[:3]
    x = np.array([-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0], np.float32).astype(NP[dtype])
    upd = np.array([0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 1.0, -1.0], np.float32).astype(NP[dtype])
    idx = np.array([0, 1, 2, 3, 4, 5, 6, 7], np.int64).reshape(8, 1)
    idx[4:6] = [[0], [1]]                                      # a second update of the first two elements
    (want,) = Interpreter().run(graph, [x, idx, upd])
    assert_same(run_scatter(plan, x, idx, upd, check=True), np.asarray(want))


def _happens_before(program: Any) -> Any:
    """``before(a, b)``: instruction ``a`` completes before ``b`` starts, by the program's own synchronisation
    (semaphore waits, transitively, and in-order completion within a sync domain), whatever order a
    simulator happens to run them in."""
    from functools import cache

    order: dict[str, list[Any]] = {}
    where: dict[int, tuple[str, int]] = {}
    for stream in program.streams.values():
        for ins in stream:
            domain = ins.signal[0]
            where[id(ins)] = (domain, len(order.setdefault(domain, [])))
            order[domain].append(ins)

    @cache
    def known(domain: str, i: int) -> dict[str, int]:
        """Completed instructions per domain when instruction ``i`` of ``domain`` starts."""
        seen = dict(known(domain, i - 1)) if i else {}
        seen[domain] = max(seen.get(domain, 0), i)
        for d, n in order[domain][i].wait:
            for e, m in {**known(d, n - 1), d: n}.items():
                seen[e] = max(seen.get(e, 0), m)
        return seen

    def before(a: Any, b: Any) -> bool:
        (da, ia), (db, ib) = where[id(a)], where[id(b)]
        return known(db, ib).get(da, 0) > ia
    return before


@pytest.mark.parametrize(("dtype", "combiner"), [("f32", "replace"), ("f16", "add"), ("f32", "add"),
                                                 ("bf16", "multiply"), ("i32", "replace"), ("i16", "add"),
                                                 ("ui8", "multiply")])
def test_duplicate_updates_apply_in_row_major_order_ordered_by_the_programs_semaphores(dtype: str,
                                                                                        combiner: str) -> None:
    # 300 single-element updates hitting 3 elements: the result depends on the order of application
    form = _form(dtype, combiner, (3, 4), (300, 1), (300, 4), [1], [0], [0], 1, "i32")
    graph, node = _graph(_module(form))
    plan = dmascatter.window_scatter_for(node)
    assert plan is not None
    rng = np.random.default_rng(3)
    x = rng.integers(-9, 9, (3, 4)).astype(NP[dtype])
    info = np.iinfo(NP[dtype]) if dtype not in FLOATS else None      # integers: the full range, so sums wrap
    upd = (rng.integers(int(info.min), int(info.max) + 1, (300, 4)) if info is not None else
           rng.choice([0.5, 1.0, 2.0, 1.5, -0.75, 3.0, 1e-3, 7.0], (300, 4))).astype(NP[dtype])
    idx = rng.integers(-1, 4, (300, 1)).astype(np.int32)
    (want,) = Interpreter().run(graph, [x, idx, upd])
    assert_same(run_scatter(plan, x, idx, upd, check=True), np.asarray(want))
    specs = [(s.shape, s.dtype) for s in dmascatter.scatter_specs(plan)]
    program = dmascatter.scatter_kernel().compile_specs(specs, "trn3", {"plan": plan}).program
    before = _happens_before(program)
    indirect = [ins for ins in program.streams["sync"] if ins.mnemonic.startswith("dma_") and
                ins.mnemonic != "dma_copy"]
    writes = [ins for ins in indirect if "scatter" in ins.mnemonic]
    reads = [ins for ins in indirect if ins.mnemonic == "dma_gather" and ins.src.tensor == "scattered"]
    assert len(writes) == len(plan.tiles()) > 1
    for earlier, later in pairwise(writes):
        assert before(earlier, later)                   # every tile's write after the previous one's
    for w, r in zip(writes, reads[1:], strict=False):
        assert before(w, r)                             # and its read of old values after them too


# the values where 16-bit halves and byte limbs carry, borrow and change sign, and the types' extremes
EDGES: dict[str, list[int]] = {
    "i32": [-(2**31), -(2**31) + 1, -(2**24) - 1, -65537, -65536, -65535, -256, -1, 0, 1, 255, 65535, 65536, 65537,
            2**24 + 1, 2**31 - 1],
    "ui32": [0, 1, 255, 256, 65535, 65536, 65537, 2**24 - 1, 2**24 + 1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 65537,
             2**32 - 65536, 2**32 - 2, 2**32 - 1],
    "i16": [-32768, -32767, -257, -256, -255, -2, -1, 0, 1, 2, 255, 256, 257, 4097, 32766, 32767],
    "ui16": [0, 1, 2, 3, 255, 256, 257, 4097, 32767, 32768, 32769, 65279, 65280, 65534, 65535, 43691],
}
SPLIT = [(t, c) for t in ("i32", "ui32") for c in ("add", "maximum", "minimum", "multiply")] + \
    [("i16", "multiply"), ("ui16", "multiply")]
PYTHON_OPS: dict[str, Callable[[int, int], int]] = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b,
                                                    "maximum": max, "minimum": min}


def _wrap(v: int, t: str) -> int:
    """``v`` mod 2**bits, as the type's value (StableHLO's integer arithmetic wraps)."""
    bits = np.dtype(NP[t]).itemsize * 8
    v &= (1 << bits) - 1
    return v - (1 << bits) if t.startswith("i") and v >= 1 << (bits - 1) else v


@pytest.mark.parametrize(("dtype", "combiner"), SPLIT)
def test_wide_integer_combiners_are_exact_on_every_pair_of_edge_values(dtype: str, combiner: str) -> None:
    """``x[i, j] = op(E[i], E[j])`` for all 256 pairs of ``EDGES`` (one update an element, a row a tile): the
    interpreter is checked against Python integers, the kernel against the interpreter."""
    edges = EDGES[dtype]
    form = _form(dtype, combiner, (16, 16), (16, 1), (16, 16), [1], [0], [0], 1, "i32")
    graph, node = _graph(_module(form))
    plan = dmascatter.window_scatter_for(node)
    assert plan is not None and len(plan.tiles()) == 16
    x = np.repeat(np.array(edges, NP[dtype])[:, None], 16, axis=1)
    upd = np.repeat(np.array(edges, NP[dtype])[None, :], 16, axis=0)
    idx = np.arange(16, dtype=np.int32).reshape(16, 1)
    (want,) = Interpreter().run(graph, [x, idx, upd])
    exact = [[_wrap(PYTHON_OPS[combiner](a, b), dtype) for b in edges] for a in edges]
    np.testing.assert_array_equal(np.asarray(want), np.array(exact, NP[dtype]))
    assert_same(run_scatter(plan, x, idx, upd, check=True), np.asarray(want))


@pytest.mark.parametrize(("dtype", "combiner"), SPLIT)
def test_wide_integer_combiners_apply_duplicates_in_order_with_batching_dims_and_windows(dtype: str,
                                                                                          combiner: str) -> None:
    """A batched scatter of 2-element windows whose index (-1 to 5 into 5 rows) repeats and falls out of range,
    on edge and random values, seeded: bit-exact with the interpreter."""
    form = {"dtype": dtype, "combiner": combiner, "index_dtype": "i32", "shape": (2, 5, 3), "idx_shape": (2, 9, 1),
            "upd_shape": (2, 9, 2), "update_window_dims": [2], "inserted_window_dims": [1],
            "input_batching_dims": [0], "scatter_indices_batching_dims": [0], "scatter_dims_to_operand_dims": [1],
            "index_vector_dim": 2}
    graph, node = _graph(_module(form))
    plan = dmascatter.window_scatter_for(node)
    assert plan is not None
    rng = np.random.default_rng(sum(map(ord, dtype + combiner)))
    info = np.iinfo(NP[dtype])

    def values(shape: tuple[int, ...]) -> np.ndarray:
        wide = rng.integers(int(info.min), int(info.max) + 1, shape, dtype=np.int64)
        edge = np.array(EDGES[dtype], np.int64)[rng.integers(0, 16, shape)]
        return np.where(rng.random(shape) < 0.5, edge, wide).astype(NP[dtype])

    x, upd = values((2, 5, 3)), values((2, 9, 2))
    idx = rng.integers(-1, 6, (2, 9, 1)).astype(np.int32)
    (want,) = Interpreter().run(graph, [x, idx, upd])
    assert_same(run_scatter(plan, x, idx, upd), np.asarray(want))


@pytest.mark.parametrize(("dtype", "method"), [(np.int32, "add"), (np.uint32, "add"), (np.int32, "max"),
                                               (np.uint32, "min"), (np.int32, "multiply"), (np.uint16, "multiply")])
def test_jax_wide_integer_scatters_lower_to_the_kernel_and_match_jax_bit_for_bit(dtype: Any, method: str) -> None:
    """``x.at[ids].<method>(u)`` with repeated, negative and out-of-range ids: the step is the general scatter
    kernel, and the kernel, run on the values the interpreter gives its inputs, returns JAX's result."""
    import jax

    from trnsim.ir.interp import Env

    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max) + 1, (6, 3), dtype=np.int64).astype(dtype)
    ids = rng.integers(-6, 8, 40).astype(np.int32)
    upd = rng.integers(int(info.min), int(info.max) + 1, (40, 3), dtype=np.int64).astype(dtype)
    upd[:6] = [[info.min], [info.max], [0], [1], [info.max - 1], [info.min + 1]]

    def fn(x: Any, i: Any, u: Any) -> Any:
        return getattr(x.at[i], method)(u)

    program = trnsim.compile(jax.jit(fn).lower(x, ids, upd), cache=False)
    (step,) = [s for s in program.plan.steps if "scatter" in s.ops]
    assert step.kernel == "generated_scatter"
    node = next(n for i in step.nodes if (n := program.graph.nodes[i]).op == "scatter")
    plan = dmascatter.window_scatter_for(node)
    assert plan is not None
    env, interp = Env(), Interpreter()
    for param, a in zip(program.graph.params, (x, ids, upd), strict=True):
        env[param.id] = a
    for n in program.graph.nodes:
        for v, a in zip(n.outputs, interp.run_node(n, [env[u.id] for u in n.inputs], env), strict=True):
            env[v.id] = a
    operand, idx, values = (np.asarray(env[v.id]) for v in node.inputs)
    assert_same(run_scatter(plan, operand, idx, values), np.asarray(jax.jit(fn)(x, ids, upd)))


def _numbers() -> str:
    return ("#stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], "
            "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>")


def _variadic() -> str:
    t, i, u, s = "tensor<6x3xf32>", "tensor<2x1xi32>", "tensor<2x3xf32>", "tensor<f32>"
    return (f"func.func @main(%a0: {t}, %b0: {t}, %a1: {i}, %a2: {u}, %b2: {u}) -> ({t}, {t}) {{\n"
            f'  %s:2 = "stablehlo.scatter"(%a0, %b0, %a1, %a2, %b2) ({{\n'
            f"  ^bb0(%x0: {s}, %y0: {s}, %x1: {s}, %y1: {s}):\n"
            f'    "stablehlo.return"(%x1, %y1) : ({s}, {s}) -> ()\n  }}) '
            f"{{indices_are_sorted = false, scatter_dimension_numbers = {_numbers()}, unique_indices = false}} : "
            f"({t}, {t}, {i}, {u}, {u}) -> ({t}, {t})\n  func.return %s#0, %s#1 : {t}, {t}\n}}\n")


def _unsimple() -> str:
    t, i, u, s = "tensor<6x3xf32>", "tensor<2x1xi32>", "tensor<2x3xf32>", "tensor<f32>"
    return (f"func.func @main(%a0: {t}, %a1: {i}, %a2: {u}) -> ({t}) {{\n"
            f'  %s = "stablehlo.scatter"(%a0, %a1, %a2) ({{\n  ^bb0(%x0: {s}, %x1: {s}):\n'
            f'    %r = "stablehlo.add"(%x0, %x1) : ({s}, {s}) -> {s}\n'
            f'    %q = "stablehlo.multiply"(%r, %x1) : ({s}, {s}) -> {s}\n'
            f'    "stablehlo.return"(%q) : ({s}) -> ()\n  }}) '
            f"{{indices_are_sorted = false, scatter_dimension_numbers = {_numbers()}, unique_indices = false}} : "
            f"({t}, {i}, {u}) -> {t}\n  func.return %s : {t}\n}}\n")


@pytest.mark.parametrize("text", [
    _module(_form("i64", "add", (6, 3), (2, 1), (2, 3), [1], [0], [0], 1)),        # no 64-bit datapath
    _module(_form("ui64", "maximum", (6, 3), (2, 1), (2, 3), [1], [0], [0], 1)),
    _variadic(), _unsimple()], ids=["i64-add", "ui64-max", "variadic", "non-simple"])
def test_forms_the_kernel_cannot_compute_exactly_keep_the_analytic_cost(text: str) -> None:
    _, node = _graph(text)
    assert dmascatter.window_scatter_for(node) is None


def test_a_scatter_of_more_tiles_than_the_cap_keeps_the_analytic_cost() -> None:
    """1,890 one-element read-modify-write tiles (the last update dim a scatter dim) > ``MAX_PICK_TILES``."""
    form = {"dtype": "f16", "combiner": "multiply", "index_dtype": "i32", "shape": (6, 7, 6),
            "idx_shape": (7, 3, 6, 1, 3), "upd_shape": (7, 5, 3, 6, 3), "update_window_dims": [1],
            "inserted_window_dims": [], "input_batching_dims": [0, 1], "scatter_indices_batching_dims": [2, 0],
            "scatter_dims_to_operand_dims": [2], "index_vector_dim": 3, "limits": [1]}
    _, node = _graph(_module(form))
    assert dmascatter.window_scatter_for(node) is None
    assert dmascatter.MAX_PICK_TILES < 7 * 5 * 3 * 6 * 3


CORPUS = Path("/work/shared/conformance/stablehlo")


def _corpus_sample() -> list[Path]:
    """Every 10th scatter file of the corpus whose types are in scope but for 64-bit index constants."""
    from trnsim.conformance import IN_SCOPE, element_types

    files = sorted(CORPUS.glob("scatter*.mlir")) if CORPUS.is_dir() else []
    return [p for p in files[::10] if (types := element_types(p.read_text(errors="replace"))) and
            types - {"i64", "ui64"} <= IN_SCOPE and "complex" not in p.name]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the conformance corpus is not here")
def test_corpus_scatters_lower_to_kernels_not_the_analytic_cost() -> None:
    """Every sampled scatter the kernel computes exactly (``window_scatter_for``) lowers to a kernel; the
    others (64-bit operands) stay analytic."""
    from trnsim.compiler.api import compile_graph

    files = _corpus_sample()
    assert len(files) > 30
    kernels: dict[str, list[str]] = {"exact": [], "inexact": []}
    for p in files:
        mod, _ = parse(p.read_text(errors="replace"))
        imp = import_module(mod, where=str(p), lift="inputs", collect_checks=True)
        graph = imp.graph
        graph.results = [x for c in imp.checks for x in (c.actual, c.expected)]
        program = compile_graph(graph, target="trn3")
        steps = [s for s in program.plan.steps if "scatter" in s.ops]
        assert steps, p.name
        for s in steps:
            node = next(n for i in s.nodes if (n := graph.nodes[i]).op == "scatter")
            exact = dmascatter.window_scatter_for(node) is not None
            kernels["exact" if exact else "inexact"].append(s.kernel)
    assert len(kernels["exact"]) > 20 and set(kernels["exact"]) <= {"generated_scatter", "generated_dma",
                                                                   "generated_elementwise", "embedding_scatter_add"}
    assert set(kernels["inexact"]) <= {"dma_gather_scatter"}
