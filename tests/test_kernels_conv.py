"""The convolution kernel against ``jax.lax.conv_general_dilated``: random shapes, strides, paddings (negative
ones crop), input and window dilations, both TensorE mappings (taps stacked on the partitions for few
channels, one tap a matmul for many), the layouts of JAX's gradient convolutions, 1-D convolutions (a unit H
axis), 3-D ones (kernel planes into the same PSUM tiles), feature groups (block-diagonal stationaries;
depthwise: diagonal ones in bf16, per-channel multiply-accumulates in fp32) and batch groups; bit-exact on
small integers in fp32, within bf16's rounding of the result otherwise."""

from __future__ import annotations

import doctest

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl
from trnsim.compiler import convgen
from trnsim.dsl.errors import KernelError
from trnsim.kernels import conv as conv_module
from trnsim.kernels import conv2d, conv_kernel

DN = ("NHWC", "HWIO", "NHWC")


def reference(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], padding: tuple[tuple[int, int], ...],
              lhs: tuple[int, int], rhs: tuple[int, int]) -> np.ndarray:
    """JAX's convolution of ``x`` padded and lhs-dilated by ``lax.pad`` first (negative padding crops).

    NOTE: the padding is not left to the convolution: XLA:CPU's convolution dropped a negative high padding
    for 130 output channels (a hypothesis draw: a 1×1 input padded (1, -1) gave x·w, not 0; 3 channels gave 0)."""
    xp = jax.lax.pad(jnp.asarray(x, jnp.float32), jnp.float32(0), [(0, 0, 0), (*padding[0], lhs[0] - 1),
                                                                  (*padding[1], lhs[1] - 1), (0, 0, 0)])
    out = jax.lax.conv_general_dilated(xp, jnp.asarray(w, jnp.float32), stride, ((0, 0), (0, 0)), (1, 1), rhs,
                                       dimension_numbers=DN, precision=jax.lax.Precision.HIGHEST)
    return np.asarray(out)


@st.composite
def convolutions(draw: st.DrawFn) -> dict[str, object]:
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    lhs = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    rhs = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    padding = tuple((draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(2))
    for size, dil, k, d, (lo, hi) in ((h, lhs[0], kh, rhs[0], padding[0]), (w, lhs[1], kw, rhs[1], padding[1])):
        if lo + (size - 1) * dil + 1 + hi < (k - 1) * d + 1:
            padding = ((2, 2), (2, 2))      # the window must fit: pad generously instead
            break
    ci = draw(st.sampled_from([1, 3, 5, 64, 70, 130]))
    return {"n": draw(st.integers(1, 2)), "h": h, "w": w, "ci": ci, "kh": kh, "kw": kw,
            "co": draw(st.sampled_from([1, 4, 130])), "stride": stride, "padding": padding, "lhs": lhs, "rhs": rhs}


@settings(max_examples=60, deadline=None)
@given(convolutions(), st.integers(0, 2**31))
@example({"n": 1, "h": 1, "w": 1, "ci": 1, "kh": 1, "kw": 1, "co": 130, "stride": (1, 1),   # (see reference)
          "padding": ((1, -1), (0, 0)), "lhs": (1, 1), "rhs": (1, 1)}, 0)
def test_conv_is_exact_on_small_integers(c: dict[str, object], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (c["n"], c["h"], c["w"], c["ci"])).astype(np.float32)  # type: ignore[arg-type]
    w = rng.integers(-3, 4, (c["kh"], c["kw"], c["ci"], c["co"])).astype(np.float32)  # type: ignore[arg-type]
    args = (c["stride"], c["padding"], c["lhs"], c["rhs"])
    got = conv2d(x, w, stride=c["stride"], padding=c["padding"], lhs_dilation=c["lhs"],  # type: ignore[arg-type]
                 rhs_dilation=c["rhs"])  # type: ignore[arg-type]
    assert np.array_equal(got, reference(x, w, *args))  # type: ignore[arg-type]


@pytest.mark.parametrize("ci,stride", [(3, (1, 1)), (16, (2, 2)), (130, (2, 1))])
def test_bf16_operands_within_the_result_rounding(ci: int, stride: tuple[int, int]) -> None:
    rng = np.random.default_rng(ci)
    x = rng.standard_normal((2, 9, 8, ci)).astype(ml_dtypes.bfloat16).astype(np.float32)
    w = rng.standard_normal((3, 3, ci, 20)).astype(ml_dtypes.bfloat16).astype(np.float32)
    ref = reference(x, w, stride, ((1, 1), (1, 1)), (1, 1), (1, 1))
    got = conv2d(x, w, "bf16", stride=stride, padding=((1, 1), (1, 1)), out_dtype="bf16")
    # products of bf16 are exact in fp32, sums differ only in order: the bf16 rounding of the result dominates
    bound = 2.0**-8 * np.abs(ref) + 1e-5 * np.sqrt(9 * ci) * np.abs(ref).max()
    assert np.all(np.abs(got - ref) <= bound)


def test_wide_rows_go_in_column_chunks() -> None:
    rng = np.random.default_rng(1)
    for ci in (2, 100):          # taps stacked, and one tap a matmul
        x = rng.integers(-2, 3, (1, 3, 600, ci)).astype(np.float32)
        w = rng.integers(-2, 3, (2, 3, ci, 3)).astype(np.float32)
        got = conv2d(x, w, padding=((0, 1), (1, 1)))
        assert np.array_equal(got, reference(x, w, (1, 1), ((0, 1), (1, 1)), (1, 1), (1, 1)))


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,lhs,rhs", [
    ((3, 6, 6, 4), (5, 5, 4, 7), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    ((130, 5, 5, 2), (4, 3, 2, 3), (1, 2), ((1, 0), (0, 1)), (1, 1), (1, 1)),       # two batch blocks
    ((2, 7, 6, 3), (3, 3, 3, 600), (2, 1), ((1, 1), (1, 1)), (1, 1), (2, 3)),       # Co over one bank
    ((1, 2, 140, 2), (2, 139, 2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),     # rows over 128
    ((2, 4, 4, 3), (5, 5, 3, 2), (1, 1), ((0, -1), (1, 0)), (2, 2), (1, 1)),     # negative pad
])
def test_windows_larger_than_the_output_contract_over_pixels(
        x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, int],
        padding: tuple[tuple[int, int], tuple[int, int]], lhs: tuple[int, int], rhs: tuple[int, int]) -> None:
    rng = np.random.default_rng(len(x_shape) + x_shape[0])
    x = rng.integers(-3, 4, x_shape).astype(np.float32)
    w = rng.integers(-3, 4, w_shape).astype(np.float32)
    want = reference(x, w, stride, padding, lhs, rhs)
    g = conv_module.Geometry(*x_shape, w_shape[0], w_shape[1], w_shape[3], stride, padding, lhs, rhs)
    assert g.pixel_mode and g.out == want.shape[1:3]
    got = conv2d(x, w, stride=stride, padding=padding, lhs_dilation=lhs, rhs_dilation=rhs)
    assert np.array_equal(got, want)


