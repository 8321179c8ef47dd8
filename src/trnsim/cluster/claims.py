"""The specification's claims about Trainium3, computed on a stated workload set (ARCHITECTURE.md, trn3 table,
"claims to check": "computed by the cluster/cost model, never assumed").

Workloads (:data:`WORKLOADS`): Llama 3 8B, 70B and 405B and GPT-3 175B, each in bf16 and in the lowest
training precision a target runs of :data:`LOW_PRECISIONS` (MXFP6 where the chip has it, else FP8), on the
same number of chips for every target (default :data:`CHIPS`), each with the estimator's default plan, bought
on demand. A claim's value is the geometric mean over the workloads of a per-workload ratio.

Each claim is a row of :data:`CLAIMS`: its wording, the claimed value, a tolerance (a "~" claim holds within
10% of the claimed gain; a range or "at least" holds at its weaker end) and an evaluator. Where a claim's value
depends on an assumption rather than on a published figure (trn3's price and power), the result says so and
gives the break-even value of the assumption at which the claim just holds.

    >>> from trnsim.cluster import claims
    >>> res = claims.evaluate(workloads=(("llama3-8b", "bf16"),), chips=64)
    >>> [r.key for r in res.results][:2]
    ['throughput', 'energy']
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from trnsim.cluster import models, tco
from trnsim.cluster.config import PRECISIONS, TrainingConfig
from trnsim.cluster.energy import JOULES_PER_KWH, power
from trnsim.cluster.tco import Assumptions, TcoRow
from trnsim.hw import get as get_spec
from trnsim.hw.spec import ChipSpec

SOURCE = "ARCHITECTURE.md, trn3 table, \"claims to check\""
WORKLOADS: tuple[tuple[str, str], ...] = tuple((m, p) for m in ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b")
                                               for p in ("bf16", "low"))
LOW_PRECISIONS: tuple[str, ...] = ("mxfp6", "fp8")
CHIPS = 1024
GPUS: tuple[str, ...] = ("h100", "h200", "b200", "mi300x")
TOKENS = 1e12  # nominal: every claim compares per-token figures, which do not depend on it
TOLERANCE = 0.10  # a "~" claim holds when at least 90% of the claimed gain is reached


def precision_for(spec: ChipSpec, kind: str) -> str:
    """``bf16``, or for ``low`` the first of :data:`LOW_PRECISIONS` the chip runs."""
    if kind == "bf16":
        return "bf16"
    return next(p for p in (*LOW_PRECISIONS, "bf16") if spec.supports(PRECISIONS[p]))


@dataclass(frozen=True)
class Runs:
    """Every (target, model, precision kind) the claims need, evaluated once."""

    chips: int
    workloads: tuple[tuple[str, str], ...]
    assumptions: Assumptions
    rows: dict[tuple[str, str, str], TcoRow] = field(default_factory=lambda: {})

    def row(self, target: str, model: str, kind: str) -> TcoRow:
        key = (target, model, kind)
        if key not in self.rows:
            spec = get_spec(target)
            cfg = TrainingConfig(precision=precision_for(spec, kind))
            self.rows[key] = tco.evaluate(models.get(model), spec, self.chips, TOKENS, cfg, self.assumptions)
        return self.rows[key]


@dataclass(frozen=True)
class ClaimResult:
    """A claim evaluated: the geometric-mean value, per-workload values, the verdict and its assumptions."""

    key: str
    claim: str
    metric: str
    claimed: float
    threshold: float
    value: float | None
    per_workload: tuple[tuple[str, float | None], ...]
    assumptions: tuple[str, ...]
    by_construction: bool = False
    break_even: str | None = None

    @property
    def holds(self) -> bool | None:
        return None if self.value is None else self.value >= self.threshold

    @property
    def verdict(self) -> str:
        if self.holds is None:
            return "cannot tell"
        text = "holds" if self.holds else "fails"
        return text + (" (by construction)" if self.by_construction else "")

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "claim": self.claim, "source": SOURCE, "metric": self.metric,
                "claimed": self.claimed, "threshold": self.threshold, "value": self.value, "holds": self.holds,
                "by_construction": self.by_construction, "verdict": self.verdict,
                "per_workload": dict(self.per_workload), "assumptions": list(self.assumptions),
                "break_even": self.break_even}


def _geomean(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values if v is not None) / len(values))


def _label(model: str, kind: str, runs: Runs, target: str = "trn3") -> str:
    return f"{model} {precision_for(get_spec(target), kind)}"


def _ratio(runs: Runs, metric: Callable[[TcoRow], float | None], a: str, b: str
           ) -> tuple[float | None, tuple[tuple[str, float | None], ...]]:
    per: list[tuple[str, float | None]] = []
    for model, kind in runs.workloads:
        x, y = metric(runs.row(a, model, kind)), metric(runs.row(b, model, kind))
        pa, pb = precision_for(get_spec(a), kind), precision_for(get_spec(b), kind)
        per.append((f"{model} {pa}" + (f" vs {pb}" if pb != pa else ""), x / y if x is not None and y else None))
    return _geomean([v for _, v in per]), tuple(per)


def _price_note(runs: Runs, target: str) -> str:
    p = runs.assumptions.prices.price(target, "on-demand", runs.assumptions.region)
    if p is None:
        return f"{target}: no price"
    return f"{target} on-demand ${p.usd_per_chip_hour:.3f}/chip-h ({p.basis}: {p.how}; {p.sources[0]})"


def _power_note(runs: Runs, target: str) -> str:
    board = runs.assumptions.energy.board_power(get_spec(target), runs.assumptions.tdp.get(target))
    return f"{target}: no board power" if board is None else f"{target} board power {board[0]:.0f} W ({board[2]})"


def _common(runs: Runs) -> list[str]:
    return [f"same {runs.chips} chips on every target; the estimator's default plan; low precision = "
            f"{' else '.join(LOW_PRECISIONS)}, the first the chip runs; geometric mean over "
            f"{len(runs.workloads)} workloads"]


def _throughput(runs: Runs) -> ClaimResult:
    value, per = _ratio(runs, lambda r: r.estimate.tokens_per_s, "trn3", "trn2")
    return ClaimResult("throughput", "~3× Trainium2 training throughput", "tokens/s, trn3 ÷ trn2", 3.0,
                       3.0 * (1 - TOLERANCE), value, per, (*_common(runs), "goodput not included (same on both)"))


def _kwh_metric(runs: Runs, tdp: float | None) -> Callable[[TcoRow], float | None]:
    def metric(row: TcoRow) -> float | None:
        if tdp is None or row.target != "trn3":
            return row.tokens_per_kwh
        p = power(row.estimate, get_spec(row.target), runs.assumptions.energy, tdp=tdp)
        return row.tokens / (p.facility_w * row.effective_s / JOULES_PER_KWH) if p else None
    return metric


def _energy(runs: Runs) -> ClaimResult:
    value, per = _ratio(runs, _kwh_metric(runs, None), "trn3", "trn2")
    threshold = 1 + 0.4 * (1 - TOLERANCE)
    board = runs.assumptions.energy.board_power(get_spec("trn3"), runs.assumptions.tdp.get("trn3"))
    assumed = board is not None and board[3]
    even = None
    if value is not None and assumed:  # tokens/kWh falls as the board power rises: bisect for the break-even
        lo, hi = 1.0, 10_000.0
        for _ in range(60):
            mid = (lo + hi) / 2
            v = _ratio(runs, _kwh_metric(runs, mid), "trn3", "trn2")[0]
            lo, hi = (mid, hi) if v is not None and v >= threshold else (lo, mid)
        even = f"holds while trn3 draws at most {lo:.0f} W (board power)"
    m = runs.assumptions.energy
    return ClaimResult("energy", "~40% better energy efficiency than Trainium2", "tokens per facility kWh, "
                       "trn3 ÷ trn2", 1.4, threshold, value, per,
                       (*_common(runs), _power_note(runs, "trn3"), _power_note(runs, "trn2"),
                        f"idle {m.idle_fraction:.0%} of board power, host {m.host_per_node:.0f} W + network "
                        f"{m.network_per_node:.0f} W per server, PUE {m.pue:g}; goodput included"),
                       break_even=even)


def _price(runs: Runs) -> ClaimResult:
    a = runs.assumptions
    trn3, h200 = a.prices.price("trn3", "on-demand", a.region), a.prices.price("h200", "on-demand", a.region)
    value = None if trn3 is None or h200 is None else 1 - trn3.usd_per_hour / h200.usd_per_hour
    chip = None if trn3 is None or h200 is None else 1 - trn3.usd_per_chip_hour / h200.usd_per_chip_hour
    per = (("per instance-hour", value), ("per chip-hour", chip))
    return ClaimResult("price", "hourly price ~30–40% below H200-based p5 instances",
                       "1 − trn3 instance-hour ÷ p5en instance-hour (on-demand)", 0.30, 0.30, value, per,
                       (_price_note(runs, "trn3"), _price_note(runs, "h200")),
                       by_construction=trn3 is not None and trn3.basis == "assumption")


def _cost_ratio(runs: Runs, others: Sequence[str], kinds: Sequence[str]
                ) -> tuple[float | None, tuple[tuple[str, float | None], ...], list[str]]:
    """Geometric mean over workloads of trn3's cost per token ÷ the cheapest of ``others`` (on demand)."""
    per: list[tuple[str, float | None]] = []
    cheapest: list[str] = []
    for model, kind in runs.workloads:
        if kind not in kinds:
            continue
        own = runs.row("trn3", model, kind).costs["on-demand"].usd_per_mtok
        rivals = [(c, t) for t in others if (c := runs.row(t, model, kind).costs["on-demand"].usd_per_mtok)]
        best = min(rivals, default=None)
        per.append((f"{_label(model, kind, runs)} vs {best[1] if best else '—'}",
                    own / best[0] if own and best else None))
        if best:
            cheapest.append(best[1])
    return _geomean([v for _, v in per]), tuple(per), sorted(set(cheapest))


