"""Each algorithm against its closed form (accelerators_cluster_cost.md §4.2) on simple topologies, and the
choice policies."""

from __future__ import annotations

import math

import pytest

from trnsim import hw
from trnsim.fabric import ALGORITHMS, OPS, FabricError, Group, Topology, collective

GB, US, MIB = 1e9, 1e-6, 2**20
S = 64 * MIB


def a100(chips: int, size: int | None = None, stride: int = 1) -> Group:
    """HGX A100: an 8-GPU NVSwitch node (12 × 25 GB/s, 1 us) and a 25 GB/s, 5 us NIC per GPU."""
    return Topology.for_chip(hw.get("a100"), chips).group(size or chips, stride)


def t(op: str, nbytes: float, group: Group, algorithm: str) -> float:
    return collective(op, nbytes, group, algorithm).time_s


def pipelined(first: float, hops: int, alpha: float, volume_s: float) -> float:
    """Brute force over chunk counts, independent of the library's closed-form optimum."""
    return min(first + (k - 1) * alpha + (hops - 1 + k) * volume_s / k for k in range(1, 20000))


B_NODE, A_NODE = 300 * GB, 1 * US  # a100 node: 12 links × 25 GB/s
B_NIC, A_NIC = 25 * GB, 5 * US


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring_on_one_switch_level(n: int) -> None:
    g = a100(8, n)
    assert t("all-reduce", S, g, "ring") == pytest.approx(2 * (n - 1) * A_NODE + 2 * (n - 1) / n * S / B_NODE,
                                                          rel=1e-12)
    assert t("reduce-scatter", S, g, "ring") == pytest.approx((n - 1) * A_NODE + (n - 1) / n * S / B_NODE)
    assert t("all-gather", S, g, "ring") == pytest.approx((n - 1) * A_NODE + (n - 1) / n * S / B_NODE)


def test_ring_on_the_trn3_torus_uses_both_hamiltonian_cycles_both_ways() -> None:
    g = Topology.for_chip(hw.get("trn3"), 16).group(16)
    expected = 2 * 15 * 1.5 * US + 2 * 15 / 16 * S / (4 * 200 * GB)
    assert t("all-reduce", S, g, "ring") == pytest.approx(expected, rel=1e-12)


def test_mesh() -> None:
    g = a100(8)
    one_step = A_NODE * math.ceil(7 / 12) + 7 / 8 * S / B_NODE
    assert t("reduce-scatter", S, g, "mesh") == pytest.approx(one_step)
    assert t("all-gather", S, g, "mesh") == pytest.approx(one_step)
    assert t("all-reduce", S, g, "mesh") == pytest.approx(2 * one_step)
    # on the trn3 torus: 15 peers over 4 ports, bandwidth 4 links / mean 32/15 hops
    torus = Topology.for_chip(hw.get("trn3"), 16).group(16)
    expected = 1.5 * US * 4 + 15 / 16 * S / (4 * 200 * GB * 15 / 32)
    assert t("reduce-scatter", S, torus, "mesh") == pytest.approx(expected)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_rdh_power_of_two(n: int) -> None:
    g = a100(8, n)
    lg = int(math.log2(n))
    assert t("all-reduce", S, g, "rdh") == pytest.approx(2 * lg * A_NODE + 2 * (n - 1) / n * S / B_NODE)
    assert t("reduce-scatter", S, g, "rdh") == pytest.approx(lg * A_NODE + (n - 1) / n * S / B_NODE)
    assert t("all-gather", S, g, "rdh") == pytest.approx(lg * A_NODE + (n - 1) / n * S / B_NODE)


def test_rdh_non_power_of_two() -> None:
    g = a100(8, 6)
    p = 6
    expected = (2 * math.floor(math.log2(p)) + 2) * A_NODE + (2 * (p - 1) / p + 2) * S / B_NODE
    assert t("all-reduce", S, g, "rdh") == pytest.approx(expected)
    for op in ("reduce-scatter", "all-gather"):
        assert "rdh" not in collective(op, S, g).candidates
        with pytest.raises(FabricError, match="power-of-two"):
            collective(op, S, g, "rdh")


