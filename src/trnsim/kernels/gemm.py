"""Matrix multiply in the kernel language: any M, K, N, every TensorE operand format, N:M-sparse weights,
and a fused ``activation(scale · (a @ b) + bias)`` epilogue.

``matmul_kernel`` computes ``O = S.T @ V`` tile by tile for a stationary operand ``S [K, Ms]`` and a moving
operand ``V [K, Nv]``, both HBM views, and writes the epilogue of each ``O`` tile to an HBM view. Two
orientations map ``c = a @ b`` onto it:

* dense: ``S = a.T`` (loaded through a transposed view: a DMA transpose), ``V = b``, ``O = c``; a bias runs
  along ``O``'s free axis, so it is loaded once per column block broadcast over the partitions and added
  on VectorE before the activation on ScalarE;
* sparse weights (``sparsity="2:4"/"4:8"``, which TensorE supports on its *stationary* operand, along K):
  ``S = b`` (compressed: K·n/m rows plus the kept positions), ``V = a.T``, ``O = c.T``; the bias is then
  per partition and the whole epilogue is one ScalarE instruction, ``func(acc * scale + bias)``; the
  output tiles are stored through a transposed view of ``c``.

Tiling (``reference/neuron.md`` §2.6): stationary tiles ``[128 (K), 128]``, moving tiles ``[128 (K), 512]``,
one fp32 PSUM bank per output tile, accumulating over all of K with ``accumulate=k > 0``. The moving
operand is processed in column chunks of up to 4 banks (2048 columns), so two chunks' accumulators fit the
8 PSUM banks and one output block's epilogue overlaps the next block's matmuls. Within a chunk the moving
tiles of all of K are loaded once and stay in SBUF (a *panel*, when it fits in ``PANEL_BYTES`` per
partition; otherwise they are streamed per use), and for each 128-column block of ``S`` its K tiles are
loaded once and each is reused across the chunk's moving tiles (consecutive matmuls share the stationary
operand). Ragged tails in M, K and N are smaller tiles, never padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import dsl
from trnsim.dsl import Tensor
from trnsim.isa.tensor_engine import MX_BLOCK, SPARSE_PATTERNS
from trnsim.kernels.operands import prepare_matmul

PANEL_BYTES = 96 * 1024  # SBUF bytes per partition a resident moving panel may take (of 256 KiB on trn3)
CHUNK_BANKS = 4  # PSUM banks of one output block: half of the 8, so two blocks are in flight


def blocks(n: int, size: int, start: int = 0) -> list[tuple[int, int]]:
    """(offset, length) of consecutive blocks of at most ``size`` covering ``start .. start + n``."""
    return [(start + i, min(size, n - i)) for i in range(0, n, size)]


@dataclass(frozen=True)
class Operand:
    """A matmul operand in HBM as ``[K, cols]`` (a view, so ``a.T`` works), with its MX scales
    ``[ceil(K/32), cols]`` and, for a compressed sparse stationary, the kept positions and ``(n, m)``."""

    data: Tensor
    scale: Tensor | None = None
    index: Tensor | None = None
    ratio: tuple[int, int] = (1, 1)

    def load(self, k0: int, kk: int, c0: int, cc: int) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The SBUF tiles of dense rows ``k0 .. k0+kk`` and columns ``c0 .. c0+cc``: (data, scale, index)."""
        n, m = self.ratio
        rows = slice(k0 * n // m, (k0 + kk) * n // m)
        data = dsl.load(self.data[rows, c0 : c0 + cc])
        scale = None if self.scale is None else dsl.load(
            self.scale[k0 // MX_BLOCK : -(-(k0 + kk) // MX_BLOCK), c0 : c0 + cc])
        index = None if self.index is None else dsl.load(self.index[rows, c0 : c0 + cc])
        return data, scale, index


def epilogue(acc: Tensor, dtype: str, scale: float, func: str | None, bias_row: Tensor | None,
             bias_col: Tensor | None) -> Tensor:
    """``func(acc * scale + bias)`` rounded to ``dtype``: ``bias_row`` [P, n] runs along the free axis
    (VectorE add first), ``bias_col`` [P, 1] per partition (fused into ScalarE's activation)."""
    if bias_row is not None:
        scaled = acc if scale == 1.0 else dsl.multiply(acc, scale)
        acc = dsl.add(scaled, bias_row, dtype=dtype if func is None else "fp32")
        if func is None:
            return acc
        scale = 1.0
    if func is None and scale == 1.0 and bias_col is None:
        return dsl.copy(acc, dtype=dtype)  # VectorE: out of PSUM with the cast
    return dsl.activation(func or "identity", acc, scale=scale, bias=bias_col, dtype=dtype)


def gemm(s: Operand, v: Operand, out: Tensor, k: int, *, scale: float = 1.0, func: str | None = None,
         bias: Tensor | None = None, bias_along_free: bool = True) -> None:
    """``out = func(scale · s.T @ v + bias)`` (module docstring); ``k`` is the dense contraction length."""
    ts = dsl.tile_size()
    k_tile, s_tile, v_tile = ts.pmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax
    ms, nv = out.shape
    k_blocks = blocks(k, k_tile)
    v_item = v.data.ap().itemsize
    width = max(v_tile, min(CHUNK_BANKS * v_tile, PANEL_BYTES // (len(k_blocks) * v_item) // v_tile * v_tile))
    for c0, cw in blocks(nv, width):
        v_blocks = blocks(cw, v_tile, c0)
        resident = len(k_blocks) * cw * v_item <= PANEL_BYTES
        panel = [[v.load(k0, kk, n0, nn) for n0, nn in v_blocks] for k0, kk in k_blocks] if resident else None
        rows = [dsl.load(bias[n0 : n0 + nn].broadcast_to((s_tile, nn)), dtype="fp32")
                for n0, nn in v_blocks] if bias is not None and bias_along_free else None
        for r0, rw in blocks(ms, s_tile):
            stationary = [s.load(k0, kk, r0, rw) for k0, kk in k_blocks]
            col = dsl.load(bias[r0 : r0 + rw, None], dtype="fp32") if bias is not None and not bias_along_free \
                else None
            accs = [dsl.psum((rw, nn)) for _, nn in v_blocks]
            for ki, (k0, kk) in enumerate(k_blocks):
                moving = panel[ki] if panel is not None else [v.load(k0, kk, n0, nn) for n0, nn in v_blocks]
                st, st_scale, st_index = stationary[ki]
                for acc, (mv, mv_scale, _) in zip(accs, moving, strict=True):
                    dsl.matmul(acc, st, mv, accumulate=ki > 0, stationary_scale=st_scale, moving_scale=mv_scale,
                               sparsity=None if s.ratio == (1, 1) else f"{s.ratio[0]}:{s.ratio[1]}",
                               stationary_index=st_index)
            for vi, (acc, (n0, nn)) in enumerate(zip(accs, v_blocks, strict=True)):
                y = epilogue(acc, out.dtype, scale, func, rows[vi][:rw] if rows is not None else None, col)
                dsl.store(out[r0 : r0 + rw, n0 : n0 + nn], y)


@dsl.kernel
def matmul_kernel(a: Tensor, b: Tensor, a_scale: Tensor | None = None, b_scale: Tensor | None = None,
                  b_index: Tensor | None = None, bias: Tensor | None = None, *, out_dtype: str = "bf16",
                  activation: str | None = None, scale: float = 1.0, sparsity: str | None = None) -> Tensor:
    """``c[M, N] = activation(scale · (a @ b) + bias)``, rounded to ``out_dtype``.

    ``a [M, K]`` and ``b [K, N]`` in any TensorE dtype; MX operands come with E8M0 scale codes
    ``a_scale [ceil(K/32), M]`` and ``b_scale [ceil(K/32), N]``; with ``sparsity="n:m"``, ``b`` is the
    compressed ``[K·n/m, N]`` and ``b_index`` its kept positions (uint8, same shape). ``bias`` is ``[N]``.
    """
    m, k = a.shape
    n = b.shape[1]
    c = dsl.hbm_tensor((m, n), out_dtype, name="c")
    func = dsl.ACTIVATION_FUNCS.get(activation, activation) if activation is not None else None
    if sparsity is None:
        gemm(Operand(a.T, a_scale), Operand(b, b_scale), c, k, scale=scale, func=func,
             bias=bias, bias_along_free=True)
    else:
        stationary = Operand(b, b_scale, b_index, SPARSE_PATTERNS[sparsity])
        gemm(stationary, Operand(a.T, a_scale), c.T, k, scale=scale, func=func, bias=bias, bias_along_free=False)
    return c


def matmul(
    a: ArrayLike, b: ArrayLike, dtype: str = "bf16", sparsity: str | None = None, bias: ArrayLike | None = None,
    activation: str | None = None, *, out_dtype: str | None = None, target: str = "trn3",
) -> NDArray[np.float32]:
    """``activation(a @ b + bias)`` on a simulated NeuronCore, operands quantized to ``dtype``.

    ``a [M, K]``, ``b [K, N]`` and ``bias [N]`` are float arrays; ``dtype`` is any TensorE operand dtype
    (bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, mxfp8_*, mxfp6_*, mxfp4_e2m1, int8, int4; see ``operands``);
    ``sparsity`` ("2:4"/"4:8") prunes ``b`` along K to that pattern and runs it as a sparse stationary;
    ``activation`` is a ``dsl`` activation name (gelu, silu, relu, …). The result is rounded to
    ``out_dtype`` (default bf16, fp32 for fp32 operands) and returned as float32 values.

        >>> import numpy as np
        >>> matmul(np.ones((3, 200)), np.ones((200, 5)), "fp8_e4m3").tolist()[0]
        [200.0, 200.0, 200.0, 200.0, 200.0]
    """
    ops = prepare_matmul(a, b, dtype, sparsity)
    if out_dtype is None:
        out_dtype = "fp32" if dtype == "fp32" else "bf16"
    bias_arr = None if bias is None else np.asarray(bias, np.float32).reshape(-1)
    res = dsl.run_kernel(matmul_kernel, ops.a, ops.b, ops.a_scale, ops.b_scale, ops.b_index, bias_arr,
                         target=target, out_dtype=out_dtype, activation=activation, scale=ops.scale,
                         sparsity=sparsity)
    return res.outputs[0]
