"""Topologies from every preset, groups on them (ranks per level, regularity), and per-level link shares."""

from __future__ import annotations

import itertools
import math

import pytest

from trnsim import hw
from trnsim.errors import TrnsimError
from trnsim.fabric import FabricError, Topology, collective

PRESETS = ["trn3", "trn3-aws", "trn2", "trn1", "a100", "h100", "h200", "b200", "mi300x", "tpu-v5p", "mtia-v2"]
GB = 1e9


def chip_counts(spec: hw.ChipSpec) -> list[int]:
    node = spec.topology.chips_per_node
    counts = [1, node, 2 * node, 8 * node]
    counts += [d.chips for d in spec.topology.scaleup] + [2 * d.chips for d in spec.topology.scaleup]
    return sorted({c for c in counts if c <= 20000 and (c <= node or c % node == 0)})


def test_every_brief_preset_is_covered() -> None:
    assert set(PRESETS) <= set(hw.names())


@pytest.mark.parametrize("name", PRESETS)
def test_topology_for_every_preset(name: str) -> None:
    spec = hw.get(name)
    node = spec.topology.chips_per_node
    for chips in chip_counts(spec):
        if name == "mtia-v2" and chips > node:  # its preset has no scale-out link (see the report)
            with pytest.raises(FabricError, match="no links"):
                Topology.for_chip(spec, chips)
            continue
        topo = Topology.for_chip(spec, chips)
        levels = topo.levels
        assert levels[0].scope == "node" and levels[0].size == node
        assert [lv.scope for lv in levels] == sorted((lv.scope for lv in levels),
                                                    key=("node", "scaleup", "scaleout").index)
        assert all(a.size < b.size for a, b in itertools.pairwise(levels))
        assert levels[-1].size >= chips
        assert all(lv.bandwidth > 0 and lv.links >= 1 and lv.latency_s > 0 for lv in levels)
        group = topo.group(chips)
        assert group.regular == (chips <= node or group.ranks_per_level[0] == node)
        assert len(group.ranks_per_level) == len(levels)
        if group.regular:
            assert math.prod(group.ranks_per_level) == chips
        cost = collective("all-reduce", 2**20, group)
        assert (cost.time_s > 0) == (chips > 1)


def test_trn3_levels() -> None:
    topo = Topology.for_chip(hw.get("trn3"), 128)
    assert [(lv.name, lv.scope, lv.size, lv.units, lv.kind, lv.dims) for lv in topo.levels] == [
        ("node", "node", 16, 16, "torus2d", (4, 4)),
        ("Trn3 UltraServer", "scaleup", 64, 4, "ring", (4,)),
        ("network", "scaleout", 128, 2, "fat-tree", ()),
    ]
    node, ultra, net = topo.levels
    assert node.bandwidth == 4 * 200 * GB and ultra.bandwidth == 2 * 200 * GB and net.bandwidth == 25 * GB
    assert (node.latency_s, net.latency_s) == pytest.approx((1.5e-6, 15e-6))


def test_levels_only_as_far_as_the_chips_reach() -> None:
    spec = hw.get("trn3")
    assert [lv.scope for lv in Topology.for_chip(spec, 8).levels] == ["node"]
    assert [lv.scope for lv in Topology.for_chip(spec, 64).levels] == ["node", "scaleup"]
    assert [lv.scope for lv in Topology.for_chip(hw.get("h100"), 64).levels] == ["node", "scaleout"]


def test_trn3_aws_picks_the_domain_built_from_its_nodes() -> None:
    spec = hw.get("trn3-aws")
    topo = Topology.for_chip(spec, 288)
    assert [lv.name for lv in topo.levels] == ["node", "Trn3 Gen2 UltraServer", "network"]
    # 5 in-rack + 2 inter-rack NeuronLink-v4 links per chip, 64 GB/s each
    assert topo.levels[1].links == 7 and topo.levels[1].bandwidth == 448 * GB
    with pytest.raises(FabricError, match="16-chip nodes"):
        Topology.for_chip(spec, 288, scaleup="Trn3 Gen1 UltraServer")
    with pytest.raises(FabricError, match="no scale-up domain"):
        Topology.for_chip(spec, 288, scaleup="nope")


def test_tpu_host_level_rides_the_ici_torus() -> None:
    topo = Topology.for_chip(hw.get("tpu-v5p"), 256)
    node, pod = topo.levels
    assert node.link_names == pod.link_names == ("ICI (v5p)",)
    assert pod.kind == "torus3d" and pod.dims == ()