def _grads(stride: int, ci: int) -> tuple[np.ndarray, ...]:
    """x, w, dy and JAX's input and weight gradients of a SAME convolution of ``stride``."""
    rng = np.random.default_rng(stride)
    x = rng.integers(-2, 3, (3, 8, 8, ci)).astype(np.float32)
    w = rng.integers(-2, 3, (3, 3, ci, 6)).astype(np.float32)
    f = lambda a, b: jax.lax.conv_general_dilated(a, b, (stride, stride), "SAME", dimension_numbers=DN,  # noqa: E731
                                                  precision=jax.lax.Precision.HIGHEST)
    y, vjp = jax.vjp(f, x, w)
    dy = rng.integers(-2, 3, y.shape).astype(np.float32)
    dx, dw = vjp(jnp.asarray(dy))
    return x, w, dy, np.asarray(dx), np.asarray(dw)


@pytest.mark.parametrize("stride,ci", [(1, 4), (2, 4), (2, 70)])
def test_gradient_layouts_of_jax(stride: int, ci: int) -> None:
    """The two gradient convolutions JAX emits, run in their own layouts (dimension numbers as permutations)."""
    x, w, dy, dx, dw = _grads(stride, ci)
    lowered = jax.jit(jax.grad(lambda a, b: (jax.lax.conv_general_dilated(
        a, b, (stride, stride), "SAME", dimension_numbers=DN) * dy).sum(), argnums=(0, 1))).lower(x, w)
    text = lowered.as_text()
    assert text.count("stablehlo.convolution") == 2
    program = trnsim.compile(lowered, cache=False)
    convs = [n for n in program.graph.nodes if n.op == "convolution"]
    found = 0
    for node in convs:
        c = convgen.conv_for(node)
        assert c is not None
        if node.out.type.shape == tuple(dx.shape):
            a, b, want = dy, w[::-1, ::-1], dx
        else:
            a, b, want = x, dy, dw
        got = dsl.run_kernel(conv_kernel, a, b, stride=c.stride, padding=c.padding, lhs_dilation=c.lhs_dilation,
                             rhs_dilation=c.rhs_dilation, x_axes=c.x_axes, w_axes=c.w_axes,
                             out_axes=c.out_axes).outputs[0]
        assert np.array_equal(got, want)
        found += 1
    assert found == 2