def test_gamma_terms() -> None:
    g, gamma = a100(8), 1e-12
    base = t("all-reduce", S, g, "ring")
    assert collective("all-reduce", S, g, "ring", gamma=gamma).time_s == pytest.approx(base + 7 / 8 * S * gamma)
    rab = collective("all-reduce", S, g, "rdh", gamma=gamma).time_s
    assert rab == pytest.approx(t("all-reduce", S, g, "rdh") + 7 / 8 * S * gamma)
    assert collective("all-gather", S, g, "ring", gamma=gamma).time_s == t("all-gather", S, g, "ring")


def test_trees_are_pipelined() -> None:
    g = a100(8)
    assert t("all-reduce", S, g, "tree") == pytest.approx(pipelined(6 * A_NODE, 6, A_NODE, 2 * S / B_NODE))
    assert t("broadcast", S, g, "tree") == pytest.approx(pipelined(3 * A_NODE, 3, A_NODE, S / B_NODE))
    assert t("broadcast", S, g, "ring") == pytest.approx(pipelined(7 * A_NODE, 7, A_NODE, S / B_NODE))
    # the bandwidth term tends to 2S/B, a ring's: within 5% of it for a big buffer
    big = 4 * 2**30
    assert t("all-reduce", big, g, "tree") / (2 * big / B_NODE) == pytest.approx(1, rel=0.05)


def test_binomial_pairwise_send_recv() -> None:
    g = a100(8)
    assert t("broadcast", S, g, "binomial") == pytest.approx(3 * (A_NODE + S / B_NODE))
    assert t("reduce", S, g, "binomial") == pytest.approx(3 * (A_NODE + S / B_NODE))
    assert t("all-to-all", S, g, "pairwise") == pytest.approx(7 * (A_NODE + S / 8 / B_NODE))
    assert t("all-to-all", S, g, "direct") == pytest.approx(A_NODE + 7 / 8 * S / B_NODE)
    pair = a100(16, 2, stride=8)  # two nodes, one GPU each: over the NICs
    assert t("send-recv", S, pair, "direct") == pytest.approx(A_NIC + S / B_NIC)


def test_flat_ring_across_nodes() -> None:
    g = a100(16)
    # the chain of 15 hops crosses the network once; the node's crossing spreads over its 8 NICs
    per_pass = 14 * A_NODE + 1 * A_NIC
    expected = 2 * per_pass + 2 * 15 / 16 * S / min(B_NODE, 8 * B_NIC)
    assert t("all-reduce", S, g, "ring") == pytest.approx(expected)


def test_hierarchical_composes_the_fastest_phases() -> None:
    g = a100(16)  # (8, 2)
    rs = A_NODE + 7 / 8 * S / B_NODE             # mesh wins inside the NVSwitch node (one step)
    ar = 2 * A_NIC + 2 * (1 / 2) * (S / 8) / B_NIC  # ring = mesh = rdh for 2 ranks; ties go to ring
    cost = collective("all-reduce", S, g, "hierarchical")
    assert cost.time_s == pytest.approx(rs + ar + rs)
    assert [p.name for p in cost.breakdown] == [
        "reduce-scatter mesh @ node", "reduce-scatter ring @ network", "all-gather ring @ network",
        "all-gather mesh @ node"]
    assert sum(p.time_s for p in cost.breakdown) == pytest.approx(cost.time_s)
    assert collective("reduce-scatter", S, g, "hierarchical").time_s == pytest.approx(rs + (S / 8 / 2) / B_NIC
                                                                                      + A_NIC)
    assert collective("all-gather", S, g, "hierarchical").time_s == pytest.approx(rs + (S / 8 / 2) / B_NIC + A_NIC)


def test_hierarchical_needs_two_levels_and_a_regular_group() -> None:
    assert "hierarchical" not in collective("all-reduce", S, a100(8)).candidates
    irregular = Topology.for_chip(hw.get("trn3"), 64).group(24)
    assert not irregular.regular
    with pytest.raises(FabricError, match="regular group"):
        collective("all-reduce", S, irregular, "hierarchical")


