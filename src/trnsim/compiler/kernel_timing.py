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

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MX_BLOCK = 32


class OnDemand:
    """A generated kernel made on first use (making it imports the kernel language), then shared by timing
    and tests: call it for the kernel; ``forget`` drops its traces (``clear_memo``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._kernel: Any = None

    def __call__(self) -> Any:
        if self._kernel is None:
            self._kernel = self._make()
        return self._kernel

    def forget(self) -> None:
        if self._kernel is not None:
            self._kernel.forget_traces()


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    busy: dict[str, float]
    hbm_bytes: int
    instructions: int
    flops: float
    by_engine: dict[str, int] = field(default_factory=dict[str, int])   # instructions per engine ("dma")


@dataclass(frozen=True)
class TileTime:
    """A generated or library kernel's timed run (timing-only): its time, each compute engine's busy time,
    its instructions (per engine: ``by_engine``, DMAs as ``dma``) and its HBM traffic."""

    seconds: float
    busy: dict[str, float]
    instructions: int
    by_engine: dict[str, int] = field(default_factory=dict[str, int])
    hbm_bytes: int = 0

    def charge(self, cost: Any) -> None:
        """Set a step's cost (``costs.StepCost``) from this run: engines, instructions, time, HBM traffic."""
        cost.busy, cost.instructions = dict(self.busy), dict(self.by_engine)
        cost.min_seconds = self.seconds
        cost.dma_bytes = self.hbm_bytes


COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")


def time_kernel(kernel: Any, *args: Any, target: str, **params: Any) -> TileTime:
    """Trace ``kernel`` for ``args`` (arrays or ``TensorSpec`` shapes) and time it on ``target``."""
    import trnsim
    from trnsim.sim.profile import Profile

    profile = trnsim.run_kernel(kernel, *args, target=target, timing=True, **params).profile
    assert isinstance(profile, Profile)
    busy = {e: t for e, t in profile.engine_busy.items() if e in COMPUTE_ENGINES and t > 0}
    return TileTime(profile.total_seconds, busy, profile.instructions, engine_counts(profile), profile.hbm_bytes)


def extrapolate(a: TileTime, b: TileTime, fit: Callable[[float, float], float]) -> TileTime:
    """A kernel's timing from two samples of it, every figure through ``fit`` (``linear_fit``)."""
    return TileTime(fit(a.seconds, b.seconds), {e: fit(a.busy.get(e, 0.0), t) for e, t in b.busy.items()},
                    round(fit(a.instructions, b.instructions)),
                    {e: round(fit(a.by_engine.get(e, 0), n)) for e, n in b.by_engine.items()},
                    round(fit(a.hbm_bytes, b.hbm_bytes)))


def engine_counts(profile: Any) -> dict[str, int]:
    """Instructions per engine of a timed kernel; DMAs (issued from the sync engine) count as ``dma``."""
    counts: dict[str, int] = {}
    for engine in profile.timeline.engine:
        name = "dma" if engine == "sync" else str(engine)
        counts[name] = counts.get(name, 0) + 1
    return counts


def scale_counts(counts: dict[str, int], factor: float) -> dict[str, int]:
    return {e: round(n * factor) for e, n in counts.items()}


def linear_fit(xa: float, xb: float, x: float) -> Callable[[float, float], float]:
    """Extrapolation from two samples of a kernel that streams through its work: ``fit(ya, yb)`` is the
    value at size ``x`` of the line through ``(xa, ya)`` and ``(xb, yb)`` (the difference gives the cost per
    unit, the rest is the fixed part: pipeline fill and drain, work done once before or after the loop),
    never less than the larger sample's ``yb``."""

    def fit(ya: float, yb: float) -> float:
        return max(yb, ya + (yb - ya) / (xb - xa) * (x - xa))

    return fit


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


_KT = OnDemand(lambda: _kt_kernel())   # the matmul of a Kᵀ-stored stationary, made on first use


SAMPLE_ROWS = 512         # larger products are timed on 512 and 1024 × 4096 output samples (see below)
SAMPLE_COLS = 4096
WIDE_DTYPES = frozenset({"bf16", "fp16", "fp32", "tf32"})   # DMA transposes run at speed (neuron.md §1.3)


