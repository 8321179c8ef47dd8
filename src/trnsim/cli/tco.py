"""``trnsim tco`` (time, goodput, energy and cost of a training run per target) and ``trnsim claims`` (the
specification's claims, computed). Both share the assumption options (prices, power, failures).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from trnsim import hw
from trnsim.cli._output import console, print_json, print_table
from trnsim.cli.cluster import add_job_options, job_config, parse_tokens
from trnsim.cluster import claims as claims_mod
from trnsim.cluster import energy, models, prices, reliability, tco
from trnsim.cluster.config import ClusterConfigError, TrainingConfig
from trnsim.errors import ConfigError, TrnsimError

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

DEFAULT_TARGETS = "trn3,trn2,h200,h100,b200,tpu-v5p,mi300x"
TCO_EPILOG = """examples:
  trnsim tco --model llama3-70b --tokens 15e12 --targets trn3,trn2,h200,h100,b200,tpu-v5p,mi300x --deadline 60d
  trnsim tco --model llama3-8b --tokens 2T --chips 1024 --purchase spot --plot cost.png
  trnsim tco --model llama3-70b --tokens 15T --chips 2048 --price trn3=3.2 --price mi300x=2.5 --json
  trnsim tco --model gpt3-175b --tokens 300B --deadline 30d --prices my_prices.toml --region us-east-2

Per target: the fewest chips that finish within --deadline (or exactly --chips), the estimator's default plan
(recomputing everything, then ZeRO-3, if it does not fit), time to train with failures (goodput), power and
energy, and the cost under each purchase option. Prices: trnsim/cluster/prices.toml (dated, sourced); the
trn3 price is derived from the specification's claim (an assumption). Figures marked * rest on an assumption.
"""
CLAIMS_EPILOG = """examples:
  trnsim claims
  trnsim claims --chips 4096 --json
  trnsim claims --price trn3=4.0 --power trn3=700     # the verdicts under other assumptions

Workloads: Llama 3 8B/70B/405B and GPT-3 175B, each in bf16 and in MXFP6 (FP8 where a chip has no MXFP6),
on the same number of chips for every target, on demand. A "~" claim holds within 10% of the claimed gain;
a range or "at least" at its weaker end. Each result gives the assumptions it rests on and, where trn3's
price or power is an assumption, the break-even value at which the claim just holds.
"""
DURATION = {"d": 86400.0, "h": 3600.0, "w": 7 * 86400.0}


def parse_duration(text: str) -> float:
    """``60d``, ``36h``, ``8w`` → seconds."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([dhw])\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"cannot read --deadline {text!r}", hint="write a positive number of days, hours or "
                          "weeks: 60d, 36h, 8w")
    return float(match.group(1)) * DURATION[match.group(2)]


