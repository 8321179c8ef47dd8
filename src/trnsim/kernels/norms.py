"""Layer normalisation and RMS normalisation over the last axis of ``x [N, D]``, in the kernel language.

Rows go on the partitions, 128 at a time; a row block ``[n, D]`` is loaded once (one DMA), its statistics
taken, and it is normalised in place column chunk by column chunk (``NORM_CHUNK``) and stored (one DMA).
``gamma`` and ``beta`` are loaded once, broadcast over the partitions by the DMA (stride-0 rows), and stay.

    layernorm   VectorE  bn_stats per ≤ 512 columns (BN_STATS_FMAX) into one record tile, bn_aggr → mean, var
                ScalarE  rstd = rsqrt(var + eps);  VectorE  nbias = -mean · rstd
                chunks:  ScalarE  t = x · rstd + nbias        (the fused multiply-add, reference/neuron.md §2.6)
                         VectorE  t = t · gamma;  x = t + beta (rounded to x's dtype)
    rmsnorm     ScalarE  Σ x² per chunk (activation square with its fused add-reduce; VectorE adds the chunks)
                ScalarE  rstd = rsqrt(Σ x² · (1/D) + eps)
                chunks:  VectorE  t = x · rstd;  x = t · gamma

bn_stats/bn_aggr keep the variance accurate when |mean| ≫ std (no E[x²] − E[x]² cancellation). SBUF per
partition holds two row blocks (double buffering), gamma and beta, and a few fp32 chunks: D up to about
16384 for bf16 x with fp32 gamma/beta, 8192 for fp32 x; beyond that allocation fails at the kernel line.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.reduction import BN_STATS_FMAX, BN_STATS_WIDTH
from trnsim.kernels.layout import blocks

NORM_CHUNK = 2048  # columns per normalising instruction: fp32 temporaries of 8 KiB per partition


def _broadcast_rows(v: Tensor, p: int) -> Tensor:
    """A [D] HBM vector loaded onto ``p`` partitions (a stride-0 broadcast DMA)."""
    return dsl.load(v.broadcast_to((p, v.shape[0])))


@dsl.kernel
def layernorm_kernel(x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) · gamma + beta`` per row of ``x [N, D]`` (population variance), in
    ``x``'s dtype; ``gamma``, ``beta`` are ``[D]``."""
    n_rows, d = x.shape
    out = dsl.hbm_tensor((n_rows, d), x.dtype, name="y")
    pmax = dsl.tile_size().pmax
    g, b = _broadcast_rows(gamma, min(pmax, n_rows)), _broadcast_rows(beta, min(pmax, n_rows))
    stat_chunks = blocks(d, BN_STATS_FMAX)
    for r0, n in blocks(n_rows, pmax):
        xt = dsl.load(x[r0 : r0 + n, :])
        stats = dsl.sbuf((n, BN_STATS_WIDTH * len(stat_chunks)))
        for i, (c0, w) in enumerate(stat_chunks):
            dsl.bn_stats(xt[:, c0 : c0 + w], out=stats[:, BN_STATS_WIDTH * i : BN_STATS_WIDTH * (i + 1)])
        mean_var = dsl.bn_aggr(stats)
        rstd = dsl.rsqrt(mean_var[:, 1:2], bias=eps)
        nbias = dsl.tensor_scalar(mean_var[:, 0:1], "mul", rstd, "mul", -1.0)
        for c0, w in blocks(d, NORM_CHUNK):
            t = dsl.identity(xt[:, c0 : c0 + w], scale=rstd, bias=nbias, dtype="fp32")
            dsl.multiply(t, g[:n, c0 : c0 + w], out=t)
            dsl.add(t, b[:n, c0 : c0 + w], out=xt[:, c0 : c0 + w])
        dsl.store(out[r0 : r0 + n, :], xt)
    return out


@dsl.kernel
def rmsnorm_kernel(x: Tensor, gamma: Tensor, *, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x²) + eps) · gamma`` per row of ``x [N, D]``, in ``x``'s dtype; ``gamma`` is ``[D]``."""
    n_rows, d = x.shape
    out = dsl.hbm_tensor((n_rows, d), x.dtype, name="y")
    pmax = dsl.tile_size().pmax
    g = _broadcast_rows(gamma, min(pmax, n_rows))
    chunks = blocks(d, NORM_CHUNK)
    squares = dsl.sbuf((min(pmax, n_rows), chunks[0][1]), "bf16")  # ScalarE's elementwise output, unused
    for r0, n in blocks(n_rows, pmax):
        xt = dsl.load(x[r0 : r0 + n, :])
        partial = dsl.sbuf((n, len(chunks)))
        for i, (c0, w) in enumerate(chunks):
            dsl.activation("square", xt[:, c0 : c0 + w], out=squares[:n, :w], reduce_res=partial[:, i : i + 1])
        total = partial if len(chunks) == 1 else dsl.reduce_sum(partial)
        rstd = dsl.rsqrt(total, scale=1.0 / d, bias=eps)
        for c0, w in chunks:
            t = dsl.tensor_scalar(xt[:, c0 : c0 + w], "mul", rstd, dtype="fp32")
            dsl.multiply(t, g[:n, c0 : c0 + w], out=xt[:, c0 : c0 + w])
        dsl.store(out[r0 : r0 + n, :], xt)
    return out


def layernorm(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5, *, dtype: str = "fp32",
              target: str = "trn3") -> NDArray[np.float32]:
    """Layer norm of ``x [N, D]`` stored as ``dtype`` (bf16 or fp32; gamma and beta in fp32) on a simulated
    NeuronCore; the result, rounded to ``dtype``, as float32 values.

        >>> layernorm([[1.0, 2.0, 3.0, 6.0]], [1.0] * 4, [0.0] * 4).astype(float).round(4).tolist()
        [[-1.069, -0.5345, 0.0, 1.6036]]
    """
    res = dsl.run_kernel(layernorm_kernel, dsl.typed(np.asarray(x, np.float32), dtype),
                         np.asarray(gamma, np.float32), np.asarray(beta, np.float32), target=target, eps=eps)
    return res.outputs[0]


def rmsnorm(x: ArrayLike, gamma: ArrayLike, eps: float = 1e-6, *, dtype: str = "fp32",
            target: str = "trn3") -> NDArray[np.float32]:
    """RMS norm of ``x [N, D]`` stored as ``dtype`` (bf16 or fp32; gamma in fp32) on a simulated NeuronCore.

        >>> rmsnorm([[3.0, 4.0]], [1.0, 2.0], eps=0.0).astype(float).round(4).tolist()
        [[0.8485, 2.2627]]
    """
    res = dsl.run_kernel(rmsnorm_kernel, dsl.typed(np.asarray(x, np.float32), dtype),
                         np.asarray(gamma, np.float32), target=target, eps=eps)
    return res.outputs[0]