def test_every_op_has_algorithms_and_a_busbw_factor() -> None:
    assert set(OPS) == set(ALGORITHMS) == {"all-reduce", "reduce-scatter", "all-gather", "all-to-all",
                                           "broadcast", "reduce", "send-recv"}
    g = a100(16)
    for op in OPS:
        cost = collective(op, S, g)
        assert cost.candidates and cost.algorithm in cost.candidates
        assert cost.busbw == pytest.approx(cost.algbw * OPS[op].busbw_factor(16))
    assert OPS["all-reduce"].busbw_factor(8) == 2 * 7 / 8


def test_fastest_policy_is_the_minimum_with_table_order_ties() -> None:
    g = a100(256)
    for size in (2**10, 2**20, 2**30):
        cost = collective("all-reduce", size, g)
        assert cost.time_s == min(cost.candidates.values())
    tie = collective("all-reduce", S, a100(16, 2, stride=8))  # 2 ranks: ring, mesh, rdh all equal
    assert tie.candidates["ring"] == tie.candidates["mesh"] == tie.candidates["rdh"]
    assert tie.algorithm == "ring"


def test_neuron_policy_follows_the_documented_size_rule() -> None:
    node = Topology.for_chip(hw.get("trn3"), 16).group(16)
    pick = {s: collective("all-reduce", s, node, policy="neuron").algorithm
            for s in (MIB - 1, MIB, 56 * MIB, 56 * MIB + 1)}
    assert pick == {MIB - 1: "mesh", MIB: "rdh", 56 * MIB: "rdh", 56 * MIB + 1: "ring"}
    odd = Topology.for_chip(hw.get("trn3"), 16).group(12)
    assert collective("all-gather", 8 * MIB, odd, policy="neuron").algorithm == "ring"  # no RDH for 12
    multi = Topology.for_chip(hw.get("trn3"), 64).group(64)
    assert collective("all-reduce", 4 * MIB, multi, policy="neuron").algorithm == "hierarchical"
    a2a = collective("all-to-all", MIB, multi, policy="neuron")
    assert a2a.algorithm == collective("all-to-all", MIB, multi).algorithm  # rule silent: fastest


def test_forced_algorithm_and_bad_names() -> None:
    g = a100(16)
    assert collective("all-reduce", S, g, "tree").algorithm == "tree"
    with pytest.raises(FabricError, match="unknown collective op") as err:
        collective("allreduce", S, g)
    assert err.value.hint is not None and "all-reduce" in err.value.hint
    with pytest.raises(FabricError, match="unknown algorithm"):
        collective("all-to-all", S, g, "ring")
    with pytest.raises(FabricError, match="policy"):
        collective("all-reduce", S, g, policy="slowest")
    with pytest.raises(FabricError):
        collective("all-reduce", -1, g)


def test_nothing_to_move_costs_nothing() -> None:
    one = a100(8, 1)
    for op in OPS:
        cost = collective(op, S, one)
        assert (cost.time_s, cost.algbw, cost.busbw, cost.breakdown) == (0.0, 0.0, 0.0, ())
    assert collective("all-reduce", 0, a100(8)).time_s == 0


def test_to_dict_is_json_ready() -> None:
    import json

    data = collective("all-reduce", S, a100(16)).to_dict()
    assert json.loads(json.dumps(data))["algorithm"] == data["algorithm"]
    assert {"time_s", "algbw", "busbw", "candidates", "breakdown", "latency_s"} <= set(data)


def test_nccl_policy_runs_only_what_nccl_implements() -> None:
    """NCCL: tree (or ring) for all-reduce only; ring for all-gather / reduce-scatter / broadcast / reduce."""
    from trnsim import hw
    from trnsim.fabric import Topology, collective

    topo = Topology.for_chip(hw.get("a100"), 256)
    group = topo.group(256)
    for op, allowed in (("all-gather", {"ring"}), ("reduce-scatter", {"ring"}), ("all-reduce", {"ring", "tree"}),
                        ("broadcast", {"ring"})):
        for size in (2.0**10, 2.0**20, 2.0**30):
            cost = collective(op, size, group, policy="nccl")
            assert cost.algorithm in allowed, (op, size, cost.algorithm)
            assert cost.time_s >= collective(op, size, group).time_s  # never better than the fastest valid
