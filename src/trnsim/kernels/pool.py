"""Window pooling in the kernel language: StableHLO's ``reduce_window`` (max, min or sum over windows of any
size, stride, padding and window dilation along axes within three adjacent ones) and the max-pool gradient,
``select_and_scatter`` (select ``GE``, scatter ``add``: what ``jax.grad`` of a max pool emits).

The kernels work on a canonical view ``x [N, H, W, C]``: ``H`` and ``W`` the windowed axes, ``N`` all axes
before them and ``C`` all after them, merged (a free reshape; a third windowed axis is a ``Depth``). Their
partitions are *bands*, an image's block of ``R × Q`` windows, 128 a tile; the free dimension is ``[rows,
cols, C]``, where each window tap is a strided view of a band tile. The pieces:

* ``pool_window``: the canonical view (``canonical``), ``Window``, ``Depth``, the ops (``IDENTITY``), select
  comparisons (``SELECT``) and integer sums (``WRAP``) the kernels take;
* ``pool_bands``: how bands are cut to fit SBUF (``plan_bands``, ``BAND_BYTES``) and the DMAs that load and
  store a tile of them;
* ``pool_forward``: ``pool_kernel`` (``reduce_window``) and ``pool_gather_kernel`` (``select_and_gather_add``,
  the JVP of a max pool);
* ``pool_grad``: ``pool_grad_kernel`` (``select_and_scatter``) and its layout, ``Scatter``;
* here: the NumPy entry points ``reduce_window``, ``select_and_gather`` and ``select_and_scatter``, and the
  names the compiler (``compiler.poolgen``) takes from the pieces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl.errors import KernelError
from trnsim.kernels.pool_bands import Move as Move
from trnsim.kernels.pool_bands import Plan as Plan
from trnsim.kernels.pool_bands import start_rows as start_rows
from trnsim.kernels.pool_forward import forward_plan as forward_plan
from trnsim.kernels.pool_forward import pool_gather_kernel as pool_gather_kernel
from trnsim.kernels.pool_forward import pool_kernel as pool_kernel
from trnsim.kernels.pool_grad import Scatter as Scatter
from trnsim.kernels.pool_grad import pool_grad_kernel as pool_grad_kernel
from trnsim.kernels.pool_window import FLAT as FLAT
from trnsim.kernels.pool_window import IDENTITY as IDENTITY
from trnsim.kernels.pool_window import MAX_INT_TERMS as MAX_INT_TERMS
from trnsim.kernels.pool_window import SELECT as SELECT
from trnsim.kernels.pool_window import WRAP as WRAP
from trnsim.kernels.pool_window import Depth as Depth
from trnsim.kernels.pool_window import Pair as Pair
from trnsim.kernels.pool_window import Window as Window
from trnsim.kernels.pool_window import canonical as canonical


def _values(x: ArrayLike) -> NDArray[np.float32] | NDArray[np.int64]:
    """``x`` as float32, or as int64 when it holds integers (a 32-bit integer is not exact in float32)."""
    arr = np.asarray(x)
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr.astype(np.float32)


def _window_args(rank: int, size: Sequence[int], stride: Sequence[int] | None, pad: Sequence[Pair] | None,
                 dilation: Sequence[int] | None) -> tuple[list[int], list[int], list[Pair], list[int]]:
    """The window's sizes, strides, paddings and dilations, one per axis of a rank-``rank`` operand (checked:
    a ``KernelError`` names the argument that does not fit)."""
    sizes, strides = [int(k) for k in size], [int(k) for k in (stride or [1] * rank)]
    pads = [(int(lo), int(hi)) for lo, hi in (pad or [(0, 0)] * rank)]
    dils = [int(k) for k in (dilation or [1] * rank)]
    for name, values in (("size", sizes), ("stride", strides), ("pad", pads), ("dilation", dils)):
        if len(values) != rank:
            raise KernelError(f"a window {name} of {len(values)} entries for a {rank}-D operand", where="kernels.pool",
                              hint=f"give one {name} per axis of the operand (1 for an axis without a window)")
    for name, values in (("size", sizes), ("stride", strides), ("dilation", dils)):
        if min(values, default=1) < 1:
            raise KernelError(f"window {name} {tuple(values)}", where="kernels.pool",
                              hint=f"every window {name} is at least 1")
    return sizes, strides, pads, dils


def _out_shape(shape: Sequence[int], sizes: list[int], strides: list[int], pads: list[Pair],
               dils: list[int]) -> list[int]:
    """The windows along each axis (StableHLO reduce_window's result shape)."""
    return [(s + lo + hi - (k - 1) * d - 1) // st + 1
            for s, k, st, (lo, hi), d in zip(shape, sizes, strides, pads, dils, strict=True)]


def _same_shape(what: str, got: tuple[int, ...], want: Sequence[int]) -> None:
    if tuple(got) != tuple(want):
        raise KernelError(f"{what} of shape {tuple(got)}", where="kernels.pool",
                          hint=f"it must have shape {tuple(want)}")


def _canonical_or_raise(shape: tuple[int, ...], *args: Sequence[int] | Sequence[Pair]) -> Window:
    win = canonical(shape, *args)  # type: ignore[arg-type]
    if win is None:
        raise KernelError(f"a window over {shape} on axes more than three apart, or with negative padding",
                          where="kernels.pool", hint="window axes within three adjacent ones, padding ≥ 0")
    return win


def reduce_window(x: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                  pad: Sequence[Pair] | None = None, dilation: Sequence[int] | None = None, *, op: str = "max",
                  init: float | None = None, dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32]:
    """``jax.lax.reduce_window(x, init, op, size, stride, pad, window_dilation=dilation)`` (``op`` ``max``,
    ``min``, ``add``, ``mul``, ``logaddexp`` (fp32: ``jnp.logaddexp``'s ops, as ``lax.cumlogsumexp``'s body),
    or ``avg``: the sum divided by the window's size, padding counted) on a simulated
    NeuronCore; the window lies along one axis or two adjacent ones of ``x`` (any rank); ``dtype``: x's ISA dtype.

        >>> reduce_window(np.arange(16.0).reshape(1, 4, 4, 1), (1, 2, 2, 1), (1, 2, 2, 1))[0, :, :, 0].tolist()
        [[5.0, 7.0], [13.0, 15.0]]
    """
    arr = np.asarray(x, np.float32)
    sizes, strides, pads, dils = _window_args(arr.ndim, size, stride, pad, dilation)
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, dils)
    scale = 1.0 / math.prod(sizes) if op == "avg" else 1.0
    kernel_op = "add" if op == "avg" else op
    view = arr.reshape(win.shape[0] * win.depth.planes, *win.shape[1:])
    arg = dsl.typed(view, dtype) if dtype is not None else view
    res = dsl.run_kernel(pool_kernel, arg, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         dilation=win.dilation, op=kernel_op, init=init, scale=scale, depth=win.depth)
    return res.outputs[0].reshape(_out_shape(arr.shape, sizes, strides, pads, dils))


