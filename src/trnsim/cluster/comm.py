"""Communicators of a training plan on the cluster topology, and memoised collective times.

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

Costs come from :func:`trnsim.fabric.collective` with its default policy (the fastest valid algorithm).
One :class:`Communicators` object exists per spec and parallel layout; it memoises every collective time,
since a plan search asks for the same few collectives many times.
"""

from __future__ import annotations

from trnsim.cluster._cache import per_spec
from trnsim.cluster.config import Plan
from trnsim.fabric import Group, Topology, collective
from trnsim.hw.spec import ChipSpec


class Communicators:
    """The groups of one parallel layout (module table) and their collective times. Hashed by identity:
    :func:`communicators` hands out one object per (spec, layout), so it can key other caches cheaply."""

    __slots__ = ("_memo", "groups")

    def __init__(self, topo: Topology, tp: int, cp: int, dp: int, ep: int, pp: int) -> None:
        self.groups: dict[str, Group] = {
            "tp": topo.group(tp, 1), "cp": topo.group(cp, tp), "dp": topo.group(dp * cp, tp),
            "ep": topo.group(ep, tp * cp), "edp": topo.group(max(1, dp * cp // ep), tp * ep),
            "pp": topo.group(2 if pp > 1 else 1, tp * cp * dp)}
        self._memo: dict[tuple[str, float, str], float] = {}

    def time(self, op: str, nbytes: float, group: str) -> float:
        """Seconds for one ``op`` of ``nbytes`` (nccl-tests size) on ``group`` (0 on one rank)."""
        key = (op, nbytes, group)
        found = self._memo.get(key)
        if found is None:
            g = self.groups[group]
            found = self._memo[key] = 0.0 if g.size == 1 or nbytes <= 0 else collective(op, nbytes, g).time_s
        return found


def topology(spec: ChipSpec, chips: int) -> Topology:
    """``Topology.for_chip(spec, chips)``, cached per spec object."""
    return per_spec(spec, f"topology:{chips}", lambda: Topology.for_chip(spec, chips))


def communicators(spec: ChipSpec, plan: Plan) -> Communicators:
    """The plan's communicators on ``plan.chips`` chips of ``spec`` (cached per spec and layout)."""
    key = f"comm:{plan.chips}:{plan.tp}:{plan.cp}:{plan.dp}:{plan.ep}:{plan.pp}"
    return per_spec(spec, key, lambda: Communicators(topology(spec, plan.chips), plan.tp, plan.cp, plan.dp,
                                                     plan.ep, plan.pp))
