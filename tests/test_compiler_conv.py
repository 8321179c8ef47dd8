"""Convolution steps: 1-D, 2-D and 3-D convolutions, grouped and depthwise ones among them (forward and JAX's
two gradients) lower to the library's conv kernel and take its timed run, in fp32, bf16, fp16, fp8 and integer
types (integers in the float format TensorE multiplies them in); a convolution fused with a prologue keeps the
analytic cost; large batches (and many batch groups) are sampled."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim.compiler import convgen

DN = ("NHWC", "HWIO", "NHWC")


def _cnn_step(stride: int):  # type: ignore[no-untyped-def]
    def loss(p, x, y):  # type: ignore[no-untyped-def]
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=DN))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.lax.conv_general_dilated(h, p["c2"], (stride, stride), "SAME", dimension_numbers=DN)
        logits = jax.nn.relu(h).mean(axis=(1, 2)) @ p["fc"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    def step(p, x, y):  # type: ignore[no-untyped-def]
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return value, jax.tree.map(lambda a, b: a - 0.1 * b, p, grads)

    return step


def _params() -> dict[str, jax.Array]:
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    return {"c1": jax.random.normal(k1, (3, 3, 3, 8)) * 0.2, "c2": jax.random.normal(k2, (3, 3, 8, 16)) * 0.2,
            "fc": jax.random.normal(k3, (16, 10)) * 0.2}


@pytest.mark.parametrize("stride", [1, 2])
def test_cnn_training_step_convolutions_are_kernels(stride: int) -> None:
    step, p = _cnn_step(stride), _params()
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 3)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 10, 4).astype(np.int32)
    program = trnsim.compile(jax.jit(step).lower(p, x, y), cache=False)
    convs = [s for s in program.plan.steps if "convolution" in s.ops]
    assert len(convs) == 5 and {s.kernel for s in convs} == {"conv"}
    for s in convs:
        conv = convgen.conv_for(program.graph.nodes[s.nodes[0]])
        assert conv is not None
        timed = convgen.conv_time("trn3", conv)
        assert s.seconds == timed.seconds and s.busy == timed.busy and s.busy["tensor"] > 0
    got = trnsim.jit(step)(p, x, y)
    ref = jax.jit(step)(p, x, y)
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-5)


def test_bf16_convolution_is_a_kernel() -> None:
    f = lambda x, w: jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=DN)  # noqa: E731
    args = [jax.ShapeDtypeStruct((2, 12, 12, 20), jnp.bfloat16), jax.ShapeDtypeStruct((3, 3, 20, 24), jnp.bfloat16)]
    program = trnsim.compile(jax.jit(f).lower(*args), cache=False)
    (step,) = [s for s in program.plan.steps if "convolution" in s.ops]
    assert step.kernel == "conv" and step.operand_dtype == "bf16"
    assert step.flops == 2.0 * 2 * 6 * 6 * 24 * 3 * 3 * 20


@pytest.mark.parametrize("dn,x_shape,w_shape,groups", [
    (("NWC", "WIO", "NWC"), (2, 16, 4), (3, 4, 6), 1),                 # 1-D
    (("NCW", "OIW", "NCW"), (2, 6, 20), (6, 1, 4), 6),                 # 1-D depthwise (a Hyena/Mamba short conv)
    (("NHWC", "HWIO", "NHWC"), (2, 8, 8, 8), (3, 3, 2, 12), 4),        # grouped (ResNeXt)
    (("NHWC", "HWIO", "NHWC"), (2, 8, 8, 8), (3, 3, 1, 8), 8),         # depthwise (MobileNet)
    (("NDHWC", "DHWIO", "NDHWC"), (1, 4, 6, 6, 3), (3, 3, 3, 3, 4), 1),  # 3-D (video)
])
def test_1d_3d_and_grouped_training_convolutions_are_kernels(dn: tuple[str, str, str], x_shape: tuple[int, ...],
                                                          w_shape: tuple[int, ...], groups: int) -> None:
    """The forward convolution and JAX's two gradients (a grouped one's weight gradient has batch groups) lower
    to the conv kernel, no analytic ``conv_matmul`` step, and the jitted program matches JAX."""
    rank = len(x_shape) - 2

    def loss(x: jax.Array, w: jax.Array) -> jax.Array:
        y = jax.lax.conv_general_dilated(x, w, (1,) * rank, "SAME", dimension_numbers=dn, feature_group_count=groups)
        return (jnp.tanh(y) ** 2).sum()

    f = jax.grad(loss, argnums=(0, 1))
    rng = np.random.default_rng(groups)
    x, w = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in (x_shape, w_shape))
    program = trnsim.compile(jax.jit(f).lower(x, w), cache=False)
    convs = [s for s in program.plan.steps if "convolution" in s.ops]
    assert len(convs) == 3 and {s.kernel for s in convs} == {"conv"}
    assert not [s for s in program.plan.steps if s.kernel == "conv_matmul"]
    for got, ref in zip(trnsim.jit(f)(x, w), jax.jit(f)(x, w), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype,preferred,operands", [
    (jnp.float16, None, "fp16"),                    # fp16: a TensorE format at the bf16 rate
    (jnp.float16, jnp.float32, "fp16"),
    (jnp.float8_e4m3fn, jnp.float32, "fp8_e4m3"),   # fp8: at 4x the bf16 rate
    (jnp.float8_e5m2, None, "fp8_e5m2"),
    (jnp.int8, None, "bf16"),                       # 8-bit integers: exact in bf16 (no integer datapath)
    (jnp.uint8, jnp.int32, "bf16"),
    (jnp.int16, None, "fp32"),                      # wider integers: fp32
    (jnp.int32, None, "fp32"),
])
def test_fp16_fp8_and_integer_convolutions_are_kernels(dtype: object, preferred: object, operands: str) -> None:
    """They run as the conv kernel in the TensorE format the chip multiplies them in (``conv.tensor_format``),
    the step's operand format that one, timed as the kernel is."""
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN,
                                            preferred_element_type=preferred)  # type: ignore[arg-type]

    specs = [jax.ShapeDtypeStruct(s, dtype) for s in ((2, 8, 8, 4), (3, 3, 4, 6))]  # type: ignore[arg-type]
    program = trnsim.compile(jax.jit(f).lower(*specs), cache=False)
    (step,) = [s for s in program.plan.steps if "convolution" in s.ops]
    assert step.kernel == "conv" and step.operand_dtype == operands
    conv = convgen.conv_for(program.graph.nodes[step.nodes[0]])
    assert conv is not None and conv.operand_format == operands
    assert step.seconds == convgen.conv_time("trn3", conv).seconds


