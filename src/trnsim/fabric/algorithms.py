"""Collective algorithms as alpha-beta(-gamma) cost formulas, in one table: op → algorithm → cost rule.

Notation (accelerators_cluster_cost.md §4.2, the MPICH source comments): ``n`` ranks, ``S`` bytes as
nccl-tests defines the size of each op (§4.1: the all-reduce buffer, reduce-scatter's whole input,
all-gather's whole output, all-to-all's whole send buffer, the broadcast/reduce buffer, the send-recv
message), ``α`` the per-message latency of a level, ``B`` a per-rank bandwidth of the :class:`Shape`
(so ``β = 1/B``), ``γ`` seconds per byte reduced. Single level, ``n`` ranks:

    ring   all-reduce       2(n−1)α + 2(n−1)/n·S/B + (n−1)/n·S·γ         (MPICH, derived in §4.2)
           reduce-scatter   (n−1)α + (n−1)/n·S/B + (n−1)/n·S·γ;  all-gather without γ
    mesh   reduce-scatter   one step to every peer: α·⌈(n−1)/ports⌉ + (n−1)/n·S/B_mesh (+γ); all-gather
           alike; all-reduce = the two (Neuron's Mesh, §4.3); all-to-all "direct" is the same exchange
    rdh    reduce-scatter   recursive halving, n = 2^k: lg n·α + (n−1)/n·S/B (+γ); all-gather by doubling;
           all-reduce = both (Rabenseifner) = 2 lg n·α + 2(n−1)/n·S/B + (n−1)/n·S·γ, and for other n
           MPICH's (2⌊lg n⌋+2)α + (2(n−1)/n + 2)·S/B + (1 + (n−1)/n)·S·γ
    tree   all-reduce       NCCL double binary tree, pipelined in k chunks through 2⌈lg n⌉ hops, the
           busiest rank sending 2S: min over k of 2⌈lg n⌉α + (k−1)α + (2⌈lg n⌉−1+k)·2S/(kB) (+ S·γ), which
           tends to 2S/B, about a ring's bandwidth; broadcast and reduce: ⌈lg n⌉ hops, volume S
    ring   broadcast/reduce pipelined chain (NCCL ring): n−1 hops, volume S, same pipeline formula
    binomial broadcast/reduce  MPICH: ⌈lg n⌉·(α + S/B) (+ S·⌈lg n⌉·γ for reduce)
    pairwise all-to-all     MPICH pairwise exchange: (n−1)·(α + S/n/B)
    direct send-recv        every rank sends S to the next: α + S/B

On several levels: a flat ring's chunk pays each hop's α where its node-major chain crosses that level
(``Shape.ring_latency_s``) and gets the slowest level's bandwidth, each unit's crossing spread over its
ranks' links (``Shape.ring_bandwidth``); recursive halving, trees and binomial trees take their lg n
steps level by level, innermost first; a mesh exchange runs every level at once. ``hierarchical`` (§4.3:
"intra-node ReduceScatter + inter-node AllReduce + intra-node AllGather") composes one-level phases, each
run by the fastest one-level algorithm for its op and size.

γ: no source gives a reduction rate for any preset, so callers pass ``gamma`` (default 0, i.e. reductions
are free and hidden under transfer). Every formula keeps its γ term so that a sourced value can be used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from trnsim.fabric.group import Shape, Span


@dataclass(frozen=True)
class Phase:
    """One step of a collective: ``time_s`` = ``latency_s`` + transfer (+ reduction); ``bytes`` per rank."""

    name: str
    level: str
    time_s: float
    bytes: float
    latency_s: float


Phases = tuple[Phase, ...]
CostRule = Callable[[float, Shape, float], Phases | None]


@dataclass(frozen=True)
class Algorithm:
    """A cost rule (``None`` when the group does not allow it), what it needs, and one line about it."""

    cost: CostRule
    summary: str
    requires: str = "any group of 2 or more ranks"


def _phase(name: str, level: str, latency: float, nbytes: float, bandwidth: float, extra: float = 0.0) -> Phase:
    return Phase(name, level, latency + nbytes / bandwidth + extra, nbytes, latency)


def _levels(shape: Shape) -> str:
    return "+".join(sp.level for sp in shape.spans)


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _clg(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


# --- ring ----------------------------------------------------------------------------------------------------

def _ring_rs(s: float, sh: Shape, g: float) -> Phases:
    frac = (sh.size - 1) / sh.size
    return (_phase("reduce-scatter ring", _levels(sh), sh.ring_latency_s, frac * s, sh.ring_bandwidth,
                   frac * s * g),)


def _ring_ag(s: float, sh: Shape, g: float) -> Phases:
    frac = (sh.size - 1) / sh.size
    return (_phase("all-gather ring", _levels(sh), sh.ring_latency_s, frac * s, sh.ring_bandwidth),)


def _ring_ar(s: float, sh: Shape, g: float) -> Phases:
    return _ring_rs(s, sh, g) + _ring_ag(s, sh, g)


def _pipelined(name: str, level: str, first: float, hops: int, alpha: float, volume: float, bandwidth: float,
               extra: float = 0.0) -> Phase:
    """A message cut into k chunks flowing down a pipeline of ``hops`` hops: the first chunk pays every hop
    (``first`` = the sum of their α), each later one the slowest hop's α; ``volume`` is what the busiest rank
    sends for the whole message. T(k) = first + (k−1)·α + (hops−1+k)·volume/(k·B), minimised over whole k
    (k* = √((hops−1)·volume/(B·α)); with one hop, k = 1)."""
    b = volume / bandwidth

    def t(k: int) -> float:
        return first + (k - 1) * alpha + (hops - 1 + k) * b / k

    best = math.sqrt((hops - 1) * b / alpha) if hops > 1 and alpha > 0 else 1.0
    k = min((max(1, math.floor(best)), max(1, math.ceil(best))), key=t)
    return Phase(name, level, t(k) + extra, volume, first + (k - 1) * alpha)


def _chain(name: str, reduce: bool) -> CostRule:
    """NCCL's ring broadcast/reduce: a pipelined chain through all n ranks, node-major."""
    def rule(s: float, sh: Shape, g: float) -> Phases:
        return (_pipelined(name, _levels(sh), sh.ring_latency_s, sh.size - 1, sh.latency_s, s, sh.ring_bandwidth,
                           s * g * reduce),)
    return rule