def _pair(text: str, what: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not sep or not key or not number > 0:
        raise ConfigError(f"cannot read {what} {text!r}", hint=f"write TARGET=NUMBER, e.g. {what} trn3=600")
    return key.strip(), number


def add_assumption_options(p: argparse.ArgumentParser) -> None:
    """Prices, power and failure options shared by tco, claims and report."""
    g = p.add_argument_group("assumptions (defaults and sources: trnsim/cluster/{prices,energy,reliability}.toml)")
    g.add_argument("--region", help="price region (default: us-east-1 where listed, else the instance's first)")
    g.add_argument("--price", action="append", default=[], metavar="TARGET[:OPTION]=USD",
                   help="USD per chip-hour, e.g. trn3=2.5 or h200:spot=2.1 (repeatable)")
    g.add_argument("--prices", metavar="FILE", help="a price file in prices.toml's format; its entries win")
    g.add_argument("--power", action="append", default=[], metavar="TARGET=W", help="board power in watts")
    g.add_argument("--pue", type=float, help="facility power / IT power (default 1.15, AWS 2023)")
    g.add_argument("--usd-per-kwh", type=float, help="electricity price (default 0.0806, US industrial 2023)")
    g.add_argument("--failure-scale", type=float, default=1.0, help="multiply every failure rate (default 1)")
    g.add_argument("--spot-interruptions", type=float, metavar="PER_MONTH",
                   help="spot interruptions per instance per 30 days (default 0.05)")
    g.add_argument("--storage-bw", type=float, metavar="TB/S", help="checkpoint storage bandwidth (default 2)")


def assumptions(args: argparse.Namespace, purchase: str = "on-demand") -> tco.Assumptions:
    """The :class:`tco.Assumptions` of the options of :func:`add_assumption_options`."""
    for name in ("pue", "usd_per_kwh", "spot_interruptions", "storage_bw"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: must be positive")
    if not args.failure_scale >= 0:
        raise ConfigError(f"--failure-scale {args.failure_scale}: must be at least 0")
    cat = prices.with_user(args.prices, dict(prices.parse_override(t) for t in args.price))
    em = energy.default()
    em = replace(em, pue=args.pue or em.pue, usd_per_kwh=args.usd_per_kwh or em.usd_per_kwh)
    rm = replace(reliability.default(), failure_scale=args.failure_scale)
    if args.spot_interruptions:
        rm = replace(rm, spot=replace(rm.spot, per_instance_month=args.spot_interruptions))
    if args.storage_bw:
        rm = replace(rm, checkpoint=replace(rm.checkpoint, storage_bandwidth=args.storage_bw * 1e12))
    a = tco.Assumptions(cat, em, rm, args.region, purchase, dict(_pair(t, "--power") for t in args.power))
    cat.check(purchase, args.region)
    return a


def register(subparsers: SubParsers) -> None:
    """Add ``tco`` and ``claims`` to the top-level parser."""
    p = subparsers.add_parser(
        "tco", help="time, goodput, energy and cost of a training run on each target",
        description="Total cost of training a model on a number of tokens, per target: chips, plan, time to "
                    "train with failures, goodput, energy, and cost under each purchase option.",
        epilog=TCO_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="zoo model name or a .toml/.json model file")
    p.add_argument("--tokens", required=True, help="training tokens, e.g. 15T or 15e12")
    p.add_argument("--targets", default=DEFAULT_TARGETS, help=f"comma-separated presets (default {DEFAULT_TARGETS})")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--chips", type=int, help="chips on every target")
    size.add_argument("--deadline", help="fewest chips that train within this time: 60d, 36h, 8w")
    p.add_argument("--max-chips", type=int, default=tco.MAX_CHIPS, help="largest cluster the deadline search tries")
    p.add_argument("--purchase", default="on-demand", choices=list(prices.PURCHASE_OPTIONS),
                   help="the option that sets goodput, time and energy (every option's cost is shown)")
    p.add_argument("--global-batch", type=int, help="sequences per step (default: about 4M tokens)")
    add_job_options(p)
    add_assumption_options(p)
    p.add_argument("--plot", metavar="FILE.png", help="write cost vs time to train as a PNG")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_tco)

    c = subparsers.add_parser(
        "claims", help="the specification's Trainium3 claims, computed on a workload set",
        description="Evaluate each of the specification's claims about trn3 (throughput, energy, price, MXFP6 "
                    "cost, TCO) on the Llama 3 family and GPT-3 175B: the computed value, whether it holds, "
                    "and under which assumptions.",
        epilog=CLAIMS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--chips", type=int, default=claims_mod.CHIPS, help=f"chips per run (default {claims_mod.CHIPS})")
    add_assumption_options(c)
    c.add_argument("--json", action="store_true", help="print JSON instead of tables")
    c.set_defaults(handler=cmd_claims)


def parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ConfigError("--targets is empty", hint=f"e.g. --targets {DEFAULT_TARGETS}")
    return [hw.get(n).name for n in names]


def run_tco(model: models.ModelSpec, targets: Sequence[str], tokens: float, a: tco.Assumptions, *,
            chips: int | None, deadline_s: float | None, config: TrainingConfig | None = None,
            max_chips: int = tco.MAX_CHIPS) -> tuple[list[tco.TcoRow], list[tuple[str, str]]]:
    """Rows for the targets that could be evaluated, and (target, reason) for the others."""
    cfg = config
    rows: list[tco.TcoRow] = []
    failed: list[tuple[str, str]] = []
    for name in targets:
        spec = hw.get(name)
        try:
            if chips is not None:
                rows.append(tco.evaluate(model, spec, chips, tokens, cfg, a))
            else:
                rows.append(tco.for_deadline(model, spec, tokens, deadline_s or math.inf, cfg, a, max_chips))
        except (ClusterConfigError, tco.DeadlineError) as exc:
            failed.append((name, " ".join(line.strip(" -") for line in exc.message.splitlines() if line.strip())))
    return rows, failed


def cmd_tco(args: argparse.Namespace) -> int:
    model = models.get(args.model)
    tokens = parse_tokens(args.tokens)
    if not tokens > 0:
        raise ConfigError(f"--tokens {args.tokens}: must be positive", hint="e.g. --tokens 15T")
    if args.chips is not None and args.chips < 1:
        raise ConfigError(f"--chips {args.chips}: must be at least 1", hint="e.g. --chips 1024")
    a = assumptions(args, args.purchase)
    deadline = parse_duration(args.deadline) if args.deadline else None
    rows, failed = run_tco(model, parse_targets(args.targets), tokens, a, chips=args.chips, deadline_s=deadline,
                           config=job_config(args), max_chips=args.max_chips)
    if not rows:
        raise TrnsimError("no target could be evaluated:\n" + "\n".join(f"  - {t}: {why}" for t, why in failed),
                          hint="change what each line names, e.g. --chips (a multiple of every target's server "
                               "size), or give a longer --deadline")
    if args.plot:
        from trnsim.report.plots import cost_vs_time, write_png  # matplotlib only when a plot is asked for
        write_png(cost_vs_time(model, rows, a, job_config(args)), Path(args.plot))
    if args.json:
        print_json({"model": model.name, "tokens": tokens, "purchase": a.purchase, "region": a.region,
                    "deadline_s": deadline, "targets": [r.to_dict(a.energy.usd_per_kwh) for r in rows],
                    "not_evaluated": dict(failed), "plot": args.plot})
        return 0
    print_tco(model, rows, failed, a, tokens, deadline)
    if args.plot:
        console().print(f"plot: {args.plot}")
    return 0


def days(seconds: float) -> str:
    return "never" if math.isinf(seconds) else f"{seconds / 86400:.1f} d" if seconds >= 86400 else \
        f"{seconds / 3600:.1f} h"


def money(usd: float | None) -> str:
    if usd is None:
        return "—"
    return f"${usd / 1e6:,.2f}M" if usd >= 1e6 else f"${usd:,.0f}"


def short_plan(row: tco.TcoRow) -> str:
    p = row.estimate.plan
    return (f"TP{p.tp} PP{p.pp}" + (f" CP{p.cp}" if p.cp > 1 else "") + f" DP{p.dp} Z{p.zero}"
            + (" rc-full" if p.recompute == "full" else ""))


def tco_tables(rows: Sequence[tco.TcoRow], a: tco.Assumptions) -> list[tuple[str, list[str], list[list[str]], str]]:
    """(title, columns, rows, caption) of the tco tables, shared by the terminal and the HTML report."""
    purchase = a.purchase
    trows: list[list[str]] = []
    for r in rows:
        pw = r.power
        star = "*" if pw is not None and pw.assumed else ""
        kwh = r.energy_kwh
        trows.append([r.target, f"{r.chips:,}", short_plan(r), r.estimate.plan.precision,
                      f"{r.estimate.mfu:.1%}", days(r.ideal_s), days(r.effective_s), f"{r.goodput:.1%}",
                      f"{r.reliability.mtbf_h:.1f} h", f"{pw.facility_w / 1e6:.2f} MW{star}" if pw else "—",
                      f"{kwh / 1e3:,.0f} MWh{star}" if kwh is not None else "—",
                      f"{r.tokens_per_kwh / 1e6:.2f}M{star}" if r.tokens_per_kwh else "—"])
    crows: list[list[str]] = []
    notes: list[str] = []
    for r in rows:
        cells = [r.target]
        for option, c in r.costs.items():
            mark = "*" if c.price is not None and c.price.basis != "list" else ""
            cells.append(money(c.usd) + mark if c.usd is not None else "—")
            if c.missing and (option == purchase or r.cost.price is not None):
                notes.append(f"{r.target} {option}: {c.missing}")
        chosen = r.cost
        cells.append(f"${chosen.price.usd_per_chip_hour:.3f}" if chosen.price else "—")
        cells.append(f"${chosen.usd_per_mtok:.3f}" if chosen.usd_per_mtok is not None else "—")
        crows.append(cells)
    em, rm = a.energy, a.reliability
    time_caption = (f"time: failure-free → with failures (goodput: Young–Daly checkpoints to "
                    f"{rm.checkpoint.storage_bandwidth / 1e12:g} TB/s, {rm.checkpoint.restart:.0f} s restarts, "
                    f"Llama 3's failure rates × {rm.failure_scale:g}); power: facility, PUE {em.pue:g}; "
                    f"* board power assumed")
    cost_caption = (f"cost = chips × price × effective time; * price derived (an assumption, see --json); "
                    f"spot includes {rm.spot.per_instance_month:g} interruptions per instance-month; savings "
                    "plans as if fully used" + ("\n" + "\n".join(notes) if notes else ""))
    return [("time, goodput and energy", ["target", "chips", "plan", "precision", "MFU", "time (no failures)",
                                          f"time ({purchase})", "goodput", "MTBF", "power", "energy", "tokens/kWh"],
             trows, time_caption),
            ("cost by purchase option (goodput of each)", ["target", *prices.PURCHASE_OPTIONS,
                                                            f"$/chip-h ({purchase})", f"$/M tokens ({purchase})"],
             crows, cost_caption)]


def print_tco(model: models.ModelSpec, rows: Sequence[tco.TcoRow], failed: Sequence[tuple[str, str]],
              a: tco.Assumptions, tokens: float, deadline_s: float | None) -> None:
    out = console()
    out.print(f"[bold]{escape(model.describe())}[/bold]")
    goal = f"within {days(deadline_s)} (fewest chips)" if deadline_s else "on the chips given"
    out.print(f"{tokens:.3g} tokens {goal}; purchase {a.purchase}; region {a.region or 'auto'}")
    for title, cols, body, caption in tco_tables(rows, a):
        print_table(title, cols, [[escape(c) for c in r] for r in body], caption=escape(caption))
    for target, why in failed:
        out.print(f"{target}: not evaluated: {why}", soft_wrap=True, markup=False)
    assumed = sorted({f"{r.target}: {c.price.how} ({c.price.sources[0]})" for r in rows
                      if (c := r.cost).price is not None and c.price.basis == "assumption"})
    for line in assumed:
        out.print(f"* {line}", soft_wrap=True, markup=False)
    for r in rows:
        if r.power is not None and r.power.assumed:
            out.print(f"* {r.target} board power {r.power.tdp:.0f} W: {r.power.source}", soft_wrap=True,
                      markup=False)


def cmd_claims(args: argparse.Namespace) -> int:
    if args.chips < 1:
        raise ConfigError(f"--chips {args.chips}: must be at least 1", hint="e.g. --chips 1024")
    report = claims_mod.evaluate(chips=args.chips, assumptions=assumptions(args))
    if args.json:
        print_json(report.to_dict())
        return 0
    print_claims(report)
    return 0


def fmt_claim(r: claims_mod.ClaimResult, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}×" if r.key in ("throughput", "energy") else f"{v:.1%}"


def claims_table(report: claims_mod.ClaimsReport) -> tuple[list[str], list[list[str]]]:
    cols = ["claim", "metric", "computed", "needs", "verdict"]
    body = [[r.claim, r.metric, fmt_claim(r, r.value), "≥ " + fmt_claim(r, r.threshold), r.verdict]
            for r in report.results]
    return cols, body


def print_claims(report: claims_mod.ClaimsReport) -> None:
    out = console()
    cols, body = claims_table(report)
    print_table(f"the specification's claims ({claims_mod.SOURCE}), on {len(report.workloads)} workloads, "
                f"{report.chips} chips each", cols, [[escape(c) for c in r] for r in body],
                caption="\"~\" claims hold within 10% of the claimed gain; ranges and \"at least\" at their weaker end")
    for r in report.results:
        out.print(f"\n[bold]{escape(r.claim)}[/bold]: {fmt_claim(r, r.value)} → {r.verdict}")
        for k, v in r.per_workload:
            out.print(f"  {k}: {fmt_claim(r, v)}", markup=False)
        if r.by_construction:
            out.print("  by construction: there is no public trn3 price, so the catalogue derives it from this "
                      "claim; pass --price trn3=USD to test it", soft_wrap=True)
        if r.break_even:
            out.print(f"  break-even: {r.break_even}", markup=False)
        for line in r.assumptions:
            out.print(f"  assumes: {line}", soft_wrap=True, markup=False)
