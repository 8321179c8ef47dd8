"""trnsim.dsl.deps's index of live accesses: the waits, retirements and fences are exactly those of the obvious
scan over every earlier access (``Reference`` below, the specification), and a kernel that streams a long
tensor through small boxes does work linear in its instructions (exact box checks counted, not timed)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim
from trnsim import dsl
from trnsim.dsl import deps
from trnsim.dsl.deps import Access, Box, Wait

# ---- the specification: every earlier access checked ---------------------------------------------------------


class ReferenceHazards:
    def __init__(self) -> None:
        self.writes: list[Access] = []
        self.reads: list[Access] = []

    def fence(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for a in (*self.writes, *self.reads):
            last[a.domain] = max(last.get(a.domain, -1), a.index)
        return last


class Reference:
    """The dependency tracker as a linear scan of each buffer's live accesses."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.known: dict[str, dict[str, int]] = {}
        self.clocks: dict[str, list[dict[str, int]]] = {}

    def waits(self, domain: str, reads: Sequence[tuple[Any, Box]],
              writes: Sequence[tuple[Any, Box, bool]]) -> tuple[Wait, ...]:
        need: dict[str, int] = {}

        def depend(accesses: list[Access], box: Box) -> None:
            for a in accesses:
                if a.domain != domain and deps.overlaps(a.box, box):
                    need[a.domain] = max(need.get(a.domain, 0), a.index + 1)

        for h, box in reads:
            depend(h.writes, box)
        for h, box, _ in writes:
            depend(h.writes, box)
            depend(h.reads, box)
        known = self.known.get(domain, {})
        return tuple(sorted((d, n) for d, n in need.items() if n > known.get(d, 0)))

    def record(self, domain: str, reads: Sequence[tuple[Any, Box]], writes: Sequence[tuple[Any, Box, bool]],
               wait: Sequence[Wait] = ()) -> int:
        index = self.counts.get(domain, 0)
        self.counts[domain] = index + 1
        known = dict(self.known.get(domain, {}))
        for d, n in wait:
            for e, m in self.clocks[d][n - 1].items():
                known[e] = max(known.get(e, 0), m)
        known[domain] = index + 1
        self.known[domain] = known
        self.clocks.setdefault(domain, []).append(known)
        for h, box in reads:
            h.reads.append(Access(box, domain, index))
        for h, box, dense in writes:
            if dense:
                h.writes = [a for a in h.writes if not deps.contains(box, a.box)]
                h.reads = [a for a in h.reads if not deps.contains(box, a.box)]
            h.writes.append(Access(box, domain, index))
        return index

    def inherit(self, h: ReferenceHazards, box: Box, fence: dict[str, int]) -> None:
        h.writes.extend(Access(box, d, i) for d, i in sorted(fence.items()))


# ---- the same waits as the reference -------------------------------------------------------------------------

DOMAINS = ["dma0", "dma1", "vector", "scalar"]
interval = st.tuples(st.integers(-2, 40), st.integers(0, 24)).map(lambda t: (t[0], t[0] + t[1] - 2))  # some empty
boxes = st.tuples(interval, interval)
step = st.tuples(st.sampled_from(["access", "inherit"]), st.sampled_from(DOMAINS),
                 st.lists(st.tuples(st.integers(0, 1), boxes), max_size=2),
                 st.lists(st.tuples(st.integers(0, 1), boxes, st.booleans()), max_size=2))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=60))
def test_waits_retirements_and_fences_are_the_linear_scans(steps: list[Any]) -> None:
    fast, slow = deps.DependencyTracker(), Reference()
    fh, sh = [deps.Hazards(), deps.Hazards()], [ReferenceHazards(), ReferenceHazards()]
    for kind, domain, reads, writes in steps:
        if kind == "inherit":
            for k, box in reads:
                fast.inherit(fh[k], box, fh[1 - k].fence())
                slow.inherit(sh[k], box, sh[1 - k].fence())
            continue
        wait = fast.waits(domain, [(fh[k], b) for k, b in reads], [(fh[k], b, d) for k, b, d in writes])
        assert wait == slow.waits(domain, [(sh[k], b) for k, b in reads], [(sh[k], b, d) for k, b, d in writes])
        fast.record(domain, [(fh[k], b) for k, b in reads], [(fh[k], b, d) for k, b, d in writes], wait)
        slow.record(domain, [(sh[k], b) for k, b in reads], [(sh[k], b, d) for k, b, d in writes], wait)
        for f, s in zip(fh, sh, strict=True):
            assert f.writes == s.writes and f.reads == s.reads and f.fence() == s.fence()


# ---- traced programs -----------------------------------------------------------------------------------------

def streaming_kernel(n: int) -> Any:
    """Each row of an [n, 2] tensor loaded, doubled and stored on its own: n small boxes per HBM tensor."""

    @trnsim.kernel
    def rows(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        for i in range(x.shape[0]):
            t = dsl.load(x[i : i + 1, :])
            dsl.store(out[i : i + 1, :], dsl.multiply(t, 2.0))
        return out

    return rows


def tiled_kernel(n: int) -> Any:
    """Partition rows of tiles written one by one (dense), read back in halves and as a whole."""

    @trnsim.kernel
    def tiles(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        for r in range(0, x.shape[0], 128):
            t = dsl.sbuf((128, 4))
            for p in range(128):
                dsl.load(t[p : p + 1, :], x[r + p : r + p + 1, :])
            u = dsl.sbuf((128, 4))
            dsl.copy(t[:, :2], out=u[:, 2:], engine="gpsimd")
            dsl.copy(t[:, 2:], out=u[:, :2], engine="scalar")
            dsl.store(out[r : r + 128, :], dsl.add(t, u))
        return out

    return tiles


KERNELS = {"streaming": streaming_kernel, "tiled": tiled_kernel}


@contextmanager
def reference_tracking() -> Iterator[None]:
    from trnsim.dsl import tensor, trace

    saved = tensor.Hazards, trace.DependencyTracker
    tensor.Hazards, trace.DependencyTracker = ReferenceHazards, Reference  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        tensor.Hazards, trace.DependencyTracker = saved  # type: ignore[misc]


@pytest.mark.parametrize("name", list(KERNELS))
def test_traced_programs_are_the_references(name: str) -> None:
    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    fast = KERNELS[name](256).compile(x).program
    with reference_tracking():
        slow = KERNELS[name](256).compile(x).program
    assert str(fast) == str(slow) and any(ins.wait for ins in fast.stream("vector"))


class Checks:
    """Counts the exact box checks (``overlaps`` and ``contains``) the tracker makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        overlaps, contains = deps.overlaps, deps.contains

        def counted_overlaps(a: Box, b: Box) -> bool:
            self.count += 1
            return overlaps(a, b)

        def counted_contains(a: Box, b: Box) -> bool:
            self.count += 1
            return contains(a, b)

        monkeypatch.setattr(deps, "overlaps", counted_overlaps)
        monkeypatch.setattr(deps, "contains", counted_contains)


@pytest.mark.parametrize("name", list(KERNELS))
def test_exact_checks_grow_linearly_with_the_instructions(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = Checks(monkeypatch)
    per_instruction: list[float] = []
    for n in (512, 2048):
        checks.count = 0
        program = KERNELS[name](n).compile(np.zeros((n, 4), np.float32)).program
        instructions = sum(len(s) for s in program.streams.values())
        per_instruction.append(checks.count / instructions)
    assert per_instruction[1] <= 1.1 * per_instruction[0] and per_instruction[1] < 8   # a scan: ~n/2 each
