"""``Profile``: what a timed run did — total time, engine and DMA-queue utilisation, bytes and bandwidth,
FLOPs with HFU/MFU, a per-label breakdown, the critical path, and a Chrome/Perfetto trace.

Definitions:

* ``total_seconds``: until the last result (signal, DMA completion, TensorE drain) is visible.
* busy time of an engine or queue: Σ (end − start) of its instructions (TensorE includes exposed
  LoadStationary); utilisation = busy / total.
* ``flops``: 2·K·M·N per matmul (K dense: a 2:4 stationary with K/2 stored rows counts K);
  ``transpose_flops`` likewise for TensorE transposes, counted separately.
* ``hfu`` / ``mfu`` (``reference/neuron.md`` §3.5: element count including / excluding transposes over
  rows × cols × cycles), measured against the peak of each instruction's dtype: Σ FLOPs_i / peak(dtype_i)
  over the total time. The peak is one NeuronCore's TensorE: rows × cols × 2 × clock × rate (× sparse).
* ``hbm_bytes``: bytes DMA read from and wrote to HBM; ``hbm_bandwidth`` = hbm_bytes / total.

Labels group instructions for a per-kernel breakdown without touching instruction classes: a mapping
``(engine, index) → label`` given to ``Device.run(..., labels=...)``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trnsim.isa.base import ENGINES
from trnsim.sim.timing.costs import core_of
from trnsim.sim.timing.schedule import QUEUE_TRACK, VIA_NAMES, Timeline

Labels = Mapping[tuple[str, int], str]


def track_name(track: int) -> str:
    """``tensor`` … ``sync`` for engines, ``dma<q>`` for DMA queue q."""
    return ENGINES[track] if track < QUEUE_TRACK else f"dma{track - QUEUE_TRACK}"


@dataclass(frozen=True)
class LabelStats:
    """One label's instructions: count, first start, last result, busy seconds per track, work."""

    instructions: int
    start: float
    end: float
    busy: dict[str, float]
    flops: float
    transpose_flops: float
    dma_bytes: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class PathStep:
    """One instruction on the critical path, and why it could not start earlier (``via``)."""

    track: str
    engine: str
    index: int
    mnemonic: str
    start: float
    end: float
    via: str


@dataclass(frozen=True)
class CriticalPath:
    """The chain of instructions that fixes the total time, first to last, with the seconds of the chain
    spent on each track (the rest is latency: DMA fixed cost is inside transfers, TensorE drain is not)."""

    steps: tuple[PathStep, ...]
    by_track: dict[str, float]

    @property
    def by_engine(self) -> dict[str, float]:
        """``by_track`` with all DMA queues together as ``dma``."""
        out: dict[str, float] = defaultdict(float)
        for track, seconds in self.by_track.items():
            out["dma" if track.startswith("dma") else track] += seconds
        return dict(out)

    @property
    def bound(self) -> str:
        """The engine (or ``dma``: the queues together) holding most of the path: what bounds the run."""
        by = self.by_engine
        return max(by, key=lambda t: by[t]) if by else "none"


