"""Speed of the StableHLO compiler and of a training step through ``trnsim.jit``, as ratios against JAX on
CPU measured in the same run.

    python benchmarks/compile.py        (or: make bench)

The program is the training step of ``trnsim.examples.gpt`` (``examples/gpt.py``) with ``GPTConfig()`` (2
layers, d_model 128, sequence 64, vocabulary 128) and batch 16: forward, backward and AdamW, about 1,100
StableHLO ops.

* compile: lowering with ``jax.jit(step).lower`` then ``trnsim.compile(lowered, cache=False)`` (parse, import,
  the seven passes) against lowering then XLA compiling for CPU (``lowered.compile()``), JAX's caches
  cleared each round. Informational; ``trnsim.compile`` alone is printed below it.
* layer: ``trnsim.compile`` of one Llama-3 70B decoder layer, forward and backward, lowered from
  ``jax.ShapeDtypeStruct`` inputs (no data), then its static profile; every matmul and generated elementwise
  kernel is traced and timed by the instruction-level model (large matmuls on two samples, extrapolated).
  Informational, against one [4096×8192]×[8192×8192] float32 numpy matmul.
* step: one call of the ``trnsim.jit``-wrapped step (signature lookup, the functional run on the reference
  executor, and the profile of the simulated time) against one call of the ``jax.jit``-wrapped step (both
  compiled once before timing). Goal for float32: ≤ 3×. bfloat16 is reported, without a goal: numpy has no
  bf16 arithmetic, so the executor widens every op to f32 and rounds back.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
import trnsim
from _timing import ratio, report
from trnsim.examples import gpt

BATCH = 16
GOAL = 3.0


def _median_ratio(candidate: Callable[[], object], baseline: Callable[[], object], rounds: int) -> tuple[float, ...]:
    """As ``_timing.ratio`` without the warm-up call (a compile is timed cold each round)."""
    c_times, b_times = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        baseline()
        t1 = time.perf_counter()
        candidate()
        t2 = time.perf_counter()
        b_times.append(t1 - t0)
        c_times.append(t2 - t1)
    ratios = [c / b for c, b in zip(c_times, b_times, strict=True)]
    return statistics.median(ratios), statistics.median(c_times), statistics.median(b_times)


def bench(dtype: str) -> bool:
    cfg = gpt.GPTConfig(dtype=dtype)
    params = gpt.init_params(cfg, jax.random.key(0))
    opt = gpt.init_opt_state(params)
    ids = gpt.CharTokenizer().encode(gpt.load_corpus(200_000))
    x, y = next(gpt.batches(ids, BATCH, cfg.seq_len, seed=0))
    step = gpt.make_train_step(cfg)
    args = (params, opt, jnp.int32(0), x, y)

    def trn_compile() -> object:
        jax.clear_caches()
        return trnsim.compile(jax.jit(step).lower(*args), cache=False)

    def xla_compile() -> object:
        jax.clear_caches()          # NOTE: else JAX hands back the executable it compiled last round
        return jax.jit(step).lower(*args).compile()

    lowered = jax.jit(step).lower(*args)
    ops = lowered.as_text().count(" = stablehlo.")
    res = _median_ratio(trn_compile, xla_compile, rounds=3)
    print(f"{f'lower + compile GPT train step, {dtype}':<48} {res[0]:6.2f}x  (informational)   "
          f"[{res[1] * 1e3:.1f} ms vs {res[2] * 1e3:.1f} ms for lower + XLA:CPU compile]")
    t0 = time.perf_counter()
    passes = trnsim.compile(lowered, cache=False).passes
    print(f"  trnsim.compile alone: {(time.perf_counter() - t0) * 1e3:.0f} ms for {ops} ops; passes: " +
          ", ".join(f"{p.name} {p.seconds * 1e3:.1f}" for p in passes) + " ms")

    on_trn = trnsim.jit(step, cache=False)
    on_cpu = jax.jit(step)
    name = f"GPT train step via trnsim.jit, {dtype}, batch {BATCH}"
    res = ratio(lambda: on_trn(*args), lambda: jax.block_until_ready(on_cpu(*args)), rounds=7)
    if dtype == "float32":
        ok = report(name, GOAL, res, "jax.jit on CPU")
    else:
        ok = True
        print(f"{name:<48} {res[0]:6.2f}x  (informational)   [{res[1] * 1e3:.1f} ms vs {res[2] * 1e3:.1f} ms "
              f"for jax.jit on CPU]")
    prof = on_trn.last_profile
    print(f"  simulated: {prof.total_seconds * 1e6:.0f} us per step on one NeuronCore, MFU {prof.mfu:.1%}, "
          f"{len(prof.steps)} kernel steps")
    return ok


def bench_layer() -> None:
    """Compile and statically time one Llama-3 70B layer, forward and backward, from shapes alone."""
    import numpy as np

    from trnsim.compiler.kernel_timing import clear_memo
    from trnsim.examples.llama_layer import LLAMA3_70B, lower_forward_backward

    a = np.ones((4096, 8192), np.float32)
    b = np.ones((8192, 8192), np.float32)
    lowered = lower_forward_backward(LLAMA3_70B)
    programs: list[trnsim.CompiledProgram] = []

    def compile_layer() -> None:
        clear_memo()                                  # time every kernel afresh, as a new process would
        programs.append(trnsim.compile(lowered, cache=False))

    r, c, base = ratio(compile_layer, lambda: a @ b, rounds=1)
    prof = programs[-1].profile()
    print(f"{'compile + time a 70B layer fwd+bwd (seq 4096)':<48} {r:6.2f}x  (informational)   [{c:.1f} s vs "
          f"{base:.2f} s for a [4096x8192]x[8192x8192] float32 numpy matmul]")
    print(f"  simulated: {prof.total_seconds * 1e3:.0f} ms on one NeuronCore, MFU {prof.mfu:.1%} of "
          f"{prof.peak_flops / 1e12:.1f} TFLOP/s, {prof.flops / 1e12:.1f} TFLOP, {len(prof.steps)} kernel steps")


def main() -> int:
    ok = bench("float32")
    ok &= bench("bfloat16")
    bench_layer()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
