"""Layer normalisation and RMS normalisation over the last axis of ``x [N, D]``, in the kernel language.

Rows go on the partitions, 128 at a time; a row block ``[n, D]`` is loaded once (DMAs on several queues,
``layout.dma_spread``), its statistics taken, and it is normalised in place column chunk by column chunk
(``NORM_CHUNK``) and stored; later blocks' loads are issued ahead of this block's store (``layout.prefetch``).
``gamma`` and ``beta`` are loaded once, broadcast over the partitions by the DMA (stride-0 rows), and stay.

    layernorm   VectorE  bn_stats per ≤ 512 columns (BN_STATS_FMAX) into one record tile, bn_aggr → mean, var
                ScalarE  rstd = rsqrt(var + eps);  VectorE  nbias = -mean · rstd
                chunks:  ScalarE  t = x · rstd + nbias        (the fused multiply-add, reference/neuron.md §2.6)
                         VectorE  t = t · gamma;  x = t + beta (rounded to x's dtype)
    rmsnorm     ScalarE  Σ x² per chunk (activation square with its fused add-reduce; VectorE adds the chunks)
                ScalarE  rstd = rsqrt(Σ x² · (1/D) + eps)
                chunks:  VectorE  t = x · rstd;  x = t · gamma

bn_stats/bn_aggr keep the variance accurate when |mean| ≫ std (no E[x²] − E[x]² cancellation). SBUF per
partition holds gamma and beta (fp32), two fp32 chunks, and as many row blocks as fit (at least three: the
one being normalised, the next one's statistics, the one being loaded): D up to 16384 for bf16 x, 8192 for
fp32 x (tested); beyond that allocation fails at the kernel line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.reduction import BN_STATS_FMAX, BN_STATS_WIDTH
from trnsim.kernels.layout import blocks, dma_spread, prefetch, prefetch_depth, staged

NORM_CHUNK = 2048  # columns per normalising instruction: fp32 temporaries of 8 KiB per partition
TEMP_BYTES = 48 * 1024  # SBUF per partition left for statistics and chunk temporaries
HOST_DTYPES = ("bf16", "fp32")  # what the host wrappers store x as (the statistics are fp32 either way)


def _row_blocks(x: Tensor, *vectors: Tensor) -> Iterator[tuple[int, int, Tensor]]:
    """``(r0, n, tile)`` per block of 128 rows of ``x``, loaded ahead as far as SBUF allows beside the
    resident ``vectors`` (``layout.prefetch``)."""
    n_rows, d = x.shape
    resident = sum(d * get_dtype(v.dtype).itemsize for v in vectors) + TEMP_BYTES
    tile_bytes = d * get_dtype(x.dtype).itemsize
    depth = prefetch_depth(tile_bytes, resident + tile_bytes)  # one more block is held by ``staged``
    rows = blocks(n_rows, dsl.tile_size().pmax)

    def load(r0: int, n: int) -> Callable[[], Tensor]:
        return lambda: dma_spread(dsl.sbuf((n, d), x.dtype), x[r0 : r0 + n, :])

    tiles = prefetch([load(r0, n) for r0, n in rows], depth)
    return ((r0, n, t) for (r0, n), t in zip(rows, tiles, strict=True))


def _broadcast_rows(v: Tensor, p: int) -> Tensor:
    """A [D] HBM vector loaded onto ``p`` partitions (a stride-0 broadcast DMA)."""
    return dma_spread(dsl.sbuf((p, v.shape[0]), v.dtype), v.broadcast_to((p, v.shape[0])))


def _check(name: str, x: Tensor, **vectors: Tensor) -> tuple[int, int]:
    """``x``'s (N, D), after checking that ``x`` is 2-D and each vector ``[D]`` (errors at the kernel line)."""
    if len(x.shape) != 2:
        fail(f"{name} of x {x.shape}", "x is [N, D]: normalise over the last axis of a 2-D array "
             "(reshape to (-1, D) first)")
    d = x.shape[1]
    for what, v in vectors.items():
        if v.shape != (d,):
            fail(f"{name} {what} of shape {v.shape} for x {x.shape}", f"{what} is [D] = ({d},): one value per column")
    return x.shape[0], d


def _temps(x: Tensor) -> list[Tensor]:
    """Two fp32 chunk buffers, allocated once: temporaries made per chunk would free memory that the next
    row block's load then waits to reuse (behind this block's compute)."""
    p, w = min(dsl.tile_size().pmax, x.shape[0]), min(NORM_CHUNK, x.shape[1])
    return [dsl.sbuf((p, w)) for _ in range(2)]


