"""Communicators of a training plan on the cluster topology, and cached collective times.

Ranks are laid out as Megatron-LM does ("tp-cp-ep-dp-pp", innermost first): rank = tp_i + TP·(cp_i + CP·(dp_i
+ DP·pp_i)), chips numbered node-major (``trnsim.fabric.Topology``). So tensor parallelism stays inside a
node, context and data parallelism come next, and pipeline stages are farthest apart:

=========  ==========================  =====================================================================
group      ranks (size, stride)        carries
=========  ==========================  =====================================================================
tp         TP, 1                       all-reduce / all-gather / reduce-scatter of activations
cp         CP, TP                      ring-attention K/V chunks
dp         DP·CP, TP                   gradient reduction and ZeRO gathers of dense weights
ep         EP, TP·CP                   token all-to-all (experts take adjacent data-parallel ranks)
edp        DP·CP/EP, TP·EP             gradient reduction of expert weights
pp         2, TP·CP·DP                 activations between neighbouring pipeline stages
=========  ==========================  =====================================================================

Costs come from :func:`trnsim.fabric.collective` with its default policy (the fastest valid algorithm);
they are cached per (op, size, group), since a plan search asks for the same few collectives many times.
"""

from __future__ import annotations

import functools

from trnsim.cluster.config import Plan
from trnsim.fabric import Group, Topology, collective
from trnsim.hw.spec import ChipSpec

_TOPOLOGIES: dict[tuple[object, ...], Topology] = {}


def topology(spec: ChipSpec, chips: int) -> Topology:
    """``Topology.for_chip``, cached on the spec fields it reads (specs hold dicts, so are not hashable)."""
    key = (spec.name, spec.source, spec.topology, spec.links, chips)
    topo = _TOPOLOGIES.get(key)
    if topo is None:
        topo = _TOPOLOGIES[key] = Topology.for_chip(spec, chips)
    return topo


def groups(spec: ChipSpec, plan: Plan) -> dict[str, Group]:
    """The plan's communicators on ``plan.chips`` chips (module table)."""
    return _groups(topology(spec, plan.chips), plan.tp, plan.cp, plan.dp, plan.ep, plan.pp)


@functools.lru_cache(maxsize=1024)
def _groups(topo: Topology, tp: int, cp: int, dp: int, ep: int, pp: int) -> dict[str, Group]:
    return {"tp": topo.group(tp, 1), "cp": topo.group(cp, tp), "dp": topo.group(dp * cp, tp),
            "ep": topo.group(ep, tp * cp), "edp": topo.group(max(1, dp * cp // ep), tp * ep),
            "pp": topo.group(2 if pp > 1 else 1, tp * cp * dp)}


@functools.lru_cache(maxsize=65536)
def collective_time(op: str, nbytes: float, group: Group) -> float:
    """Seconds for one collective (0 on a group of one rank)."""
    if group.size == 1 or nbytes <= 0:
        return 0.0
    return collective(op, nbytes, group).time_s
