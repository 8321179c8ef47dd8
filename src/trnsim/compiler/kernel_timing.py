"""Timing matmul steps with the kernel library: ``trnsim.kernels.gemm.matmul_kernel`` traced for the step's
shapes and operand format and timed by the instruction-level timing model (timing-only: no data).

This is how the compiler's lowering of a ``dot_general`` is costed on NeuronCore targets: the same
kernel a user would call, its DMA transposes, PSUM evacuation and epilogue overlap included. The
compiler also chooses the layout of the left operand: ``matmul_kernel`` reads ``a [M, K]`` through a
transposed view (a DMA transpose, which only 2- and 4-byte types take at speed, ``reference/neuron.md``
§1.3), while ``matmul_kt_kernel`` reads ``a`` already K-major (``[K, M]``, as the producing step can write
it); the faster of the two is the step's lowering. A batched
product (batch B of [M, K] × [K, N]) is timed as one kernel over the stacked rows [B·M, K] × [K, N] — the
tile schedule of a batched kernel that keeps its stationary tiles across the batch; it is optimistic when
the batch members have different right-hand sides. Results are cached per shape and format.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MX_BLOCK = 32


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    busy: dict[str, float]
    hbm_bytes: int
    instructions: int
    flops: float


def _kt_kernel() -> object:
    from trnsim import dsl
    from trnsim.dsl import Tensor
    from trnsim.kernels.gemm import Operand, gemm

    @dsl.kernel
    def matmul_kt_kernel(at: Tensor, b: Tensor, a_scale: Tensor | None = None, b_scale: Tensor | None = None,
                         *, out_dtype: str = "bf16") -> Tensor:
        """``c[M, N] = at.T @ b`` for a K-major left operand ``at [K, M]`` (no DMA transpose)."""
        k, m = at.shape
        c = dsl.hbm_tensor((m, b.shape[1]), out_dtype, name="c")
        gemm(Operand(at, a_scale), Operand(b, b_scale), c, k)
        return c

    return matmul_kt_kernel


_KT: list[object] = []


def matmul_time(target: str, m: int, k: int, n: int, dtype: str, sparsity: str | None, out_dtype: str) -> KernelTime:
    """The faster lowering of ``[M, K] @ [K, N]``: the library kernel, or the K-major-lhs variant (dense)."""
    best = _library_time(target, m, k, n, dtype, sparsity, out_dtype)
    if sparsity is None:
        kt = _kt_time(target, m, k, n, dtype, out_dtype)
        best = kt if kt.seconds < best.seconds else best
    return best


@lru_cache(maxsize=512)
def _kt_time(target: str, m: int, k: int, n: int, dtype: str, out_dtype: str) -> KernelTime:
    import trnsim

    if not _KT:
        _KT.append(_kt_kernel())
    spec = trnsim.TensorSpec
    kb = -(-k // MX_BLOCK)
    args: list[Any] = [spec((k, m), dtype), spec((k, n), dtype)]
    if dtype.startswith("mx"):
        args += [spec((kb, m), "uint8"), spec((kb, n), "uint8")]
    kernel: Any = _KT[0]
    result = trnsim.run_kernel(kernel, *args, target=target, timing=True, out_dtype=out_dtype)
    return _summary(result.profile)


@lru_cache(maxsize=512)
def _library_time(target: str, m: int, k: int, n: int, dtype: str, sparsity: str | None,
                  out_dtype: str) -> KernelTime:
    import trnsim
    from trnsim.kernels.gemm import matmul_kernel

    spec = trnsim.TensorSpec
    kb = -(-k // MX_BLOCK)
    args: list[Any] = [spec((m, k), dtype)]
    params: dict[str, object] = {"out_dtype": out_dtype}
    if sparsity is not None:
        nn, mm = (int(x) for x in sparsity.split(":"))
        kept = k * nn // mm
        args.append(spec((kept, n), dtype))
        params["sparsity"] = sparsity
    else:
        args.append(spec((k, n), dtype))
    if dtype.startswith("mx"):
        args += [spec((kb, m), "uint8"), spec((kb, n), "uint8")]
    else:
        args += [None, None]
    if sparsity is not None:
        args.append(spec((k * int(sparsity.split(":")[0]) // int(sparsity.split(":")[1]), n), "uint8"))
    result = trnsim.run_kernel(matmul_kernel, *args, target=target, timing=True, **params)
    return _summary(result.profile)


def _summary(profile: object) -> KernelTime:
    from trnsim.sim.profile import Profile

    assert isinstance(profile, Profile)
    busy = {e: t for e, t in profile.engine_busy.items() if e in ("tensor", "vector", "scalar", "gpsimd") and t > 0}
    return KernelTime(profile.total_seconds, busy, profile.hbm_bytes, profile.instructions, profile.flops)


def clear_memo() -> None:
    """Forget every timed kernel and its trace: the next compile times its matmuls as a new process would
    (benchmarks use this to measure a cold compile honestly)."""
    from trnsim.compiler import tilegen
    from trnsim.kernels.gemm import matmul_kernel

    tilegen.clear_memo()
    _library_time.cache_clear()
    _kt_time.cache_clear()
    for kernel in (matmul_kernel, *_KT):
        cache = getattr(kernel, "_cache", None)
        if isinstance(cache, dict):
            cache.clear()
