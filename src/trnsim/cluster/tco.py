"""Total cost of a training run: time, goodput, energy and dollars per target and purchase option.

For a model, a number of training tokens and a target, :func:`evaluate` takes a chip count, estimates the
step (``estimate``), applies the failure model (``reliability``: goodput, so effective time = tokens /
throughput / goodput), the power model (``energy``) and the price catalogue (``prices``)::

    cost(option) = chips × USD per chip-hour(option) × effective hours(option)
    cost per million tokens = cost / tokens × 10⁶

Spot adds spot interruptions, so its goodput and effective time differ from the other options. Capacity
Blocks have AWS's limits (cost.md §3.2 [CB-DOC]): at most 256 instances (servers) and 182 days; beyond them the
option has no cost. Savings Plans are priced as if the commitment is fully used (the job's share of it).
Electricity is informational: cloud prices include it.

:func:`for_deadline` finds the fewest chips that finish within a deadline: it walks chip counts upward on a
fixed grid (:func:`chip_grid`) and returns the first that fits in memory and meets the deadline under the
chosen purchase option, so a longer deadline never needs more chips.

    >>> from trnsim import hw
    >>> from trnsim.cluster import models, tco
    >>> row = tco.evaluate(models.get("llama3-8b"), hw.get("h100"), 64, 1e11)
    >>> row.costs["on-demand"].price.instance, 0.9 < row.goodput <= 1.0
    ('p5.48xlarge', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from trnsim.cluster.config import ClusterConfigError, TrainingConfig
from trnsim.cluster.energy import JOULES_PER_KWH, EnergyModel, Power, power
from trnsim.cluster.energy import default as default_energy
from trnsim.cluster.estimate import Estimate, estimate
from trnsim.cluster.models import ModelSpec
from trnsim.cluster.prices import PURCHASE_OPTIONS, Catalogue, Price, catalogue
from trnsim.cluster.reliability import Reliability, ReliabilityModel, reliability
from trnsim.cluster.reliability import default as default_reliability
from trnsim.errors import ConfigError
from trnsim.hw.spec import ChipSpec

# EC2 Capacity Blocks: "up to 256 instances across Capacity Blocks", "up to 182 days total" (cost.md §3.2 [CB-DOC])
CAPACITY_BLOCK_INSTANCES = 256
CAPACITY_BLOCK_DAYS = 182
# Memory savers tried in order when a setup does not fit (each step keeps the previous): the estimator's
# default plan first, then recompute everything (Korthikanti 2022), then shard all model states (ZeRO-3).
FIT_LADDER: tuple[dict[str, object], ...] = ({}, {"recompute": "full"}, {"recompute": "full", "zero": 3})
MAX_CHIPS = 131072  # the deadline search stops here (an order above the largest published clusters, cost.md §2)


class DeadlineError(ConfigError):
    """No chip count on the search grid trains the model within the deadline."""


@dataclass(frozen=True)
class Assumptions:
    """Everything a TCO depends on besides the job and the target; ``tdp`` overrides board power by target."""

    prices: Catalogue = field(default_factory=catalogue)
    energy: EnergyModel = field(default_factory=default_energy)
    reliability: ReliabilityModel = field(default_factory=default_reliability)
    region: str | None = None
    purchase: str = "on-demand"
    tdp: dict[str, float] = field(default_factory=lambda: {})


@dataclass(frozen=True, slots=True)
class OptionCost:
    """One purchase option: its price (or why there is none), goodput, effective time and cost."""

    option: str
    price: Price | None
    missing: str | None
    goodput: float
    effective_s: float
    usd: float | None
    usd_per_mtok: float | None

    def to_dict(self) -> dict[str, object]:
        return {"price": self.price.to_dict() if self.price else None, "missing": self.missing,
                "goodput": self.goodput, "effective_time_s": self.effective_s, "usd": self.usd,
                "usd_per_million_tokens": self.usd_per_mtok}


@dataclass(frozen=True)
class TcoRow:
    """One target: the setup, its times, goodput, power and energy, and the cost of each purchase option."""

    target: str
    tokens: float
    estimate: Estimate
    reliability: Reliability  # under the chosen purchase option
    purchase: str
    ideal_s: float
    power: Power | None
    costs: dict[str, OptionCost]

    @property
    def chips(self) -> int:
        return self.estimate.plan.chips

    @property
    def goodput(self) -> float:
        return self.reliability.goodput

    @property
    def effective_s(self) -> float:
        return self.costs[self.purchase].effective_s

    @property
    def energy_kwh(self) -> float | None:
        """Facility energy of the run (effective time, chosen option), or ``None`` without a board power."""
        if self.power is None or math.isinf(self.effective_s):
            return None
        return self.power.facility_w * self.effective_s / JOULES_PER_KWH

    @property
    def joules_per_step(self) -> float | None:
        return None if self.power is None else self.power.facility_w * self.estimate.step_time_s

    @property
    def tokens_per_kwh(self) -> float | None:
        kwh = self.energy_kwh
        return None if not kwh else self.tokens / kwh

    @property
    def cost(self) -> OptionCost:
        return self.costs[self.purchase]

    def to_dict(self, usd_per_kwh: float) -> dict[str, object]:
        p = self.estimate.plan
        kwh = self.energy_kwh
        return {"target": self.target, "chips": self.chips, "tokens": self.tokens, "purchase": self.purchase,
                "plan": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "zero": p.zero,
                         "recompute": p.recompute, "micro_batch": p.micro_batch, "global_batch": p.global_batch,
                         "precision": p.precision, "describe": p.describe()},
                "step_time_s": self.estimate.step_time_s, "tokens_per_s": self.estimate.tokens_per_s,
                "mfu": self.estimate.mfu, "time_to_train_ideal_s": self.ideal_s,
                "time_to_train_effective_s": self.effective_s, "reliability": self.reliability.to_dict(),
                "power": self.power.to_dict() if self.power else None,
                "energy": {"joules_per_step": self.joules_per_step, "kwh": kwh,
                           "mwh": kwh / 1e3 if kwh is not None else None, "tokens_per_kwh": self.tokens_per_kwh,
                           "electricity_usd": kwh * usd_per_kwh if kwh is not None else None},
                "costs": {o: c.to_dict() for o, c in self.costs.items()}}


def _option(option: str, spec: ChipSpec, est: Estimate, tokens: float, rel: Reliability, a: Assumptions) -> OptionCost:
    effective = est.time_to_train(tokens) / rel.goodput if rel.goodput > 0 else math.inf
    price = a.prices.price(spec.name, option, a.region)
    missing = None if price is not None else a.prices.missing(spec.name, option, a.region)
    servers = math.ceil(est.plan.chips / spec.topology.chips_per_node)
    if option == "capacity-block" and price is not None:
        if servers > CAPACITY_BLOCK_INSTANCES:
            price, missing = None, (f"{servers} instances: Capacity Blocks allow at most {CAPACITY_BLOCK_INSTANCES} "
                                    "(cost.md §3.2 [CB-DOC])")
        elif effective > CAPACITY_BLOCK_DAYS * 86400:
            price, missing = None, f"longer than the {CAPACITY_BLOCK_DAYS}-day Capacity Block maximum (cost.md §3.2)"
    if price is None or math.isinf(effective):
        return OptionCost(option, price, missing or "no goodput: the job never finishes", rel.goodput, effective,
                          None, None)
    usd = est.plan.chips * price.usd_per_chip_hour * effective / 3600.0
    return OptionCost(option, price, None, rel.goodput, effective, usd, usd / tokens * 1e6)


def evaluate_estimate(model: ModelSpec, spec: ChipSpec, est: Estimate, tokens: float,
                      a: Assumptions | None = None) -> TcoRow:
    """The TCO of an already estimated setup."""
    a = a or Assumptions()
    a.prices.check(a.purchase, a.region)
    cpn = spec.topology.chips_per_node
    rel = {s: reliability(model, est.plan, cpn, a.reliability, spot=s) for s in (False, True)}
    costs = {o: _option(o, spec, est, tokens, rel[o == "spot"], a) for o in PURCHASE_OPTIONS}
    return TcoRow(spec.name, tokens, est, rel[a.purchase == "spot"], a.purchase, est.time_to_train(tokens),
                  power(est, spec, a.energy, tdp=a.tdp.get(spec.name)), costs)


def fitting_estimate(model: ModelSpec, spec: ChipSpec, chips: int, config: TrainingConfig | None = None, *,
                     ladder: bool = True) -> Estimate:
    """``estimate`` of ``config``; if it does not fit and ``ladder``, the first step of :data:`FIT_LADDER` that
    does (else the last tried)."""
    cfg = config or TrainingConfig()
    est = estimate(model, spec, chips, cfg)
    for step in FIT_LADDER[1:] if ladder else ():
        if est.fits:
            break
        est = estimate(model, spec, chips, replace(cfg, **step))  # pyright: ignore[reportArgumentType]
    return est


def evaluate(model: ModelSpec, spec: ChipSpec, chips: int, tokens: float, config: TrainingConfig | None = None,
             a: Assumptions | None = None, *, ladder: bool = True) -> TcoRow:
    """The TCO of training ``model`` on ``tokens`` tokens on ``chips`` chips (:func:`fitting_estimate`)."""
    return evaluate_estimate(model, spec, fitting_estimate(model, spec, chips, config, ladder=ladder), tokens, a)


def sweep(model: ModelSpec, spec: ChipSpec, tokens: float, chip_counts: list[int],
          config: TrainingConfig | None = None, a: Assumptions | None = None) -> list[TcoRow]:
    """:func:`evaluate` at each chip count whose setup fits (the others are left out)."""
    rows: list[TcoRow] = []
    for chips in chip_counts:
        try:
            row = evaluate(model, spec, chips, tokens, config, a)
        except ClusterConfigError:
            continue
        if row.estimate.fits:
            rows.append(row)
    return rows


def chip_grid(chips_per_node: int, max_chips: int = MAX_CHIPS) -> list[int]:
    """Whole servers, 1, 2, 3, … then four steps per doubling (4, 5, 6, 7 × 2^k / 4 servers), up to ``max_chips``."""
    nodes: set[int] = set()
    k = 0
    while chips_per_node * 2**k <= max_chips:
        nodes |= {max(1, (m * 2**k) // 4) for m in (4, 5, 6, 7)}
        k += 1
    return sorted(c for n in nodes if (c := n * chips_per_node) <= max_chips)


def for_deadline(model: ModelSpec, spec: ChipSpec, tokens: float, deadline_s: float,
                 config: TrainingConfig | None = None, a: Assumptions | None = None,
                 max_chips: int = MAX_CHIPS, *, ladder: bool = True) -> TcoRow:
    """The fewest chips of :func:`chip_grid` whose setup fits and trains within ``deadline_s`` (module docstring)."""
    a = a or Assumptions()
    best_s = math.inf
    for chips in chip_grid(spec.topology.chips_per_node, max_chips):
        try:
            est = fitting_estimate(model, spec, chips, config, ladder=ladder)
        except ClusterConfigError:
            continue
        if not est.fits:
            continue
        row = evaluate_estimate(model, spec, est, tokens, a)
        if row.effective_s <= deadline_s:
            return row
        best_s = min(best_s, row.effective_s)
    fastest = f"the fastest found takes {best_s / 86400:.1f} days" if best_s < math.inf else "no setup fits"
    raise DeadlineError(f"no {spec.name} cluster of up to {max_chips:,} chips trains {model.name} on {tokens:.3g} "
                        f"tokens within {deadline_s / 86400:.1f} days: {fastest}", where=spec.name,
                        hint="give a longer --deadline, a lower --tokens, or a fixed --chips")
