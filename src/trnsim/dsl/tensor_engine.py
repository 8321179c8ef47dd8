"""TensorE: matrix multiply into PSUM (dense, MX-scaled, N:M-sparse stationary) and transpose.

``matmul(acc, stationary, moving)`` computes ``acc[M, N] (+)= stationary[K, M].T @ moving[K, N]``: both
operands in SBUF with the contraction K on their partitions (K ≤ 128, M ≤ 128, N ≤ 512), ``acc`` an fp32
PSUM tile within one bank. Accumulating over K is a chain of matmuls into the same ``acc``, the first with
``accumulate=False``. MX operands (dtype ``mxfp*``) take their E8M0 scale tiles ``[ceil(K/32), M or N]``;
a 2:4 / 4:8 sparse stationary holds only the kept values (K·n/m rows) plus ``stationary_index``, each kept
value's position in its group.

    acc = psum((128, 512))
    for k in range(kt):
        matmul(acc, w_tiles[k], x_tiles[k], accumulate=k > 0)
    y = copy(acc, dtype="bf16")
"""

from __future__ import annotations

from trnsim.dsl.errors import fail
from trnsim.dsl.tensor import Tensor
from trnsim.dsl.trace import current
from trnsim.isa.tensor_engine import Matmul, TensorTranspose


def matmul(
    dst: Tensor, stationary: Tensor, moving: Tensor, *, accumulate: bool = False,
    stationary_scale: Tensor | None = None, moving_scale: Tensor | None = None, sparsity: str | None = None,
    stationary_index: Tensor | None = None,
) -> Tensor:
    """``dst (+)= stationary.T @ moving`` on TensorE (NKI's ``nc_matmul``); returns ``dst``."""
    if dst.memory != "psum":
        fail(f"matmul writes PSUM, not {dst.memory}", "allocate the accumulator with dsl.psum((M, N))")
    if len(stationary.shape) != 2 or len(moving.shape) != 2:
        fail(f"matmul of {stationary.shape} and {moving.shape}", "operands are 2-D tiles [K, M] and [K, N]")
    extra = [t for t in (stationary_scale, moving_scale, stationary_index) if t is not None]
    reads = [stationary, moving, *extra, *([dst] if accumulate else [])]
    d, st, mv = dst.ap(), stationary.ap(), moving.ap()
    ss, ms, si = (None if t is None else t.ap() for t in (stationary_scale, moving_scale, stationary_index))
    current().emit("tensor", lambda w, s: Matmul(d, st, mv, accumulate, ss, ms, sparsity, si, wait=w, signal=s),
                   reads, [dst])
    return dst


def transpose(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x[P, F].T`` on TensorE (identity matmul in transpose mode, bit-exact) into a PSUM tile ``[F, P]`` of
    ``x``'s dtype. (To transpose on the way in from HBM instead, load through a ``.T`` view.)"""
    if len(x.shape) != 2:
        fail(f"transpose of a {len(x.shape)}-D tile", "transpose 2-D tiles [P, F]")
    if out is None:
        out = current().allocate("psum", (x.shape[1], x.shape[0]), x.dtype)
    d, src = out.ap(), x.ap()
    current().emit("tensor", lambda w, s: TensorTranspose(d, src, wait=w, signal=s), [x], [out])
    return out