# --- mesh / direct ---------------------------------------------------------------------------------------------

def _exchange(name: str, per_peer: float, sh: Shape, extra: float = 0.0) -> Phase:
    """Every rank sends ``per_peer`` bytes to every other rank at once; levels run concurrently, and a
    rank's messages on a level leave its ``ports`` links one at a time (α is per message, §4.2)."""
    latency = max(sp.latency_s * math.ceil(sp.peers / sp.ports) for sp in sh.spans)
    transfer = max(per_peer * sp.peers / sp.mesh for sp in sh.spans)
    moved = per_peer * sum(sp.peers for sp in sh.spans)
    return Phase(name, _levels(sh), latency + transfer + extra, moved, latency)


def _mesh_rs(s: float, sh: Shape, g: float) -> Phases:
    return (_exchange("reduce-scatter mesh", s / sh.size, sh, (sh.size - 1) / sh.size * s * g),)


def _mesh_ag(s: float, sh: Shape, g: float) -> Phases:
    return (_exchange("all-gather mesh", s / sh.size, sh),)


def _mesh_ar(s: float, sh: Shape, g: float) -> Phases:
    return _mesh_rs(s, sh, g) + _mesh_ag(s, sh, g)


def _direct_a2a(s: float, sh: Shape, g: float) -> Phases:
    return (_exchange("all-to-all direct", s / sh.size, sh),)


def _pairwise_a2a(s: float, sh: Shape, g: float) -> Phases:
    chunk = s / sh.size
    return tuple(_phase("all-to-all pairwise", sp.level, sp.peers * sp.latency_s, sp.peers * chunk, sp.single)
                 for sp in sh.spans)


def _send_recv(s: float, sh: Shape, g: float) -> Phases:
    slowest = max(sh.spans, key=lambda sp: sp.latency_s + s / sp.single)
    return (_phase("send-recv", slowest.level, slowest.latency_s, s, slowest.single),)


# --- recursive halving-doubling ----------------------------------------------------------------------------------

