"""Speed of the emulated formats, as ratios against numpy/ml_dtypes baselines measured in the same run.

    python benchmarks/numerics.py        (or: make bench)
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import trnsim.numerics as tn
from _timing import ratio, report


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1 << 24, dtype=np.float32)  # 16M values
    bf16_round_trip = lambda: x.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    ok = True
    for fmt in ("mxfp6_e2m3", "mxfp8_e4m3"):
        res = ratio(lambda f=fmt: tn.mx_quantize(x, f).dequantize(), bf16_round_trip)
        ok &= report(f"{fmt} quantize+dequantize, 16M float32", 4.0, res, "bf16 round trip (ml_dtypes)")
        res = ratio(lambda f=fmt: tn.quantize(x, f), bf16_round_trip)
        report(f"{fmt} fused quantize (tn.quantize), 16M", 4.0, res, "bf16 round trip (ml_dtypes)")
    res = ratio(lambda: tn.quantize(x, "fp8_e4m3"), bf16_round_trip)
    report("fp8_e4m3 element quantize, 16M", 4.0, res, "bf16 round trip (ml_dtypes)")

    a = rng.standard_normal((2048, 2048), dtype=np.float32)
    b = rng.standard_normal((2048, 2048), dtype=np.float32)
    mx_matmul = lambda: tn.quantize(a, "mxfp8_e4m3") @ tn.quantize(b, "mxfp8_e4m3", axis=0)  # noqa: E731
    res = ratio(mx_matmul, lambda: a @ b)
    ok &= report("MXFP8 matmul 2048^3 (quantize both, fp32 matmul)", 1.5, res, "float32 numpy matmul")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
