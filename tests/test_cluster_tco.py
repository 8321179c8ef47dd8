"""Prices, energy, reliability and TCO (trnsim.cluster.prices/energy/reliability/tco): formulas against hand
computation, properties, and the errors of bad price files."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hw
from trnsim.cluster import energy, estimate, models, prices, reliability, tco
from trnsim.errors import ConfigError

CAT = prices.catalogue()


# --- prices -------------------------------------------------------------------------------------------------

def test_listed_prices_per_chip_hour() -> None:
    h200 = CAT.price("h200")
    assert h200 is not None and h200.basis == "list" and h200.region == "us-east-1"
    assert h200.usd_per_chip_hour == pytest.approx(63.296 / 8)
    spot = CAT.price("h100", "spot")  # median of the four us-east-1 zone quotes
    assert spot is not None and spot.usd_per_hour == pytest.approx((19.2531 + 21.1543) / 2)


def test_trn3_price_is_derived_from_the_claim_and_marked() -> None:
    trn3, p5en = CAT.price("trn3"), CAT.price("h200")
    assert trn3 is not None and p5en is not None
    assert trn3.basis == "assumption" and "claim" in trn3.sources[0]
    assert trn3.usd_per_hour == pytest.approx(p5en.usd_per_hour * (1 - 0.35))
    assert trn3.usd_per_chip_hour == pytest.approx(63.296 * 0.65 / 16)


def test_fallback_rules() -> None:
    od, cb, s1 = CAT.price("b200"), CAT.price("b200", "capacity-block"), CAT.price("b200", "savings-1y")
    assert od is not None and cb is not None and s1 is not None
    assert cb.usd_per_hour == pytest.approx(113.9328 * 39.33 / 55.04) and cb.basis == "assumption"
    assert s1.usd_per_hour == pytest.approx(113.9328 * (1 - 0.47))
    trn2 = CAT.price("trn2")  # spot × p5en's on-demand/spot ratio, us-east-2
    assert trn2 is not None and trn2.region == "us-east-2"
    assert trn2.usd_per_hour == pytest.approx(23.0631 * 63.296 / ((16.24 + 24.2039) / 2))


def test_unpriced_targets_say_why() -> None:
    assert CAT.price("mi300x") is None and "--price mi300x" in CAT.missing("mi300x", "on-demand", None)
    assert CAT.price("trn2", "on-demand", "us-east-1") is None  # the derivation is for us-east-2 only


def test_overrides() -> None:
    cat = CAT.with_overrides(dict([prices.parse_override("trn3=3.0"), prices.parse_override("mi300x=2.0")]))
    trn3, mi = cat.price("trn3"), cat.price("mi300x")
    assert trn3 is not None and trn3.usd_per_chip_hour == pytest.approx(3.0) and trn3.basis == "override"
    assert mi is not None and mi.usd_per_chip_hour == pytest.approx(2.0)
    s3 = cat.price("trn3", "savings-3y")  # fallbacks start from the overridden on-demand price
    assert s3 is not None and s3.usd_per_chip_hour == pytest.approx(3.0 * (1 - 0.72))
    for bad in ("trn3", "trn3=abc", "trn3=-1", "=2", "trn3:lease=2"):
        with pytest.raises(prices.PriceError, match="--price"):
            prices.parse_override(bad)


def test_user_file_wins(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('[instances."p5en.48xlarge"]\ntarget = "h200"\nchips = 8\n'
                 '[[instances."p5en.48xlarge".prices]]\noption = "on-demand"\nregion = "us-east-1"\nusd = 40.0\n'
                 'date = "2026-01"\nsource = "my quote"\n')
    cat = prices.with_user(f)
    h200, trn3 = cat.price("h200"), cat.price("trn3")
    assert h200 is not None and h200.usd_per_hour == 40.0 and h200.sources == ("my quote",)
    assert trn3 is not None and trn3.usd_per_hour == pytest.approx(40.0 * 0.65)  # derivations follow


@pytest.mark.parametrize(("text", "match"), [
    ("[instances.x\n", "syntax error"),
    ('[instances.x]\ntarget = "h200"\nchips = 8\ncolour = 1\n', "unknown key 'colour'"),
    ('[instances.x]\ntarget = "h200"\nchips = 8\n[[instances.x.prices]]\noption = "on-demand"\nregion = "r"\n'
     'date = "d"\nsource = "s"\n', "exactly one of `usd` and `quotes`"),
    ('[instances.x]\ntarget = "h200"\nchips = 8\n[[instances.x.prices]]\noption = "lease"\nregion = "r"\nusd = 1\n'
     'date = "d"\nsource = "s"\n', "'lease' is not one of"),
    ('[instances.x]\ntarget = "h200"\nchips = 8\n[[instances.x.prices]]\noption = "spot"\nregion = "r"\nusd = -3\n'
     'date = "d"\nsource = "s"\n', "out of range"),
    ('[instances.x]\ntarget = "h200"\nchips = 8\n[[instances.x.derived]]\nrule = "below"\nof = "nope"\n'
     'fraction = [0.3]\nsource = "s"\n', "unknown instance 'nope'"),
    ('[fallback.lease]\nrule = "discount"\nrelative_to = "on-demand"\ndiscount = 0.5\nsource = "s"\n',
     "unknown purchase option 'lease'"),
    ("[wrong]\n", "unknown section 'wrong'"),
])
def test_bad_price_file(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(prices.PriceError, match=match) as info:
        prices.with_user(f)
    assert isinstance(info.value, ConfigError) and str(f) in str(info.value)


def test_missing_price_file_and_unknown_region(tmp_path: Path) -> None:
    with pytest.raises(prices.PriceError, match="cannot read price file"):
        prices.load(tmp_path / "none.toml")
    with pytest.raises(prices.PriceError, match="unknown region 'mars-1'") as info:
        CAT.price("h200", "on-demand", "mars-1")
    assert info.value.hint is not None and "us-east-1" in info.value.hint
    with pytest.raises(prices.PriceError, match="unknown purchase option"):
        CAT.price("h200", "rent-to-own")


# --- energy ---------------------------------------------------------------------------------------------------

def test_power_by_hand() -> None:
    spec, m = hw.get("h100"), energy.default()
    est = estimate(models.get("llama3-8b"), spec, 64)
    busy = sum(est.breakdown[k] for k in energy.BUSY_PARTS) / est.step_time_s
    p = energy.power(est, spec, m)
    assert p is not None and not p.assumed
    chip = 700 * m.idle_fraction + 700 * (1 - m.idle_fraction) * busy
    assert p.chip_w == pytest.approx(chip)
    assert p.servers == 8 and p.it_w == pytest.approx(64 * chip + 8 * (500 + 100))
    assert p.facility_w == pytest.approx(p.it_w * 1.15)


def test_assumed_and_missing_power() -> None:
    est = estimate(models.get("llama3-8b"), hw.get("trn3"), 64)
    p = energy.power(est, hw.get("trn3"))
    assert p is not None and p.assumed and p.tdp == 500 and "assumption" in p.source
    assert energy.power(estimate(models.get("llama3-8b"), hw.get("trn1"), 64), hw.get("trn1")) is None
    q = energy.power(est, hw.get("trn3"), tdp=700.0)
    assert q is not None and q.chip_w == pytest.approx(p.chip_w * 700 / 500)


# --- reliability -----------------------------------------------------------------------------------------------

def test_llama3_rates_reproduce_the_observation() -> None:
    rm = reliability.default()
    rates = rm.failure_rates(16384, 2048)
    assert sum(rates.values()) == pytest.approx(419 / (54 * 24))  # 3.09 h between interruptions (cost.md §5.2)
    assert sum(c.count for c in rm.causes.values()) == 419


def test_young_daly_and_goodput_by_hand() -> None:
    assert reliability.young_daly(60.0, 3600.0) == pytest.approx(math.sqrt(2 * 60 * 3600))
    tau, lost = reliability.waste(60.0, 600.0, 1 / 3600, 0.0)
    assert tau == pytest.approx(math.sqrt(2 * 60 * 3600))
    assert lost == pytest.approx(60 / tau + (tau / 2 + 600) / 3600)
    assert reliability.waste(60.0, 600.0, 0.0, 0.0) == (math.inf, 0.0)


def test_checkpoint_and_llama3_goodput() -> None:
    m = models.get("llama3-405b")
    est = tco.fitting_estimate(m, hw.get("h100"), 16384)
    r = reliability.reliability(m, est.plan, 8)
    assert r.checkpoint_bytes == pytest.approx(m.params().total * 14)  # 2 B weights + 12 B AdamW states
    assert r.write_s == pytest.approx(r.checkpoint_bytes / 2e12)
    assert r.mtbf_h == pytest.approx(54 * 24 / 419)
    assert 0.9 < r.goodput < 0.97  # Meta: "effective training time ... higher than 90%"


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0), st.sampled_from([64, 1024, 16384]))
def test_more_failures_never_raise_goodput(a: float, b: float, chips: int) -> None:
    m = models.get("llama3-70b")
    plan = tco.fitting_estimate(m, hw.get("h200"), chips).plan
    lo, hi = sorted((a, b))
    base = reliability.default()
    g = [reliability.reliability(m, plan, 8, replace(base, failure_scale=s)).goodput for s in (lo, hi)]
    assert g[1] <= g[0]
    spot = reliability.reliability(m, plan, 8, replace(base, failure_scale=lo), spot=True).goodput
    assert spot <= g[0]


# --- TCO -------------------------------------------------------------------------------------------------------

def test_cost_formula() -> None:
    m, spec = models.get("llama3-8b"), hw.get("h200")
    row = tco.evaluate(m, spec, 64, 1e11)
    od = row.costs["on-demand"]
    assert od.price is not None and od.usd is not None
    assert od.effective_s == pytest.approx(1e11 / row.estimate.tokens_per_s / row.goodput)
    assert od.usd == pytest.approx(64 * 63.296 / 8 * od.effective_s / 3600)
    assert od.usd_per_mtok == pytest.approx(od.usd / 1e5)
    assert row.costs["spot"].goodput <= row.goodput
    assert row.energy_kwh == pytest.approx(row.power.facility_w * row.effective_s / 3.6e6)  # type: ignore[union-attr]


def test_capacity_block_limits() -> None:
    big = tco.evaluate(models.get("llama3-8b"), hw.get("h100"), 8 * 257, 1e11)
    assert big.costs["capacity-block"].usd is None and "256" in (big.costs["capacity-block"].missing or "")
    small = tco.evaluate(models.get("llama3-8b"), hw.get("h100"), 8 * 256, 1e11)
    assert small.costs["capacity-block"].usd is not None


@settings(max_examples=20, deadline=None)
@given(st.floats(0.1, 20.0), st.floats(0.1, 20.0), st.sampled_from(["trn3", "h200", "mi300x"]))
def test_cheaper_price_never_raises_cost(p1: float, p2: float, target: str) -> None:
    m, spec = models.get("llama3-8b"), hw.get(target)
    est = estimate(m, spec, 64)
    lo, hi = sorted((p1, p2))
    costs = []
    for p in (lo, hi):
        a = tco.Assumptions(prices=CAT.with_overrides({(target, "on-demand"): p}))
        row = tco.evaluate_estimate(m, spec, est, 1e11, a)
        costs.append({o: c.usd for o, c in row.costs.items()})
    for option in prices.PURCHASE_OPTIONS:
        if costs[0][option] is not None and costs[1][option] is not None:
            assert costs[0][option] <= costs[1][option]  # type: ignore[operator]


@settings(max_examples=12, deadline=None)
@given(st.floats(2.0, 400.0), st.floats(2.0, 400.0), st.sampled_from(["trn3", "h100"]))
def test_longer_deadline_never_needs_more_chips(d1: float, d2: float, target: str) -> None:
    m, spec = models.get("llama3-8b"), hw.get(target)
    short, long_ = sorted((d1, d2))
    chips = []
    for days in (short, long_):
        try:
            chips.append(tco.for_deadline(m, spec, 2e11, days * 86400, max_chips=512).chips)
        except tco.DeadlineError:
            chips.append(math.inf)
    assert chips[1] <= chips[0]


def test_deadline_is_met_and_minimal_on_the_grid() -> None:
    m, spec = models.get("llama3-8b"), hw.get("trn3")
    row = tco.for_deadline(m, spec, 2e12, 10 * 86400)
    assert row.effective_s <= 10 * 86400
    grid = tco.chip_grid(16)
    smaller = [c for c in grid if c < row.chips]
    if smaller:
        prev = tco.evaluate(m, spec, smaller[-1], 2e12)
        assert prev.effective_s > 10 * 86400 or not prev.estimate.fits
    with pytest.raises(tco.DeadlineError, match="longer --deadline"):
        tco.for_deadline(m, spec, 2e12, 3600, max_chips=64)


def test_chip_grid() -> None:
    g = tco.chip_grid(8, 1024)
    assert g[:8] == [8, 16, 24, 32, 40, 48, 56, 64] and g == sorted(set(g)) and g[-1] == 1024
    assert all(c % 8 == 0 for c in g)
