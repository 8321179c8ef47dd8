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
``RESIDENT_BYTES`` per partition is loaded once for both passes; larger ones are streamed twice.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.layout import blocks

CHUNK = 2048  # vocabulary columns per instruction: 8 KiB of fp32 per partition
RESIDENT_BYTES = 64 * 1024  # a row block of at most this many bytes per partition is loaded once


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
    width = chunks[0][1]
    iota = dsl.iota((min(pmax, n_rows), width), "fp32")  # column j on every partition
    discard = dsl.sbuf((min(pmax, n_rows), width), "bf16")  # pass 1's elementwise exp: only its sums are used
    resident = v * get_dtype(logits.dtype).itemsize <= RESIDENT_BYTES
    for r0, n in blocks(n_rows, pmax):
        rows = logits[r0 : r0 + n, :]
        whole = dsl.load(rows) if resident else None

        def chunk_of(c0: int, w: int, rows: Tensor = rows, whole: Tensor | None = whole) -> Tensor:
            return whole[:, c0 : c0 + w] if whole is not None else dsl.load(rows[:, c0 : c0 + w])

        label = dsl.copy(dsl.load(labels[r0 : r0 + n]), dtype="fp32")
        shifted = [label if c0 == 0 else dsl.subtract(label, float(c0)) for c0, _ in chunks]  # label - c0
        neg_max = total = target = None
        for (c0, w), lab in zip(chunks, shifted, strict=True):
            x = chunk_of(c0, w)  # NOTE: bf16 logits: the max and rescale are kept in fp32, not x's dtype
            chunk_neg_max = dsl.reduce_max(x, negate=True, dtype="fp32")
            new_neg_max = chunk_neg_max if neg_max is None else dsl.minimum(neg_max, chunk_neg_max)
            _, chunk_sum = dsl.activation_reduce("exp", x, bias=new_neg_max, out=discard[:n, :w])
            if total is None or neg_max is None:
                total = chunk_sum
            else:
                rescale = dsl.exp(neg_max, scale=-1.0, bias=new_neg_max, dtype="fp32")  # exp(m - m'): 1 if m held
                total = dsl.tensor_scalar(total, "mul", rescale, "add", chunk_sum)
            neg_max = new_neg_max
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, engine="gpsimd")
            picked = dsl.reduce_sum(dsl.multiply(onehot, x))
            target = picked if target is None else dsl.add(target, picked)
        assert total is not None and neg_max is not None and target is not None
        log_total = dsl.log(total)
        row_loss = dsl.tensor_scalar(log_total, "sub", neg_max, "sub", target)  # ln s + m - x[label]
        dsl.dma_copy(loss[r0 : r0 + n], row_loss)
        # exp bias: -(m + ln s) + ln(scale), so that pass 2's exp is the softmax times scale
        bias = dsl.tensor_scalar(log_total, "sub", neg_max, "add", math.log(scale), reverse0=True)
        for (c0, w), lab in zip(chunks, shifted, strict=True):
            p = dsl.exp(chunk_of(c0, w), bias=bias, dtype="fp32")
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, "mul", scale, engine="gpsimd")
            dsl.store(dlogits[r0 : r0 + n, c0 : c0 + w], dsl.subtract(p, onehot, dtype=dlogits.dtype))
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
