"""Elementwise activations and row softmax in the kernel language.

``activation_kernel`` applies one ScalarE function (gelu, silu, …) to a 2-D tensor in tiles of 128 rows ×
``COLS`` columns: DMA in, one activation instruction, DMA out; consecutive tiles use fresh buffers, so the
DMA of one tile overlaps the activation of the previous.

``softmax_kernel`` normalises each row (the free axis), numerically stable::

    neg_max = -max(x)                      VectorE tensor_reduce (negate)
    e, s    = exp(x + neg_max), Σ e        ScalarE activation with the fused add-reduce; e kept in fp32
    y       = e · (1 / s)                  ScalarE reciprocal of the [P, 1] sums, VectorE tensor_scalar,
                                           rounded once to the output dtype

A row of at most ``COLS`` columns is one tile and one pass. Longer rows are processed in column chunks in
three passes (running max; sums of exp; recompute exp and scale), reading ``x`` three times rather than
keeping a whole row in SBUF.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.gemm import blocks

COLS = 4096  # columns per tile: 16 KiB of fp32 per partition, a few live tiles per row block
FLOAT_DTYPES = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")  # what the results may be stored as


def _shape(name: str, x: Tensor) -> tuple[int, int]:
    """``x``'s (rows, columns), after checking that it is 2-D (an error at the kernel line)."""
    if len(x.shape) != 2:
        fail(f"{name} of x {x.shape}", "x is [R, C]: reshape to (-1, C) first (the host wrappers take any shape)")
    rows, cols = x.shape
    return rows, cols


def _result_dtype(x: Tensor, out_dtype: str | None) -> str:
    """``out_dtype``, else ``x``'s dtype if it is a float, else fp32: an integer input gives float results,
    as numpy's and JAX's do, never values truncated to integers."""
    return out_dtype or (x.dtype if get_dtype(x.dtype).kind == "float" else "fp32")


@dsl.kernel
def activation_kernel(x: Tensor, *, func: str, out_dtype: str | None = None) -> Tensor:
    """``out = func(x)`` elementwise (``func`` a ``dsl.ACTIVATION_FUNCS`` name), ``x [R, C]``; ``out`` is
    ``out_dtype`` (default: ``x``'s dtype for floats, fp32 for integers)."""
    rows, cols = _shape(func, x)
    out = dsl.hbm_tensor((rows, cols), _result_dtype(x, out_dtype), name="out")
    pmax = dsl.tile_size().pmax
    for r0, rn in blocks(rows, pmax):
        for c0, cn in blocks(cols, COLS):
            t = dsl.load(x[r0 : r0 + rn, c0 : c0 + cn])
            dsl.store(out[r0 : r0 + rn, c0 : c0 + cn],
                      dsl.activation(dsl.ACTIVATION_FUNCS.get(func, func), t, dtype=out.dtype))
    return out


@dsl.kernel
def softmax_kernel(x: Tensor, *, out_dtype: str | None = None) -> Tensor:
    """``out[r, :] = exp(x[r, :] - max) / Σ exp(x[r, :] - max)`` for ``x [R, C]``; ``out`` is ``out_dtype``, a
    float format (default: ``x``'s dtype for floats, fp32 for integers)."""
    rows, cols = _shape("softmax", x)
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        fail(f"softmax into {out_dtype}", f"probabilities need a float out_dtype: {', '.join(FLOAT_DTYPES)}")
    out = dsl.hbm_tensor((rows, cols), _result_dtype(x, out_dtype), name="out")
    pmax = dsl.tile_size().pmax
    chunks = blocks(cols, COLS)
    for r0, rn in blocks(rows, pmax):
        if len(chunks) == 1:
            t = dsl.load(x[r0 : r0 + rn, :])
            e, s = dsl.activation_reduce("exp", t, bias=dsl.reduce_max(t, negate=True), dtype="fp32")
            dsl.store(out[r0 : r0 + rn, :], dsl.multiply(e, dsl.reciprocal(s), dtype=out.dtype))
            continue
        neg_max = _row_reduce([dsl.reduce_max(dsl.load(x[r0 : r0 + rn, c0 : c0 + cn]), dtype="fp32")
                               for c0, cn in chunks], "maximum")
        neg_max = dsl.multiply(neg_max, -1.0)
        sums = _row_reduce([dsl.activation_reduce("exp", dsl.load(x[r0 : r0 + rn, c0 : c0 + cn]), bias=neg_max)[1]
                            for c0, cn in chunks], "add")
        inv = dsl.reciprocal(sums)
        for c0, cn in chunks:
            e = dsl.exp(dsl.load(x[r0 : r0 + rn, c0 : c0 + cn]), bias=neg_max, dtype="fp32")
            dsl.store(out[r0 : r0 + rn, c0 : c0 + cn], dsl.multiply(e, inv, dtype=out.dtype))
    return out


def _row_reduce(parts: list[Tensor], op: str) -> Tensor:
    """Combine per-chunk [P, 1] results left to right (VectorE ``maximum``/``add``)."""
    acc = parts[0]
    for p in parts[1:]:
        acc = dsl.binary(dsl.BINARY_OPS[op], acc, p)
    return acc


def _rows(name: str, x: ArrayLike) -> tuple[NDArray[Any], tuple[int, ...]]:
    """``x`` as ``[rows, last axis]`` (a float array: integers and booleans are computed as fp32) and its
    shape."""
    arr = np.asarray(x)
    if arr.size == 0:
        raise KernelError(f"{name} of an empty array of shape {arr.shape}", where=f"kernels.{name}",
                          hint="pass an array with at least one element")
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float32)
    return arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1), arr.shape


def _run(name: str, kernel: dsl.Kernel, x: ArrayLike, dtype: str | None, target: str,
         **params: Any) -> NDArray[np.float32]:
    arr, shape = _rows(name, x)
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise KernelError(f"{name} in {dtype}", where=f"kernels.{name}",
                          hint=f"use one of {', '.join(FLOAT_DTYPES)}, or None for the array's own "
                               "(integer arrays are computed in fp32)")
    arg = dsl.typed(arr, dtype) if dtype is not None else arr
    return dsl.run_kernel(kernel, arg, target=target, **params).outputs[0].reshape(shape)


def gelu(x: ArrayLike, dtype: str | None = None, *, target: str = "trn3") -> NDArray[np.float32]:
    """GELU (erf form) of ``x`` on ScalarE, elementwise over any shape; ``dtype`` is the ISA float dtype of
    the input and output (default: the array's; integer and boolean arrays are computed and returned as
    fp32, as numpy and JAX promote them).

        >>> gelu([0.0, 1.0]).tolist()
        [0.0, 0.8413447737693787]
    """
    return _run("gelu", activation_kernel, x, dtype, target, func="gelu")


def silu(x: ArrayLike, dtype: str | None = None, *, target: str = "trn3") -> NDArray[np.float32]:
    """SiLU ``x · sigmoid(x)`` of ``x`` on ScalarE, elementwise over any shape (see ``gelu``)."""
    return _run("silu", activation_kernel, x, dtype, target, func="silu")


def softmax(x: ArrayLike, dtype: str | None = None, *, target: str = "trn3") -> NDArray[np.float32]:
    """Softmax over the last axis of ``x`` (any shape), numerically stable (module docstring); ``dtype`` as
    for ``gelu`` (a float format; integer arrays give fp32 probabilities).

        >>> softmax([[0.0, 0.0], [0.0, 1e4]]).tolist()
        [[0.5, 0.5], [0.0, 1.0]]
    """
    return _run("softmax", softmax_kernel, x, dtype, target)
