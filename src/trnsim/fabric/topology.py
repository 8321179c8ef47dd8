"""A cluster of chips as nested levels: node, scale-up domain, scale-out network.

``Topology.for_chip(spec, chips)`` reads a hardware preset (``trnsim.hw``) and stacks the levels that
``chips`` span, innermost first. Chips are numbered node-major: chip ``c`` sits in node ``c // node_size``,
scale-up domain ``c // domain_size``. Each :class:`Level` says how its units (chips inside a node, nodes
inside a domain, domains on the network) are wired and what a *chip* has to reach across it:

    level      size (chips, cumulative)   units of the level below    links (per chip, one direction)
    node       chips_per_node             chips                        links with scope "node"
    scaleup    the domain's chips         nodes                        links with scope "scaleup"
    scaleout   all ``chips``              domains (or nodes)           links with scope "scaleout"

Every bandwidth and latency comes from the preset; nothing here is a hardware constant. Groups of ranks
on the topology (``Topology.group``) live in :mod:`trnsim.fabric.group`.

    >>> from trnsim import hw
    >>> topo = Topology.for_chip(hw.get("trn3"), 128)
    >>> [(lv.name, lv.size, lv.kind, lv.dims) for lv in topo.levels]
    [('node', 16, 'torus2d', (4, 4)), ('Trn3 UltraServer', 64, 'ring', (4,)), ('network', 128, 'fat-tree', ())]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.fabric.errors import FabricError
from trnsim.fabric.group import Group
from trnsim.hw.spec import ChipSpec, LinkSpec, ScaleupSpec, parse_topology

# Torus rank → level kind name; a torus reduced to one non-trivial dimension is a ring.
# NOTE: the largest topology trnsim builds: 8× the largest published training clusters (~131k chips), and
# small enough that the per-rank group analysis (Group.build) answers in seconds
MAX_CHIPS = 2**20

_TORUS_KIND = {1: "ring", 2: "torus2d", 3: "torus3d"}


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy, as seen from one chip.

    ``size`` counts chips in one unit of this level (cumulative: a node's chips, a domain's chips, all
    chips); ``units`` counts units of the level below inside it. ``dims`` lay those units out on the
    torus/ring (empty for switches and networks). ``bandwidth`` is what one chip can send across this level
    in one direction, per-link bandwidth × ``links``; ``oversubscription`` (≥ 1, a fat-tree's cross-tier
    ratio) divides it for traffic that crosses the level.
    """

    name: str
    scope: str
    size: int
    units: int
    kind: str
    dims: tuple[int, ...]
    bandwidth: float
    links: int
    latency_s: float
    oversubscription: float = 1.0
    link_names: tuple[str, ...] = ()

    @property
    def link_bandwidth(self) -> float:
        """One link, one direction (the mean, if the level groups links of different speeds)."""
        return self.bandwidth / self.links

    @property
    def effective_link_bandwidth(self) -> float:
        """One link's share once the oversubscription ratio is applied."""
        return self.link_bandwidth / self.oversubscription

    def describe(self) -> str:
        shape = f"{self.kind} {'x'.join(map(str, self.dims))}".strip()
        over = f", {self.oversubscription:g}:1 oversubscribed" if self.oversubscription != 1 else ""
        return (f"{self.name} ({shape}; {self.links} × {self.link_bandwidth / 1e9:.4g} GB/s, "
                f"{self.latency_s * 1e6:.3g} us{over})")


def _merge_links(links: tuple[LinkSpec, ...]) -> tuple[float, int, float, tuple[str, ...]]:
    """Several link groups of one scope act as one: bandwidths and counts add, the slowest hop wins."""
    return (sum(lk.chip_bandwidth for lk in links), sum(lk.count for lk in links),
            max(lk.latency for lk in links), tuple(lk.name for lk in links))


def _links_for(spec: ChipSpec, scope: str) -> tuple[LinkSpec, ...]:
    """The links a chip uses to cross ``scope``; a level without its own links rides the next scope out.

    NOTE: this is how TPU presets work: ICI (scope "scaleup") is one torus that spans the host and the pod,
    so the host level reuses it.
    """
    order = ("node", "scaleup", "scaleout")
    for outer in order[order.index(scope):]:
        found = spec.links_in(outer)
        if found:
            return found
    return ()


def _domain(spec: ChipSpec, name: str | None) -> ScaleupSpec | None:
    """The scale-up domain to stack above the node: the named one, else the first that is built from this
    preset's nodes and is bigger than one node (a domain of one node adds nothing)."""
    per_node = spec.topology.chips_per_node
    if name is not None:
        for dom in spec.topology.scaleup:
            if dom.name == name:
                if dom.chips != dom.nodes * per_node:
                    raise FabricError(f"{name!r} is built from {dom.chips // dom.nodes}-chip nodes, but {spec.name}'s "
                                      f"node has {per_node} chips", where=spec.source,
                                      hint="use a preset whose chips_per_node matches that domain")
                return dom
        known = ", ".join(repr(d.name) for d in spec.topology.scaleup) or "none"
        raise FabricError(f"{spec.name} has no scale-up domain {name!r}", where=spec.source,
                          hint=f"domains in this preset: {known}")
    for dom in spec.topology.scaleup:
        if dom.chips > per_node and dom.chips == dom.nodes * per_node:
            return dom
    return None