def _halving(name: str, s: float, sh: Shape, g: float) -> Phases:
    """lg r_k steps per level, innermost first: the big early halves stay on the fast links."""
    phases: list[Phase] = []
    data = s
    for sp in sh.spans:
        moved = data * (1 - 1 / sp.ranks)
        phases.append(_phase(name, sp.level, _clg(sp.ranks) * sp.latency_s, moved, sp.single, moved * g))
        data /= sp.ranks
    return tuple(phases)


def _rdh_rs(s: float, sh: Shape, g: float) -> Phases | None:
    if not _pow2(sh.size):
        return None
    if not sh.regular:
        return _flat_pow2("reduce-scatter rdh", s, sh, g)
    return _halving("reduce-scatter rdh", s, sh, g)


def _rdh_ag(s: float, sh: Shape, g: float) -> Phases | None:
    if not _pow2(sh.size):
        return None
    if not sh.regular:
        return _flat_pow2("all-gather rdh", s, sh, 0.0)
    return tuple(reversed(_halving("all-gather rdh", s, sh, 0.0)))


def _flat_pow2(name: str, s: float, sh: Shape, g: float) -> Phases:
    frac = (sh.size - 1) / sh.size
    return (_phase(name, _levels(sh), _clg(sh.size) * sh.latency_s, frac * s, sh.single_bandwidth, frac * s * g),)


def _rdh_ar(s: float, sh: Shape, g: float) -> Phases:
    rs, ag = _rdh_rs(s, sh, g), _rdh_ag(s, sh, g)
    if rs is not None and ag is not None:
        return rs + ag
    p = sh.size  # MPICH's non-power-of-two Rabenseifner, flat
    moved = (2 * (p - 1) / p + 2) * s
    return (_phase("all-reduce rdh (non-power-of-two)", _levels(sh), (2 * math.floor(math.log2(p)) + 2) *
                   sh.latency_s, moved, sh.single_bandwidth, (1 + (p - 1) / p) * s * g),)


# --- trees ---------------------------------------------------------------------------------------------------------

def _depth(sh: Shape) -> tuple[int, float]:
    """Hops and summed latency of one pass up or down a tree: ⌈lg r_k⌉ hops at each level, innermost first
    (flat ⌈lg n⌉ hops at the slowest level's α if the group is irregular)."""
    if not sh.regular:
        return _clg(sh.size), _clg(sh.size) * sh.latency_s
    return sum(_clg(sp.ranks) for sp in sh.spans), sum(_clg(sp.ranks) * sp.latency_s for sp in sh.spans)


def _tree(name: str, passes: int, reduce: bool) -> CostRule:
    """NCCL's double binary tree, pipelined: each tree carries half the data; a rank is inner node of one
    tree and leaf of the other, so per pass it sends S (broadcast, reduce) — 2S for all-reduce's
    reduce-then-broadcast over 2× the depth. Bandwidth as a ring's (each rank's neighbour links)."""
    def rule(s: float, sh: Shape, g: float) -> Phases:
        hops, first = _depth(sh)
        return (_pipelined(name, _levels(sh), passes * first, passes * hops, sh.latency_s, passes * s,
                           sh.ring_bandwidth, s * g * reduce),)
    return rule


def _binomial(name: str, reduce: bool) -> CostRule:
    """The whole buffer down (or up) ⌈lg r_k⌉ levels of a binomial tree at each level, innermost first."""
    def rule(s: float, sh: Shape, g: float) -> Phases:
        if not sh.regular:
            k = _clg(sh.size)
            return (_phase(name, _levels(sh), k * sh.latency_s, k * s, sh.single_bandwidth, k * s * g * reduce),)
        return tuple(_phase(name, sp.level, k * sp.latency_s, k * s, sp.single, k * s * g * reduce)
                     for sp in sh.spans for k in (_clg(sp.ranks),))
    return rule


# --- hierarchical ----------------------------------------------------------------------------------------------------

def _best(op: str, s: float, span: Span, g: float) -> Phases:
    """The fastest one-level algorithm for ``op`` on one spanned level, as a hierarchical phase runs it."""
    sub = Shape(span.ranks, (span.alone(),), True)
    options = [ph for name, alg in ALGORITHMS[op].items() if name != "hierarchical"
               if (ph := alg.cost(s, sub, g)) is not None]
    best = min(options, key=lambda ph: sum(p.time_s for p in ph))
    return tuple(Phase(f"{p.name} @ {span.level}", p.level, p.time_s, p.bytes, p.latency_s) for p in best)