def select_and_gather(x: ArrayLike, tangent: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                      pad: Sequence[Pair] | None = None, dilation: Sequence[int] | None = None, *,
                      select: str = "GE", init: float | None = None, tangent_init: float = 0.0,
                      dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32]:
    """The tangent of each window's element ``select`` picks (``pool_gather_kernel``: JAX's
    ``_select_and_gather_add``, the JVP of a max pool) on a simulated NeuronCore.

        >>> select_and_gather([[1.0, 3.0, 3.0, 2.0]], [[10.0, 20.0, 30.0, 40.0]], (1, 2), (1, 2)).tolist()
        [[20.0, 30.0]]
    """
    arr, tan = np.asarray(x, np.float32), np.asarray(tangent, np.float32)
    sizes, strides, pads, dils = _window_args(arr.ndim, size, stride, pad, dilation)
    _same_shape("a tangent", tan.shape, arr.shape)
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, dils)
    args = [a.reshape(win.shape[0] * win.depth.planes, *win.shape[1:]) for a in (arr, tan)]
    typed = [dsl.typed(a, dtype) if dtype is not None else a for a in args]
    res = dsl.run_kernel(pool_gather_kernel, *typed, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         dilation=win.dilation, select=select, init=init, tangent_init=tangent_init, depth=win.depth)
    return res.outputs[0].reshape(_out_shape(arr.shape, sizes, strides, pads, dils))


def select_and_scatter(x: ArrayLike, source: ArrayLike, size: Sequence[int], stride: Sequence[int] | None = None,
                       pad: Sequence[Pair] | None = None, *, select: str = "GE", init: float = 0.0,
                       dtype: str | None = None, target: str = "trn3") -> NDArray[np.float32] | NDArray[np.int64]:
    """StableHLO ``select_and_scatter(x, source, init)`` with ``compare select`` and ``add`` (the gradient
    of a max pool: ``source`` goes to each window's first maximum) on a simulated NeuronCore.

        >>> select_and_scatter([[1.0, 3.0, 3.0, 2.0]], [[10.0, 20.0]], (1, 2), (1, 2)).tolist()
        [[0.0, 10.0, 20.0, 0.0]]
    """
    arr, src = _values(x), _values(source)
    sizes, strides, pads, _ = _window_args(arr.ndim, size, stride, pad, None)
    _same_shape("a source", src.shape, _out_shape(arr.shape, sizes, strides, pads, [1] * arr.ndim))
    win = _canonical_or_raise(arr.shape, sizes, strides, pads, [1] * arr.ndim)
    n, oh, ow, c = win.shape[0], *win.out, win.shape[3]
    args = [arr.reshape(n * win.depth.planes, *win.shape[1:]), src.reshape(n * win.depth.out, oh, ow, c)]
    typed = [dsl.typed(a, dtype) if dtype is not None else a for a in args]
    res = dsl.run_kernel(pool_grad_kernel, *typed, target=target, size=win.size, stride=win.stride, pad=win.pad,
                         select=select, init=init, depth=win.depth)
    return res.outputs[0].reshape(arr.shape)