def test_operand_format_sets_the_tensor_engine_time() -> None:
    """TensorE's busy time follows the format used: fp8 at 4x bf16/fp16, fp32 (and int32) at 1/4; an int8
    convolution runs exactly as fast on TensorE as a bf16 one."""
    def busy(dtype: str) -> float:
        conv = convgen.Conv((4, 14, 14, 128), (3, 3, 128, 128), dtype, dtype, (0, 1, 2, 3), (0, 1, 2, 3),
                            (0, 1, 2, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1))
        return convgen.conv_time("trn3", conv).busy["tensor"]

    bf16 = busy("bf16")
    assert busy("fp16") == bf16 and busy("int8") == pytest.approx(bf16, rel=1e-3)
    assert busy("fp8_e4m3") < 0.3 * bf16 and busy("fp32") > 3.5 * bf16
    assert busy("int32") == busy("fp32")


def test_autocast_convolutions_keep_the_analytic_cost() -> None:
    """A convolution fused with its autocast prologue (converts, qdq) is not a lone convolution: analytic."""
    f = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)  # noqa: E731
    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((2, 8, 8, 4), (3, 3, 4, 6))]
    program = trnsim.compile(jax.jit(f).lower(*specs), cache=False, auto_cast="matmul", auto_cast_type="fp8_e4m3")
    (step,) = [s for s in program.plan.steps if "convolution" in s.ops]
    assert step.kernel == "conv_matmul"


def test_batch_groups_are_sampled_within_three_percent() -> None:
    """The weight gradient of a 32-group convolution (32 batch groups) is timed on 8 and 16 groups and
    extrapolated."""
    f = jax.grad(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN,
                                                           feature_group_count=32).sum(), argnums=1)
    specs = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in ((2, 6, 6, 64), (3, 3, 2, 64))]
    program = trnsim.compile(jax.jit(f).lower(*specs), cache=False)
    (conv,) = [c for n in program.graph.nodes if (c := convgen.conv_for(n)) is not None and c.batch_groups > 1]
    assert conv.batch_groups == 32 and convgen.geometry(conv).pixel_mode
    sampled = convgen.conv_time("trn3", conv)
    whole = convgen._timed("trn3", conv)  # pyright: ignore[reportPrivateUsage]
    assert abs(sampled.seconds - whole.seconds) <= 0.03 * whole.seconds


@pytest.mark.parametrize("x_shape,w_shape,axes", [
    ((24, 10, 10, 8), (3, 3, 8, 16), ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))),    # forward
    ((20, 6, 6, 130), (3, 3, 130, 8), ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))),   # one tap a matmul
])
def test_many_images_are_sampled_within_three_percent(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                                       axes: tuple[tuple[int, ...], ...]) -> None:
    conv = convgen.Conv(x_shape, w_shape, "fp32", "fp32", *axes, (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1))
    sampled = convgen.conv_time("trn3", conv)
    whole = convgen._timed("trn3", conv)  # pyright: ignore[reportPrivateUsage]
    assert abs(sampled.seconds - whole.seconds) <= 0.03 * whole.seconds
