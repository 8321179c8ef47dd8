"""A communicator: which chips take part, and what each rank can send across every level it spans.

``topo.group(size, stride)`` picks ranks ``r_i = i * stride`` (``i < size``) on a :class:`Topology`. For each
level the group has ``ranks_per_level[k]`` units of the level below inside one unit of level ``k``: a DP
group of 32 with stride 8 on 8-chip nodes is ``(1, 32)``, one rank per node on 32 nodes. Levels with more
than one such unit are *spanned*; each becomes a :class:`Span` with the per-rank bandwidths that the cost
formulas use.

Contention model (the usual case in training: every chip of a node is busy in its own group at once, the
groups at other offsets having the same shape):

- every chip owns its links at each level, NIC shares included (EFA/InfiniBand bandwidth is per chip in
  the presets), so a rank gets its own chip's bandwidth and a node's ``q`` ranks of one group together get
  ``q`` times that — what a flat ring spreads its node crossings over, one channel per rank (NCCL-style);
- switch levels (NVSwitch, NeuronSwitch, PCIe through a host) and the scale-out fat-tree give a rank its
  full per-chip bandwidth to any peer, divided by the level's oversubscription ratio;
- a fully connected level (MI300X's Infinity Fabric) gives one link per peer in the group;
- on a torus or ring, a rank counts the link directions its group can use: a dimension the group covers as
  a closed ring gives 2 (both directions; on a full 4×4 torus the two edge-disjoint Hamiltonian cycles of
  neuron.md §4.2 run both ways and use all 4 links), an open segment gives 1, and a dimension covered
  every ``s``-th chip shares its links with the ``s`` groups at the other offsets (÷ ``s``). One peer at a
  time (recursive halving-doubling, send/recv) gets one link; all peers at once (mesh) get the ring's
  links divided by the mean hop count between group members.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trnsim.fabric.errors import FabricError
from trnsim.hw.spec import TOPOLOGY_KINDS

if TYPE_CHECKING:
    from trnsim.fabric.topology import Level, Topology


@dataclass(frozen=True)
class Share:
    """What one rank can use at a level, in links: neighbour traffic, one peer at a time, every peer at once,
    and how many messages it can have in flight (its usable ports)."""

    ring: float
    single: float
    mesh: float
    ports: int


@dataclass(frozen=True)
class Span:
    """One spanned level of a group. Bandwidths are per rank, one direction, in bytes/s.

    ``ranks``: members of the sub-group at this level (units of the level below, e.g. nodes);
    ``inner``: group ranks inside one unit of the level below (the fewest, if the group is irregular);
    ``peers``: group ranks a rank reaches through this level and no lower one (the most, if irregular);
    ``edges``: hops of a node-major ring's n−1-hop chain that cross this level (units below − units here).
    """

    level: str
    ranks: int
    inner: int
    peers: int
    edges: int
    latency_s: float
    ring: float
    single: float
    mesh: float
    ports: int

    def alone(self) -> Span:
        """This level as a one-level sub-group (one rank per unit below), as a hierarchical phase runs it."""
        return replace(self, inner=1, peers=self.ranks - 1, edges=self.ranks - 1)


@dataclass(frozen=True)
class Shape:
    """What the cost formulas see: group size, spanned levels (innermost first), regularity."""

    size: int
    spans: tuple[Span, ...]
    regular: bool

    @property
    def latency_s(self) -> float:
        """A flat algorithm's per-step latency: its slowest (outermost) hop."""
        return max(sp.latency_s for sp in self.spans)

    @property
    def ring_latency_s(self) -> float:
        """One pass of a flat ring: a chunk's n−1 hops, each at the latency of the level it crosses (data
        moves on as soon as it arrives, so a ring pays the slow hops only where it crosses slow links)."""
        return sum(sp.edges * sp.latency_s for sp in self.spans)

    @property
    def ring_bandwidth(self) -> float:
        """A flat ring's per-rank bandwidth: each unit's crossing spread over its ``inner`` ranks' links."""
        return min(sp.inner * sp.ring for sp in self.spans)

    @property
    def single_bandwidth(self) -> float:
        """One-peer bandwidth of the slowest spanned level."""
        return min(sp.single for sp in self.spans)


# --- link shares per topology kind -------------------------------------------------------------------------

def _switch(level: Level, members: Sequence[int]) -> Share:
    """Every link goes to the switch (or host, or network): any peer gets all of them."""
    return Share(level.links, level.links, level.links, level.links)


def _fully_connected(level: Level, members: Sequence[int]) -> Share:
    """One direct link per peer: a ring can run on m−1 edge-disjoint directed Hamiltonian cycles of the
    complete graph on the m members, a mesh sends to each peer on its own link, one peer gets one link."""
    peers = min(len(members) - 1, level.links)
    return Share(peers, 1, peers, max(1, peers))