def test_mismatched_channels_and_empty_windows_are_kernel_errors() -> None:
    with pytest.raises(KernelError, match="input channels"):
        conv2d(np.ones((1, 4, 4, 3)), np.ones((2, 2, 4, 1)))
    with pytest.raises(KernelError, match="window"):
        conv2d(np.ones((1, 2, 2, 1)), np.ones((3, 3, 1, 1)))


def test_doctests() -> None:
    assert doctest.testmod(conv_module).failed == 0


def test_operands_that_are_not_4_d_are_named_in_the_error() -> None:
    with pytest.raises(KernelError, match=r"2-D convolution of x \(3, 3, 2\) with w \(2, 2, 2, 1\)"):
        conv2d(np.ones((3, 3, 2)), np.ones((2, 2, 2, 1)))


def _general(x: np.ndarray, w: np.ndarray, c: convgen.Conv) -> np.ndarray:
    """``lax.conv_general_dilated`` of ``c``'s layout, window and groups (its axes as dimension numbers)."""
    dn = jax.lax.ConvDimensionNumbers((c.x_axes[0], c.x_axes[-1], *c.x_axes[1:-1]),
                                      (c.w_axes[-1], c.w_axes[-2], *c.w_axes[:-2]),
                                      (c.out_axes[0], c.out_axes[-1], *c.out_axes[1:-1]))
    out = jax.lax.conv_general_dilated(jnp.asarray(x), jnp.asarray(w), c.stride, c.padding, c.lhs_dilation,
                                       c.rhs_dilation, dn, c.feature_groups, c.batch_groups,
                                       precision=jax.lax.Precision.HIGHEST)
    return np.asarray(out)


def _run(x: np.ndarray, w: np.ndarray, c: convgen.Conv, dtype: str = "fp32") -> np.ndarray:
    return dsl.run_kernel(conv_kernel, dsl.typed(x, dtype), dsl.typed(w, dtype), stride=c.stride,
                          padding=c.padding, lhs_dilation=c.lhs_dilation, rhs_dilation=c.rhs_dilation,
                          x_axes=c.x_axes, w_axes=c.w_axes, out_axes=c.out_axes, out_dtype=c.out_dtype,
                          feature_groups=c.feature_groups, batch_groups=c.batch_groups).outputs[0]


