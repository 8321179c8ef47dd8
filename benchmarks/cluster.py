"""Speed of the cluster estimator and the planner, against goals and baselines measured in the same run.

    python benchmarks/cluster.py        (or: make bench)

- one estimate of Llama-3 405B on 16,384 trn3 chips, in a fresh process (model and target loaded, every
  estimator cache cold): goal under 50 ms; ratio against the same plan's estimate once the caches are warm;
- planner throughput, Llama-3 70B on 1,024 trn3 chips, whole default search space, in this process after a
  first search has cached the layer shapes: goal at least 1,000 configurations estimated per second; ratio of
  the planner's time per estimated configuration to a bare ``estimate_plan`` call on the same plans;
- the same search on the process pool (one worker per core): speed-up against the in-process search.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import ratio
from trnsim import hw
from trnsim.cluster import TrainingConfig, estimate, estimate_plan, models, planner, resolve

ESTIMATE_GOAL_S = 0.050
PLANNER_GOAL = 1000.0  # configurations estimated per second
COLD_RUNS = 5


def cold_405b() -> float:
    """Seconds for the first estimate in this process (run in a child: ``cluster.py --cold-405b``)."""
    model, spec = models.get("llama3-405b"), hw.get("trn3")
    start = time.perf_counter()
    estimate(model, spec, 16384)
    return time.perf_counter() - start


def bench_405b() -> bool:
    runs = [float(subprocess.run([sys.executable, __file__, "--cold-405b"], check=True, capture_output=True,
                                 text=True).stdout) for _ in range(COLD_RUNS)]
    cold = statistics.median(runs)
    model, spec = models.get("llama3-405b"), hw.get("trn3")
    plan = estimate(model, spec, 16384).plan
    warm = min(_time(lambda: estimate_plan(model, spec, plan)) for _ in range(200))
    ok = cold < ESTIMATE_GOAL_S
    print(f"{'llama3-405b on 16384 trn3, one estimate (cold)':<56} {cold * 1e3:7.2f} ms  (goal < "
          f"{ESTIMATE_GOAL_S * 1e3:g} ms: {'met' if ok else 'MISSED'})   [{cold / warm:.0f}x a warm estimate_plan, "
          f"{warm * 1e6:.0f} us; median of {COLD_RUNS} fresh processes; plan {plan.describe().split(';')[0]}]")
    return ok


def bench_planner() -> bool:
    model, spec, chips = models.get("llama3-70b"), hw.get("trn3"), 1024
    first = planner.search(model, spec, chips, workers=1, progress=False)  # caches the layer shapes
    estimated = first.evaluated + sum(r.count for r in first.rejections if r.reason in ("memory: activations",
                                                                                       "topology"))
    cfg = TrainingConfig(global_batch=first.global_batch)
    plans = [resolve(model, spec, chips, _config(cfg, s.candidate)) for s in first.ranked[::4]]

    def search() -> None:
        planner.search(model, spec, chips, workers=1, progress=False)

    def bare() -> None:
        for p in plans:
            estimate_plan(model, spec, p)

    r, c, b = ratio(search, bare, rounds=3)
    per_config = r * len(plans) / estimated
    rate = estimated / c
    ok = rate >= PLANNER_GOAL
    print(f"{'planner, llama3-70b on 1024 trn3 (in-process, warm)':<56} {rate:7,.0f} /s  (goal >= "
          f"{PLANNER_GOAL:,.0f} configurations estimated/s: {'met' if ok else 'MISSED'})   "
          f"[{first.considered:,} considered ({first.considered / c:,.0f}/s), {estimated:,} estimated in "
          f"{c:.2f} s]")
    print(f"{'  time per estimated configuration':<56} {per_config:7.2f}x  (no goal)   [vs a bare estimate_plan, "
          f"{b / len(plans) * 1e6:.0f} us, on {len(plans):,} of the same plans]")

    start = time.perf_counter()
    pooled = planner.search(model, spec, chips, progress=False)
    wall = time.perf_counter() - start
    print(f"{'  on the process pool':<56} {estimated / wall:7,.0f} /s  (no goal)   [{c / wall:.2f}x the "
          f"in-process speed with {pooled.workers} processes, {wall:.2f} s]")
    assert pooled.ranked == first.ranked, "the pool changed the result"
    return ok


def _config(base: TrainingConfig, c: planner.Candidate) -> TrainingConfig:
    return TrainingConfig(global_batch=base.global_batch, dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, sp=c.sp,
                          interleave=c.interleave, zero=c.zero, recompute=c.recompute, micro_batch=c.micro_batch)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    if sys.argv[1:] == ["--cold-405b"]:
        print(cold_405b())
        return 0
    ok = bench_405b()
    ok &= bench_planner()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