def _saving(key: str, claim: str, claimed: float, threshold: float, runs: Runs, others: Sequence[str],
            kinds: Sequence[str], note: str) -> ClaimResult:
    ratio, per, used = _cost_ratio(runs, others, kinds)
    value = None if ratio is None else 1 - ratio
    trn3 = runs.assumptions.prices.price("trn3", "on-demand", runs.assumptions.region)
    even = None
    if ratio and trn3 is not None:  # cost is proportional to trn3's price
        even = f"holds while trn3 costs at most ${trn3.usd_per_chip_hour * (1 - threshold) / ratio:.3f}/chip-h"
    unpriced = [t for t in others if runs.assumptions.prices.price(t, "on-demand", runs.assumptions.region) is None]
    notes = [*_common(runs), note, _price_note(runs, "trn3"), *(_price_note(runs, t) for t in used)]
    if unpriced:
        notes.append(f"left out, no price: {', '.join(unpriced)} (--price TARGET=USD)")
    return ClaimResult(key, claim, "1 − trn3 cost per token ÷ " + ("the cheapest GPU's" if len(others) > 1
                       else f"{others[0]}'s"), claimed, threshold, value,
                       tuple((k, None if v is None else 1 - v) for k, v in per), tuple(notes), break_even=even,
                       by_construction=False)


