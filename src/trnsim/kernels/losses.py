"""Softmax cross-entropy with its gradient, for any vocabulary size, in the kernel language.

For ``logits [N, V]`` and integer ``labels [N]``: ``loss[r] = logsumexp(logits[r]) - logits[r, labels[r]]``
(fp32) and ``dlogits = (softmax(logits) - onehot(labels)) · s`` with ``s = 1/N`` for the mean loss (else 1),
in the logits' dtype. Rows go on the partitions, 128 at a time; V is tiled in chunks of ``chunk`` columns
and each row block takes two passes over its chunks:

    pass 1 (online max and sum)        VectorE  -m_c = -max(chunk); -m' = min(-m, -m_c)
                                       ScalarE  Σ exp(x - m') (activation exp, bias -m', fused add-reduce)
                                       ScalarE  exp(m - m');  VectorE  s = s · exp(m - m') + Σ
           (the label's logit)         GpSimd   onehot = (iota == label - c0);  VectorE  Σ onehot · x
    then                               ScalarE  ln s;  VectorE  loss = ln s + m - x[label]
                                       VectorE  bias = -(m + ln s) - ln(1/s)
    pass 2 (the gradient)              ScalarE  p = exp(x + bias) = softmax · s     (the fused bias, §2.6)
                                       GpSimd   onehot · s = (iota == label - c0) · s
                                       VectorE  dlogits = p - onehot · s  (rounded to the logits' dtype)

The column iota ``[128, chunk]`` is made once; each chunk compares it with ``label - c0`` (a per-partition
scalar), so the one-hot costs one GpSimd instruction. A row block whose logits take at most
``RESIDENT_BYTES`` per partition is loaded once for both passes; larger ones are streamed twice. Loads
(in pieces over the DMA queues) are issued ahead of the stores of earlier chunks (``layout.prefetch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.layout import blocks, dma_spread, prefetch, prefetch_depth

CHUNK = 2048  # vocabulary columns per instruction: 8 KiB of fp32 per partition
RESIDENT_BYTES = 64 * 1024  # a row block of at most this many bytes per partition is loaded once
OUT_BUFS = 4  # gradient chunks in flight: a chunk's store (~6 us for 512 KiB on 4 queues) overlaps 3 more


def _fold(total: Tensor | None, target: Tensor | None, rescale: Tensor | None, chunk_sum: Tensor,
          picked: Tensor) -> tuple[Tensor, Tensor]:
    """The running sum and label logit after one more chunk: ``s · exp(m - m') + Σ``, ``t + picked``."""
    if total is None or target is None or rescale is None:
        return chunk_sum, picked
    return dsl.tensor_scalar(total, "mul", rescale, "add", chunk_sum), dsl.add(target, picked)


def _load(view: Tensor, chunks: list[tuple[int, int]] | None = None) -> Callable[[], Tensor]:
    """Load ``view`` into a new tile (by column ``chunks``, so the first chunk's compute need not wait
    for the whole tile)."""
    def load() -> Tensor:
        tile = dsl.sbuf(view.shape, view.dtype)
        for c0, w in chunks or [(0, view.shape[-1])]:
            dma_spread(tile[:, c0 : c0 + w], view[:, c0 : c0 + w])
        return tile
    return load


@dsl.kernel
def cross_entropy_kernel(logits: Tensor, labels: Tensor, *, mean: bool = True,
                         chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """``(loss [N] fp32, dlogits [N, V])`` for ``logits [N, V]`` and int32 ``labels [N]`` (module docstring).
    A label outside ``[0, V)`` matches no column: its row's loss is ``logsumexp`` and its gradient the
    softmax."""
    n_rows, v = logits.shape
    loss = dsl.hbm_tensor((n_rows,), "fp32", name="loss")
    dlogits = dsl.hbm_tensor((n_rows, v), logits.dtype, name="dlogits")
    pmax = dsl.tile_size().pmax
    scale = 1.0 / n_rows if mean else 1.0
    chunks = blocks(v, chunk)
    rows, width, itemsize = min(pmax, n_rows), chunks[0][1], get_dtype(logits.dtype).itemsize
    iota = dsl.iota((rows, width), "fp32")  # column j on every partition
    discard = dsl.sbuf((rows, width), "bf16")  # pass 1's elementwise exp: only its sums are used
    # NOTE: per-chunk temporaries live in buffers made once: a temporary freed in the loop would hand its
    # memory to a prefetched load, which would then wait (holding the DMA issue order) for this compute
    hot_bufs = [[dsl.sbuf((rows, width), logits.dtype) for _ in range(2)] for _ in range(2)]
    fp32_bufs = [[dsl.sbuf((rows, width)) for _ in range(2)] for _ in range(2)]
    out_bufs = [dsl.sbuf((rows, width), logits.dtype) for _ in range(OUT_BUFS)]
    reserved = (4 * 2 + 4 * 4 + (4 + OUT_BUFS) * itemsize) * width + 4096
    resident = v * itemsize <= RESIDENT_BYTES
    row_blocks = blocks(n_rows, pmax)
    loads: list[Callable[[], Tensor]] = []  # in the order the loop below consumes them
    for r0, n in row_blocks:
        loads.append(_load(labels[r0 : r0 + n, None]))
        if resident:
            loads.append(_load(logits[r0 : r0 + n, :], chunks))
        else:
            loads += [_load(logits[r0 : r0 + n, c0 : c0 + w]) for _ in range(2) for c0, w in chunks]
    stream = prefetch(loads, prefetch_depth(v * itemsize if resident else width * itemsize, reserved))
    k = 0  # rotates the temporaries
    for r0, n in row_blocks:
        label = dsl.copy(next(stream), dtype="fp32")
        whole = next(stream) if resident else None

        def chunk_of(c0: int, w: int, whole: Tensor | None = whole) -> Tensor:
            return whole[:, c0 : c0 + w] if whole is not None else next(stream)

        shifted = [label if c0 == 0 else dsl.subtract(label, float(c0)) for c0, _ in chunks]  # label - c0
        neg_max = total = target = state = None
        for (c0, w), lab in zip(chunks, shifted, strict=True):
            x = chunk_of(c0, w)  # NOTE: bf16 logits: the max and rescale are kept in fp32, not x's dtype
            chunk_neg_max = dsl.reduce_max(x, negate=True, dtype="fp32")
            new_neg_max = chunk_neg_max if neg_max is None else dsl.minimum(neg_max, chunk_neg_max)
            if state is not None:  # the previous chunk's sums, folded in once VectorE has this chunk's max
                total, target = _fold(total, target, *state)
            _, chunk_sum = dsl.activation_reduce("exp", x, bias=new_neg_max, out=discard[:n, :w])
            rescale = None if neg_max is None else dsl.exp(neg_max, scale=-1.0, bias=new_neg_max, dtype="fp32")
            # the label's logit: one-hot (GpSimd) and product (VectorE) in the logits' dtype are exact (0/1
            # times x), so their sum (ScalarE's fused add-reduce), one term and zeros, is x[label]
            a, b = (buf[k % 2][:n, :w] for buf in hot_bufs)
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, engine="gpsimd", out=a)
            _, picked = dsl.activation_reduce("identity", dsl.multiply(onehot, x, out=b), out=discard[:n, :w])
            state, neg_max = (rescale, chunk_sum, picked), new_neg_max
            k += 1
        assert state is not None
        total, target = _fold(total, target, *state)
        assert total is not None and neg_max is not None and target is not None
        log_total = dsl.log(total)
        row_loss = dsl.tensor_scalar(log_total, "sub", neg_max, "sub", target)  # ln s + m - x[label]
        dsl.dma_copy(loss[r0 : r0 + n], row_loss)
        # exp bias: -(m + ln s) + ln(scale), so that pass 2's exp is the softmax times scale
        bias = dsl.tensor_scalar(log_total, "sub", neg_max, "add", math.log(scale), reverse0=True)
        for (c0, w), lab in zip(chunks, shifted, strict=True):
            a, b = (buf[k % 2][:n, :w] for buf in fp32_bufs)
            p = dsl.exp(chunk_of(c0, w), bias=bias, out=a)
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, "mul", scale, engine="gpsimd", out=b)
            g = dsl.subtract(p, onehot, out=out_bufs[k % OUT_BUFS][:n, :w])
            dma_spread(dlogits[r0 : r0 + n, c0 : c0 + w], g)
            k += 1
    return loss, dlogits


def cross_entropy(logits: ArrayLike, labels: ArrayLike, *, mean: bool = True, dtype: str = "fp32",
                  target: str = "trn3") -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """``(loss [N], dlogits [N, V])`` of softmax cross-entropy on a simulated NeuronCore, the logits stored
    as ``dtype`` (bf16 or fp32, which dlogits is rounded to); ``mean`` scales the gradient by 1/N.

        >>> loss, grad = cross_entropy([[0.0, 0.0, 0.0, 0.0]], [2])
        >>> round(float(loss[0]), 6), grad.tolist()
        (1.386294, [[0.25, 0.25, -0.75, 0.25]])
    """
    res = dsl.run_kernel(cross_entropy_kernel, dsl.typed(np.asarray(logits, np.float32), dtype),
                         np.asarray(labels, np.int32), target=target, mean=mean)
    return res.outputs[0], res.outputs[1]