def matmul_time(target: str, m: int, k: int, n: int, dtype: str, sparsity: str | None, out_dtype: str) -> KernelTime:
    """The faster lowering of ``[M, K] @ [K, N]``: the library kernel, or the K-major-lhs variant (dense).

    NOTE: the kernel walks output blocks (column chunks, then groups of up to 512 stationary columns, then blocks of
    PSUM banks; kernels/gemm.py) one after another, each accumulating over all of K (K is never sampled: whether a
    moving panel stays resident in SBUF depends on it), so its time is linear in the number of output blocks once
    the pipeline is full. A product with more than ``2 × SAMPLE_ROWS`` rows or ``SAMPLE_COLS`` columns is timed on
    two samples of ``SAMPLE_ROWS`` and twice that rows (at most ``SAMPLE_COLS`` columns, all of K) and extrapolated
    linearly in the output area: the difference gives the cost per output element, the rest is the fixed fill and
    drain. Measured against whole kernels: within 2% for full chunks, 7% under with a ragged last column chunk. This
    keeps a 70B-model layer's compile to seconds. The K-major variant is only tried for 1-byte and narrower
    operands, the ones whose DMA transpose is slow."""
    sn = min(n, SAMPLE_COLS)
    if m > 2 * SAMPLE_ROWS or n > SAMPLE_COLS:
        # two samples fix the fixed part (pipeline fill and drain) and the cost per output element
        a = _best(target, SAMPLE_ROWS, k, sn, dtype, sparsity, out_dtype)
        b = _best(target, 2 * SAMPLE_ROWS, k, sn, dtype, sparsity, out_dtype)
        fit = linear_fit(SAMPLE_ROWS * sn, 2 * SAMPLE_ROWS * sn, m * n)
        busy = {e: fit(a.busy.get(e, 0.0), t) for e, t in b.busy.items()}
        counts = {e: round(fit(a.by_engine.get(e, 0), n)) for e, n in b.by_engine.items()}
        return KernelTime(fit(a.seconds, b.seconds), busy, round(fit(a.hbm_bytes, b.hbm_bytes)),
                          round(fit(a.instructions, b.instructions)), fit(a.flops, b.flops), counts)
    return _best(target, m, k, n, dtype, sparsity, out_dtype)


def _best(target: str, m: int, k: int, n: int, dtype: str, sparsity: str | None, out_dtype: str) -> KernelTime:
    best = _library_time(target, m, k, n, dtype, sparsity, out_dtype)
    if sparsity is None and dtype not in WIDE_DTYPES:
        kt = _kt_time(target, m, k, n, dtype, out_dtype)
        best = kt if kt.seconds < best.seconds else best
    return best


@lru_cache(maxsize=512)
def _kt_time(target: str, m: int, k: int, n: int, dtype: str, out_dtype: str) -> KernelTime:
    import trnsim

    spec = trnsim.TensorSpec
    kb = -(-k // MX_BLOCK)
    args: list[Any] = [spec((k, m), dtype), spec((k, n), dtype)]
    if dtype.startswith("mx"):
        args += [spec((kb, m), "uint8"), spec((kb, n), "uint8")]
    result = trnsim.run_kernel(_KT(), *args, target=target, timing=True, out_dtype=out_dtype)
    return _summary(result.profile)


@lru_cache(maxsize=512)
def _library_time(target: str, m: int, k: int, n: int, dtype: str, sparsity: str | None,
                  out_dtype: str) -> KernelTime:
    import trnsim
    from trnsim.kernels.gemm import matmul_kernel

    spec = trnsim.TensorSpec
    kb = -(-k // MX_BLOCK)
    args: list[Any] = [spec((m, k), dtype)]
    params: dict[str, Any] = {"out_dtype": out_dtype}
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
    return KernelTime(profile.total_seconds, busy, profile.hbm_bytes, profile.instructions, profile.flops,
                      engine_counts(profile))


def clear_memo() -> None:
    """Forget every timed kernel and its trace: the next compile times its matmuls as a new process would
    (benchmarks use this to measure a cold compile honestly)."""
    from trnsim.compiler import convgen, dmagen, dmascatter, intreduce, poolgen, selection, tilegen
    from trnsim.kernels.gemm import matmul_kernel

    tilegen.clear_memo()
    dmagen.clear_memo()
    dmascatter.clear_memo()
    intreduce.clear_memo()
    convgen.clear_memo()
    poolgen.clear_memo()
    selection.clear_memo()
    _library_time.cache_clear()
    _kt_time.cache_clear()
    matmul_kernel.forget_traces()
    _KT.forget()
