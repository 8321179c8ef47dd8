"""Speed of the timing model, as a ratio against numpy computing the same matmul in the same run.

    python benchmarks/timing.py        (or: make bench)

The program is [4096 x 8192] x [8192 x 8192] in bf16, built with ProgramBuilder the way a good kernel
tiles it (``trnsim.sim.timing.examples.matmul_program``: 128x128 stationary tiles, 512-wide moving tiles,
K accumulated in PSUM, stationary row blocks resident in SBUF, double buffering): 42,496 instructions.
Timing-only simulation (scheduler + profile, the verifier excluded: it is timed separately) against
``a @ b`` in float32 numpy.

Then the library's DSL kernel (``trnsim.kernels.matmul_kernel``, traced from shape descriptions and timed
timing-only) at 2048³ and at the shape above: its HFU beside the hand-built program's at that shape.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import trnsim
from _timing import ratio, report
from trnsim.kernels import matmul_kernel
from trnsim.sim.timing import matmul_program

M, K, N = 4096, 8192, 8192
KERNEL_SHAPES = ((2048, 2048, 2048), (M, K, N))


def main() -> int:
    t0 = time.perf_counter()
    program = matmul_program(M, K, N)
    built = time.perf_counter() - t0
    count = sum(len(s) for s in program.streams.values())
    device = trnsim.Device("trn3")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    profile = device.run(program, timing_only=True, check=False)
    res = ratio(lambda: device.run(program, timing_only=True, check=False), lambda: a @ b, rounds=5)
    ok = report(f"timing-only {M}x{K}x{N} bf16 matmul program", 0.1, res, "numpy float32 a @ b")
    print(f"  {count:,} instructions: {count / res[1]:,.0f} simulated instructions/s "
          f"(program built with ProgramBuilder in {built:.2f} s)")
    t0 = time.perf_counter()
    program.verify(device.spec)
    print(f"  verifier (check=True, once): {time.perf_counter() - t0:.2f} s")
    print(f"  simulated: {profile.total_seconds * 1e3:.3f} ms on one NeuronCore, HFU {profile.hfu:.1%} "
          f"({profile.peak_name})")
    for m, k, n in KERNEL_SHAPES:
        t0 = time.perf_counter()
        shapes = trnsim.TensorSpec((m, k), "bf16"), trnsim.TensorSpec((k, n), "bf16")
        run = trnsim.run_kernel(matmul_kernel, *shapes, timing=True)
        hand = device.run(matmul_program(m, k, n), timing_only=True, check=False)
        kernel = run.profile
        assert kernel is not None
        print(f"DSL matmul_kernel {m}x{k}x{n} bf16: HFU {kernel.hfu:.1%}, {kernel.hfu / hand.hfu:.3f}x the "
              f"hand-built program's {hand.hfu:.1%} ({kernel.instructions:,} instructions, traced and timed in "
              f"{time.perf_counter() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
