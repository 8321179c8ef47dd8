"""``collective(op, nbytes, group)``: the time of one collective, the algorithm that runs it, and why.

Every algorithm valid for the group is costed (``CollectiveCost.candidates``); a *policy* then picks one:

- ``"fastest"`` (default): the valid algorithm with the least time; exact ties go to the earlier entry of
  ``ALGORITHMS[op]``. Deterministic, and time stays monotone in ``nbytes`` (a minimum of monotone costs).
- ``"neuron"``: the Neuron runtime's documented size rule (neuron.md §4.2, accelerators_cluster_cost.md
  §4.3 [N-INTRA]): a group spanning several levels runs hierarchical; within one level, Mesh below 1 MB,
  RDH from 1 to 56 MB (power-of-two groups), Ring above. Ops the rule does not cover fall back to
  ``"fastest"``. Being a step function of size, it need not be monotone at the thresholds.
- ``"nccl"``: what NCCL (and AMD's RCCL, its port) can run: all-reduce by ring or tree, whichever its cost
  model prefers (here: the faster); all-gather, reduce-scatter, broadcast and reduce by ring only (NCCL's
  tree and hierarchical variants serve all-reduce alone; NVLS/CollNet need NVSwitch-SHARP or SHARP
  switches, which no preset describes); all-to-all and send-recv point to point.

Bandwidths follow nccl-tests (§4.1): ``algbw = S/t``, ``busbw = algbw × factor(n)``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trnsim.fabric.algorithms import ALGORITHMS, Phase
from trnsim.fabric.errors import FabricError
from trnsim.fabric.group import Group, Shape


@dataclass(frozen=True)
class Op:
    """A collective: what nccl-tests calls its size ``S``, and its bus-bandwidth factor."""

    size_is: str
    busbw_factor: Callable[[int], float]


# nccl-tests PERFORMANCE.md factors (accelerators_cluster_cost.md §4.1); send-recv as nccom-test's "1".
OPS: dict[str, Op] = {
    "all-reduce": Op("the buffer each rank reduces", lambda n: 2 * (n - 1) / n),
    "reduce-scatter": Op("each rank's whole input (its output is S/n)", lambda n: (n - 1) / n),
    "all-gather": Op("each rank's whole output (its input is S/n)", lambda n: (n - 1) / n),
    "all-to-all": Op("each rank's whole send buffer (S/n to each rank)", lambda n: (n - 1) / n),
    "broadcast": Op("the buffer sent from the root", lambda n: 1.0),
    "reduce": Op("the buffer reduced to the root", lambda n: 1.0),
    "send-recv": Op("the message each rank sends to the next", lambda n: 1.0),
}

# Neuron's empirical sweet spots, neuron.md §4.2 / accelerators_cluster_cost.md §4.3 [N-INTRA]: Mesh "< 1MB",
# RDH "1-56MB", KangaRing "> 56MB" (KangaRing needs two ranks per chip; with one rank per chip it is Ring).
# NOTE: the docs write "MB"; read here as MiB, the unit nccom-test reports in.
NEURON_MESH_BELOW = 1 * 2**20
NEURON_RDH_UP_TO = 56 * 2**20


def _fastest(op: str, nbytes: float, shape: Shape, candidates: Mapping[str, float]) -> str:
    order = list(ALGORITHMS[op])
    return min(candidates, key=lambda name: (candidates[name], order.index(name)))


def _neuron(op: str, nbytes: float, shape: Shape, candidates: Mapping[str, float]) -> str:
    if op in ("all-reduce", "reduce-scatter", "all-gather"):
        if len(shape.spans) > 1:
            wanted = ("hierarchical", "ring")
        elif nbytes < NEURON_MESH_BELOW:
            wanted = ("mesh", "ring")
        elif nbytes <= NEURON_RDH_UP_TO:
            wanted = ("rdh", "ring")
        else:
            wanted = ("ring",)
        for name in wanted:
            if name in candidates:
                return name
    return _fastest(op, nbytes, shape, candidates)


# The algorithms NCCL implements per collective (NCCL's src/enqueue.cc / tuning: Tree only for AllReduce;
# Ring for AllGather, ReduceScatter, Broadcast and Reduce; AllToAll and SendRecv as point-to-point).
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all-reduce": ("ring", "tree"), "all-gather": ("ring",), "reduce-scatter": ("ring",),
    "broadcast": ("ring",), "reduce": ("ring",), "all-to-all": ("pairwise", "direct"), "send-recv": ("direct",),
}


def _nccl(op: str, nbytes: float, shape: Shape, candidates: Mapping[str, float]) -> str:
    allowed = {name: t for name, t in candidates.items() if name in NCCL_ALGORITHMS.get(op, ())}
    return _fastest(op, nbytes, shape, allowed or candidates)


# Policy name → chooser(op, nbytes, shape, {algorithm: time}) → algorithm.
POLICIES: dict[str, Callable[[str, float, Shape, Mapping[str, float]], str]] = {
    "fastest": _fastest,
    "neuron": _neuron,
    "nccl": _nccl,
}


@dataclass(frozen=True)
class CollectiveCost:
    """The cost of one collective on one group. ``breakdown`` lists the phases of the chosen algorithm;
    ``candidates`` the total time of every algorithm valid for the group (empty when nothing moves)."""

    op: str
    nbytes: float
    ranks: int
    algorithm: str
    time_s: float
    breakdown: tuple[Phase, ...]
    candidates: Mapping[str, float]
    policy: str

    @property
    def algbw(self) -> float:
        """nccl-tests algorithm bandwidth S/t, bytes/s (0 when nothing moves)."""
        return self.nbytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def busbw(self) -> float:
        """nccl-tests bus bandwidth: algbw × the op's factor, bytes/s."""
        return self.algbw * OPS[self.op].busbw_factor(self.ranks)

    @property
    def latency_s(self) -> float:
        return sum(p.latency_s for p in self.breakdown)

    def to_dict(self) -> dict[str, object]:
        return {"op": self.op, "nbytes": self.nbytes, "ranks": self.ranks, "algorithm": self.algorithm,
                "policy": self.policy, "time_s": self.time_s, "algbw": self.algbw, "busbw": self.busbw,
                "latency_s": self.latency_s, "candidates": dict(self.candidates),
                "breakdown": [p.__dict__ for p in self.breakdown]}


