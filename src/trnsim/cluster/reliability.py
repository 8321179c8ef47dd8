"""Failures, checkpoints and goodput of a training run (data and sources: ``reliability.toml``).

Failure rates come from the one published large-scale breakdown, Llama 3 405B's 419 unexpected
interruptions on 16,384 H100s over 54 days (reference/accelerators_cluster_cost.md §5.2). Each cause is a
rate per chip-hour or per server-hour (its ``scope``), so on a cluster of ``n`` chips in ``s`` servers::

    λ  = failure_scale · Σ_causes count / (observed chips or servers · observed hours) · (n or s)
         + spot: per_instance_month / 720 h · s                       (only when bought as Spot)
    λp = planned / observed hours                                     (planned interruptions: no lost work)

A checkpoint holds the trained weights (16-bit) and optimizer states (``config.OPTIMIZERS``) and is written
at the storage bandwidth; reading it back is part of a restart (cost.md §5.4, Young 1974 / Daly 2006)::

    δ = checkpoint bytes / storage bandwidth          R = restart + δ
    τ = max(√(2·δ/λ), δ)                              (Young–Daly interval)
    waste = δ/τ + λ·(τ/2 + R) + λp·(δ + R)            goodput = max(0, 1 − waste)

so the effective time to train is the failure-free time divided by the goodput.

    >>> from trnsim.cluster import reliability
    >>> r = reliability.young_daly(60.0, 3600.0)   # 1-minute writes, one failure an hour
    >>> round(r)
    657
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trnsim.cluster.config import OPTIMIZERS, Plan
from trnsim.cluster.memory import lora_params_per_layer
from trnsim.cluster.models import ModelSpec
from trnsim.hw.schema import build_file, doc

RELIABILITY_FILE = Path(__file__).parent / "reliability.toml"
HOURS_PER_MONTH = 720.0
SCOPES: dict[str, str] = {"chip": "per accelerator", "node": "per server"}


@dataclass(frozen=True, kw_only=True)
class Cause:
    count: int = field(metadata=doc("interruptions observed"))
    scope: str = field(metadata=doc("what the rate scales with", choices=SCOPES))


@dataclass(frozen=True, kw_only=True)
class Observed:
    chips: int = field(metadata=doc("accelerators in the observed job"))
    chips_per_node: int = field(metadata=doc("accelerators per server"))
    days: float = field(metadata=doc("length of the observation"))
    planned: int = field(metadata=doc("planned interruptions"))
    source: str = field(metadata=doc("where the counts come from"))

    @property
    def hours(self) -> float:
        return self.days * 24.0

    @property
    def nodes(self) -> int:
        return self.chips // self.chips_per_node


@dataclass(frozen=True, kw_only=True)
class CheckpointModel:
    storage_bandwidth: float = field(metadata=doc("checkpoint write and read bandwidth", dim="bytes/s"))
    restart: float = field(metadata=doc("restart time besides reading the checkpoint", dim="s"))


@dataclass(frozen=True, kw_only=True)
class SpotModel:
    per_instance_month: float = field(metadata=doc("spot interruptions per instance per 30 days"))


@dataclass(frozen=True, kw_only=True)
class ReliabilityModel:
    observed: Observed = field(metadata=doc("the observed job"))
    causes: Mapping[str, Cause] = field(metadata=doc("unexpected interruptions by cause"))
    checkpoint: CheckpointModel = field(metadata=doc("checkpoint storage and restart"))
    spot: SpotModel = field(metadata=doc("spot interruptions"))
    failure_scale: float = field(default=1.0, metadata=doc("multiplier on every failure rate", internal=True))

    def failure_rates(self, chips: int, servers: int) -> dict[str, float]:
        """Unexpected interruptions per hour of a job on ``chips`` chips in ``servers`` servers, by cause."""
        o = self.observed
        per = {"chip": chips / o.chips, "node": servers / o.nodes}
        return {name: self.failure_scale * c.count / o.hours * per[c.scope] for name, c in self.causes.items()}


@dataclass(frozen=True, slots=True)
class Reliability:
    """The failure model applied to one job. Rates per hour, times in seconds."""

    failures_per_hour: float
    spot_per_hour: float
    planned_per_hour: float
    checkpoint_bytes: float
    write_s: float
    restart_s: float
    interval_s: float
    goodput: float

    @property
    def mtbf_h(self) -> float:
        """Mean hours between interruptions that lose work (failures and spot reclaims)."""
        rate = self.failures_per_hour + self.spot_per_hour
        return 1.0 / rate if rate > 0 else math.inf

    def to_dict(self) -> dict[str, object]:
        return {"failures_per_hour": self.failures_per_hour, "spot_interruptions_per_hour": self.spot_per_hour,
                "planned_per_hour": self.planned_per_hour, "mtbf_h": self.mtbf_h,
                "checkpoint_bytes": self.checkpoint_bytes, "checkpoint_write_s": self.write_s,
                "restart_s": self.restart_s, "checkpoint_interval_s": self.interval_s, "goodput": self.goodput}


def checkpoint_bytes(model: ModelSpec, plan: Plan) -> float:
    """16-bit weights plus optimizer states of every trained parameter (the frozen base of LoRA is not saved)."""
    trained = (model.params().total if plan.finetune == "full"
               else lora_params_per_layer(model, plan.lora_rank, 1) * model.layers)
    return trained * (2.0 + OPTIMIZERS[plan.optimizer])


def young_daly(write_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval √(2·δ·M) (cost.md §5.4 [YOUNG-CODE])."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def waste(write_s: float, restart_s: float, rate_per_s: float, planned_per_s: float) -> tuple[float, float]:
    """(interval τ, fraction of time lost) for the module docstring's model."""
    # NOTE: in closed form (δ/τ = λτ/2 = √(δλ/2) at τ = √(2δ/λ)), so that a vanishing λ gives no inf·0
    if rate_per_s <= 0:
        interval, lost = math.inf, 0.0
    elif rate_per_s * write_s > 2.0:  # √(2δ/λ) < δ: checkpoint back to back
        interval, lost = write_s, 1.0 + rate_per_s * (write_s / 2 + restart_s)
    else:
        interval = math.sqrt(2.0 * write_s / rate_per_s) if rate_per_s > 1e-300 else math.inf
        lost = math.sqrt(2.0 * write_s * rate_per_s) + rate_per_s * restart_s
    return interval, lost + planned_per_s * (write_s + restart_s)


def reliability(model: ModelSpec, plan: Plan, chips_per_node: int, rm: ReliabilityModel | None = None, *,
                spot: bool = False) -> Reliability:
    """The failure model for ``plan`` (module docstring); ``spot`` adds spot interruptions per server."""
    m = rm or default()
    servers = math.ceil(plan.chips / chips_per_node)
    fail = sum(m.failure_rates(plan.chips, servers).values())
    spot_rate = m.spot.per_instance_month / HOURS_PER_MONTH * servers if spot else 0.0
    planned = m.observed.planned / m.observed.hours
    size = checkpoint_bytes(model, plan)
    write = size / m.checkpoint.storage_bandwidth
    restart = m.checkpoint.restart + write
    interval, lost = waste(write, restart, (fail + spot_rate) / 3600.0, planned / 3600.0)
    return Reliability(fail, spot_rate, planned, size, write, restart, interval, max(0.0, 1.0 - lost))


def load(path: str | Path) -> ReliabilityModel:
    return build_file(ReliabilityModel, path)


@functools.cache
def default() -> ReliabilityModel:
    """The packaged data (``reliability.toml``)."""
    return load(RELIABILITY_FILE)
