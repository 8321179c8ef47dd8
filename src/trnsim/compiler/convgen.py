"""Convolution steps: a StableHLO ``convolution`` lowered to the library's ``conv_kernel``.

A 1-D, 2-D or 3-D convolution (3-D to 5-D operands), no window reversal (JAX emits a separate ``reverse``),
operands and result in fp32, bf16, fp16, fp8 (e4m3fn, e5m2) or 8- to 32-bit integers runs as
``trnsim.kernels.conv.conv_kernel`` in the TensorE format the chip multiplies them in (``Conv.operand_format``,
the step's operand dtype: fp8 at its 4x rate; integers as floats, TensorE having no integer datapath,
``reference/neuron.md`` §1.5: 8-bit ones in bf16, exact, wider ones in fp32) and in whatever
layout its ``dimension_numbers`` give: the forward convolution and both gradients JAX emits (the input
gradient with ``lhs_dilation`` and the kernel's ``I``/``O`` swapped, the weight gradient with batch and
feature swapped), with any ``feature_group_count`` (grouped and depthwise convolutions: block-diagonal
stationaries) or ``batch_group_count`` (the weight gradient of a grouped one: a convolution a group). A 1-D
convolution is the kernel's 2-D one of a unit H axis; a 3-D one accumulates its kernel's depth planes into the
same PSUM tiles. Its time is the kernel's, timed
by the instruction-level model (timing-only); every other convolution keeps the analytic cost (``costs``: MX
and other fp8 types, 64-bit and boolean ones), as does a convolution fused with a prologue or epilogue (autocast's
converts and qdq among them), and one the kernel cannot trace (a weight gradient
whose whole window does not fit SBUF, for one: counted in the ``conv_fallbacks`` statistic).

The kernel's work is a loop over its (canonical) batch, each image the same units (for the pixel-contracting
mapping, each block of 128 batch members the same work, of whole batch groups when they are small; with larger
batch groups, each group the same convolution):
a kernel of more than ``2 · SAMPLE_IMAGES`` such units is timed on ``SAMPLE_IMAGES`` and twice as many and
extrapolated linearly (``kernel_timing.linear_fit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trnsim.compiler.costs import StepCost
from trnsim.compiler.kernel_timing import TileTime, extrapolate, linear_fit, time_kernel
from trnsim.ir.graph import Node
from trnsim.ir.types import FLOATS, INTS, isa_dtypes

if TYPE_CHECKING:
    from trnsim.kernels.conv import Geometry

# StableHLO element types of the operands and results the kernel takes, as ISA dtypes (integers multiply in a
# float format on TensorE: ``conv.tensor_format``)
DSL_DTYPE = isa_dtypes(*FLOATS, "f8E4M3FN", "f8E5M2", *INTS)
SAMPLE_IMAGES = 8
PARTITIONS = 128


@dataclass(frozen=True)
class Conv:
    """A convolution as ``conv_kernel``'s arguments: operand shapes as given, where the canonical axes are
    (``x_axes``: N, H, W, Ci; ``w_axes``: KH, KW, Ci, Co; ``out_axes``: N, OH, OW, Co; without H, KH and OH
    for a 1-D one), the window (one entry a spatial axis) and the groups."""

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    dtype: str
    out_dtype: str
    x_axes: tuple[int, ...]
    w_axes: tuple[int, ...]
    out_axes: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    feature_groups: int = 1
    batch_groups: int = 1
    w_dtype: str | None = None  # the kernel's dtype when it differs from ``dtype`` (the input's)

    @property
    def operand_format(self) -> str:
        """The format TensorE multiplies in (``conv.tensor_format``: integers as floats, mixed operands in one
        that holds both)."""
        from trnsim.kernels.conv import tensor_format

        fmt = tensor_format(self.dtype, self.w_dtype or self.dtype)
        assert fmt is not None, (self.dtype, self.w_dtype)
        return fmt

    @property
    def images(self) -> int:
        """The kernel's batch: images, or batch groups (each its own convolution)."""
        n = self.x_shape[self.x_axes[0]]
        return self.batch_groups if self.batch_groups > 1 else n

    def with_images(self, n: int) -> Conv:
        """The same convolution of ``n`` images (with batch groups: of ``n`` groups, ``Co`` with them)."""
        shape, w_shape = list(self.x_shape), list(self.w_shape)
        if self.batch_groups > 1:
            shape[self.x_axes[0]] = shape[self.x_axes[0]] // self.batch_groups * n
            w_shape[self.w_axes[-1]] = w_shape[self.w_axes[-1]] // self.batch_groups * n
            return replace(self, x_shape=tuple(shape), w_shape=tuple(w_shape), batch_groups=n)
        shape[self.x_axes[0]] = n
        return replace(self, x_shape=tuple(shape))


