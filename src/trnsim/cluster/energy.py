"""Power and energy of a training run (constants and their sources: ``energy.toml``).

A chip draws its idle power plus the rest of its board power in proportion to how busy it is::

    P_chip = idle + (tdp − idle) · activity          idle = idle_fraction · tdp unless the preset gives it
    activity = (compute + recompute + optimizer + gradient accumulation) / step time    (from the estimate)
    P_IT   = chips · P_chip + servers · (host + network)       servers = ⌈chips / chips_per_node⌉
    P      = P_IT · PUE;   energy per step = P · step time;   energy of a run = P · effective time to train

Board power is the preset's ``[power] tdp``; presets without one use ``[assumed_tdp]`` of ``energy.toml``
(an assumption, flagged in :class:`Power`), and a caller may pass its own (``tdp=``).

    >>> from trnsim import hw
    >>> from trnsim.cluster import estimate, models, energy
    >>> est = estimate(models.get("llama3-8b"), hw.get("h100"), 64)
    >>> p = energy.power(est, hw.get("h100"))
    >>> p.tdp, p.assumed, 0.46875 * 700 < p.chip_w <= 700
    (700.0, False, True)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trnsim.cluster.estimate import Estimate
from trnsim.errors import ConfigError
from trnsim.hw.schema import build_file, doc
from trnsim.hw.spec import ChipSpec

ENERGY_FILE = Path(__file__).parent / "energy.toml"
# The parts of a step during which the chip computes (the rest: exposed communication and pipeline bubbles).
BUSY_PARTS: tuple[str, ...] = ("compute", "recompute", "optimizer", "grad_accum")
JOULES_PER_KWH = 3.6e6


class EnergyError(ConfigError):
    """No board power is known for a target, or an energy option has a bad value."""


@dataclass(frozen=True, kw_only=True)
class AssumedPower:
    tdp: float = field(metadata=doc("board power", dim="W"))
    source: str = field(metadata=doc("why this figure"))


@dataclass(frozen=True, kw_only=True)
class EnergyModel:
    """The constants of the module docstring (``energy.toml``)."""

    idle_fraction: float = field(metadata=doc("idle power / board power", high=1.0))
    host_per_node: float = field(metadata=doc("host power per server", dim="W"))
    network_per_node: float = field(metadata=doc("network power per server", dim="W"))
    pue: float = field(metadata=doc("power usage effectiveness (facility / IT power)"))
    usd_per_kwh: float = field(metadata=doc("electricity price, USD per kWh"))
    assumed_tdp: Mapping[str, AssumedPower] = field(default_factory=lambda: {},
                                                    metadata=doc("board power of presets that give none"))

    def board_power(self, spec: ChipSpec, tdp: float | None = None) -> tuple[float, float, str, bool] | None:
        """(tdp, idle, source, assumed) in watts, or ``None`` when nothing gives the board power."""
        if tdp is not None:
            return tdp, self.idle_fraction * tdp, "given on the command line", True
        if spec.power.tdp is not None:
            idle = spec.power.idle if spec.power.idle is not None else self.idle_fraction * spec.power.tdp
            return spec.power.tdp, idle, f"{spec.name} preset [power]", False
        a = self.assumed_tdp.get(spec.name)
        if a is None:
            return None
        return a.tdp, self.idle_fraction * a.tdp, a.source, True


@dataclass(frozen=True, slots=True)
class Power:
    """Power of one training setup while it trains. Watts; ``assumed``: the board power is an assumption."""

    tdp: float
    idle: float
    activity: float
    chip_w: float
    servers: int
    it_w: float
    facility_w: float
    source: str
    assumed: bool

    def to_dict(self) -> dict[str, object]:
        return {"tdp_w": self.tdp, "idle_w": self.idle, "activity": self.activity, "chip_w": self.chip_w,
                "servers": self.servers, "it_w": self.it_w, "facility_w": self.facility_w, "source": self.source,
                "assumed": self.assumed}


def activity(est: Estimate) -> float:
    """Share of the step the chips compute (module docstring)."""
    return min(1.0, sum(est.breakdown[k] for k in BUSY_PARTS) / est.step_time_s)


def power(est: Estimate, spec: ChipSpec, model: EnergyModel | None = None, *, tdp: float | None = None) -> Power | None:
    """Power while training ``est`` on ``spec``, or ``None`` when no board power is known."""
    m = model or default()
    board = m.board_power(spec, tdp)
    if board is None:
        return None
    top, idle, source, assumed = board
    a = activity(est)
    chip_w = idle + (top - idle) * a
    chips = est.plan.chips
    servers = math.ceil(chips / spec.topology.chips_per_node)
    it_w = chips * chip_w + servers * (m.host_per_node + m.network_per_node)
    return Power(top, idle, a, chip_w, servers, it_w, it_w * m.pue, source, assumed)


def load(path: str | Path) -> EnergyModel:
    return build_file(EnergyModel, path)


@functools.cache
def default() -> EnergyModel:
    """The packaged constants (``energy.toml``)."""
    return load(ENERGY_FILE)
