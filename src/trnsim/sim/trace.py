"""Chrome / Perfetto trace export of a ``Profile`` (the Trace Event Format's JSON object form).

One process (the NeuronCore), one thread (``tid``) per engine and per DMA queue, named by metadata
events. Every instruction that takes time is a complete event (``"ph": "X"``) on its track, with its
mnemonic as name, microsecond ``ts``/``dur``, and in ``args`` its text form (operands, waits, signals),
engine index, label and cost details (K/M/N and FLOPs; bytes, descriptors and efficiency). A DMA also
leaves an instant event (``"ph": "i"``) where its engine issued it; a ``nop`` is an instant. Events on a
track never overlap, and the list is sorted by time. Open the file in ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trnsim.isa.base import ENGINES
from trnsim.sim.timing.schedule import QUEUE_TRACK

if TYPE_CHECKING:
    from trnsim.sim.profile import Profile

US = 1e6  # seconds → microseconds (the format's unit)
PID = 0


def _thread_names(profile: Profile) -> list[dict[str, Any]]:
    names = {k: f"{e}" for k, e in enumerate(ENGINES)}
    names.update({QUEUE_TRACK + q: f"DMA queue {q}" for q in profile.queue_busy})
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                                   "args": {"name": f"NeuronCore ({profile.target})"}}]
    for tid, name in names.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}})
    return meta


def chrome_trace(profile: Profile) -> dict[str, Any]:
    """The trace as a JSON-ready dict: ``{"traceEvents": [...], "displayTimeUnit": "ns", ...}``."""
    tl = profile.timeline
    events: list[dict[str, Any]] = []
    for g, ins in enumerate(tl.instruction):
        args: dict[str, Any] = {"instruction": str(ins), "engine": tl.engine[g], "index": tl.index[g]}
        label = profile.label_of.get(g)
        if label is not None:
            args["label"] = label
        work, dma = tl.tensor.get(g), tl.dma.get(g)
        if work is not None:
            args.update(K=work.k, M=work.m, N=work.n, dtype=work.dtype, flops=2 * work.k * work.m * work.n,
                        transpose=work.transpose, exposed_load_us=tl.exposed_load.get(g, 0.0) * US)
        if dma is not None:
            args.update(bytes=dma.nbytes, hbm_bytes=dma.hbm_bytes, descriptors=dma.descriptors,
                        efficiency=round(dma.efficiency, 4), queue=dma.queue, issued_us=tl.issue[g] * US)
            events.append({"name": f"issue {ins.mnemonic} q{dma.queue}", "cat": "dma-issue", "ph": "i", "s": "t",
                           "ts": tl.issue[g] * US, "pid": PID, "tid": ENGINES.index(tl.engine[g])})
        if tl.end[g] > tl.start[g] or dma is not None:
            events.append({"name": ins.mnemonic, "cat": tl.engine[g] if dma is None else "dma", "ph": "X",
                           "ts": tl.start[g] * US, "dur": (tl.end[g] - tl.start[g]) * US, "pid": PID,
                           "tid": tl.track[g], "args": args})
        else:
            events.append({"name": ins.mnemonic, "cat": tl.engine[g], "ph": "i", "s": "t", "ts": tl.start[g] * US,
                           "pid": PID, "tid": tl.track[g], "args": args})
    events.sort(key=lambda ev: (ev["ts"], ev["tid"]))
    return {"traceEvents": _thread_names(profile) + events, "displayTimeUnit": "ns",
            "otherData": {"generator": "trnsim", "target": profile.target,
                          "total_us": profile.total_seconds * US, "hfu": profile.hfu, "mfu": profile.mfu}}
