"""Speed of kernels written in trnsim.dsl, run through ``run_kernel`` on the functional simulator, as ratios
against numpy baselines measured in the same run.

    python benchmarks/kernels.py        (or: make bench)

The matmul goal (≤ 2× a float32 numpy matmul of the same shapes) is for the cached path: a kernel is traced
once per shape (as NKI caches kernels), so a repeated ``run_kernel`` only runs the program. The first call,
which also traces and verifies the 1,472-instruction program, is reported separately.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _timing import ratio, report
from trnsim import dsl
from trnsim.kernels import matmul_kernel


def main() -> int:
    rng = np.random.default_rng(0)
    n = 2048
    a = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    ta, tb = dsl.typed(a, "bf16"), dsl.typed(b, "bf16")

    def run() -> object:
        return dsl.run_kernel(matmul_kernel, ta, tb).outputs[0]

    def baseline() -> object:
        return a @ b

    start = time.perf_counter()
    matmul_kernel.compile(ta, tb)
    trace = time.perf_counter() - start
    res = ratio(run, baseline, rounds=5)
    ok = report(f"matmul {n}^3 bf16 (run_kernel, traced once)", 2.0, res, "float32 numpy matmul")
    print(f"{'  first call: trace + verify':<48} {trace / res[2]:6.2f}x  ({trace * 1e3:.0f} ms, "
          f"{sum(len(s) for s in matmul_kernel.compile(ta, tb).program.streams.values())} instructions)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
