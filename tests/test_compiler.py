"""trnsim.compile and trnsim.jit: every input form, errors that say where and how to fix, each pass's effect
(folding, fusion, autocast, sparsity, allocation), the run's profile, and properties against jax on CPU.

Programs are compiled with ``cache=False`` so each test runs the pipeline it is about (a cache hit would load
the stored program and skip the passes).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax import lax

import trnsim
from trnsim.compiler.options import AUTO_CAST_TYPES
from trnsim.config import settings as trnsim_settings
from trnsim.errors import CompileError, ConfigError, UnsupportedError

PASSES = ["canonicalize", "autocast", "sparsity", "fuse", "lower", "schedule", "allocate"]
F32_EPS = float(np.finfo(np.float32).eps)
BF16_EPS = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
LOCATION = re.compile(r":\d+:\d+")          # a StableHLO location: file:line:col


def compile_(module: object, **options: Any) -> Any:
    return trnsim.compile(module, cache=False, **options)


def lower(fn: Any, *args: Any) -> Any:
    return jax.jit(fn, keep_unused=True).lower(*args)


def spec(shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def rand(shape: tuple[int, ...], seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def tensor_seconds(program: Any) -> float:
    return float(program.plan.engine_busy()["tensor"])


# ---- input forms --------------------------------------------------------------------------------------

def _mlp(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.sum(jnp.tanh(x @ w) * 2.0 + 1.0, axis=0)


FORMS = ["text", "text_path", "bytecode", "bytecode_path", "lowered", "exported", "mlir_module"]


def _module_in_form(form: str, x: np.ndarray, w: np.ndarray, folder: Path) -> object:
    lowered = lower(_mlp, x, w)
    exported = jax.export.export(jax.jit(_mlp))(x, w)
    if form == "text":
        return lowered.as_text()
    if form == "text_path":
        (folder / "m.mlir").write_text(lowered.as_text())
        return str(folder / "m.mlir")
    if form == "bytecode":
        return exported.mlir_module_serialized
    if form == "bytecode_path":
        (folder / "m.mlirbc").write_bytes(exported.mlir_module_serialized)
        return folder / "m.mlirbc"
    if form == "lowered":
        return lowered
    if form == "exported":
        return exported
    assert form == "mlir_module"
    return lowered.compiler_ir("stablehlo")


@pytest.mark.parametrize("form", FORMS)
def test_every_input_form_compiles_and_matches_jax(form: str, tmp_path: Path) -> None:
    x, w = rand((32, 48), 1), rand((48, 24), 2)
    program = compile_(_module_in_form(form, x, w, tmp_path))
    assert [r.name for r in program.passes] == PASSES
    (out,) = program.run(x, w)
    ref = np.asarray(jax.jit(_mlp)(x, w))
    assert out.shape == ref.shape and out.dtype == ref.dtype
    # a sum over 32 rows of O(1) values, each from a K=48 dot product: a few dozen ulps of the largest value
    np.testing.assert_allclose(out, ref, rtol=0, atol=64 * F32_EPS * float(np.max(np.abs(ref))))


def test_default_compile_goes_through_the_cache_and_gives_the_same_program() -> None:
    x, w = rand((8, 16), 3), rand((16, 4), 4)
    first = trnsim.compile(lower(_mlp, x, w))
    again = trnsim.compile(lower(_mlp, x, w))
    assert again.cache_hit and not first.cache_hit
    np.testing.assert_array_equal(first.run(x, w)[0], again.run(x, w)[0])


# ---- errors: unsupported, bad options, malformed input, HBM ----------------------------------------------

F64_TEXT = """func.func @main(%a: tensor<4xf64>) -> tensor<4xf64> {
  %0 = stablehlo.add %a, %a : tensor<4xf64>
  return %0 : tensor<4xf64>
}"""
DYNAMIC_TEXT = """func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.add %a, %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}"""


def _assert_unsupported(module: object, *, message: str, location: bool = True) -> UnsupportedError:
    with pytest.raises(UnsupportedError) as info:
        compile_(module)
    err = info.value
    assert re.search(message, err.message), err.message
    assert err.where, "an UnsupportedError names where in the module"
    if location:
        assert LOCATION.search(err.where), err.where
    assert err.hint, "an UnsupportedError says what to do instead"
    return err


def test_f64_program_is_unsupported_with_location_and_hint() -> None:
    err = _assert_unsupported(F64_TEXT, message="f64")
    assert "f32" in (err.hint or "")
    with jax.enable_x64(True):
        lowered = lower(lambda a: a * 2, np.ones(3, np.float64))
    _assert_unsupported(lowered, message="f64")


def test_lapack_custom_call_is_unsupported_at_compile_time() -> None:
    # jnp.linalg.inv lowers to LAPACK custom_calls on CPU: rejected by compile, not when the program runs
    err = _assert_unsupported(lower(jnp.linalg.inv, np.eye(4, dtype=np.float32)), message="lapack")
    assert "custom_call" in (err.where or "")
    assert "jnp" in (err.hint or "")


def test_dynamic_shapes_are_unsupported() -> None:
    err = _assert_unsupported(DYNAMIC_TEXT, message=r"dynamic shape tensor<\?xf32>")
    assert "static" in (err.hint or "")
    (n,) = jax.export.symbolic_shape("n")
    exported = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(spec((n, 4)))
    # serialised bytecode carries no source locations; the error still names the op
    _assert_unsupported(exported, message="dynamic shape", location=False)


@pytest.mark.parametrize("options, match", [
    ({"auto_cast": "fp8"}, "auto_cast='fp8' is not one of"),
    ({"auto_cast_type": "fp9"}, "auto_cast_type='fp9' is not one of"),
    ({"sparsity": "1:4"}, "sparsity='1:4' is not one of"),
    ({"fold_limit": -1}, "fold_limit=-1"),
    ({"autocast": "matmul"}, "unknown compile option 'autocast'"),
])
def test_bad_option_raises_config_error(options: dict[str, Any], match: str) -> None:
    module = lower(lambda a: a * 2, np.ones(3, np.float32))
    with pytest.raises(ConfigError, match=match) as info:
        compile_(module, **options)
    assert info.value.where
    if "autocast" in options:
        assert "did you mean 'auto_cast'" in (info.value.hint or "")
    with pytest.raises(ConfigError, match=match):
        trnsim.jit(lambda a: a, **options)            # rejected when wrapping, not at the first call


@pytest.mark.parametrize("module, match", [
    ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.ad %a, %a : tensor<4xf32>\n"
     "  return %0 : tensor<4xf32>\n}", "stablehlo.ad"),
    ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.add %a, %a : tensor<4xf32>\n",
     "not a valid StableHLO module"),
    (b"not bytecode", "no 'ML\\\\xefR' magic"),
    (b"ML\xefR\x00\x01truncated", "cannot deserialise"),
    ("/nonexistent/folder/model.mlir", "cannot read"),
    (12345, "cannot compile a int"),
])
def test_malformed_input_raises_compile_error(module: object, match: str) -> None:
    with pytest.raises(CompileError, match=match) as info:
        compile_(module)
    assert not isinstance(info.value, UnsupportedError)
    assert info.value.where and info.value.hint


def test_program_over_hbm_capacity_raises_compile_error_with_hint() -> None:
    # a 240 GB result: only types are involved, nothing runs
    module = lower(lambda x: jnp.broadcast_to(x, (60_000, 1_000_000)) + 1, spec((1,)))
    with pytest.raises(CompileError, match=r"GiB of HBM") as info:
        compile_(module)
    assert not isinstance(info.value, UnsupportedError)
    assert info.value.where == "allocate"
    assert "batch" in (info.value.hint or "")


# ---- passes: dump, canonicalize, fuse -------------------------------------------------------------------

def test_dump_ir_writes_one_file_per_pass(tmp_path: Path) -> None:
    module = lower(lambda x: jnp.exp(x) @ x.T, rand((16, 16), 5))
    with trnsim_settings.override(dump_ir=str(tmp_path)):
        program = compile_(module)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00-input.txt"] + [f"{i:02d}-{name}.txt" for i, name in enumerate(PASSES, start=1)]
    assert [r.name for r in program.passes] == PASSES
    for i, name in enumerate(PASSES, start=1):
        text = (tmp_path / f"{i:02d}-{name}.txt").read_text()
        assert text.startswith(f"// after pass {i}: {name}")
        assert "exponential" in text and "dot_general" in text
    assert "// plan for trn3" in (tmp_path / "05-lower.txt").read_text()
    assert "// plan for" not in (tmp_path / "04-fuse.txt").read_text()


def test_no_dump_without_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRNSIM_DUMP_IR", raising=False)
    monkeypatch.chdir(tmp_path)
    compile_(lower(lambda x: x + 1, rand((4,))))
    assert list(tmp_path.iterdir()) == []


CONST = np.arange(16, dtype=np.float32).reshape(4, 4) / 7  # ≤ 64 elements: folded, not kept as an op


def _with_constant_math(x: jax.Array) -> jax.Array:
    c = jnp.exp(jnp.asarray(CONST) / 10.0) + jnp.sqrt(jnp.asarray(CONST))
    return x * c


def test_canonicalize_folds_constant_math() -> None:
    x = rand((4, 4), 6)
    module = lower(_with_constant_math, x)
    folded, unfolded = compile_(module), compile_(module, fold_limit=0)
    stats = folded.passes[0].stats
    assert folded.passes[0].name == "canonicalize"
    assert stats["folded"] > 0 and unfolded.passes[0].stats["folded"] == 0
    assert folded.passes[0].nodes < unfolded.passes[0].nodes
    ops = {n.op for n in folded.graph.nodes}
    assert {"exponential", "sqrt"}.isdisjoint(ops) and "multiply" in ops
    assert {"exponential", "sqrt"} <= {n.op for n in unfolded.graph.nodes}
    ref = np.asarray(jax.jit(_with_constant_math)(x))
    # folded at compile time with the device's semantics: the same bits as computing them on the device
    np.testing.assert_array_equal(folded.run(x)[0], unfolded.run(x)[0])
    np.testing.assert_allclose(folded.run(x)[0], ref, rtol=4 * F32_EPS, atol=0)


def _pair_reduce(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    return lax.reduce((a, b), (jnp.float32(3), jnp.int32(0)),
                      lambda x, y: (jnp.maximum(x[0], y[0]), jnp.minimum(x[1], y[1])), (0,))


def test_canonicalize_splits_a_variadic_reduce_whose_results_combine_independently() -> None:
    """``lax.reduce`` over a tuple with one combiner per operand becomes one reduce per operand (each an
    ordinary reduction with a kernel; an unused one dead), with the same results; argmax's reducer, which
    mixes its operands, stays whole."""
    a, b = rand((37, 70), 3), np.random.default_rng(4).integers(-9, 9, (37, 70)).astype(np.int32)
    program = compile_(lower(_pair_reduce, a, b))
    assert program.passes[0].stats["split_reduces"] == 1
    reduces = [n for n in program.graph.nodes if n.op == "reduce"]
    assert [len(n.outputs) for n in reduces] == [1, 1]
    # (the int32 minimum of values of any size: the exact integer kernel; fp32 would round beyond 2**24)
    assert [s.kernel for s in program.plan.steps] == ["generated_elementwise", "int_reduce"]
    for got, want in zip(program.run(a, b), jax.jit(_pair_reduce)(a, b), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))
    first = compile_(lower(lambda a, b: _pair_reduce(a, b)[1], a, b))
    assert [len(n.outputs) for n in first.graph.nodes if n.op == "reduce"] == [1]
    argmax = compile_(lower(lambda a: jnp.argmax(a, axis=0), a))
    assert argmax.passes[0].stats["split_reduces"] == 0
    assert [len(n.outputs) for n in argmax.graph.nodes if n.op == "reduce"] == [2]


def test_steps_whose_results_are_empty_cost_nothing() -> None:
    """A pad or a product whose result has a zero-sized axis computes and moves nothing: an ``empty`` step of
    no time (it was costed as a DMA or engine op of some microseconds), with the right shapes out."""
    x = rand((2, 3), 8)
    fn = lambda x: (lax.pad(x, 0.0, [(0, 0, 0), (-2, -3, 1)]), jnp.tanh(x[:, 2:2]) * 2.0)  # noqa: E731
    program = compile_(lower(fn, x))
    empty = [s for s in program.plan.steps if s.kernel == "empty"]
    assert empty and all(s.seconds == 0 and s.dma_bytes == 0 for s in empty)
    assert [o.shape for o in program.run(x)] == [(2, 0), (2, 0)]


def _update(w: jax.Array, b: jax.Array, gw: jax.Array, gb: jax.Array, step: jax.Array) -> tuple[jax.Array, ...]:
    lr = 0.01 * (1 - 0.9 ** (step.astype(jnp.float32) + 1))       # shared scalar work: one fused group
    return w - lr * gw * jnp.sqrt(jnp.abs(w)), b - lr * gb / (1 + jnp.abs(b))


def test_a_group_of_two_iteration_spaces_is_one_generated_kernel_per_space() -> None:
    """An optimizer's updates of a matrix and a vector fused through shared scalar work (AdamW's bias
    correction) have no single tile loop: the step is timed as the kernel of each output size in turn, each
    with the scalar work it needs, not by the analytic formula."""
    args = (rand((130, 70), 1), rand((70,), 2), rand((130, 70), 3), rand((70,), 4), np.int32(3))
    (step,) = compile_(lower(_update, *args)).plan.steps
    assert step.kernel == "generated_elementwise"
    parts = [compile_(lower(lambda *a, i=i: _update(*a)[i], *args)).plan.steps for i in (0, 1)]
    assert [[s.kernel for s in p] for p in parts] == [["generated_elementwise"]] * 2
    assert step.seconds == pytest.approx(parts[0][0].seconds + parts[1][0].seconds, rel=1e-9)


def test_elementwise_chain_fuses_into_one_step_that_keeps_intermediates_in_sbuf() -> None:
    x = rand((256, 512), 7)
    program = compile_(lower(lambda x: jnp.exp(jnp.tanh(x) * 2.0 + 1.0) - x, x))
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"      # generated tile code, timed by the instruction model
    assert {"tanh", "multiply", "add", "exponential", "subtract"} <= set(step.ops)
    assert step.dma_bytes == 2 * x.nbytes             # x in, the result out: no intermediate goes to HBM
    assert len({n.attrs["_group"] for n in program.graph.nodes if n.op != "constant"}) == 1


def test_sibling_chains_read_by_one_op_fuse_into_one_step() -> None:
    x = rand((256, 512), 7)
    program = compile_(lower(lambda x, y: jnp.tanh(x * 2.0 + y) - jnp.maximum(x, 0.0), x, x))
    (step,) = program.plan.steps
    assert {"tanh", "maximum", "subtract"} <= set(step.ops)
    assert step.dma_bytes == 3 * x.nbytes             # x and y in, the result out


def test_a_chain_read_elsewhere_stays_its_own_step() -> None:
    x = rand((256, 512), 7)
    program = compile_(lower(lambda x: (jnp.tanh(x) - jnp.maximum(x, 0.0), jnp.maximum(x, 0.0) * 3.0), x))
    (result_a, result_b) = program.run(x, timing=False)
    np.testing.assert_allclose(result_a, np.tanh(x) - np.maximum(x, 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result_b, np.maximum(x, 0) * 3, rtol=1e-6)
    steps = program.plan.steps
    for s in steps:                                   # every step runs after the steps it reads
        assert all(d < s.index and steps[d].end <= s.start + 1e-15 for d in s.deps)


def test_matmul_epilogue_fuses_into_the_matmul_step() -> None:
    a, w = rand((128, 64), 8), rand((64, 96), 9)
    program = compile_(lower(lambda a, w: jax.nn.relu(a @ w) * 2.0, a, w))
    (step,) = program.plan.steps
    assert step.kernel == "matmul" and step.ops[0] == "dot_general"
    assert {"maximum", "multiply"} <= set(step.ops)
    assert {n.attrs["_kind"] for n in program.graph.nodes if n.op != "constant"} == {"matmul"}
    np.testing.assert_allclose(program.run(a, w)[0], np.maximum(a.astype(np.float64) @ w, 0) * 2,
                               rtol=0, atol=64 * 8 * F32_EPS)


def test_bias_add_joins_the_matmul_epilogue() -> None:
    # the bias is broadcast from a parameter: that view waits for its consumer instead of splitting the step
    a, w, b = rand((128, 64), 30), rand((64, 96), 31), rand((96,), 32)
    program = compile_(lower(lambda a, w, b: jax.nn.relu(a @ w + b), a, w, b))
    (step,) = program.plan.steps
    assert step.kernel == "matmul" and {"add", "maximum"} <= set(step.ops)
    np.testing.assert_allclose(program.run(a, w, b)[0], np.maximum(a.astype(np.float64) @ w + b, 0),
                               rtol=0, atol=64 * 8 * F32_EPS)


# ---- autocast ------------------------------------------------------------------------------------------

# |qdq(x) − x| ≤ r·|x| + t·amax(x), from each format's definition: r is the unit roundoff 2^−(mantissa+1),
# or the saturation error of an OCP MX block whose amax/X lies in [2^emax, 2^(emax+1)) when that is larger;
# t is half the format's smallest subnormal step relative to the (tensor, block or group) amax.
FORMAT_ERROR: dict[str, tuple[float, float]] = {
    "bf16": (2**-8, 0.0),
    "fp8_e4m3": (2**-4, 2**-10 / 448),              # amax scaled to 448; subnormal step 2^-9
    "fp8_e5m2": (2**-3, 2**-17 / 57344),            # amax scaled to 57344; subnormal step 2^-16
    "mxfp8": (1 - 448 / 512, 2**-10 / 2**8),        # e4m3: amax/X < 512 saturates at 448; X ≤ amax/2^8
    "mxfp6": (2**-4, 2**-4 / 2**2),                 # e2m3: max 7.5 of < 8; subnormal step 2^-3; X ≤ amax/4
    "mxfp4": (2**-2, 2**-2 / 2**2),                 # e2m1: max 6 of < 8; subnormal step 2^-1; X ≤ amax/4
    "int4": (0.0, 1 / 14),                          # symmetric, scale = group amax / 7: half a step
}


def _matmul_error_bound(a: np.ndarray, w: np.ndarray, fmt: str) -> np.ndarray:
    """|a·w − q(a)·q(w)| ≤ |a|·δw + δa·|w| + δa·δw, δx = r|x| + t·max|x| (the tensor's amax bounds each
    block's), plus fp32 accumulation over K of the quantized products."""
    r, t = FORMAT_ERROR[fmt]
    a64, w64 = np.abs(a.astype(np.float64)), np.abs(w.astype(np.float64))
    da, dw = r * a64 + t * a64.max(), r * w64 + t * w64.max()
    k = a.shape[1]
    return a64 @ dw + da @ w64 + da @ dw + 2 * k * 2**-24 * ((a64 + da) @ (w64 + dw))


@pytest.mark.parametrize("fmt", AUTO_CAST_TYPES)
def test_autocast_matmul_quantizes_operands_within_the_format_bound(fmt: str) -> None:
    a, w = rand((64, 256), 10), rand((256, 48), 11)
    module = lower(lambda a, w: a @ w, a, w)
    program = compile_(module, auto_cast="matmul", auto_cast_type=fmt)
    (dot,) = [n for n in program.graph.nodes if n.op == "dot_general"]
    assert dot.attrs["operand_format"] == fmt
    narrowing = "convert" if fmt == "bf16" else "qdq"
    assert [v.producer.op for v in dot.inputs] == [narrowing, narrowing]
    assert program.passes[1].stats["cast"] == 1
    (out,) = program.run(a, w)
    assert out.dtype == np.float32                     # accumulation and result stay f32
    exact = a.astype(np.float64) @ w.astype(np.float64)
    err = np.abs(out - exact)
    bound = _matmul_error_bound(a, w, fmt)
    assert np.all(err <= bound), float(np.max(err / bound))
    # narrow formats really narrow: the error is far above fp32 accumulation error
    assert np.max(err) > 100 * _matmul_error_bound(a, w, "bf16").max() * 2**-16


def test_autocast_error_grows_as_formats_narrow() -> None:
    a, w = rand((64, 256), 12), rand((256, 48), 13)
    module = lower(lambda a, w: a @ w, a, w)
    exact = a.astype(np.float64) @ w.astype(np.float64)

    def err(**options: str) -> float:
        return float(np.sqrt(np.mean((compile_(module, **options).run(a, w)[0] - exact) ** 2)))

    none, bf16 = err(), err(auto_cast="matmul", auto_cast_type="bf16")
    mxfp6, mxfp4 = (err(auto_cast="matmul", auto_cast_type=t) for t in ("mxfp6", "mxfp4"))
    assert none < bf16 < mxfp6 < mxfp4


def test_autocast_tensor_engine_time_fp8_and_mx_below_bf16_below_f32() -> None:
    module = lower(lambda a, w: a @ w, spec((1024, 1024)), spec((1024, 1024)))
    f32 = tensor_seconds(compile_(module))
    bf16 = tensor_seconds(compile_(module, auto_cast="matmul", auto_cast_type="bf16"))
    assert 0 < bf16 < f32
    for fmt in ("fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp6", "mxfp4", "int4"):
        narrow = tensor_seconds(compile_(module, auto_cast="matmul", auto_cast_type=fmt))
        assert 0 < narrow < bf16, fmt


def _bf16_round(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_autocast_all_computes_elementwise_in_bf16() -> None:
    x, y = rand((64, 128), 14), rand((64, 128), 15)
    module = lower(lambda x, y: x * y + x, x, y)
    everything = compile_(module, auto_cast="all")
    assert {n.out.type.dtype for n in everything.graph.nodes if n.op in ("multiply", "add")} == {"bf16"}
    assert everything.passes[1].stats["cast"] == 2
    # each op: inputs rounded to bf16, computed, rounded to bf16 (then widened back to f32)
    prod = _bf16_round(_bf16_round(x) * _bf16_round(y))
    expect = _bf16_round(_bf16_round(prod) + _bf16_round(x))
    np.testing.assert_array_equal(everything.run(x, y)[0], expect)
    matmul_only = compile_(module, auto_cast="matmul")
    np.testing.assert_array_equal(matmul_only.run(x, y)[0], x * y + x)


# ---- sparsity ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["2:4", "4:8"])
def test_sparsity_prunes_n_of_every_m_weights_along_k(pattern: str) -> None:
    n, m = (int(v) for v in pattern.split(":"))
    k = 64
    eye, w = np.eye(k, dtype=np.float32), rand((k, 40), 16)
    program = compile_(lower(lambda a, w: a @ w, eye, w), sparsity=pattern)
    assert program.passes[2].stats["pruned"] == 1
    (dot,) = [node for node in program.graph.nodes if node.op == "dot_general"]
    assert dot.attrs["sparse"] == pattern and dot.inputs[1].producer.op == "prune"
    (pruned,) = program.run(eye, w)               # I·prune(w) = prune(w) exactly: the identity is not pruned
    groups = pruned.reshape(k // m, m, -1)            # [group, position along K, column]
    assert np.all(np.count_nonzero(groups, axis=1) == n)
    kept = groups != 0
    original = np.abs(w.reshape(k // m, m, -1))
    # the kept ones are the n largest magnitudes of each group, unchanged
    assert np.all(np.where(kept, original, np.inf).min(axis=1) >= np.where(kept, -np.inf, original).max(axis=1))
    np.testing.assert_array_equal(pruned[pruned != 0], w[pruned != 0])


@pytest.mark.parametrize("operands", ["bf16", "fp8_e4m3"])
def test_sparsity_lowers_tensor_engine_time(operands: str) -> None:
    if operands == "bf16":
        module, options = lower(lambda a, w: a @ w, spec((1024, 1024), jnp.bfloat16),
                                spec((1024, 1024), jnp.bfloat16)), {}
    else:
        module = lower(lambda a, w: a @ w, spec((1024, 1024)), spec((1024, 1024)))
        options = {"auto_cast": "matmul", "auto_cast_type": operands}
    dense = tensor_seconds(compile_(module, **options))
    sparse = tensor_seconds(compile_(module, sparsity="2:4", **options))
    assert 0 < sparse < 0.75 * dense


# ---- the run's profile ---------------------------------------------------------------------------------

def _block(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    h = jax.nn.gelu(x @ w1)
    return jax.nn.softmax(h @ w2, axis=-1)


def test_profile_is_consistent() -> None:
    x, w1, w2 = rand((256, 128), 17), rand((128, 512), 18, 0.05), rand((512, 128), 19, 0.05)
    program = compile_(lower(_block, x, w1, w2))
    assert program.last_profile is None
    (out,) = program.run(x, w1, w2)
    np.testing.assert_allclose(out, np.asarray(jax.jit(_block)(x, w1, w2)), rtol=0, atol=1e-5)
    prof = program.last_profile
    assert prof.total_seconds > 0
    util = prof.utilisation
    assert set(util) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert all(0 <= u <= 1 for u in util.values()), util
    assert util["tensor"] > 0 and util["dma"] > 0 and util["vector"] > 0
    assert prof.flops == 2 * 256 * 128 * 512 * 2              # the two matmuls, exactly
    assert 0 < prof.mfu <= 1
    assert prof.hbm_bytes >= x.nbytes + w1.nbytes + w2.nbytes + out.nbytes
    kernels = prof.by_kernel()
    assert "matmul" in kernels and sum(n for n, _ in kernels.values()) == len(prof.steps)
    first, second = prof.top_steps(2)
    assert first.end - first.start >= second.end - second.start
    assert json.loads(json.dumps(prof.to_dict()))["flops"] == prof.flops


def test_chrome_trace_has_engine_tracks_and_complete_events(tmp_path: Path) -> None:
    x, w1, w2 = rand((256, 128), 20), rand((128, 512), 21, 0.05), rand((512, 128), 22, 0.05)
    program = compile_(lower(_block, x, w1, w2))
    program.run(x, w1, w2)
    prof = program.last_profile
    trace = prof.to_chrome_trace()
    events = trace["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks.values()) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and {e["ph"] for e in events} <= {"M", "X"}
    assert {tracks[e["tid"]] for e in spans} >= {"tensor", "vector", "dma"}
    assert any(e["name"] == "matmul" and tracks[e["tid"]] == "tensor" for e in spans)
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) <= prof.total_seconds * 1e6 * (1 + 1e-9)
    path = prof.save_trace(tmp_path / "sub" / "trace.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace))
    assert [p.name for p in path.parent.iterdir()] == ["trace.json"]        # written atomically, no temp left


def _power_loop(x: jax.Array, trips: int) -> jax.Array:
    return lax.fori_loop(0, trips, lambda i, c: jnp.tanh(c @ x), x)


def test_while_loop_time_and_flops_scale_with_trips() -> None:
    x = rand((128, 128), 23, 0.05)
    profiles = {}
    for trips in (1, 10):
        program = compile_(lower(lambda x, t=trips: _power_loop(x, t), x))
        (out,) = program.run(x)
        np.testing.assert_allclose(out, np.asarray(jax.jit(lambda x, t=trips: _power_loop(x, t))(x)),
                                   rtol=0, atol=1e-5)
        profiles[trips] = program.last_profile
    assert profiles[10].flops == 10 * profiles[1].flops == 10 * 2 * 128**3
    assert profiles[10].total_seconds > 5 * profiles[1].total_seconds


def test_dynamic_trip_count_time_is_linear_in_trips() -> None:
    def doubling(x: jax.Array, n: jax.Array) -> jax.Array:
        return lax.fori_loop(0, n, lambda i, c: c * 2.0 + 1.0, x)

    x = rand((64, 64), 24)
    program = compile_(lower(doubling, x, np.int32(0)))
    seconds = {}
    for n in (0, 3, 7):
        (out,) = program.run(x, np.int32(n))
        np.testing.assert_array_equal(out, np.asarray(jax.jit(doubling)(x, np.int32(n))))
        seconds[n] = program.last_profile.total_seconds
    per_trip = (seconds[3] - seconds[0]) / 3
    assert per_trip > 0
    assert seconds[7] - seconds[0] == pytest.approx(7 * per_trip, rel=1e-9)


# ---- trnsim.jit ----------------------------------------------------------------------------------------

def _tree_fn(d: dict[str, jax.Array], scale: jax.Array) -> dict[str, Any]:
    return {"sum": d["a"] + d["b"], "pair": (d["a"] * scale, jnp.sum(d["b"], axis=0))}


def test_jit_caches_per_signature_and_matches_jax_pytree() -> None:
    fn = trnsim.jit(_tree_fn, cache=False)
    d = {"a": rand((3, 5), 25), "b": rand((3, 5), 26)}
    for scale in (np.float32(2.0), np.float32(-0.5)):
        out = fn(d, scale)
        ref = jax.jit(_tree_fn)(d, scale)
        assert jax.tree.structure(out) == jax.tree.structure(ref)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
            assert isinstance(a, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=2 * F32_EPS, atol=0)
    assert fn.compiles == 1 and len(fn.programs) == 1
    assert fn.last_profile is not None and fn.last_profile.total_seconds > 0
    first = fn.last_program

    wide = {"a": rand((4, 5), 27), "b": rand((4, 5), 28)}
    out = fn(wide, np.float32(1.0))
    assert fn.compiles == 2 and len(fn.programs) == 2 and fn.last_program is not first
    assert out["pair"][1].shape == (5,) and out["sum"].shape == (4, 5)
    fn(d, np.float32(3.0))
    assert fn.compiles == 2 and fn.last_program is first


def test_jit_takes_python_scalars_and_static_arguments_as_jax_does() -> None:
    def scaled(x: jax.Array, s: float, power: int) -> jax.Array:
        return x * s ** power

    fn = trnsim.jit(scaled, static_argnums=(2,), cache=False)
    x = rand((8,), 29)
    np.testing.assert_allclose(fn(x, 1.5, 2), jax.jit(scaled, static_argnums=2)(x, 1.5, 2), rtol=2 * F32_EPS)
    np.testing.assert_allclose(fn(x, 1.5, 3), jax.jit(scaled, static_argnums=2)(x, 1.5, 3), rtol=2 * F32_EPS)
    assert fn.compiles == 2


def test_jit_profile_off_when_timing_is_off() -> None:
    fn = trnsim.jit(lambda x: x + 1, timing=False, cache=False)
    np.testing.assert_array_equal(fn(np.ones(4, np.float32)), np.full(4, 2, np.float32))
    assert fn.last_profile is None


# ---- properties ----------------------------------------------------------------------------------------

UNARY = {
    "tanh": jnp.tanh, "sin": jnp.sin, "sigmoid": jax.nn.sigmoid, "abs": jnp.abs, "neg": jnp.negative,
    "relu": jax.nn.relu, "half": lambda x: x * 0.5, "exp_tanh": lambda x: jnp.exp(jnp.tanh(x)),
    "square_tanh": lambda x: jnp.square(jnp.tanh(x)),
}
BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum, "min": jnp.minimum}

shapes = st.lists(st.integers(1, 17), min_size=1, max_size=3).map(tuple)
chain_steps = st.lists(st.one_of(st.tuples(st.just("u"), st.sampled_from(sorted(UNARY))),
                                 st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)), st.booleans())),
                       min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)
@given(shape=shapes, steps=chain_steps, dtype=st.sampled_from(["float32", "bfloat16"]),
       seed=st.integers(0, 2**16))
def test_random_elementwise_chains_match_jax(shape: tuple[int, ...], steps: list[tuple[Any, ...]], dtype: str,
                                              seed: int) -> None:
    """A chain of jnp ops over two inputs (the second broadcast along the leading axis when the step says so)
    agrees with jax.jit within a few rounding errors per op, relative to the largest intermediate."""
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(dtype)
    x = rng.uniform(-2, 2, shape).astype(dt)
    y = rng.uniform(-2, 2, shape).astype(dt)
    y_row = rng.uniform(-2, 2, shape[1:]).astype(dt)

    def chain(x: jax.Array, y: jax.Array, y_row: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
        values = [x]
        for step in steps:
            x = UNARY[step[1]](x) if step[0] == "u" else BINARY[step[1]](x, y_row if step[2] else y)
            values.append(x)
        return x, values

    out = compile_(lower(lambda *a: chain(*a)[0], x, y, y_row)).run(x, y, y_row)[0]
    ref, intermediates = jax.jit(chain)(x, y, y_row)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    eps = F32_EPS if dtype == "float32" else BF16_EPS
    scale = max(1.0, *(float(jnp.max(jnp.abs(v.astype(jnp.float32)))) for v in intermediates))
    # NOTE: XLA on CPU may keep bf16 intermediates in f32 (excess precision) where trnsim rounds after each
    # op as the engines do; each op can then differ by one rounding, amplified by at most the scale
    tol = 2 * (len(steps) + 1) * eps * scale**2
    err = np.abs(np.asarray(out, np.float64) - np.asarray(ref.astype(jnp.float32), np.float64))
    assert float(err.max(initial=0.0)) <= tol, (steps, float(err.max()), tol)


dims = st.integers(1, 700)
SLACK = 0.02  # a larger matmul may simulate this much faster (tiling and grouping granularity, below)


@settings(max_examples=25, deadline=None)
@given(m=dims, k=dims, n=dims, grow=st.tuples(st.integers(0, 600), st.integers(0, 600), st.integers(0, 600)),
       dtype=st.sampled_from([jnp.float32, jnp.bfloat16]))
@example(m=386, k=1, n=513, grow=(127, 0, 0), dtype=jnp.float32)
@example(m=387, k=1, n=513, grow=(126, 0, 0), dtype=jnp.float32)
@example(m=512, k=267, n=572, grow=(105, 0, 0), dtype=jnp.bfloat16)
def test_a_larger_matmul_never_simulates_faster(m: int, k: int, n: int, grow: tuple[int, int, int],
                                                dtype: Any) -> None:
    def time_of(m: int, k: int, n: int) -> tuple[float, float]:
        program = compile_(lower(lambda a, w: a @ w, spec((m, k), dtype), spec((k, n), dtype)))
        return program.plan.total_seconds, tensor_seconds(program)

    small = time_of(m, k, n)
    large = time_of(m + grow[0], k + grow[1], n + grow[2])
    # NOTE: the kernel's tiling is discrete, so a larger shape may save a little (SLACK). The old worst cases, the
    # explicit examples (386/387x1x513 against 513 rows, 512x267x572 bf16 against 617), came from the last block's
    # cut stores sharing queues round-robin with the block before's whole-tile stores: a product of few output
    # tiles now cuts all its stores (gemm.SMALL_TILES), and these are monotone
    assert large[0] >= small[0] * (1 - SLACK) and large[1] >= small[1] * (1 - 1e-12), (small, large)
    assert math.isfinite(large[0])