def test_bad_chip_counts_and_groups() -> None:
    spec = hw.get("trn3")
    with pytest.raises(FabricError, match="whole number of 16-chip nodes") as err:
        Topology.for_chip(spec, 20)
    assert err.value.hint is not None and "32" in err.value.hint
    with pytest.raises(FabricError):
        Topology.for_chip(spec, 0)
    with pytest.raises(FabricError, match="oversubscription"):
        Topology.for_chip(spec, 64, oversubscription=0.5)
    topo = Topology.for_chip(spec, 64)
    with pytest.raises(FabricError, match="needs 65 chips") as err:
        topo.group(5, stride=16)
    assert isinstance(err.value, TrnsimError) and err.value.hint is not None
    with pytest.raises(FabricError):
        topo.group(0)
    with pytest.raises(FabricError):
        topo.group(4, stride=0)


@pytest.mark.parametrize(("name", "chips", "size", "stride", "expected", "regular"), [
    ("a100", 256, 32, 8, (1, 32), True),       # the brief's DP group: one rank per node, 32 nodes
    ("a100", 256, 8, 1, (8, 1), True),         # TP inside a node
    ("trn3", 256, 256, 1, (16, 4, 4), True),
    ("trn3", 256, 8, 32, (1, 2, 4), True),     # every other node: 2 per UltraServer, 4 UltraServers
    ("trn3", 256, 4, 64, (1, 1, 4), True),     # one rank per UltraServer
    ("trn3", 64, 24, 1, (16, 2), False),       # 16 on one node, 8 on the next
])
def test_ranks_per_level(name: str, chips: int, size: int, stride: int, expected: tuple[int, ...],
                         regular: bool) -> None:
    group = Topology.for_chip(hw.get(name), chips).group(size, stride)
    assert group.ranks_per_level == expected
    assert group.regular is regular
    assert list(group.ranks) == [i * stride for i in range(size)]
    assert len(group.spans) == sum(r > 1 for r in expected)


@pytest.mark.parametrize(("size", "stride", "ring", "single", "mesh"), [
    (16, 1, 4, 1, 4 / (32 / 15)),   # whole 4×4 torus: 2 closed rings × 2 directions; mean 32/15 hops
    (4, 1, 2, 1, 2 / (4 / 3)),      # one row: a closed ring of 4
    (4, 4, 2, 1, 2 / (4 / 3)),      # one column
    (2, 1, 1, 1, 1),                # two neighbours: an open segment
    (8, 2, 3, 0.5, None),           # every other column: x shared with the other offset (2/2), y closed (2)
    (8, 1, 3, 1, None),             # two rows: x closed (2), y an open segment (1)
])
def test_torus_link_shares(size: int, stride: int, ring: float, single: float, mesh: float | None) -> None:
    (span,) = Topology.for_chip(hw.get("trn3"), 16).group(size, stride).spans
    link = 200 * GB
    assert span.ring == pytest.approx(ring * link)
    assert span.single == pytest.approx(single * link)
    if mesh is not None:
        assert span.mesh == pytest.approx(mesh * link)


def test_ultraserver_z_ring_shares() -> None:
    topo = Topology.for_chip(hw.get("trn3"), 64)
    four = topo.group(4, stride=16).spans[0]
    two = topo.group(2, stride=16).spans[0]
    apart = topo.group(2, stride=32).spans[0]  # nodes 0 and 2: 2 hops, shared with the group at nodes 1, 3
    assert (four.ring, two.ring, apart.ring) == (400 * GB, 200 * GB, 200 * GB)
    assert apart.single == 100 * GB


def test_switch_and_fully_connected_shares() -> None:
    (nv,) = Topology.for_chip(hw.get("h100"), 8).group(2).spans
    assert nv.ring == nv.single == nv.mesh == 18 * 25 * GB
    mi = Topology.for_chip(hw.get("mi300x"), 8)
    (pair,) = mi.group(2).spans
    (whole,) = mi.group(8).spans
    assert pair.ring == 64 * GB and whole.ring == 7 * 64 * GB and whole.single == 64 * GB


def test_scale_out_contention_and_oversubscription() -> None:
    spec = hw.get("a100")
    node, net = Topology.for_chip(spec, 256).group(256).spans
    # each chip keeps its own NIC; a node's 8 ranks cross together through 8 NICs
    assert (net.inner, net.ring, net.single) == (8, 25 * GB, 25 * GB)
    assert Topology.for_chip(spec, 256).group(256).shape.ring_bandwidth == 8 * 25 * GB
    assert node.ring == 300 * GB
    (over,) = Topology.for_chip(spec, 256, oversubscription=2).group(32, 8).spans
    assert over.ring == 12.5 * GB


def test_egress_bounds_a_rank() -> None:
    group = Topology.for_chip(hw.get("trn3"), 256).group(256)
    assert group.egress_bandwidth == pytest.approx((800 + 400 + 25) * GB)
    assert Topology.for_chip(hw.get("trn3"), 16).group(1).egress_bandwidth == 0


@pytest.mark.parametrize("module", ["trnsim.fabric", "trnsim.fabric.topology"])
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