@st.composite
def grouped(draw: st.DrawFn) -> convgen.Conv:
    """A 1-D, 2-D or 3-D convolution in NHWC/HWIO of feature groups (depthwise among them) or batch groups."""
    rank = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2, 3, 4]))
    depthwise = draw(st.booleans())
    per_group = 1 if depthwise else draw(st.sampled_from([1, 3, 40]))
    ci = groups * per_group if not depthwise else draw(st.sampled_from([2, 8, 70, 130]))
    groups = ci if depthwise else groups
    batch = draw(st.booleans()) and not depthwise
    co = groups * draw(st.sampled_from([1, 2, 5]))
    n = groups * draw(st.integers(1, 2)) if batch else draw(st.integers(1, 2))
    sizes = [draw(st.integers(3, 8 if rank < 3 else 4)) for _ in range(rank)]
    window = [draw(st.integers(1, 3)) for _ in range(rank)]
    stride = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    lhs = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    rhs = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    padding = tuple((draw(st.integers(0, 2)), draw(st.integers(-1, 2))) for _ in range(rank))
    padding = tuple(p if lo + (s - 1) * ld + 1 + hi >= (k - 1) * rd + 1 else (k * rd, k * rd)
                    for p, (lo, hi), s, ld, k, rd in zip(padding, padding, sizes, lhs, window, rhs, strict=True))
    axes = tuple(range(rank + 2))
    return convgen.Conv((n, *sizes, ci), (*window, ci if batch else ci // groups, co), "fp32", "fp32", axes,
                        axes, axes, stride, padding, lhs, rhs, 1 if batch else groups, groups if batch else 1)


@settings(max_examples=30, deadline=None)
@given(grouped(), st.integers(0, 2**31))
def test_1d_3d_and_grouped_convolutions_are_exact_on_small_integers(c: convgen.Conv, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, c.x_shape).astype(np.float32)
    w = rng.integers(-3, 4, c.w_shape).astype(np.float32)
    assert np.array_equal(_run(x, w, c), _general(x, w, c))


@pytest.mark.parametrize("x_shape,w_shape,groups", [
    ((2, 7, 6, 130), (3, 3, 1, 130), 130),       # depthwise, channels over one tile: diagonal stationaries
    ((2, 5, 6, 40), (3, 3, 1, 40), 40),          # depthwise of few channels: multiply-accumulate
    ((2, 6, 6, 64), (3, 3, 8, 64), 8),           # grouped, taps stacked on the partitions
    ((2, 20, 96), (4, 96, 96), 1),               # 1-D
])
def test_grouped_and_1d_bf16_within_the_result_rounding(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                                        groups: int) -> None:
    rng = np.random.default_rng(len(x_shape) + groups)
    x = rng.standard_normal(x_shape).astype(ml_dtypes.bfloat16).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(ml_dtypes.bfloat16).astype(np.float32)
    axes = tuple(range(len(x_shape)))
    rank = len(x_shape) - 2
    c = convgen.Conv(x_shape, w_shape, "bf16", "bf16", axes, axes, axes, (2,) * rank, ((1, 1),) * rank, (1,) * rank,
                     (1,) * rank, groups)
    ref, got = _general(x, w, c), _run(x, w, c, "bf16")
    terms = int(np.prod(w_shape[:-1]))
    bound = 2.0**-8 * np.abs(ref) + 1e-5 * np.sqrt(terms) * np.abs(ref).max()
    assert np.all(np.abs(got - ref) <= bound)


@pytest.mark.parametrize("dn,x_shape,w_shape,stride,groups", [
    (("NWC", "WIO", "NWC"), (3, 12, 4), (3, 4, 6), 1, 1),             # 1-D
    (("NCW", "OIW", "NCW"), (2, 4, 11), (6, 4, 4), 2, 1),             # 1-D, channels first
    (("NHWC", "HWIO", "NHWC"), (2, 6, 6, 8), (3, 3, 2, 8), 1, 4),     # grouped
    (("NHWC", "HWIO", "NHWC"), (2, 7, 7, 6), (3, 3, 1, 6), 2, 6),     # depthwise
    (("NCHW", "OIHW", "NCHW"), (2, 4, 5, 5), (4, 1, 3, 3), 1, 4),     # depthwise, channels first
    (("NDHWC", "DHWIO", "NDHWC"), (2, 4, 5, 5, 3), (3, 3, 3, 3, 4), 1, 1),   # 3-D
    (("NCDHW", "OIDHW", "NCDHW"), (1, 6, 5, 4, 4), (6, 2, 2, 3, 3), 2, 3),   # 3-D grouped, channels first
])
def test_gradient_convolutions_of_1d_3d_and_grouped_run_in_jax_layouts(
        dn: tuple[str, str, str], x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int,
        groups: int) -> None:
    """Every convolution of JAX's training program (forward, input and weight gradient: batch groups for a
    grouped one) run by the kernel in its own layout equals ``lax.conv_general_dilated`` of its attributes."""
    rank = len(x_shape) - 2
    f = lambda a, b: (jax.lax.conv_general_dilated(  # noqa: E731
        a, b, (stride,) * rank, "SAME", dimension_numbers=dn, feature_group_count=groups) ** 2).sum()
    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in (x_shape, w_shape)]
    program = trnsim.compile(jax.jit(jax.grad(f, argnums=(0, 1))).lower(*specs), cache=False)
    convs = [n for n in program.graph.nodes if n.op == "convolution"]
    assert len(convs) == 3
    rng = np.random.default_rng(stride + groups)
    for node in convs:
        c = convgen.conv_for(node)
        assert c is not None
        x = rng.integers(-2, 3, c.x_shape).astype(np.float32)
        w = rng.integers(-2, 3, c.w_shape).astype(np.float32)
        assert np.array_equal(_run(x, w, c), _general(x, w, c))


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,rhs", [
    ((8, 6, 6, 3), (5, 5, 3, 8), (1, 1), ((0, 0), (0, 0)), (1, 1)),
    ((130, 7, 7, 2), (4, 4, 2, 130), (2, 1), ((1, 0), (0, 1)), (1, 2)),     # two channel tiles
    ((4, 9, 2), (7, 2, 4), (1,), ((1, -1),), (1,)),                         # 1-D, a cropped pad
    ((3, 4, 5, 5, 2), (3, 4, 4, 2, 3), (1, 1, 1), ((1, 0), (0, 0), (1, 1)), (1, 1, 1)),  # 3-D
])
def test_depthwise_weight_gradients_multiply_accumulate_per_channel(
        x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...], rhs: tuple[int, ...]) -> None:
    """Batch groups of one member and one output channel each (JAX's depthwise weight gradient)."""
    rng = np.random.default_rng(x_shape[0])
    axes = tuple(range(len(x_shape)))
    c = convgen.Conv(x_shape, w_shape, "fp32", "fp32", axes, axes, axes, stride, padding, (1,) * len(stride), rhs,
                     1, x_shape[0])
    x = rng.integers(-3, 4, x_shape).astype(np.float32)
    w = rng.integers(-3, 4, w_shape).astype(np.float32)
    assert convgen.geometry(c).pixel_mode
    assert np.array_equal(_run(x, w, c), _general(x, w, c))