def conv_for(node: Node) -> Conv | None:
    """The kernel arguments of ``node`` if ``conv_kernel`` computes it (module docstring); else None."""
    if node.op != "convolution" or len(node.inputs) != 2:
        return None
    x, w = node.inputs
    a = node.attrs
    from trnsim.kernels.conv import tensor_format

    dtype, w_dtype = DSL_DTYPE.get(x.type.dtype), DSL_DTYPE.get(w.type.dtype)
    out_dtype = DSL_DTYPE.get(node.out.type.dtype)
    if (dtype is None or w_dtype is None or out_dtype is None or tensor_format(dtype, w_dtype) is None
            or len(x.type.shape) not in (3, 4, 5) or any(a.get("window_reversal") or ()) or "operand_format" in a):
        return None
    d = a["dimension_numbers"]
    spatial = (d["input_spatial_dimensions"], d["kernel_spatial_dimensions"], d["output_spatial_dimensions"])
    rank = len(x.type.shape) - 2
    if any(len(s) != rank for s in spatial):
        return None
    x_axes = (d["input_batch_dimension"], *spatial[0], d["input_feature_dimension"])
    w_axes = (*spatial[1], d["kernel_input_feature_dimension"], d["kernel_output_feature_dimension"])
    out_axes = (d["output_batch_dimension"], *spatial[2], d["output_feature_dimension"])
    pads = a.get("padding")
    padding = ((0, 0),) * rank if pads is None else tuple((int(lo), int(hi)) for lo, hi in pads)

    def per_axis(key: str) -> tuple[int, ...]:
        return tuple(int(v) for v in a.get(key) or (1,) * rank)

    return Conv(tuple(x.type.shape), tuple(w.type.shape), dtype, out_dtype, x_axes, w_axes, out_axes,
                per_axis("window_strides"), padding, per_axis("lhs_dilation"), per_axis("rhs_dilation"),
                int(a.get("feature_group_count", 1)), int(a.get("batch_group_count", 1)),
                None if w_dtype == dtype else w_dtype)


def geometry(conv: Conv) -> Geometry:
    """The kernel's canonical 2-D geometry of ``conv``: one batch group's, a 1-D one's with a unit H axis, a
    3-D one's of a depth plane."""
    from trnsim.kernels.conv import Geometry

    one_d = len(conv.x_shape) == 3
    x, w = [conv.x_shape[a] for a in conv.x_axes[-4:]], [conv.w_shape[a] for a in conv.w_axes[-4:]]
    x[0] = conv.x_shape[conv.x_axes[0]]         # N, H, W, Ci and KH, KW, Ci, Co: a 3-D one's depth dropped
    if one_d:
        x.insert(1, 1)
        w.insert(0, 1)

    def planar(values: tuple[Any, ...], unit: Any) -> tuple[Any, Any]:
        return (unit, values[0]) if one_d else (values[-2], values[-1])

    n, h, wd, ci = x
    kh, kw, _, co = w
    return Geometry(n // conv.batch_groups, h, wd, ci, kh, kw, co // conv.batch_groups, planar(conv.stride, 1),
                    planar(conv.padding, (0, 0)), planar(conv.lhs_dilation, 1), planar(conv.rhs_dilation, 1),
                    conv.feature_groups)


def conv_time(target: str, conv: Conv) -> TileTime:
    """The kernel's time (timing-only), sampled over the batch when it is large (module docstring)."""
    g = geometry(conv)
    # pixel_contract repeats per block of 128 batch members (with small batch groups: of 128 // g.n groups)
    small_groups = conv.batch_groups > 1 and 2 * g.n <= PARTITIONS
    unit = (PARTITIONS // g.n if small_groups else 1 if conv.batch_groups > 1 else PARTITIONS) if g.pixel_mode else 1
    small = SAMPLE_IMAGES * unit
    n = conv.images
    if n <= 2 * small:  # n: the canonical batch (or the batch groups)
        return _timed(target, conv)
    a = _timed(target, conv.with_images(small))
    b = _timed(target, conv.with_images(2 * small))
    return extrapolate(a, b, linear_fit(small, 2 * small, n))


@lru_cache(maxsize=256)
def _timed(target: str, conv: Conv) -> TileTime:
    import trnsim
    from trnsim.kernels.conv import conv_kernel

    args: list[Any] = [trnsim.TensorSpec(conv.x_shape, conv.dtype),
                       trnsim.TensorSpec(conv.w_shape, conv.w_dtype or conv.dtype)]
    return time_kernel(conv_kernel, *args, target=target, stride=conv.stride, padding=conv.padding,
                       lhs_dilation=conv.lhs_dilation, rhs_dilation=conv.rhs_dilation, x_axes=conv.x_axes,
                       w_axes=conv.w_axes, out_axes=conv.out_axes, out_dtype=conv.out_dtype,
                       feature_groups=conv.feature_groups, batch_groups=conv.batch_groups,
                       operand_format=conv.operand_format)


def conv_cost(node: Node, timed: TileTime, cost: StepCost) -> None:
    """A convolution step's cost from its kernel's timed run: engines, instructions, HBM traffic, FLOPs, and
    the operand format TensorE ran it in."""
    w = node.inputs[1].type
    d = node.attrs["dimension_numbers"]
    per_output = math.prod(s for i, s in enumerate(w.shape) if i != d["kernel_output_feature_dimension"])
    cost.flops += 2.0 * node.out.type.size * per_output
    conv = conv_for(node)
    assert conv is not None, node
    cost.operand_dtype = conv.operand_format
    cost.busy, cost.instructions = dict(timed.busy), dict(timed.by_engine)
    cost.min_seconds = timed.seconds
    cost.dma_bytes = timed.hbm_bytes


def clear_memo() -> None:
    """Forget every timed convolution kernel and its trace."""
    from trnsim.kernels.conv import conv_kernel

    _timed.cache_clear()
    conv_kernel.forget_traces()
