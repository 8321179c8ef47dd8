"""2-D transpose in the kernel language, two ways (both bit-exact):

* ``method="dma"`` (default, any dtype): each output tile ``[≤ 128, ≤ COLS]`` is loaded through a
  transposed view of the input (a DMA transpose, as NeuronCore's DMA engines do for 2- and 4-byte types on
  the way from HBM to SBUF) and stored as it is: two DMAs per tile, no engine work;
* ``method="tensor"`` (float dtypes): 128 × 128 blocks loaded as they are, transposed on TensorE (the
  identity matmul in transpose mode) into PSUM, copied out on ScalarE and stored. The copy goes through
  fp32, exact for every float format but not for integers beyond 2^24, hence floats only.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.dsl.errors import fail
from trnsim.isa.dtypes import get_dtype
from trnsim.kernels.gemm import blocks

COLS = 2048  # free size of a DMA-transposed tile


@dsl.kernel
def transpose_kernel(x: Tensor, *, method: str = "dma") -> Tensor:
    """``out[C, R] = x[R, C].T``."""
    if len(x.shape) != 2:
        fail(f"transpose of x {x.shape}", "x is a 2-D [R, C] array (for other ranks, permute an HBM view "
             "with Tensor.permute inside a kernel)")
    rows, cols = x.shape
    out = dsl.hbm_tensor((cols, rows), x.dtype, name="out")
    pmax = dsl.tile_size().pmax
    if method == "dma":
        for c0, cn in blocks(cols, pmax):
            for r0, rn in blocks(rows, COLS):
                dsl.store(out[c0 : c0 + cn, r0 : r0 + rn], dsl.load(x[r0 : r0 + rn, c0 : c0 + cn].T))
    elif method == "tensor":
        if get_dtype(x.dtype).kind != "float":
            fail(f"transpose(method='tensor') of {x.dtype}", "use method='dma' for integer and MX data")
        for r0, rn in blocks(rows, pmax):
            for c0, cn in blocks(cols, pmax):
                t = dsl.transpose(dsl.load(x[r0 : r0 + rn, c0 : c0 + cn]))
                dsl.store(out[c0 : c0 + cn, r0 : r0 + rn], dsl.copy(t, dtype=x.dtype, engine="scalar"))
    else:
        fail(f"unknown transpose method {method!r}", "use 'dma' or 'tensor'")
    return out


def transpose(x: ArrayLike, dtype: str | None = None, *, method: str = "dma", target: str = "trn3"
              ) -> NDArray[np.float32]:
    """``x.T`` of a 2-D array on a simulated NeuronCore (``dtype``: the ISA dtype to hold it in).

        >>> transpose(np.arange(6.0).reshape(2, 3)).tolist()
        [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    arr = np.asarray(x)
    arg = dsl.typed(arr, dtype) if dtype is not None else arr
    return dsl.run_kernel(transpose_kernel, arg, target=target, method=method).outputs[0]
