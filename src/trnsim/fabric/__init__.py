"""Chip interconnects and the cost of collective communication over them.

A :class:`Topology` stacks the levels of a preset (node, scale-up domain, scale-out network); a
:class:`Group` is a communicator on it (ranks ``i * stride``); :func:`collective` costs one collective on a
group with every algorithm that applies (alpha-beta formulas, accelerators_cluster_cost.md §4) and picks
one by an explicit policy.

    >>> from trnsim import hw
    >>> from trnsim.fabric import Topology, collective
    >>> topo = Topology.for_chip(hw.get("trn3"), 64)
    >>> dp = topo.group(4, stride=16)          # one rank per 16-chip node, 4 nodes of the UltraServer
    >>> dp.ranks_per_level
    (1, 4)
    >>> cost = collective("all-reduce", 64 * 2**20, dp)
    >>> cost.algorithm, round(cost.time_s * 1e6)
    ('ring', 261)
"""

from __future__ import annotations

from trnsim.fabric.algorithms import ALGORITHMS, Algorithm, Phase
from trnsim.fabric.collective import OPS, POLICIES, CollectiveCost, Op, collective
from trnsim.fabric.errors import FabricError
from trnsim.fabric.group import Group, Shape, Span
from trnsim.fabric.topology import MAX_CHIPS, Level, Topology

__all__ = [
    "ALGORITHMS",
    "MAX_CHIPS",
    "OPS",
    "POLICIES",
    "Algorithm",
    "CollectiveCost",
    "FabricError",
    "Group",
    "Level",
    "Op",
    "Phase",
    "Shape",
    "Span",
    "Topology",
    "collective",
]