def _hier(op: str) -> CostRule:
    """All-reduce: reduce-scatter level by level from the innermost (each on 1/r of the data left), all-reduce
    at the outermost, all-gather back inwards. Reduce-scatter: the outermost level reduce-scatters too and
    nothing is gathered; all-gather: nothing is scattered, the outermost level all-gathers first."""
    def rule(s: float, sh: Shape, g: float) -> Phases | None:
        if not sh.regular or len(sh.spans) < 2:
            return None
        *inner, top = sh.spans
        # bytes each level's phase works on: S, then S/r_0, S/(r_0 r_1), ...
        sizes = [s / math.prod(sp.ranks for sp in sh.spans[:k]) for k in range(len(sh.spans))]
        parts: list[Phases] = []
        if op != "all-gather":
            parts += [_best("reduce-scatter", sizes[k], sp, g) for k, sp in enumerate(inner)]
        parts.append(_best(op, sizes[-1], top, g))
        if op != "reduce-scatter":
            parts += [_best("all-gather", sizes[k], sp, g) for k, sp in reversed(list(enumerate(inner)))]
        return tuple(p for ph in parts for p in ph)
    return rule


_HIER = "a regular group (same ranks in every unit) spanning 2 or more levels"
_POW2 = "a power-of-two group size"

# op → algorithm → rule. Order matters only to break exact ties (earlier wins).
ALGORITHMS: dict[str, dict[str, Algorithm]] = {
    "all-reduce": {
        "ring": Algorithm(_ring_ar, "ring reduce-scatter + ring all-gather; bandwidth-optimal"),
        "mesh": Algorithm(_mesh_ar, "one-step mesh reduce-scatter + all-gather (Neuron Mesh, < 1 MB)"),
        "rdh": Algorithm(_rdh_ar, "recursive halving-doubling (Rabenseifner; MPICH non-power-of-two form)"),
        "tree": Algorithm(_tree("all-reduce tree", 2, True), "NCCL double binary tree, pipelined"),
        "hierarchical": Algorithm(_hier("all-reduce"), "intra reduce-scatter + inter all-reduce + intra "
                                  "all-gather", _HIER),
    },
    "reduce-scatter": {
        "ring": Algorithm(_ring_rs, "ring, n−1 steps"),
        "mesh": Algorithm(_mesh_rs, "one step to every peer"),
        "rdh": Algorithm(_rdh_rs, "recursive halving", _POW2),
        "hierarchical": Algorithm(_hier("reduce-scatter"), "reduce-scatter level by level, innermost first", _HIER),
    },
    "all-gather": {
        "ring": Algorithm(_ring_ag, "ring, n−1 steps"),
        "mesh": Algorithm(_mesh_ag, "one step to every peer"),
        "rdh": Algorithm(_rdh_ag, "recursive doubling", _POW2),
        "hierarchical": Algorithm(_hier("all-gather"), "all-gather level by level, outermost first", _HIER),
    },
    "all-to-all": {
        "direct": Algorithm(_direct_a2a, "every peer at once (ingress congestion as the shared links)"),
        "pairwise": Algorithm(_pairwise_a2a, "MPICH pairwise exchange, one peer per step"),
    },
    "broadcast": {
        "ring": Algorithm(_chain("broadcast ring", False), "pipelined chain (NCCL ring)"),
        "tree": Algorithm(_tree("broadcast tree", 1, False), "pipelined double binary tree"),
        "binomial": Algorithm(_binomial("broadcast binomial", False), "MPICH binomial tree, whole buffer"),
    },
    "reduce": {
        "ring": Algorithm(_chain("reduce ring", True), "pipelined chain (NCCL ring)"),
        "tree": Algorithm(_tree("reduce tree", 1, True), "pipelined double binary tree"),
        "binomial": Algorithm(_binomial("reduce binomial", True), "MPICH binomial tree, whole buffer"),
    },
    "send-recv": {
        "direct": Algorithm(_send_recv, "each rank sends S to the next rank of the group"),
    },
}
