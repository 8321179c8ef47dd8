"""Speed of kernels written in trnsim.dsl, run through ``run_kernel`` on the functional simulator, as ratios
against numpy baselines measured in the same run.

    python benchmarks/kernels.py        (or: make bench)

The matmul goal (≤ 2× a float32 numpy matmul of the same shapes) is for the cached path: a kernel is traced
once per shape (as NKI caches kernels), so a repeated ``run_kernel`` only runs the program. The first call,
which also traces and verifies the program, is reported separately. The operands are bf16 arrays
(``ml_dtypes.bfloat16``), whose codes go into HBM as they are; a second line passes the same values as fp32
arrays typed bf16, which ``run_kernel`` rounds on the way in (two more passes over 4M values each).
``--plain`` runs the simulator's plain reference path (``Device(fast_paths=False)``) for comparison.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import trnsim
from _timing import ratio, report
from trnsim import dsl
from trnsim.kernels import flash_attention, flash_attention_kernel, matmul_kernel
from trnsim.sim import fastpath


def main() -> int:
    if "--plain" in sys.argv[1:]:
        fastpath.ENABLED = False
    rng = np.random.default_rng(0)
    n = 2048
    a16 = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b16 = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    a, b = a16.astype(np.float32), b16.astype(np.float32)  # the same values, for numpy
    ta, tb = dsl.typed(a, "bf16"), dsl.typed(b, "bf16")

    def run() -> object:  # bf16 operands as bf16 arrays: their codes are copied into HBM
        return dsl.run_kernel(matmul_kernel, a16, b16).outputs[0]

    def run_from_fp32() -> object:  # fp32 arrays that run_kernel rounds to bf16 on the way in
        return dsl.run_kernel(matmul_kernel, ta, tb).outputs[0]

    def baseline() -> object:
        return a @ b

    start = time.perf_counter()
    matmul_kernel.compile(a16, b16)
    trace = time.perf_counter() - start
    res = ratio(run, baseline, rounds=5)
    ok = report(f"matmul {n}^3 bf16 (run_kernel, traced once)", 2.0, res, "float32 numpy matmul")
    print(f"{'  first call: trace + verify':<48} {trace / res[2]:6.2f}x  ({trace * 1e3:.0f} ms, "
          f"{sum(len(s) for s in matmul_kernel.compile(a16, b16).program.streams.values())} instructions)")
    res = ratio(run_from_fp32, baseline, rounds=5)
    print(f"{'  fp32 arrays rounded to bf16 by run_kernel':<48} {res[0]:6.2f}x  ({res[1] * 1e3:.1f} ms)")
    ok &= attention()
    return 0 if ok else 1


def attention() -> bool:
    """Flash attention forward, batch 1, 8 heads, 2048 x 128, bf16, through run_kernel (host function,
    traced once) against float32 numpy softmax(Q Kᵀ / √d) V on the same values; also the program's time on
    the timing model. NOTE: the program has 2,560 small matmuls (≤ 128x128x512); the simulator sums each
    PSUM accumulation group in one BLAS call (``trnsim.sim.fastpath``), but the calls stay small, and
    OpenBLAS's threads make small calls several times slower on a busy machine (OPENBLAS_NUM_THREADS=1
    avoids that)."""
    rng = np.random.default_rng(0)
    shape = (1, 8, 2048, 128)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    qf, kf, vf = (x.astype(np.float32) for x in (q, k, v))
    scale = np.float32(1 / np.sqrt(shape[-1]))

    def baseline() -> object:
        s = qf @ np.swapaxes(kf, -1, -2) * scale
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ vf

    start = time.perf_counter()
    flash_attention(q, k, v)
    first = time.perf_counter() - start
    res = ratio(lambda: flash_attention(q, k, v), baseline, rounds=3)
    ok = report("flash_attention fwd 1x8x2048x128 bf16 (traced once)", 3.0, res, "float32 numpy attention")
    program = flash_attention_kernel.compile(*(dsl.typed(x, "bf16") for x in (q, k, v)), causal=False, scale=None,
                                             kv_tile=None).program  # the host call's cached trace
    print(f"{'  first call: trace + verify + run':<48} {first / res[2]:6.2f}x  ({first * 1e3:.0f} ms, "
          f"{sum(len(s) for s in program.streams.values())} instructions)")
    profile = trnsim.Device("trn3").run(program, timing_only=True, check=False)
    print(f"  on the timing model: {profile.total_seconds * 1e6:.0f} us, MFU {profile.mfu:.2f}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