def _torus(level: Level, members: Sequence[int]) -> Share:
    """Link directions per rank on a torus/ring, from the members' coordinates (see the module docstring)."""
    dims = level.dims
    if not dims:  # NOTE: torus size not in the preset (TPU pod): the group is a closed, near-cubic slice
        dims = _cube(len(members), TOPOLOGY_KINDS.get(level.kind, 1))
        members = range(len(members))
    coords = [_coords(m, dims) for m in members]
    ring, spacing, mean_hops = 0.0, 1, 0.0
    for d, size in enumerate(dims):
        values = sorted({c[d] for c in coords})
        if len(values) < 2:
            continue
        step = math.gcd(*(b - a for a, b in itertools.pairwise(values)))
        closed = len(values) * step == size
        ring += (2 if closed and size > 2 else 1) / step
        spacing = max(spacing, step)
        mean_hops += _mean_distance(len(values), closed)
    n = len(members)
    ring = min(ring, level.links)
    hops = max(1.0, mean_hops * n / (n - 1))  # mean over the other members, not over all pairs
    return Share(ring, min(1.0 / spacing, ring), ring / hops, max(1, math.ceil(ring)))


def _cube(count: int, ndim: int) -> tuple[int, ...]:
    """``count`` as ``ndim`` factors, each as close to the ``ndim``-th root as divisibility allows."""
    dims: list[int] = []
    for left in range(ndim, 0, -1):
        target = round(count ** (1 / left))
        f = min((d for d in range(1, count + 1) if count % d == 0), key=lambda d: (abs(d - target), d))
        dims.append(f)
        count //= f
    return tuple(dims)


def _coords(index: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for size in dims:
        index, c = divmod(index, size)
        out.append(c)
    return tuple(out)


def _mean_distance(count: int, closed: bool) -> float:
    """Mean steps between two of ``count`` members on a closed ring or an open line (pairs with itself too)."""
    total = sum(min(abs(i - j), count - abs(i - j)) if closed else abs(i - j)
                for i in range(count) for j in range(count))
    return total / count**2


# Topology kind → how a rank's links are shared (a table: a new kind is one entry here).
SHARES: dict[str, Callable[[Level, Sequence[int]], Share]] = {
    "switch": _switch, "pcie": _switch, "fat-tree": _switch, "fully-connected": _fully_connected,
    "ring": _torus, "torus2d": _torus, "torus3d": _torus,
}


@dataclass(frozen=True)
class Group:
    """Ranks ``i * stride`` (``i < size``) on ``topology``; see the module docstring for the model."""

    topology: Topology
    size: int
    stride: int
    ranks_per_level: tuple[int, ...]
    regular: bool
    shape: Shape

    @property
    def ranks(self) -> range:
        return range(0, self.size * self.stride, self.stride)

    @property
    def spans(self) -> tuple[Span, ...]:
        return self.shape.spans

    @property
    def egress_bandwidth(self) -> float:
        """The most a rank can send per second over all levels it spans together (0 for one rank): no
        collective's bus bandwidth can exceed it."""
        return sum(max(sp.ring, sp.single, sp.mesh) for sp in self.spans)

    @classmethod
    def build(cls, topology: Topology, size: int, stride: int = 1) -> Group:
        chips = topology.chips
        if size < 1 or stride < 1:
            raise FabricError(f"group size and stride must be at least 1, got size={size}, stride={stride}")
        if (size - 1) * stride >= chips:
            fit = (chips - 1) // stride + 1
            raise FabricError(f"a group of {size} ranks with stride {stride} needs {(size - 1) * stride + 1} "
                              f"chips; the topology has {chips}",
                              hint=f"use --chips {(size - 1) * stride + 1} or more, or a group of at most {fit}")
        ranks = range(0, size * stride, stride)
        # unit sizes in chips: a rank alone, then each level's unit (the outermost holds every chip)
        unit = [1, *(lv.size for lv in topology.levels[:-1]), chips]
        counts = [Counter(r // u for r in ranks) for u in unit]
        per_level: list[int] = []
        spans: list[Span] = []
        regular = True
        for k, level in enumerate(topology.levels):
            inner, outer = unit[k], unit[k + 1]
            distinct: dict[int, set[int]] = {}
            for r in ranks:
                distinct.setdefault(r // outer, set()).add(r // inner)
            fan = max(len(v) for v in distinct.values())
            regular &= len(set(counts[k + 1].values())) == 1 and min(len(v) for v in distinct.values()) == fan
            per_level.append(fan)
            if fan < 2:
                continue
            # where the group sits inside the first unit (rank 0's): ids of the units below, which for unit 0
            # are already local positions 0 .. level.units-1 (chips on the node's torus, nodes on the Z ring)
            share = SHARES[level.kind](level, sorted(distinct[0]))
            bw = level.effective_link_bandwidth
            peers = max(counts[k + 1][r // outer] - counts[k][r // inner] for r in ranks)
            edges = len(counts[k]) - len(counts[k + 1])
            spans.append(Span(level.name, fan, min(counts[k].values()), peers, edges, level.latency_s, share.ring * bw,
                              share.single * bw, share.mesh * bw, share.ports))
        regular &= math.prod(per_level) == size
        return cls(topology, size, stride, tuple(per_level), regular, Shape(size, tuple(spans), regular))

    def to_dict(self) -> dict[str, object]:
        return {"size": self.size, "stride": self.stride, "ranks_per_level": list(self.ranks_per_level),
                "regular": self.regular, "egress_bandwidth": self.egress_bandwidth,
                "spans": [sp.__dict__ for sp in self.spans]}