@dsl.kernel
def layernorm_kernel(x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) · gamma + beta`` per row of ``x [N, D]`` (population variance), in
    ``x``'s dtype; ``gamma``, ``beta`` are ``[D]``."""
    n_rows, d = _check("layernorm", x, gamma=gamma, beta=beta)
    out = dsl.hbm_tensor((n_rows, d), x.dtype, name="y")
    pmax = dsl.tile_size().pmax
    g, b = _broadcast_rows(gamma, min(pmax, n_rows)), _broadcast_rows(beta, min(pmax, n_rows))
    stat_chunks = blocks(d, BN_STATS_FMAX)
    temps = _temps(x)

    def scale_bias(block: tuple[int, int, Tensor]) -> tuple[Tensor, Tensor]:
        """(rstd, -mean · rstd) of a row block."""
        _, n, xt = block
        stats = dsl.sbuf((n, BN_STATS_WIDTH * len(stat_chunks)))
        for i, (c0, w) in enumerate(stat_chunks):
            dsl.bn_stats(xt[:, c0 : c0 + w], out=stats[:, BN_STATS_WIDTH * i : BN_STATS_WIDTH * (i + 1)])
        mean_var = dsl.bn_aggr(stats)
        rstd = dsl.rsqrt(mean_var[:, 1:2], bias=eps)
        return rstd, dsl.tensor_scalar(mean_var[:, 0:1], "mul", rstd, "mul", -1.0)

    for (r0, n, xt), (rstd, nbias) in staged(_row_blocks(x, gamma, beta), scale_bias):
        for k, (c0, w) in enumerate(blocks(d, NORM_CHUNK)):
            t = dsl.identity(xt[:, c0 : c0 + w], scale=rstd, bias=nbias, out=temps[k % 2][:n, :w])
            dsl.multiply(t, g[:n, c0 : c0 + w], out=t)
            dsl.add(t, b[:n, c0 : c0 + w], out=xt[:, c0 : c0 + w])
        dma_spread(out[r0 : r0 + n, :], xt)
    return out


@dsl.kernel
def rmsnorm_kernel(x: Tensor, gamma: Tensor, *, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x²) + eps) · gamma`` per row of ``x [N, D]``, in ``x``'s dtype; ``gamma`` is ``[D]``."""
    n_rows, d = _check("rmsnorm", x, gamma=gamma)
    out = dsl.hbm_tensor((n_rows, d), x.dtype, name="y")
    pmax = dsl.tile_size().pmax
    g = _broadcast_rows(gamma, min(pmax, n_rows))
    chunks = blocks(d, NORM_CHUNK)
    squares = dsl.sbuf((min(pmax, n_rows), chunks[0][1]), "bf16")  # ScalarE's elementwise output, unused
    temps = _temps(x)

    def scale(block: tuple[int, int, Tensor]) -> Tensor:
        """rstd of a row block."""
        _, n, xt = block
        partial = dsl.sbuf((n, len(chunks)))
        for i, (c0, w) in enumerate(chunks):
            dsl.activation("square", xt[:, c0 : c0 + w], out=squares[:n, :w], reduce_res=partial[:, i : i + 1])
        total = partial if len(chunks) == 1 else dsl.reduce_sum(partial)
        return dsl.rsqrt(total, scale=1.0 / d, bias=eps)

    for (r0, n, xt), rstd in staged(_row_blocks(x, gamma), scale):
        for k, (c0, w) in enumerate(chunks):
            t = dsl.tensor_scalar(xt[:, c0 : c0 + w], "mul", rstd, out=temps[k % 2][:n, :w])
            dsl.multiply(t, g[:n, c0 : c0 + w], out=xt[:, c0 : c0 + w])
        dma_spread(out[r0 : r0 + n, :], xt)
    return out


def _check_dtype(name: str, dtype: str) -> None:
    if dtype not in HOST_DTYPES:
        raise KernelError(f"{name} in {dtype}", where=f"kernels.{name}",
                          hint=f"use dtype={' or '.join(map(repr, HOST_DTYPES))}")


def layernorm(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5, *, dtype: str = "fp32",
              target: str = "trn3") -> NDArray[np.float32]:
    """Layer norm of ``x [N, D]`` stored as ``dtype`` (bf16 or fp32; gamma and beta in fp32) on a simulated
    NeuronCore; the result, rounded to ``dtype``, as float32 values.

        >>> layernorm([[1.0, 2.0, 3.0, 6.0]], [1.0] * 4, [0.0] * 4).astype(float).round(4).tolist()
        [[-1.069, -0.5345, 0.0, 1.6036]]
    """
    _check_dtype("layernorm", dtype)
    res = dsl.run_kernel(layernorm_kernel, dsl.typed(np.asarray(x, np.float32), dtype),
                         np.asarray(gamma, np.float32), np.asarray(beta, np.float32), target=target, eps=eps)
    return res.outputs[0]


def rmsnorm(x: ArrayLike, gamma: ArrayLike, eps: float = 1e-6, *, dtype: str = "fp32",
            target: str = "trn3") -> NDArray[np.float32]:
    """RMS norm of ``x [N, D]`` stored as ``dtype`` (bf16 or fp32; gamma in fp32) on a simulated NeuronCore.

        >>> rmsnorm([[3.0, 4.0]], [1.0, 2.0], eps=0.0).astype(float).round(4).tolist()
        [[0.8485, 2.2627]]
    """
    _check_dtype("rmsnorm", dtype)
    res = dsl.run_kernel(rmsnorm_kernel, dsl.typed(np.asarray(x, np.float32), dtype),
                         np.asarray(gamma, np.float32), target=target, eps=eps)
    return res.outputs[0]