@dataclass(frozen=True)
class Profile:
    """Timing of one program on one NeuronCore (see the module docstring for every definition)."""

    target: str
    total_seconds: float
    instructions: int
    engine_busy: dict[str, float]
    engine_utilization: dict[str, float]
    queue_busy: dict[int, float]
    queue_utilization: dict[int, float]
    dma_transfers: int
    dma_bytes: int
    hbm_bytes: int
    flops: float
    transpose_flops: float
    flops_by_dtype: dict[str, float]
    peak_flops: float
    peak_name: str
    hfu: float
    mfu: float
    exposed_load_seconds: float
    labels: dict[str, LabelStats]
    timeline: Timeline = field(repr=False, compare=False)
    label_of: dict[int, str] = field(repr=False, compare=False)

    @property
    def achieved_flops(self) -> float:
        """Matmul FLOP/s (transposes excluded)."""
        return self.flops / self.total_seconds if self.total_seconds else 0.0

    @property
    def hbm_bandwidth(self) -> float:
        """Achieved HBM bandwidth, bytes/s."""
        return self.hbm_bytes / self.total_seconds if self.total_seconds else 0.0

    @property
    def dma_bandwidth(self) -> float:
        return self.dma_bytes / self.total_seconds if self.total_seconds else 0.0

    @property
    def arithmetic_intensity(self) -> float:
        """Matmul FLOPs per HBM byte (inf without HBM traffic)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else float("inf")

    def critical_path(self) -> CriticalPath:
        """Follow what fixed each start back from the instruction whose result lands last."""
        tl = self.timeline
        if not len(tl):
            return CriticalPath((), {})
        g = max(range(len(tl)), key=lambda i: (tl.effect[i], tl.seq[i]))
        chain: list[int] = []
        while g >= 0 and len(chain) <= len(tl):
            chain.append(g)
            g = tl.pred[g]
        by_track: dict[str, float] = defaultdict(float)
        steps: list[PathStep] = []
        for g in reversed(chain):
            name = track_name(tl.track[g])
            by_track[name] += tl.end[g] - tl.start[g]
            steps.append(PathStep(name, tl.engine[g], tl.index[g], tl.instruction[g].mnemonic, tl.start[g],
                                  tl.end[g], VIA_NAMES[tl.via[g]]))
        return CriticalPath(tuple(steps), dict(by_track))

    def to_chrome_trace(self) -> dict[str, Any]:
        """Chrome/Perfetto trace JSON (``trnsim.sim.trace``)."""
        from trnsim.sim.trace import chrome_trace

        return chrome_trace(self)

    def save_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the Chrome trace atomically; open it in ui.perfetto.dev."""
        from trnsim.fileio import write_atomic

        return write_atomic(path, json.dumps(self.to_chrome_trace(), separators=(",", ":")).encode())

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (SI units: seconds, bytes, FLOP, bytes/s, FLOP/s)."""
        return {
            "target": self.target, "total_seconds": self.total_seconds, "instructions": self.instructions,
            "engine_busy": self.engine_busy, "engine_utilization": self.engine_utilization,
            "queue_busy": {str(q): v for q, v in self.queue_busy.items()},
            "queue_utilization": {str(q): v for q, v in self.queue_utilization.items()},
            "dma_transfers": self.dma_transfers, "dma_bytes": self.dma_bytes, "hbm_bytes": self.hbm_bytes,
            "hbm_bandwidth": self.hbm_bandwidth, "flops": self.flops, "transpose_flops": self.transpose_flops,
            "flops_by_dtype": self.flops_by_dtype, "achieved_flops": self.achieved_flops,
            "peak_flops": self.peak_flops, "peak_name": self.peak_name, "hfu": self.hfu, "mfu": self.mfu,
            "exposed_load_seconds": self.exposed_load_seconds,
            "labels": {k: {"instructions": v.instructions, "start": v.start, "end": v.end, "seconds": v.seconds,
                           "busy": v.busy, "flops": v.flops, "transpose_flops": v.transpose_flops,
                           "dma_bytes": v.dma_bytes} for k, v in self.labels.items()},
        }


def _peak(tl: Timeline, ideal: dict[tuple[str, bool], float], work: float) -> tuple[float, str]:
    """The peak FLOP/s the run is measured against, and its name."""
    te = core_of(tl.spec).tensor
    if len(ideal) > 1:
        names = ", ".join(f"{d}{' sparse' if s else ''}" for d, s in sorted(ideal))
        return work / sum(ideal.values()), f"mixed ({names}): each instruction against its dtype's peak"
    dtype, sparse = next(iter(ideal)) if ideal else ("bf16", False)
    peak = te.flops(dtype, sparse)
    mult = f" x sparse {te.sparse_multiplier.get(dtype, 1.0):g}" if sparse else ""
    return peak, (f"{dtype} {'sparse' if sparse else 'dense'}, one NeuronCore: {te.rows}x{te.cols} PEs x 2 FLOP x "
                  f"{te.clock / 1e9:g} GHz x rate {te.rate.get(dtype, 1.0):g}{mult} = {peak / 1e12:.1f} TFLOP/s")


def build_profile(tl: Timeline, labels: Labels | None = None) -> Profile:
    """Aggregate a timeline into a ``Profile``."""
    core = core_of(tl.spec)
    te = core.tensor
    total = tl.total_seconds
    busy = [0.0] * (QUEUE_TRACK + core.dma.queues)
    for t, s, e in zip(tl.track, tl.start, tl.end, strict=True):
        busy[t] += e - s
    flops = tflops = 0.0
    by_dtype: dict[str, float] = defaultdict(float)
    ideal: dict[tuple[str, bool], float] = defaultdict(float)
    ideal_mm = 0.0
    gid_flops: dict[int, float] = {}
    for g, w in tl.tensor.items():
        f = 2.0 * w.k * w.m * w.n
        gid_flops[g] = f
        seconds = f / (te.macs_per_cycle * 2 * te.clock * w.rate)
        ideal[(w.dtype, w.sparse)] += seconds
        if w.transpose:
            tflops += f
        else:
            flops += f
            ideal_mm += seconds
            by_dtype[w.dtype] += f
    peak, peak_name = _peak(tl, ideal, flops + tflops)
    label_of: dict[int, str] = {}
    if labels:
        for g, (e, i) in enumerate(zip(tl.engine, tl.index, strict=True)):
            lab = labels.get((e, i))
            if lab is not None:
                label_of[g] = lab
    return Profile(
        target=tl.spec.name, total_seconds=total, instructions=len(tl),
        engine_busy={e: busy[k] for k, e in enumerate(ENGINES)},
        engine_utilization={e: busy[k] / total if total else 0.0 for k, e in enumerate(ENGINES)},
        queue_busy={q: busy[QUEUE_TRACK + q] for q in range(core.dma.queues)},
        queue_utilization={q: busy[QUEUE_TRACK + q] / total if total else 0.0 for q in range(core.dma.queues)},
        dma_transfers=len(tl.dma), dma_bytes=sum(c.nbytes for c in tl.dma.values()),
        hbm_bytes=sum(c.hbm_bytes for c in tl.dma.values()), flops=flops, transpose_flops=tflops,
        flops_by_dtype=dict(by_dtype), peak_flops=peak, peak_name=peak_name,
        hfu=sum(ideal.values()) / total if total else 0.0, mfu=ideal_mm / total if total else 0.0,
        exposed_load_seconds=sum(tl.exposed_load.values()), labels=_label_stats(tl, label_of, gid_flops),
        timeline=tl, label_of=label_of)


def _label_stats(tl: Timeline, label_of: dict[int, str], gid_flops: dict[int, float]) -> dict[str, LabelStats]:
    groups: dict[str, list[int]] = defaultdict(list)
    for g, lab in label_of.items():
        groups[lab].append(g)
    out: dict[str, LabelStats] = {}
    for lab, gids in groups.items():
        busy: dict[str, float] = defaultdict(float)
        for g in gids:
            busy[track_name(tl.track[g])] += tl.end[g] - tl.start[g]
        out[lab] = LabelStats(
            len(gids), min(tl.start[g] for g in gids), max(tl.effect[g] for g in gids), dict(busy),
            sum(gid_flops[g] for g in gids if g in tl.tensor and not tl.tensor[g].transpose),
            sum(gid_flops[g] for g in gids if g in tl.tensor and tl.tensor[g].transpose),
            sum(tl.dma[g].nbytes for g in gids if g in tl.dma))
    return out
