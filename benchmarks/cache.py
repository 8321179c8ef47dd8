"""Speed of the compile cache, against baselines measured in the same run.

    python benchmarks/cache.py        (or: make bench)

- warm load: ``trnsim.compile`` of the GPT train step (examples/gpt.py, bf16, batch 16, as a
  ``jax.stages.Lowered``) with the program already in a local cache, against its cold compile
  (``cache=False``, with the per-process memo of timed matmul kernels cleared, as in a new process), in
  interleaved rounds: goal ≤ 1/50. A hit returns once the entry is read and verified; its graph and plan are
  decoded on first use, so the load with that decoding is reported beside it;
- a cold start at scale: 8 processes started at once on an empty shared cache (``file://`` temporary folder)
  against 1 process on another empty one. Each process lowers the step and calls ``trnsim.compile``; the
  goal is that the 8 together compile once (builds summed from each process's ``CompileCache.stats``).
  Wall time from launch to the last exit is reported for both (no goal: 8 processes share the cores).

``--profile`` prints where a warm load spends its time (cProfile, cumulative).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _timing import ratio, report

WARM_GOAL = 1 / 50
PROCESSES = 8


def gpt_step() -> Any:
    from trnsim.examples.gpt import DEMO_BATCH, GPTConfig, lower_train_step

    return lower_train_step(GPTConfig(dtype="bfloat16"), DEMO_BATCH)


def bench_warm(folder: str) -> bool:
    import trnsim
    from trnsim.compiler.kernel_timing import clear_memo
    from trnsim.runtime.cache import CompileCache

    lowered = gpt_step()
    cache = CompileCache("file://" + folder)
    first = trnsim.compile(lowered, cache=cache)
    assert not first.cache_hit

    def warm() -> None:
        assert trnsim.compile(lowered, cache=cache).cache_hit

    def warm_decoded() -> None:
        program = trnsim.compile(lowered, cache=cache)
        _ = (program.graph, program.plan)      # what the first run or profile decodes

    def cold() -> None:
        # NOTE: a cold compile also times its matmul kernels afresh (kernel_timing memoises them per process)
        clear_memo()
        trnsim.compile(lowered, cache=False)

    ok = report("GPT train step: warm-cache load / cold compile", WARM_GOAL, ratio(warm, cold, rounds=7),
                "a cold compile")
    r, c, b = ratio(warm_decoded, cold, rounds=7)
    print(f"{'  (also) load + decode graph and plan':<48} {r:6.3f}x  (no goal)   [{c * 1e3:.1f} ms vs "
          f"{b * 1e3:.1f} ms]")
    return ok


def worker(url: str) -> None:
    """One process of the cold start: lower, compile through the cache at ``url``, print what happened."""
    from trnsim.runtime.cache import CompileCache
    from trnsim.runtime.program import compile as compile_cached

    lowered = gpt_step()
    cache = CompileCache(url)
    start = time.perf_counter()
    program = compile_cached(lowered, cache=cache)
    elapsed = time.perf_counter() - start
    print(json.dumps({"builds": cache.stats.builds, "waits": cache.stats.waits, "hit": program.cache_hit,
                      "compile_s": elapsed}))


def _cold_start(n: int, folder: str) -> tuple[float, list[dict[str, Any]]]:
    url = "file://" + folder
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", url], stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed: exit codes {[p.returncode for p in procs]}")
    return wall, [json.loads(o.strip().splitlines()[-1]) for o in outs]


def bench_cold_start(root: str) -> bool:
    one_wall, one = _cold_start(1, os.path.join(root, "one"))
    many_wall, many = _cold_start(PROCESSES, os.path.join(root, "many"))
    builds = sum(r["builds"] for r in many)
    entries = len(list(Path(root, "many").glob("*.trnc")))
    ok = builds == 1 and entries == 1
    waited = max(r["compile_s"] for r in many)
    print(f"{f'{PROCESSES} processes at once, empty shared cache':<48} {builds:6d}   compiles (goal 1: "
          f"{'met' if ok else 'MISSED'}; {entries} entry, {sum(r['waits'] for r in many)} processes waited for "
          f"it)")
    print(f"{'  wall time, launch to last exit':<48} {many_wall / one_wall:6.2f}x  (no goal)   [{many_wall:.2f} s "
          f"for {PROCESSES} vs {one_wall:.2f} s for 1 process ({one[0]['builds']} compile, "
          f"{one[0]['compile_s']:.2f} s in trnsim.compile); slowest trnsim.compile of the {PROCESSES}: "
          f"{waited:.2f} s]")
    return ok


def profile_warm() -> None:
    import cProfile
    import pstats

    import trnsim

    lowered = gpt_step()
    with tempfile.TemporaryDirectory() as folder:
        url = "file://" + folder
        trnsim.compile(lowered, cache=url)
        trnsim.compile(lowered, cache=url)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            trnsim.compile(lowered, cache=url)
        prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
        return 0
    if sys.argv[1:2] == ["--profile"]:
        profile_warm()
        return 0
    with tempfile.TemporaryDirectory() as root:
        ok = bench_warm(os.path.join(root, "warm"))
        ok = bench_cold_start(os.path.join(root, "start")) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
