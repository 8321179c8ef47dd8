"""Softmax cross-entropy with its gradient, for any vocabulary size, in the kernel language.

For ``logits [N, V]`` and integer ``labels [N]``: ``loss[r] = logsumexp(logits[r]) - logits[r, labels[r]]``
(fp32) and ``dlogits = (softmax(logits) - onehot(labels)) · s`` with ``s = 1/N`` for the mean loss (else 1),
in the logits' dtype. Rows go on the partitions, 128 at a time; V is tiled in chunks of ``chunk`` columns
and each row block takes two passes over its chunks:

    pass 1 (online max and sum)        VectorE  -m_c = -max(chunk); -m' = min(-m, -m_c)
                                       ScalarE  Σ exp(x - m') (activation exp, bias -m', fused add-reduce)
                                       ScalarE  exp(m - m');  VectorE  σ = σ · exp(m - m') + Σ
           (the label's logit)         GpSimd   onehot = (iota == label - c0)
                                       VectorE  select(onehot, x, 0);  ScalarE  its sum (fused add-reduce)
    then                               ScalarE  ln σ;  VectorE  loss = ln σ - (x[label] - m);  r = s / σ
    pass 2 (the gradient)              ScalarE  p = exp(x - m)                        (fp32)
                                       GpSimd   onehot · σ = (iota == label - c0) · σ
                                       VectorE  dlogits = (p - onehot · σ) · r  (rounded to the logits' dtype)

Every logit enters as its difference from the row max ``m`` (``x - m``, ``x[label] - m``), which is exact
where it is small (Sterbenz), before terms of order ``ln V`` are added: logits ``x + c`` give the loss of
``x`` for any offset ``c``. (A fused ``exp(x - (m + ln σ))`` would round ``ln σ`` at the ulp of ``m``: loss
8.0 instead of ln 300 for 300 logits of 1e8.) A logit of -inf (a masked entry) adds ``exp(-inf) = 0`` and
is never multiplied by a zero (``0 · -inf = NaN``): the label's logit is selected, not ``Σ onehot · x``; the
first chunk's ``-m_c`` is clamped to ``FLT_MAX`` so that a chunk of -inf sums ``exp(-inf) = 0`` where
``exp(-inf + inf)`` is NaN, and the next chunk's rescale ``exp(-FLT_MAX - m')`` is 0. A row without a finite
logit has no softmax: its gradient is NaN.

The column iota ``[128, chunk]`` is made once; each chunk compares it with ``label - c0`` (a per-partition
scalar, exact in fp32 for V ≤ 2^24), so the one-hot costs one GpSimd instruction. A row block whose logits
take at most ``RESIDENT_BYTES`` per partition is loaded once for both passes; larger ones are streamed twice.
Loads (in pieces over the DMA queues) are issued ahead of the stores of earlier chunks (``layout.prefetch``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.layout import blocks, dma_spread, prefetch, prefetch_depth

CHUNK = 2048  # vocabulary columns per instruction: 8 KiB of fp32 per partition
RESIDENT_BYTES = 64 * 1024  # a row block of at most this many bytes per partition is loaded once
OUT_BUFS = 4  # gradient chunks in flight: a chunk's store (~6 us for 512 KiB on 4 queues) overlaps 3 more
FLT_MAX = float(np.finfo(np.float32).max)  # the clamp of a chunk's -max (module docstring)
MAX_VOCAB = 2**24  # labels are compared with column numbers in fp32, exact up to 2^24
HOST_DTYPES = ("bf16", "fp32")  # what the host wrapper stores the logits as


def _fold(total: Tensor | None, target: Tensor | None, rescale: Tensor | None, chunk_sum: Tensor,
          picked: Tensor) -> tuple[Tensor, Tensor]:
    """The running sum and label logit after one more chunk: ``σ · exp(m - m') + Σ``, ``t + picked``."""
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


def _check(logits: Tensor, labels: Tensor, chunk: int) -> tuple[int, int]:
    """``logits``' (N, V), after checking the operands (errors at the kernel line)."""
    if len(logits.shape) != 2:
        fail(f"cross_entropy of logits {logits.shape}", "logits are [N, V]: a row of V class scores per label "
             "(reshape to (-1, V) first)")
    n_rows, v = logits.shape
    if get_dtype(logits.dtype).kind != "float":
        fail(f"cross_entropy of {logits.dtype} logits", "pass float logits (bf16 or fp32)")
    if labels.shape != (n_rows,):
        fail(f"cross_entropy of labels {labels.shape} for logits {logits.shape}",
             f"labels are [N] = ({n_rows},): one class index per row of logits")
    if get_dtype(labels.dtype).kind != "int":
        fail(f"cross_entropy labels of dtype {labels.dtype}", "pass int32 labels (class indices)")
    if v > MAX_VOCAB:
        fail(f"cross_entropy over {v} classes", f"at most {MAX_VOCAB} (labels are matched in fp32)")
    if chunk < 1:
        fail(f"cross_entropy chunk={chunk!r}", f"chunk is the columns per instruction, ≥ 1 (default {CHUNK})")
    return n_rows, v


@dsl.kernel
def cross_entropy_kernel(logits: Tensor, labels: Tensor, *, mean: bool = True,
                         chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """``(loss [N] fp32, dlogits [N, V])`` for float ``logits [N, V]`` and integer (int32) ``labels [N]``
    (module docstring). A label outside ``[0, V)`` matches no column: its row's loss is ``logsumexp`` and
    its gradient the softmax."""
    n_rows, v = _check(logits, labels, chunk)
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
            x = chunk_of(c0, w)
            # NOTE: -max(chunk) is one of x's values, exact in x's dtype (a bf16 result streams bf16 at twice
            # the fp32 rate); the running -m' and the rescale are fp32, as FLT_MAX is not a bf16 value
            chunk_neg_max = dsl.reduce_max(x, negate=True)
            if neg_max is None:  # -m' is finite from the first chunk on: one of -inf has -max = +inf
                new_neg_max = dsl.minimum(chunk_neg_max, FLT_MAX, dtype="fp32")
            else:
                new_neg_max = dsl.minimum(neg_max, chunk_neg_max)
            if state is not None:  # the previous chunk's sums, folded in once VectorE has this chunk's max
                total, target = _fold(total, target, *state)
            _, chunk_sum = dsl.activation_reduce("exp", x, bias=new_neg_max, out=discard[:n, :w])
            rescale = None if neg_max is None else dsl.exp(neg_max, scale=-1.0, bias=new_neg_max, dtype="fp32")
            # the label's logit: the one-hot (GpSimd) selects x, else its own 0 (VectorE; 0 · x would be NaN for
            # x = -inf), and the sum of one term and zeros (ScalarE's fused add-reduce) is x[label], exactly
            a, b = (buf[k % 2][:n, :w] for buf in hot_bufs)
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, engine="gpsimd", out=a)
            _, picked = dsl.activation_reduce("identity", dsl.where(onehot, x, onehot, out=b), out=discard[:n, :w])
            state, neg_max = (rescale, chunk_sum, picked), new_neg_max
            k += 1
        assert state is not None
        total, target = _fold(total, target, *state)
        assert total is not None and neg_max is not None and target is not None
        log_total = dsl.log(total)
        # ln σ - (x[label] - m): m cancels (x[label] - m) before ln σ is added
        row_loss = dsl.tensor_scalar(target, "add", neg_max, "sub", log_total, reverse1=True)
        dsl.dma_copy(loss[r0 : r0 + n], row_loss)
        inv = dsl.divide(scale, total)  # r = s / σ
        for (c0, w), lab in zip(chunks, shifted, strict=True):
            a, b = (buf[k % 2][:n, :w] for buf in fp32_bufs)
            p = dsl.exp(chunk_of(c0, w), bias=neg_max, out=a)  # exp(x - m) ≤ 1
            onehot = dsl.tensor_scalar(iota[:n, :w], "eq", lab, "mul", total, engine="gpsimd", out=b)
            g = dsl.tensor_scalar(dsl.subtract(p, onehot, out=a), "mul", inv, out=out_bufs[k % OUT_BUFS][:n, :w])
            dma_spread(dlogits[r0 : r0 + n, c0 : c0 + w], g)
            k += 1
    return loss, dlogits


def _host_labels(labels: ArrayLike, n_rows: int) -> NDArray[np.int32]:
    """``labels`` as int32, checked: whole numbers (a float label is never truncated), within int32 (never
    wrapped: 2**32 + 3 is not label 3), one per row."""
    arr = np.asarray(labels)
    if arr.size and arr.dtype.kind not in "iu":
        raise KernelError(f"cross_entropy labels of dtype {arr.dtype}", where="kernels.cross_entropy",
                          hint="pass an integer array of class indices (np.rint(labels).astype(np.int64) if "
                               "they are whole numbers)")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        info = np.iinfo(np.int32)
        if lo < info.min or hi > info.max:
            raise KernelError(f"cross_entropy label {lo if lo < info.min else hi} does not fit int32",
                              where="kernels.cross_entropy",
                              hint="labels are class indices; one outside [0, V) (such as -100) matches no "
                                   "class, but it must fit int32")
    if arr.shape != (n_rows,):
        raise KernelError(f"cross_entropy of labels {arr.shape} for {n_rows} rows of logits",
                          where="kernels.cross_entropy", hint=f"labels are [N] = ({n_rows},): one per row")
    return arr.astype(np.int32)


def cross_entropy(logits: ArrayLike, labels: ArrayLike, *, mean: bool = True, dtype: str = "fp32",
                  target: str = "trn3") -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """``(loss [N], dlogits [N, V])`` of softmax cross-entropy on a simulated NeuronCore, the logits stored
    as ``dtype`` (bf16 or fp32, which dlogits is rounded to); ``mean`` scales the gradient by 1/N. Labels
    are integers, one per row; one outside ``[0, V)`` matches no class (the kernel's docstring).

        >>> loss, grad = cross_entropy([[0.0, 0.0, 0.0, 0.0]], [2])
        >>> round(float(loss[0]), 6), grad.tolist()
        (1.386294, [[0.25, 0.25, -0.75, 0.25]])
    """
    if dtype not in HOST_DTYPES:
        raise KernelError(f"cross_entropy of {dtype} logits", where="kernels.cross_entropy",
                          hint=f"use dtype={' or '.join(map(repr, HOST_DTYPES))}")
    x = np.asarray(logits, np.float32)
    if x.ndim != 2:
        raise KernelError(f"cross_entropy of logits {x.shape}", where="kernels.cross_entropy",
                          hint="logits are [N, V]: a row of V class scores per label (reshape to (-1, V) first)")
    res = dsl.run_kernel(cross_entropy_kernel, dsl.typed(x, dtype), _host_labels(labels, x.shape[0]),
                         target=target, mean=mean)
    return res.outputs[0], res.outputs[1]
