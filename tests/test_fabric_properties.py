"""Properties every cost must have, checked on random presets, chip counts, groups, ops and sizes."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hw
from trnsim.fabric import ALGORITHMS, OPS, Group, Topology, collective

PRESETS = ["trn3", "trn3-aws", "trn2", "trn1", "a100", "h100", "h200", "b200", "mi300x", "tpu-v5p", "mtia-v2"]
TOL = 1e-12


@functools.cache
def spec(name: str, scale: float = 1.0) -> hw.ChipSpec:
    base = hw.get(name)
    links = tuple(dataclasses.replace(lk, bandwidth=lk.bandwidth * scale) for lk in base.links)
    return dataclasses.replace(base, links=links)


@functools.cache
def group(name: str, chips: int, size: int, stride: int, scale: float = 1.0) -> Group:
    return Topology.for_chip(spec(name, scale), chips).group(size, stride)


@st.composite
def groups(draw: st.DrawFn) -> tuple[str, int, int, int]:
    name = draw(st.sampled_from(PRESETS))
    node = hw.get(name).topology.chips_per_node
    nodes = 1 if name == "mtia-v2" else draw(st.sampled_from([1, 2, 3, 4, 8, 40]))
    chips = node * nodes if nodes > 1 else draw(st.integers(1, node))
    # training groups: small strides (TP, and groups spanning nodes several ranks each) or node multiples
    usual = [s for s in sorted({1, 2, max(1, node // 2), node, 2 * node}) if s <= chips]
    stride = draw(st.one_of(st.sampled_from(usual), st.integers(1, chips)))
    fit = (chips - 1) // stride + 1
    size = draw(st.one_of(st.just(fit), st.integers(1, fit)))
    return name, chips, size, stride


sizes = st.integers(0, 2**33)
ops = st.sampled_from(list(OPS))


@settings(max_examples=300, deadline=None)
@given(groups(), ops, sizes, sizes)
def test_time_is_monotone_in_bytes(case: tuple[str, int, int, int], op: str, a: int, b: int) -> None:
    g = group(*case)
    small, big = collective(op, min(a, b), g), collective(op, max(a, b), g)
    assert small.time_s <= big.time_s * (1 + TOL)
    for name, t in small.candidates.items():  # every algorithm on its own, too
        assert t <= big.candidates[name] * (1 + TOL)


@settings(max_examples=200, deadline=None)
@given(groups(), ops, sizes)
def test_doubling_every_link_never_slows_down(case: tuple[str, int, int, int], op: str, nbytes: int) -> None:
    slow, fast = collective(op, nbytes, group(*case)), collective(op, nbytes, group(*case, scale=2.0))
    assert fast.time_s <= slow.time_s * (1 + TOL)
    for name, t in fast.candidates.items():
        assert t <= slow.candidates[name] * (1 + TOL)


@settings(max_examples=300, deadline=None)
@given(groups(), ops, sizes)
def test_busbw_never_exceeds_what_a_rank_can_send(case: tuple[str, int, int, int], op: str, nbytes: int) -> None:
    g = group(*case)
    for name in ALGORITHMS[op]:
        if name not in collective(op, nbytes, g).candidates and g.size > 1 and nbytes > 0:
            continue
        cost = collective(op, nbytes, g, name if g.size > 1 and nbytes > 0 else None)
        assert cost.busbw <= g.egress_bandwidth * (1 + 1e-9)
        if len(g.spans) == 1:  # one level: its own bandwidth is the bottleneck
            (span,) = g.spans
            assert cost.busbw <= max(span.ring, span.single, span.mesh) * (1 + 1e-9)
        if name == "ring" and op in ("all-reduce", "reduce-scatter", "all-gather") and g.spans and nbytes:
            assert cost.busbw <= g.shape.ring_bandwidth * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PRESETS), ops, sizes)
def test_a_group_of_one_costs_nothing(name: str, op: str, nbytes: int) -> None:
    assert collective(op, nbytes, group(name, 1, 1, 1)).time_s == 0


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PRESETS), st.integers(1, 2**34))
def test_ring_all_reduce_is_the_textbook_formula_on_one_level(name: str, nbytes: int) -> None:
    node = hw.get(name).topology.chips_per_node
    for n in range(2, node + 1):
        g = group(name, node, n, 1)
        (span,) = g.spans
        expected = 2 * (n - 1) * span.latency_s + 2 * (n - 1) / n * nbytes / span.ring
        assert collective("all-reduce", nbytes, g, "ring").time_s == pytest.approx(expected, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(groups(), ops, sizes)
def test_choice_is_deterministic(case: tuple[str, int, int, int], op: str, nbytes: int) -> None:
    fresh = Topology.for_chip(hw.get(case[0]), case[1]).group(case[2], case[3])
    first, again = collective(op, nbytes, group(*case)), collective(op, nbytes, fresh)
    assert first == again
    assert list(first.candidates) == [n for n in ALGORITHMS[op] if n in first.candidates]


AT_SCALE = [("trn3", 256), ("trn3-aws", 288), ("trn2", 256), ("trn1", 256), ("a100", 256), ("h100", 256),
            ("h200", 256), ("b200", 256), ("mi300x", 256), ("tpu-v5p", 256)]


@pytest.mark.parametrize(("name", "chips"), AT_SCALE)
@pytest.mark.parametrize("op", ["all-reduce", "reduce-scatter", "all-gather"])
def test_hierarchical_beats_flat_ring_at_scale_for_small_messages(name: str, chips: int, op: str) -> None:
    g = group(name, chips, chips, 1)
    assert len(g.spans) >= 2
    for nbytes in (2**10, 2**16):
        cost = collective(op, nbytes, g)
        assert cost.candidates["hierarchical"] < cost.candidates["ring"] / 3
        assert cost.algorithm != "ring"
