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

Costs come from :func:`trnsim.fabric.collective` with the policy of the chip's collective library
(``COLLECTIVE_POLICY``: NCCL's algorithms on NVIDIA and AMD, Neuron's size rule on Trainium), on
the *achieved* link rates: ``trnsim.fabric`` works at line rate, and the estimator scales each link by the
fraction of it that collective traffic gets (``LINK_EFFICIENCY``: per chip where a documented figure exists,
else per link kind; a link with neither runs at line rate, and the estimate says so nowhere else — see the
table). One :class:`Communicators` object exists per spec and parallel layout; it memoises every collective
time, since a plan search asks for the same few collectives many times.
"""

from __future__ import annotations

import dataclasses

from trnsim.cluster._cache import per_spec
from trnsim.cluster.config import Plan
from trnsim.fabric import Group, Topology, collective
from trnsim.hw.spec import ChipSpec

# Fraction of a link's line rate that collective traffic achieves, with its source. Data, not code: one line per
# documented figure. Per chip first (preset name → link kind), then per link kind; otherwise line rate.
# NOTE: NCCL sizes its rings and trees with these per-link NVLink rates (src/graph/topo.h); nccl-tests' bus
# bandwidth on 8-GPU NVSwitch boards sits near links × that rate, not near the line rate.
CHIP_LINK_EFFICIENCY: dict[str, dict[str, tuple[float, str]]] = {
    "a100": {"nvlink": (20.0 / 25.0, "NCCL src/graph/topo.h (NVIDIA/nccl): SM80_NVLINK_BW 20.0 GB/s per NVLink 3 "
                                     "link, of its 25 GB/s per direction")},
    "h100": {"nvlink": (20.6 / 25.0, "NCCL src/graph/topo.h (NVIDIA/nccl): SM90_NVLINK_BW 20.6 GB/s per NVLink 4 "
                                     "link, of its 25 GB/s per direction")},
    "h200": {"nvlink": (20.6 / 25.0, "NCCL src/graph/topo.h (NVIDIA/nccl): SM90_NVLINK_BW 20.6 GB/s per NVLink 4 "
                                     "link (H200 is an SM90 GPU), of its 25 GB/s per direction")},
}
_RDMA = "accelerators_cluster_cost.md §2.2 [ML-ENG-NET]: ib_write_bw \"193.72Gbps on one adapter, or 96.9% of that " \
        "adapter's 200Gbps line rate\" (EFA)"
LINK_EFFICIENCY: dict[str, tuple[float, str]] = {
    "efa": (0.969, _RDMA),
    "infiniband": (0.969, "assumption: the same RDMA-write fraction as EFA's measured 96.9% (" + _RDMA + "); "
                          "per-packet headers cost InfiniBand about as much"),
    "ethernet": (0.969, "assumption: RoCE NICs as EFA's measured RDMA-write fraction 96.9% (" + _RDMA + ")"),
}


def link_efficiency(spec: ChipSpec, kind: str) -> tuple[float, str]:
    """(achieved fraction of line rate, source) of ``spec``'s links of ``kind`` (1.0 where nothing is known)."""
    found = CHIP_LINK_EFFICIENCY.get(spec.name, {}).get(kind) or LINK_EFFICIENCY.get(kind)
    return found or (1.0, "no documented figure: line rate")


def achieved(spec: ChipSpec) -> ChipSpec:
    """``spec`` with every link at its achieved rate (``link_efficiency``), cached per spec object."""
    def build() -> ChipSpec:
        links = tuple(dataclasses.replace(lk, bandwidth=lk.bandwidth * link_efficiency(spec, lk.kind)[0])
                      for lk in spec.links)
        return dataclasses.replace(spec, links=links)
    return per_spec(spec, "achieved-links", build)


class Communicators:
    """The groups of one parallel layout (module table) and their collective times. Hashed by identity:
    :func:`communicators` hands out one object per (spec, layout), so it can key other caches cheaply."""

    __slots__ = ("_memo", "groups", "policy")

    def __init__(self, topo: Topology, tp: int, cp: int, dp: int, ep: int, pp: int, policy: str = "fastest") -> None:
        self.policy = policy
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
            found = 0.0 if g.size == 1 or nbytes <= 0 else collective(op, nbytes, g, policy=self.policy).time_s
            self._memo[key] = found
        return found


def topology(spec: ChipSpec, chips: int) -> Topology:
    """``Topology.for_chip`` of ``spec`` at achieved link rates (:func:`achieved`), cached per spec object."""
    return per_spec(spec, f"topology:{chips}", lambda: Topology.for_chip(achieved(spec), chips))


# Designer → the collective library's algorithm choice (trnsim.fabric.POLICIES): NCCL on NVIDIA, RCCL (NCCL's
# port) on AMD, the Neuron runtime's documented size rule on Trainium; others take the fastest valid algorithm.
COLLECTIVE_POLICY: dict[str, str] = {"NVIDIA": "nccl", "AMD": "nccl", "AWS": "neuron"}


def collective_policy(spec: ChipSpec) -> str:
    return COLLECTIVE_POLICY.get(spec.meta.designer.split()[0], "fastest")


def communicators(spec: ChipSpec, plan: Plan) -> Communicators:
    """The plan's communicators on ``plan.chips`` chips of ``spec`` (cached per spec and layout)."""
    key = f"comm:{plan.chips}:{plan.tp}:{plan.cp}:{plan.dp}:{plan.ep}:{plan.pp}"
    return per_spec(spec, key, lambda: Communicators(topology(spec, plan.chips), plan.tp, plan.cp, plan.dp,
                                                     plan.ep, plan.pp, collective_policy(spec)))
