"""The AdamW optimizer step, elementwise over tensors of any shape, in the kernel language.

PyTorch's ``torch.optim.AdamW`` (decoupled weight decay, bias correction by ``step`` ≥ 1):

    m' = β1·m + (1-β1)·g                 v' = β2·v + (1-β2)·g²
    p' = p·(1 - lr·wd) - (lr / (1-β1^t)) · m' / (sqrt(v' / (1-β2^t)) + eps)

``param``, ``m`` and ``v`` are fp32 (``grad`` may be bf16); the results are fp32. The tensors are cut into
runs of consecutive elements, each DMAed into a ``[128, ≤ FREE]`` tile whatever the shape
(``layout.flat_tiles``), and each tile takes 11 instructions spread over three engines:

    ScalarE  β1·m;  (sqrt(1-β2)·g)²;  sqrt(v' · 1/(1-β2^t))       (activation with its free scale)
    GpSimd   (1-β1)·g;  β2·v;  p·(1 - lr·wd)                      (tensor_scalar)
    VectorE  m' = sum;  v' = sum;  den = (sqrt + eps) · -(1-β1^t)/lr;  u = m' / den;  p' = p·(1 - lr·wd) + u

Loads are issued ``DEPTH`` tiles ahead of the stores (``layout.prefetch``). The hyper-parameters are
compile-time constants (a new ``step`` is a new trace, cached per value).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import KernelError, fail
from trnsim.kernels.layout import Key, flat_tiles, prefetch

FREE = 1024  # fp32 elements per partition of a tile: 512 KiB DMAs of 4 KiB a partition
DEPTH = 3  # tiles loaded ahead
RESULT_BUFS = 3  # tiles whose results are being stored while the next is computed


def check_hyperparameters(step: object, beta1: float, beta2: float) -> None:
    """The bias corrections ``1 - β^step`` are > 0: ``step`` an integer ≥ 1 and the betas in [0, 1)."""
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
        fail(f"adamw step={step!r}", "step counts the updates made so far, this one included: an integer ≥ 1")
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        if not 0.0 <= beta < 1.0:
            fail(f"adamw {name}={beta!r}", f"{name} is a decay rate in [0, 1), e.g. 0.9 or 0.999")


@dsl.kernel
def adamw_kernel(param: Tensor, grad: Tensor, m: Tensor, v: Tensor, *, lr: float, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
                 step: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """``(param', m', v')`` in fp32 (module docstring); all four inputs share one shape; ``step`` is an
    integer ≥ 1 and ``beta1``, ``beta2`` lie in [0, 1)."""
    check_hyperparameters(step, beta1, beta2)
    if any(t.shape != param.shape for t in (grad, m, v)):
        fail(f"adamw of param {param.shape}, grad {grad.shape}, m {m.shape}, v {v.shape}",
             "pass param, grad, m and v of one shape")
    shape = param.shape
    p_out, m_out, v_out = (dsl.hbm_tensor(shape, "fp32", name=n) for n in ("param_out", "m_out", "v_out"))
    bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
    pmax = dsl.tile_size().pmax
    tiles = flat_tiles(shape, pmax, FREE)
    # NOTE: results and temporaries live in buffers made once, used in turn: a temporary freed in the loop
    # would hand its memory to a prefetched load, which would then wait for this tile's compute
    results = [[dsl.sbuf((pmax, FREE)) for _ in range(RESULT_BUFS)] for _ in range(3)]  # stores read them
    temps = [[dsl.sbuf((pmax, FREE)) for _ in range(2)] for _ in range(3)]

    def load(key: Key, p: int, f: int) -> Callable[[], tuple[Tensor, ...]]:
        return lambda: tuple(dsl.dma_copy(dsl.sbuf((p, f), t.dtype), t[key]) for t in (param, grad, m, v))

    loaded = prefetch([load(*tile) for tile in tiles], DEPTH)
    for k, ((key, p, f), (pt, gt, mt, vt)) in enumerate(zip(tiles, loaded, strict=True)):
        m_new, v_new, p_new = (b[k % RESULT_BUFS][:p, :f] for b in results)
        t1, t2, t3 = (b[k % 2][:p, :f] for b in temps)
        dsl.identity(mt, scale=beta1, out=m_new)
        dsl.add(m_new, dsl.tensor_scalar(gt, "mul", 1.0 - beta1, engine="gpsimd", out=t1), out=m_new)
        dsl.tensor_scalar(vt, "mul", beta2, engine="gpsimd", out=v_new)
        dsl.add(v_new, dsl.square(gt, scale=math.sqrt(1.0 - beta2), out=t2), out=v_new)
        dsl.tensor_scalar(pt, "mul", 1.0 - lr * weight_decay, engine="gpsimd", out=p_new)
        if lr != 0.0:
            den = dsl.sqrt(v_new, scale=1.0 / bc2, out=t3)
            dsl.tensor_scalar(den, "add", eps, "mul", -bc1 / lr, out=den)  # -(sqrt(v̂) + eps) / step size
            dsl.add(p_new, dsl.divide(m_new, den, out=den), out=p_new)
        for out, t in ((p_out, p_new), (m_out, m_new), (v_out, v_new)):
            dsl.dma_copy(out[key], t)
    return p_out, m_out, v_out


def adamw(param: ArrayLike, grad: ArrayLike, m: ArrayLike, v: ArrayLike, *, lr: float, beta1: float = 0.9,
          beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01, step: int = 1,
          grad_dtype: str = "fp32", target: str = "trn3",
          ) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32]]:
    """One AdamW step on a simulated NeuronCore: ``(param', m', v')`` as fp32 arrays of ``param``'s shape
    (``grad`` stored as ``grad_dtype``).

        >>> p, m, v = adamw([1.0, -2.0], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0], lr=0.1, weight_decay=0.0)
        >>> p.astype(float).round(6).tolist(), m.astype(float).round(6).tolist()
        ([0.9, -2.1], [0.05, 0.05])
    """
    arrays = [np.asarray(a, np.float32) for a in (param, grad, m, v)]
    if any(a.shape != arrays[0].shape for a in arrays):  # NOTE: before run_kernel makes a 0-d array [1]
        raise KernelError(f"adamw of param {arrays[0].shape}, grad {arrays[1].shape}, m {arrays[2].shape}, "
                          f"v {arrays[3].shape}", where="kernels.adamw", hint="pass param, grad, m and v of one shape")
    res = dsl.run_kernel(adamw_kernel, arrays[0], dsl.typed(arrays[1], grad_dtype), arrays[2], arrays[3],
                         target=target, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                         step=step)
    p_out, m_out, v_out = res.outputs
    return p_out, m_out, v_out
