"""Run an elementwise kernel over cache-sized chunks, on every core.

numpy releases the GIL inside its loops, so chunks of a few hundred KiB processed by a small thread pool
keep both the caches and the cores busy. Chunks write disjoint slices of preallocated outputs, so the
result does not depend on scheduling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache

_MIN_CHUNKS_FOR_THREADS = 4


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="trnsim-numerics")


def for_chunks(n: int, step: int, work: Callable[[int, int], None]) -> None:
    """Call ``work(start, stop)`` for consecutive ranges of ``step`` covering ``range(n)``."""
    ranges = [(s, min(s + step, n)) for s in range(0, n, step)]
    if len(ranges) < _MIN_CHUNKS_FOR_THREADS or (os.cpu_count() or 1) == 1:
        for start, stop in ranges:
            work(start, stop)
        return
    for future in [_pool().submit(work, start, stop) for start, stop in ranges]:
        future.result()  # re-raises a worker's exception here