def _check_name(kind: str, name: str, known: list[str]) -> None:
    if name not in known:
        near = difflib.get_close_matches(name, known, n=1)
        raise FabricError(f"unknown {kind} {name!r}",
                          hint=(f"did you mean {near[0]!r}? " if near else "") + f"known: {', '.join(known)}")


def collective(op: str, nbytes: float, group: Group, algorithm: str | None = None, *, policy: str = "fastest",
               gamma: float = 0.0) -> CollectiveCost:
    """Cost of ``op`` on ``nbytes`` (nccl-tests' ``S`` for that op, see ``OPS``) over ``group``.

    ``algorithm`` forces one of ``ALGORITHMS[op]`` (an error if the group does not allow it); otherwise
    ``policy`` chooses. ``gamma`` is the reduction cost in seconds per byte (no source gives one: 0).
    """
    _check_name("collective op", op, list(OPS))
    if algorithm is not None:
        _check_name(f"algorithm for {op}", algorithm, list(ALGORITHMS[op]))
    _check_name("algorithm policy", policy, list(POLICIES))
    if nbytes < 0 or not 0 <= gamma < math.inf:
        raise FabricError(f"nbytes and gamma must be finite and non-negative, got nbytes={nbytes}, gamma={gamma}",
                          hint="gamma is a reduction cost in seconds per byte, e.g. --gamma 1e-12 (0: none)")
    if group.size == 1 or nbytes == 0:  # nothing crosses a link
        return CollectiveCost(op, nbytes, group.size, algorithm or "none", 0.0, (), {}, policy)
    shape = group.shape
    costed = {name: phases for name, alg in ALGORITHMS[op].items()
              if (phases := alg.cost(nbytes, shape, gamma)) is not None}
    candidates = {name: sum(p.time_s for p in phases) for name, phases in costed.items()}
    if algorithm is not None and algorithm not in costed:
        raise FabricError(f"{algorithm} {op} does not apply to this group of {group.size} ranks "
                          f"(ranks per level {group.ranks_per_level})",
                          hint=f"{algorithm} needs {ALGORITHMS[op][algorithm].requires}; valid here: "
                               f"{', '.join(costed)}")
    chosen = algorithm or POLICIES[policy](op, nbytes, shape, candidates)
    return CollectiveCost(op, nbytes, group.size, chosen, candidates[chosen], costed[chosen], candidates, policy)