def _mxfp6(runs: Runs) -> ClaimResult:
    return _saving("mxfp6", "MXFP6 training ~35% cheaper than on GPUs", 0.35, 0.35 * (1 - TOLERANCE), runs, GPUS,
                   ("low",), "trn3 in MXFP6 vs each GPU in its lowest precision (FP8, MXFP6 on B200); effective "
                   "time with goodput, on-demand")


def _tco(runs: Runs) -> ClaimResult:
    return _saving("tco", "TCO at least 30% lower (than H200-based p5)", 0.30, 0.30, runs, ("h200",),
                   ("bf16", "low"), "cost of the run on demand (rental × effective time, failures included); "
                   "electricity and operations are in the cloud price")


# key → evaluator, in the order the specification lists the claims.
CLAIMS: dict[str, Callable[[Runs], ClaimResult]] = {
    "throughput": _throughput, "energy": _energy, "price": _price, "mxfp6": _mxfp6, "tco": _tco}


@dataclass(frozen=True)
class ClaimsReport:
    chips: int
    workloads: tuple[tuple[str, str], ...]
    results: tuple[ClaimResult, ...]
    runs: Runs

    def to_dict(self) -> dict[str, object]:
        return {"chips": self.chips, "workloads": [f"{m} {k}" for m, k in self.workloads],
                "claims": [r.to_dict() for r in self.results]}


def evaluate(*, workloads: Sequence[tuple[str, str]] = WORKLOADS, chips: int = CHIPS,
             assumptions: Assumptions | None = None, only: Sequence[str] | None = None) -> ClaimsReport:
    """Evaluate the claims (all, or those named in ``only``) on ``workloads`` at ``chips`` chips."""
    a = replace(assumptions or Assumptions(), purchase="on-demand")
    runs = Runs(chips, tuple(workloads), a)
    keys = list(only) if only else list(CLAIMS)
    return ClaimsReport(chips, tuple(workloads), tuple(CLAIMS[k](runs) for k in keys), runs)
