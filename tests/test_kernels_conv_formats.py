"""The convolution kernel in every operand type the compiler gives it: fp16 and fp8 (TensorE formats) and the
integers (multiplied as floats: bf16 for 8-bit ones, fp32 for wider ones, ``conv.tensor_format``), 1-byte
operands widened in HBM before their channel-major loads and 1-byte results narrowed after their stores.
Against JAX on CPU (XLA's own integer and float semantics): bit-exact on small integers, whose products and sums
every format holds; within the format's rounding of the result otherwise."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl
from trnsim.compiler import convgen
from trnsim.dsl.errors import KernelError
from trnsim.kernels import conv_kernel
from trnsim.kernels.conv import INTEGER_FORMAT, tensor_format

DN = ("NHWC", "HWIO", "NHWC")
# JAX dtype → the ISA dtype of the kernel's HBM operands
ISA = {jnp.float16: "fp16", jnp.float8_e4m3fn: "fp8_e4m3", jnp.float8_e5m2: "fp8_e5m2", jnp.int8: "int8",
       jnp.uint8: "uint8", jnp.int16: "int16", jnp.int32: "int32", jnp.bfloat16: "bf16", jnp.float32: "fp32"}


def _run(conv: convgen.Conv, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The kernel of ``conv`` (as the compiler times it) run on the functional simulator."""
    out = dsl.run_kernel(conv_kernel, dsl.typed(x, conv.dtype), dsl.typed(w, conv.w_dtype or conv.dtype),
                         stride=conv.stride, padding=conv.padding, lhs_dilation=conv.lhs_dilation,
                         rhs_dilation=conv.rhs_dilation, x_axes=conv.x_axes, w_axes=conv.w_axes,
                         out_axes=conv.out_axes, out_dtype=conv.out_dtype, feature_groups=conv.feature_groups,
                         batch_groups=conv.batch_groups, operand_format=conv.operand_format)
    return out.outputs[0]


def _compiled(f: Any, x: np.ndarray, w: np.ndarray) -> convgen.Conv:
    program = trnsim.compile(jax.jit(f).lower(x, w), cache=False)
    (node,) = [n for n in program.graph.nodes if n.op == "convolution"]
    conv = convgen.conv_for(node)
    assert conv is not None
    return conv


@st.composite
def convolutions(draw: st.DrawFn) -> dict[str, Any]:
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    lhs, rhs = (draw(st.integers(1, 2)), draw(st.integers(1, 2))), (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple((draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(2))
    for size, dil, k, d, (lo, hi) in ((h, lhs[0], kh, rhs[0], padding[0]), (w, lhs[1], kw, rhs[1], padding[1])):
        if lo + (size - 1) * dil + 1 + hi < (k - 1) * d + 1:
            padding = ((2, 2), (2, 2))      # the window must fit: pad generously instead
            break
    return {"n": draw(st.integers(1, 2)), "h": h, "w": w, "kh": kh, "kw": kw,
            "ci": draw(st.sampled_from([1, 3, 64, 70, 130])), "co": draw(st.sampled_from([1, 5, 130])),
            "stride": (draw(st.integers(1, 2)), draw(st.integers(1, 2))), "padding": padding, "lhs": lhs,
            "rhs": rhs, "dn": draw(st.sampled_from([DN, ("NCHW", "OIHW", "NCHW")]))}


# operand type, result type (None: the operands'), value range: sums of at most 130 · 9 products of the range
# stay exact in every format and within the result type (an fp8 result: rounded once, as XLA rounds it)
TYPES = [(jnp.int8, None, 1), (jnp.int8, jnp.int32, 3), (jnp.uint8, jnp.int32, 3), (jnp.int16, None, 3),
         (jnp.int32, None, 3), (jnp.float16, None, 1), (jnp.float16, jnp.float32, 3),
         (jnp.float8_e4m3fn, jnp.float32, 3), (jnp.float8_e5m2, None, 3)]


@settings(max_examples=40, deadline=None)
@given(convolutions(), st.sampled_from(TYPES), st.integers(0, 2**31))
@example({"n": 1, "h": 1, "w": 1, "kh": 1, "kw": 1, "ci": 1, "co": 130, "stride": (1, 1), "padding": ((0, 0), (1, -1)),
          "lhs": (1, 1), "rhs": (1, 1), "dn": DN}, (jnp.int8, jnp.int32, 3), 0)
def test_compiled_convolutions_run_exactly_on_small_integers(c: dict[str, Any], types: tuple[Any, Any, int],
                                                             seed: int) -> None:
    """The conv the compiler lowers (its layout, window and types from ``conv_for``) computes what XLA does."""
    dtype, preferred, bound = types
    rng = np.random.default_rng(seed)
    lo = 0 if dtype == jnp.uint8 else -bound
    x_shape = (c["n"], c["h"], c["w"], c["ci"])
    w_shape = (c["kh"], c["kw"], c["ci"], c["co"])
    if c["dn"] != DN:
        x_shape, w_shape = (x_shape[0], x_shape[3], x_shape[1], x_shape[2]), (w_shape[3], w_shape[2], *w_shape[:2])
    x = rng.integers(lo, bound + 1, x_shape).astype(dtype)
    w = rng.integers(lo, bound + 1, w_shape).astype(dtype)

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(a, b, c["stride"], c["padding"], c["lhs"], c["rhs"],
                                            dimension_numbers=c["dn"], preferred_element_type=preferred,
                                            precision=jax.lax.Precision.HIGHEST)

    out_dtype = np.dtype(jax.eval_shape(f, x, w).dtype)
    exact = _numpy_conv(x.astype(np.float64), w.astype(np.float64), c)
    # NOTE: a sum outside an integer result's range wraps in StableHLO but saturates on the chip's conversion
    assume(np.all((np.iinfo(out_dtype).min <= exact) & (exact <= np.iinfo(out_dtype).max))
           if np.issubdtype(out_dtype, np.integer) else True)
    want = exact.astype(out_dtype)      # exact sums, rounded once to the result type (as XLA rounds them)
    conv = _compiled(f, x, w)
    assert conv.dtype == ISA[dtype]
    got = _run(conv, x, w)
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), (got, want)


def _numpy_conv(x: np.ndarray, w: np.ndarray, c: dict[str, Any]) -> np.ndarray:
    """StableHLO's convolution in float64 (exact on these small integers): the input dilated, then padded (a
    negative padding crops), the dilated window slid with its stride. The reference, not XLA's CPU
    convolution, which with a negative padding can ignore it (1x1 input, padding (1, -1), 130 output channels:
    x·w where the padded input is a single zero)."""
    if c["dn"] != DN:
        x, w = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    n, h, wd, ci = x.shape
    (lh, lw), (dh, dw), (sh, sw) = c["lhs"], c["rhs"], c["stride"]
    xd = np.zeros((n, (h - 1) * lh + 1, (wd - 1) * lw + 1, ci))
    xd[:, ::lh, ::lw, :] = x
    for axis, (lo, hi) in zip((1, 2), c["padding"], strict=True):
        pad = [(0, 0)] * 4
        pad[axis] = (max(lo, 0), max(hi, 0))
        xd = np.pad(xd, pad)
        keep = [slice(None)] * 4
        keep[axis] = slice(max(-lo, 0), xd.shape[axis] - max(-hi, 0))
        xd = xd[tuple(keep)]
    kh, kw = w.shape[:2]
    oh, ow = (xd.shape[1] - (kh - 1) * dh - 1) // sh + 1, (xd.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw)
            out += xd[:, rows, cols, :] @ w[i, j]
    return out if c["dn"] == DN else out.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype,fmt", [("fp16", "fp16"), ("bf16", "bf16"), ("fp8_e4m3", "fp8_e4m3"),
                                       ("fp8_e5m2", "fp8_e5m2"), ("fp32", "fp32"), ("int8", "bf16"),
                                       ("uint8", "bf16"), ("int16", "fp32"), ("uint16", "fp32"), ("int32", "fp32"),
                                       ("uint32", "fp32")])