def _domain_dims(dom: ScaleupSpec, node_kind: str, node_dims: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """Lay the domain's nodes out: a torus whose dims divide by the node's torus keeps the quotient
    (Trn2/Trn3's 4×4×4 over a 4×4 node is a ring of 4 nodes in Z); an unknown-size torus keeps no dims."""
    kind, dims = parse_topology(dom.topology)
    if not kind.startswith("torus") and kind != "ring":
        return kind, ()
    if not dims:
        return kind, ()
    inner = node_dims if node_kind.startswith("torus") or node_kind == "ring" else ()
    inner = inner + (1,) * (len(dims) - len(inner))
    if len(inner) == len(dims) and all(d % i == 0 for d, i in zip(dims, inner, strict=True)):
        left = tuple(d // i for d, i in zip(dims, inner, strict=True) if d // i > 1)
    else:
        left = (dom.nodes,)
    return (_TORUS_KIND.get(len(left), kind), left) if left else ("switch", ())


@dataclass(frozen=True)
class Topology:
    """``chips`` chips of one preset, numbered node-major, grouped into ``levels`` (innermost first)."""

    spec_name: str
    chips: int
    levels: tuple[Level, ...]

    @classmethod
    def for_chip(cls, spec: ChipSpec, chips: int, *, scaleup: str | None = None,
                 oversubscription: float = 1.0) -> Topology:
        """Build the levels that ``chips`` chips of ``spec`` span.

        ``scaleup`` names the preset's scale-up domain to use (default: the first one made of this preset's
        nodes). ``oversubscription`` is the scale-out fat-tree's cross-tier ratio (1 = non-blocking, as every
        built-in preset's network is described).
        """
        topo = spec.topology
        per_node = topo.chips_per_node
        if chips < 1:
            raise FabricError(f"chips must be at least 1, got {chips}", where=spec.name)
        if chips > MAX_CHIPS:
            raise FabricError(f"{chips:,} chips is more than trnsim models ({MAX_CHIPS:,} at most)", where=spec.name,
                              hint=f"use at most {MAX_CHIPS:,} chips (the largest published clusters have ~131k)")
        if chips > per_node and chips % per_node:
            raise FabricError(f"{chips} chips is not a whole number of {per_node}-chip nodes", where=spec.name,
                              hint=f"use a multiple of {per_node}, e.g. {per_node * math.ceil(chips / per_node)}")
        if oversubscription < 1:
            raise FabricError(f"oversubscription must be >= 1 (1 = non-blocking), got {oversubscription:g}")
        node_kind, node_dims = parse_topology(topo.node_topology)
        levels = [cls._level(spec, "node", "node", per_node, per_node, node_kind, node_dims)]
        dom = _domain(spec, scaleup)
        if dom is not None and chips > per_node:
            kind, dims = _domain_dims(dom, node_kind, node_dims)
            levels.append(cls._level(spec, dom.name, "scaleup", dom.chips, dom.nodes, kind, dims))
        if chips > levels[-1].size:
            inner = levels[-1].size
            levels.append(cls._level(spec, "network", "scaleout", chips, math.ceil(chips / inner), "fat-tree", (),
                                     oversubscription))
        return cls(spec.name, chips, tuple(levels))

    @staticmethod
    def _level(spec: ChipSpec, name: str, scope: str, size: int, units: int, kind: str,
               dims: tuple[int, ...], oversubscription: float = 1.0) -> Level:
        links = _links_for(spec, scope)
        if not links:
            raise FabricError(f"{spec.name} has no links that reach across the {scope} level", where=spec.source,
                              hint=f"add a [[links]] entry with scope = \"{scope}\" to the preset, or use at most "
                                   f"{spec.topology.chips_per_node} chips")
        bandwidth, count, latency, names = _merge_links(links)
        return Level(name, scope, size, units, kind, dims, bandwidth, count, latency, oversubscription, names)

    def group(self, size: int, stride: int = 1) -> Group:
        """Ranks ``i * stride`` for ``i < size`` (see :class:`trnsim.fabric.group.Group`)."""
        return Group.build(self, size, stride)

    def describe(self) -> str:
        return " → ".join(lv.describe() for lv in self.levels)

    def to_dict(self) -> dict[str, object]:
        return {"target": self.spec_name, "chips": self.chips,
                "levels": [{"name": lv.name, "scope": lv.scope, "size": lv.size, "units": lv.units,
                            "kind": lv.kind, "dims": list(lv.dims), "bandwidth": lv.bandwidth, "links": lv.links,
                            "latency_s": lv.latency_s, "oversubscription": lv.oversubscription,
                            "link_names": list(lv.link_names)} for lv in self.levels]}
