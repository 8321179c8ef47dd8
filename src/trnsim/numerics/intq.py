"""Integer quantization (int8, int4) with per-tensor, per-channel and per-group scales.

    symmetric:  scale = amax / qmax,               q = clip(rne(x / scale), −qmax, qmax),   x ≈ q · scale
    asymmetric: scale = (max − min) / (qmax − qmin), zp = clip(rne(qmin − min / scale), qmin, qmax),
                q = clip(rne(x / scale) + zp, qmin, qmax),                                  x ≈ (q − zp) · scale

Symmetric uses the restricted range ±qmax (−127..127, −7..7) so that zero is exact and the range is
symmetric, as most weight quantizers do; asymmetric uses the full range (−128..127, −8..7) and always
represents 0.0 exactly (the zero point is an integer). Scales are float32; a group or channel that is all
zeros gets scale 1. Granularities:

* ``tensor``  — one scale;
* ``channel`` — one scale per index of ``axis`` (e.g. output channel), reduced over every other axis;
* ``group``   — one scale per ``group_size`` consecutive elements along ``axis`` (GPTQ/AWQ-style groups
  along the input dimension), separately for every index of the other axes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim.errors import NumericsError
from trnsim.numerics.formats import Format, IntFormat, get_format
from trnsim.numerics.packing import pack_codes
from trnsim.numerics.quantize import as_float_array


@dataclass(frozen=True)
class IntQuantized:
    """Integer codes with their scales and zero points (broadcastable against ``values``)."""

    format: IntFormat
    values: NDArray[np.int8]
    scale: NDArray[np.float32]
    zero_point: NDArray[np.int32]
    granularity: str
    axis: int | None
    group_size: int | None

    def dequantize(self) -> NDArray[np.float32]:
        q = self.values.astype(np.float32)
        if self.granularity != "group":
            return ((q - self.zero_point) * self.scale).astype(np.float32)
        assert self.axis is not None and self.group_size is not None
        g = (_grouped(q, self.axis, self.group_size) - self.zero_point[..., None]) * self.scale[..., None]
        return np.moveaxis(g.reshape(*g.shape[:-2], -1), -1, self.axis).astype(np.float32)

    def to_bytes(self) -> bytes:
        """The codes packed densely (two's complement, int4 two per byte)."""
        return pack_codes(self.values.astype(np.uint8) & ((1 << self.format.bits) - 1), self.format.bits)


def _grouped(x: NDArray[Any], axis: int, group: int) -> NDArray[Any]:
    """View ``x`` with ``axis`` moved last and split into (n_groups, group)."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(*moved.shape[:-1], moved.shape[-1] // group, group)


def _reduce_for(
    granularity: str, x: NDArray[Any], axis: int | None, group: int | None
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Per-scale min and max of ``x`` for the granularity (keepdims-shaped, or grouped)."""
    if granularity == "tensor":
        return np.min(x, keepdims=True), np.max(x, keepdims=True)
    if granularity == "channel":
        assert axis is not None
        others = tuple(d for d in range(x.ndim) if d != axis)
        return np.min(x, axis=others, keepdims=True), np.max(x, axis=others, keepdims=True)
    assert axis is not None and group is not None
    g = _grouped(x, axis, group)
    return g.min(axis=-1), g.max(axis=-1)


GRANULARITIES = ("tensor", "channel", "group")


def _positive(scale: NDArray[Any]) -> NDArray[np.float32]:
    """fp32 scales, none 0: a range of subnormals divided by the code range underflows to 0 in fp32, and
    dividing by it would turn every code into a NaN cast; the smallest subnormal then codes those values
    within half a step of it, as close as an fp32 scale can."""
    tiny = np.finfo(np.float32).smallest_subnormal
    return np.maximum(np.asarray(scale).astype(np.float32), tiny)


def _scales(lo: NDArray[Any], hi: NDArray[Any], fmt: IntFormat, symmetric: bool) -> tuple[NDArray[Any], NDArray[Any]]:
    if symmetric:
        amax = np.maximum(np.abs(lo), np.abs(hi))
        scale = _positive(np.where(amax > 0, amax / fmt.max, 1.0))
        return scale, np.zeros(scale.shape, np.int32)
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)  # the range always contains 0, so 0.0 is exact
    scale = _positive(np.where(hi > lo, (hi - lo) / (fmt.max - fmt.min), 1.0))
    zp = np.clip(np.rint(fmt.min - lo / scale), fmt.min, fmt.max).astype(np.int32)
    return scale, zp


_QUANT_ROUND: Callable[[NDArray[Any]], NDArray[Any]] = np.rint  # round half to even


def quantize_int(
    x: ArrayLike,
    fmt: str | Format = "int8",
    granularity: str = "tensor",
    axis: int = -1,
    group_size: int = 128,
    symmetric: bool = True,
) -> IntQuantized:
    """Quantize ``x`` to int8/int4 codes with float32 scales; see the module docstring for the rules."""
    f = get_format(fmt)
    if not isinstance(f, IntFormat) or not f.signed or f.bits > 8:
        raise NumericsError(f"quantize_int supports int8 and int4, not {f.name!r}")
    if granularity not in GRANULARITIES:
        raise NumericsError(f"unknown granularity {granularity!r}", hint=f"use one of: {', '.join(GRANULARITIES)}")
    arr = as_float_array(x)
    if not np.isfinite(arr).all():
        raise NumericsError("cannot integer-quantize NaN or infinite values", hint="clean the tensor first")
    ax = None if granularity == "tensor" else axis % max(arr.ndim, 1)
    group = group_size if granularity == "group" else None
    if group is not None:
        assert ax is not None
        if group < 1 or arr.shape[ax] % group:
            raise NumericsError(
                f"group_size {group_size} does not divide dimension {ax} of size {arr.shape[ax]}",
                hint="pick a group size that divides the quantized axis (e.g. 32, 64, 128)",
            )
    lo, hi = _reduce_for(granularity, arr, ax, group)
    scale, zp = _scales(lo, hi, f, symmetric)
    qmin = -f.max if symmetric else f.min
    if group is not None:
        assert ax is not None
        g = _grouped(arr, ax, group)
        q = np.clip(_QUANT_ROUND(g / scale[..., None]) + zp[..., None], qmin, f.max)
        q = np.moveaxis(q.reshape(*q.shape[:-2], -1), -1, ax)
    else:
        q = np.clip(_QUANT_ROUND(arr / scale) + zp, qmin, f.max)
    return IntQuantized(f, q.astype(np.int8), scale, zp, granularity, ax, group)