def test_integers_multiply_in_a_float_format_that_holds_them(dtype: str, fmt: str) -> None:
    """TensorE has no integer datapath (``reference/neuron.md`` §1.5): 8-bit integers take bf16, which holds every
    one of them (so do their products in fp32); wider ones fp32."""
    assert tensor_format(dtype, dtype) == fmt
    if dtype in INTEGER_FORMAT:
        d = DTYPES_NP[dtype]
        lo, hi = np.iinfo(d).min, np.iinfo(d).max
        if fmt == "bf16":
            values = np.arange(lo, hi + 1)
            assert np.array_equal(values.astype(ml_dtypes.bfloat16).astype(np.int64), values)


DTYPES_NP: dict[str, Any] = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
                             "int32": np.int32, "uint32": np.uint32}


def test_mixed_operands_multiply_in_a_format_that_holds_both() -> None:
    assert tensor_format("fp8_e4m3", "bf16") == "bf16"
    assert tensor_format("fp8_e5m2", "fp16") == "fp16"
    assert tensor_format("fp16", "bf16") == "fp32"
    assert tensor_format("int8", "fp8_e4m3") == "bf16"
    assert tensor_format("int16", "bf16") == "fp32"
    assert tensor_format("mxfp8_e4m3", "mxfp8_e4m3") is None


def test_an_unknown_operand_format_is_refused() -> None:
    x, w = np.ones((1, 3, 3, 2), np.float32), np.ones((2, 2, 2, 1), np.float32)
    with pytest.raises(KernelError, match="operand_format"):
        dsl.run_kernel(conv_kernel, x, w, operand_format="mxfp8_e4m3")


@pytest.mark.parametrize("dtype,fmt,eps", [
    (np.float16, "fp16", 2.0**-11), (ml_dtypes.float8_e4m3fn, "fp8_e4m3", 2.0**-4),
    (ml_dtypes.float8_e5m2, "fp8_e5m2", 2.0**-3)])
@pytest.mark.parametrize("ci,stride", [(3, (1, 1)), (130, (2, 1))])
def test_float_operands_within_the_result_rounding(dtype: Any, fmt: str, eps: float, ci: int,
                                                   stride: tuple[int, int]) -> None:
    """Products of the format are exact in fp32 and sums differ from XLA's only in order: the result's rounding
    to the format (unit roundoff ``eps``) bounds the difference, plus fp32 sums' order."""
    rng = np.random.default_rng(ci)
    x = rng.standard_normal((2, 9, 8, ci)).astype(dtype)
    w = (rng.standard_normal((3, 3, ci, 20)) * 0.25).astype(dtype)
    ref = np.asarray(jax.lax.conv_general_dilated(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32), stride,
                                                  ((1, 1), (1, 1)), dimension_numbers=DN,
                                                  precision=jax.lax.Precision.HIGHEST))
    out = dsl.run_kernel(conv_kernel, dsl.typed(x.astype(np.float32), fmt), dsl.typed(w.astype(np.float32), fmt),
                         stride=stride, padding=((1, 1), (1, 1)), out_dtype=fmt).outputs[0].astype(np.float64)
    sums = 1e-5 * np.sqrt(9 * ci) * np.abs(ref).max()
    assert np.all(np.abs(out - ref) <= eps * np.abs(ref) + sums + 2.0**-9 * (fmt != "fp16"))
