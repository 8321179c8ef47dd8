"""The profile of a compiled program's run: when each kernel step ran on which engine, utilisation, FLOPs
and MFU, HBM traffic, where the time goes, and a Chrome/Perfetto trace.

The times come from the compiled plan (``trnsim.compiler.costs``), with control flow multiplied out by the
trips the run actually took. MFU is the matmul FLOPs over the run time and the dense bf16 TensorE peak of
one NeuronCore (``rows × cols × 2 × clock``, ``reference/neuron.md`` §3.5); ``peak_flops`` states it.
``memory`` gives the bytes the HBM plan rematerialised and spilled and the seconds of their ``recompute``,
``spill`` and ``reload`` steps (which also appear in ``steps`` and ``by_kernel``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trnsim.compiler.lowering import ENGINES, Plan, Step, run_schedule

if TYPE_CHECKING:
    from trnsim.compiler.api import CompiledProgram
    from trnsim.ir.interp import Interpreter

TRACKS = (*ENGINES, "dma")


@dataclass(frozen=True)
class StepRecord:
    index: int
    kernel: str
    ops: str
    loc: str
    start: float
    end: float
    busy: dict[str, float]
    dma_seconds: float
    dma_bytes: float
    flops: float


@dataclass
class ProgramProfile:
    target: str
    total_seconds: float
    steps: list[StepRecord]
    peak_flops: float
    flops: float
    hbm_bytes: float
    engine_busy: dict[str, float] = field(default_factory=dict[str, float])
    memory: dict[str, float] = field(default_factory=dict[str, float])   # Plan.memory_costs(): remat and spills

    @property
    def mfu(self) -> float:
        return self.flops / (self.total_seconds * self.peak_flops) if self.total_seconds and self.peak_flops else 0.0

    @property
    def utilisation(self) -> dict[str, float]:
        t = self.total_seconds
        return {e: (b / t if t else 0.0) for e, b in self.engine_busy.items()}

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_bytes / self.total_seconds if self.total_seconds else 0.0

    def by_kernel(self) -> dict[str, tuple[int, float]]:
        """kernel → (steps, seconds from start to end summed), most expensive first."""
        out: dict[str, list[float]] = {}
        for s in self.steps:
            row = out.setdefault(s.kernel, [0, 0.0])
            row[0] += 1
            row[1] += s.end - s.start
        return {k: (int(v[0]), v[1]) for k, v in sorted(out.items(), key=lambda kv: -kv[1][1])}

    def top_steps(self, n: int = 10) -> list[StepRecord]:
        return sorted(self.steps, key=lambda s: -(s.end - s.start))[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "total_seconds": self.total_seconds, "flops": self.flops,
                "peak_flops": self.peak_flops, "mfu": self.mfu, "hbm_bytes": self.hbm_bytes,
                "hbm_bandwidth": self.hbm_bandwidth, "engine_busy": self.engine_busy,
                "utilisation": self.utilisation, "memory": self.memory,
                "by_kernel": {k: {"steps": n, "seconds": t} for k, (n, t) in self.by_kernel().items()}}

    def to_chrome_trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON (open in ui.perfetto.dev): one track per engine and one for DMA."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "pid": 0, "tid": i, "name": "thread_name", "args": {"name": track}}
            for i, track in enumerate(TRACKS)]
        events.append({"ph": "M", "pid": 0, "name": "process_name", "args": {"name": f"NeuronCore ({self.target})"}})
        for s in self.steps:
            for track, seconds in [*s.busy.items(), ("dma", s.dma_seconds)]:
                if seconds <= 0:
                    continue
                events.append({"ph": "X", "pid": 0, "tid": TRACKS.index(track), "name": s.kernel,
                               "ts": s.start * 1e6, "dur": seconds * 1e6,
                               "args": {"step": s.index, "ops": s.ops, "loc": s.loc, "flops": s.flops,
                                        "dma_bytes": s.dma_bytes}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def save_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the Chrome trace atomically; open it in ui.perfetto.dev."""
        from trnsim.fileio import write_atomic

        return write_atomic(path, json.dumps(self.to_chrome_trace(), separators=(",", ":")).encode())


def _durations(plan: Plan, graph_nodes: list[Any], runs: dict[int, int]) -> list[float]:
    out = []
    for s in plan.steps:
        if not s.sub:
            out.append(s.seconds)
            continue
        node = graph_nodes[s.nodes[0]]
        extra = sum(runs.get(id(region), 0) * sub.total_seconds for region, sub in zip(node.regions, s.sub,
                                                                                          strict=True))
        static = s.seconds - sum(sub.total_seconds for sub in s.sub)
        out.append(static + extra)
    return out


def build_profile(program: CompiledProgram, runs: dict[int, int] | None = None) -> ProgramProfile:
    """The profile of one run (``runs``: region trips the interpreter counted; None: the static plan)."""
    plan: Plan = program.plan
    durations = _durations(plan, program.graph.nodes, runs) if runs is not None else [s.seconds for s in plan.steps]
    saved = [(s.start, s.end) for s in plan.steps]
    total = run_schedule(plan, durations)
    records = [_record(s, d, program.graph.nodes, runs) for s, d in zip(plan.steps, durations, strict=True)]
    for s, (a, b) in zip(plan.steps, saved, strict=True):
        s.start, s.end = a, b
    busy: dict[str, float] = dict.fromkeys(TRACKS, 0.0)
    for r in records:
        for e, t in r.busy.items():
            busy[e] += t
        busy["dma"] += r.dma_seconds
    core = program.spec.core
    assert core is not None
    peak = core.tensor.flops("bf16")
    return ProgramProfile(plan.target, total, records, peak, sum(r.flops for r in records),
                          sum(r.dma_bytes for r in records), busy, plan.memory_costs())


def _record(s: Step, duration: float, nodes: list[Any], runs: dict[int, int] | None) -> StepRecord:
    busy, flops, dma_s, dma_b = dict(s.busy), s.flops, s.dma_seconds, s.dma_bytes
    if s.sub:
        node = nodes[s.nodes[0]]
        for region, sub in zip(node.regions, s.sub, strict=True):
            trips = runs.get(id(region), 0) if runs is not None else 1
            for step in sub.steps:
                for e, t in step.busy.items():
                    busy[e] = busy.get(e, 0.0) + trips * t
                flops += trips * step.flops
                dma_s += trips * step.dma_seconds
                dma_b += trips * step.dma_bytes
    return StepRecord(s.index, s.kernel, "+".join(dict.fromkeys(s.ops)), s.loc, s.start, s.start + duration, busy,
                      dma_s, dma_b, flops)


def profile_run(program: CompiledProgram, interp: Interpreter) -> ProgramProfile:
    return build_profile(program, interp.region_runs)
