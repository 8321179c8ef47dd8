"""Ratio timing for benchmarks: candidate and baseline measured alternately in the same process.

Machines are shared and noisy, so a bare time means little; each benchmark reports candidate/baseline,
both timed in interleaved rounds, as the median of the per-round ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def _once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ratio(
    candidate: Callable[[], object], baseline: Callable[[], object], rounds: int = 7
) -> tuple[float, float, float]:
    """(median ratio, median candidate seconds, median baseline seconds) over interleaved rounds."""
    candidate()
    baseline()  # warm caches, tables and thread pools
    c_times, b_times, ratios = [], [], []
    for _ in range(rounds):
        b = _once(baseline)
        c = _once(candidate)
        c_times.append(c)
        b_times.append(b)
        ratios.append(c / b)
    return statistics.median(ratios), statistics.median(c_times), statistics.median(b_times)


def report(name: str, goal: float, result: tuple[float, float, float], baseline: str) -> bool:
    r, c, b = result
    ok = r <= goal
    print(f"{name:<48} {r:6.2f}x  (goal <= {goal:g}x: {'met' if ok else 'MISSED'})   "
          f"[{c * 1e3:.1f} ms vs {b * 1e3:.1f} ms for {baseline}]")
    return ok
