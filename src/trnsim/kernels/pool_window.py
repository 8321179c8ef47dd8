"""The pool kernels' window (``kernels.pool``): the canonical view ``x [N, H, W, C]`` a window over any rank
is taken as (``canonical``), its ``Window`` and ``Depth``, the ops and select comparisons the kernels take, and
the checks a kernel makes of its operand.

``H`` and ``W`` are the windowed axes (``W = 1`` for a 1-D window), ``N`` all axes before them and ``C`` all
axes after them, merged (``canonical``: a reshape of a row-major tensor, free). The layout suits channels-last
tensors (NHWC, as ``flax``'s pools take them).

A window along three axes (3-D pooling, ``x [N, D, H, W, C]``, or two windowed axes with one between) has
the outermost as its ``Depth``: the kernels take ``x [N·D, H, W, C]`` (a free reshape); a tap
``(kd, ky, kx)`` is a view of plane ``kd``'s rows (``pool_bands``). Taps go in window order, ``kd`` outermost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail

Pair = tuple[int, int]
IDENTITY = {"max": float("-inf"), "min": float("inf"), "add": 0.0, "mul": 1.0, "logaddexp": float("-inf")}
SELECT: dict[str, tuple[str, bool]] = {  # select comparison → (the reduction its winner attains, walk backwards)
    "GE": ("max", False), "GT": ("max", True), "LE": ("min", False), "LT": ("min", True),
}
# NOTE: sums of 8- and 16-bit integers (a pool's, the gradient's shares) are made exactly in int32 (VectorE
# and GpSimd compute in fp32, exact below 2**24: MAX_INT_TERMS terms of 16 bits), then wrapped to the type as
# StableHLO's integer add does: the low bits (``and`` with the unsigned twin's mask), read as the type
WRAP = {"int8": ("uint8", 8), "int16": ("uint16", 16), "uint8": ("uint8", 8), "uint16": ("uint16", 16)}
MAX_INT_TERMS = 256


@dataclass(frozen=True)
class Depth:
    """The window along a third windowed axis ``D`` outside ``H, W`` (3-D pooling of volumes and video;
    ``D`` of one plane and a window of one: none): ``planes`` the axis's length, the window's size, stride,
    padding ``(front, back)`` and dilation along it."""

    planes: int = 1
    size: int = 1
    stride: int = 1
    pad: Pair = (0, 0)
    dilation: int = 1

    @property
    def extent(self) -> int:
        return (self.size - 1) * self.dilation + 1

    @property
    def out(self) -> int:
        return (self.pad[0] + self.planes + self.pad[1] - self.extent) // self.stride + 1

    @property
    def lead(self) -> int:
        """Windows before a plane group's own that reach into its planes (as ``Window.lead``)."""
        return max(0, -(-self.extent // self.stride) - 1)

    @property
    def groups(self) -> int:
        """The gradient's plane groups: ``stride`` padded planes each, every padded plane in one."""
        return max(self.out, -(-(self.pad[0] + self.planes + self.pad[1]) // self.stride))

    def plane(self, padded: int) -> int | None:
        """The plane of ``x`` at padded plane ``padded``; None in the padding."""
        d = padded - self.pad[0]
        return d if 0 <= d < self.planes else None


FLAT = Depth()      # no third windowed axis


@dataclass(frozen=True)
class Window:
    """A pooling window over the canonical ``[N, H, W, C]`` view (module docstring): ``shape`` that view,
    the window's size, strides, padding ``((top, bottom), (left, right))`` and dilation along ``H, W``, and
    along ``depth`` (the kernels' ``x`` is then ``[N·D, H, W, C]``: plane ``d`` of image ``n`` at ``n·D + d``)."""

    shape: tuple[int, int, int, int]
    size: Pair
    stride: Pair
    pad: tuple[Pair, Pair]
    dilation: Pair
    depth: Depth = FLAT

    @property
    def extent(self) -> Pair:
        """Padded-input rows and columns one window spans (dilation included)."""
        return (self.size[0] - 1) * self.dilation[0] + 1, (self.size[1] - 1) * self.dilation[1] + 1

    @property
    def padded(self) -> Pair:
        (pt, pb), (pl, pr) = self.pad
        return pt + self.shape[1] + pb, pl + self.shape[2] + pr

    @property
    def out(self) -> Pair:
        (hp, wp), (eh, ew) = self.padded, self.extent
        return (hp - eh) // self.stride[0] + 1, (wp - ew) // self.stride[1] + 1

    @property
    def taps(self) -> list[Pair]:
        """The window's offsets ``(ky, kx)`` in window (row-major) order."""
        return [(ky, kx) for ky in range(self.size[0]) for kx in range(self.size[1])]

    @property
    def lead(self) -> int:
        """Windows before a band's own that reach into its rows (overlapping windows: ``extent > stride``)."""
        return max(0, -(-self.extent[0] // self.stride[0]) - 1)


def canonical(shape: Sequence[int], size: Sequence[int], stride: Sequence[int], pad: Sequence[Pair],
              dilation: Sequence[int]) -> Window | None:
    """The canonical window of a full-rank StableHLO window over ``shape``, or None if it is not one the
    kernels take: windowed axes more than three apart, negative padding, or a 0-d operand. The axes from
    the first windowed one to the last are ``D, H, W`` (three), ``H, W`` (two) or ``H`` (one; ``W = 1``),
    so two windowed axes with one between are a 3-D window of one along the middle. A window of one element
    everywhere is a copy, taken along the last axis."""
    rank = len(shape)
    windowed = [a for a in range(rank) if (size[a], stride[a], tuple(pad[a]), dilation[a]) != (1, 1, (0, 0), 1)]
    windowed = windowed or [rank - 1]
    if rank == 0 or windowed[-1] - windowed[0] > 2:
        return None
    if any(lo < 0 or hi < 0 for lo, hi in pad) or any(shape[a] < 1 for a in range(rank)):
        return None
    first, last = windowed[0], windowed[-1]
    span: list[int | None] = list(range(first, last + 1))
    d_ax, h_ax, w_ax = [None] * (3 - len(span)) + span if len(span) > 1 else [None, span[0], None]

    def pick(values: Sequence[int], a: int | None) -> int:
        return 1 if a is None else int(values[a])

    def pads(a: int | None) -> Pair:
        return (0, 0) if a is None else (int(pad[a][0]), int(pad[a][1]))

    assert h_ax is not None
    n, c = math.prod(shape[:first]), math.prod(shape[last + 1 :])
    depth = Depth(pick(shape, d_ax), pick(size, d_ax), pick(stride, d_ax), pads(d_ax), pick(dilation, d_ax))
    win = Window((n, pick(shape, h_ax), pick(shape, w_ax), c), (pick(size, h_ax), pick(size, w_ax)),
                 (pick(stride, h_ax), pick(stride, w_ax)), (pads(h_ax), pads(w_ax)),
                 (pick(dilation, h_ax), pick(dilation, w_ax)), depth)
    oh, ow = win.out
    return win if min(oh, ow, depth.out) >= 1 else None


def wrap_sums(t: Tensor, dtype: str) -> Tensor:
    """The int32 sums ``t`` wrapped to the narrow integer ``dtype`` (``WRAP``)."""
    twin, bits = WRAP[dtype]
    low = dsl.binary("and", t, float((1 << bits) - 1), dtype=twin)
    return low if twin == dtype else low.bitcast(dtype)


def sum_dtype(dtype: str) -> str:
    """The dtype a sum of ``dtype`` values is made in: int32 for a narrow integer (``WRAP``), else fp32."""
    return "int32" if dtype in WRAP else "fp32"


def itemsize(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def _check(x: Tensor, win: Window) -> None:
    if len(x.shape) != 4:
        fail(f"a pool of a {len(x.shape)}-D tensor", "give the canonical [N, H, W, C] view (pool.canonical)")
    (pt, pb), (pl, pr) = win.pad
    if min(*win.size, *win.stride, *win.dilation) < 1 or min(pt, pb, pl, pr) < 0 or min(win.out) < 1:
        fail(f"a {win.size} window (strides {win.stride}, padding {win.pad}, dilation {win.dilation}) over "
             f"{x.shape}", "use sizes, strides and dilations ≥ 1, padding ≥ 0 and a window that fits the input")


def kernel_window(x: Tensor, size: Pair, stride: Pair, pad: tuple[Pair, Pair], dilation: Pair, depth: Depth) -> Window:
    """The window of a kernel's ``x [N·D, H, W, C]``, checked (``_check``)."""
    if len(x.shape) != 4:
        fail(f"a pool of a {len(x.shape)}-D tensor", "give the canonical [N, H, W, C] view (pool.canonical)")
    if (min(depth.planes, depth.size, depth.stride, depth.dilation) < 1 or min(depth.pad) < 0
            or x.shape[0] % depth.planes or depth.out < 1):
        fail(f"a depth window {depth} over {x.shape[0]} images' planes",
             "give x as [N·D, H, W, C], sizes, strides and dilations ≥ 1, padding ≥ 0, a window that fits")
    n, h, w, c = x.shape
    win = Window((n // depth.planes, h, w, c), size, stride, pad, dilation, depth)
    _check(x, win)
    return win
