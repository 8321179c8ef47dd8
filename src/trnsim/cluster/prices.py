"""The price catalogue (``prices.toml``): USD per chip-hour of each target by purchase option and region.

    >>> from trnsim.cluster import prices
    >>> cat = prices.catalogue()
    >>> p = cat.price("h200", "on-demand")
    >>> p.instance, p.region, round(p.usd_per_chip_hour, 3), p.basis
    ('p5en.48xlarge', 'us-east-1', 7.912, 'list')
    >>> cat.price("trn3", "on-demand").basis      # no public price: derived from the spec's claim
    'assumption'

A price is found, in this order: a command-line override (:meth:`Catalogue.with_overrides`, USD per
chip-hour); a *listed* price of the target's instance (``usd``, or the median of spot ``quotes``); a *derived*
price of that instance (a rule of :data:`RULES`); the option's *fallback* rule. Derived and fallback prices
are assumptions and say so (``Price.basis``), with the arithmetic in ``Price.how`` and every source they used.

``region=None`` means "auto": the catalogue's default region where the instance has a price there, else its
first listed region; a named region must appear somewhere in the catalogue (else :class:`PriceError`) and an
instance without a price in it has none (``None``, with :meth:`Catalogue.missing` saying why).

A user file (``--prices FILE``) has the same format; its instances come first and its entries win.
"""

from __future__ import annotations

import functools
import statistics
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from trnsim.errors import ConfigError, SpecError
from trnsim.hw.schema import FieldIssue, build, doc

CATALOGUE_FILE = Path(__file__).parent / "prices.toml"

PURCHASE_OPTIONS: dict[str, str] = {
    "on-demand": "pay per hour, no commitment",
    "capacity-block": "EC2 Capacity Blocks for ML: reserved for 1-182 days, paid up front (cost.md §3.2)",
    "spot": "spare capacity, interruptible (adds spot interruptions to the failure model)",
    "savings-1y": "1-year Savings Plan: a usage commitment, priced as if fully used (cost.md §3.3)",
    "savings-3y": "3-year Savings Plan: a usage commitment, priced as if fully used (cost.md §3.3)",
}


class PriceError(ConfigError):
    """A price file is malformed, or a price request names an unknown region, option or target."""


@dataclass(frozen=True, kw_only=True)
class ListedPrice:
    """A published price: ``usd`` per instance-hour, or spot ``quotes`` (per zone) of which the median is used."""

    option: str = field(metadata=doc("purchase option", choices=PURCHASE_OPTIONS))
    region: str = field(metadata=doc("cloud region, e.g. us-east-1"))
    usd: float | None = field(default=None, metadata=doc("USD per instance-hour"))
    quotes: tuple[float, ...] | None = field(default=None, metadata=doc("USD per instance-hour, one per zone"))
    date: str = field(metadata=doc("when the price was published or snapshotted"))
    source: str = field(metadata=doc("where the price comes from"))

    def __post_init__(self) -> None:
        if (self.usd is None) == (self.quotes is None):
            raise FieldIssue("usd", "give exactly one of `usd` and `quotes`",
                             hint="usd = 12.5 for one price; quotes = [1.0, 1.2] for per-zone spot prices")
        if self.quotes is not None and not self.quotes:
            raise FieldIssue("quotes", "empty list", hint="give at least one quote, or use `usd`")

    @property
    def value(self) -> float:
        return self.usd if self.usd is not None else statistics.median(cast("tuple[float, ...]", self.quotes))


@dataclass(frozen=True, kw_only=True)
class DerivedPrice:
    """A price computed from others by ``rule`` (:data:`RULES`); always an assumption."""

    option: str = field(default="on-demand", metadata=doc("purchase option", choices=PURCHASE_OPTIONS))
    rule: str = field(metadata=doc("derivation rule", choices={
        "below": "`of`'s price of this option × (1 − mean of `fraction`)",
        "same-ratio": "own `relative_to` price × `of`'s (option / relative_to) price ratio",
        "discount": "own `relative_to` price × (1 − `discount`)"}))
    of: str | None = field(default=None, metadata=doc("the instance whose prices are used"))
    relative_to: str | None = field(default=None, metadata=doc("option the rule starts from",
                                                               choices=PURCHASE_OPTIONS))
    region: str | None = field(default=None, metadata=doc("region of the prices the rule reads"))
    fraction: tuple[float, ...] | None = field(default=None, metadata=doc("fractions below `of`", high=1.0))
    discount: float | None = field(default=None, metadata=doc("fraction off", high=1.0))
    source: str = field(metadata=doc("where the rule and its numbers come from"))

    def __post_init__(self) -> None:
        needs = {"below": ("of", "fraction"), "same-ratio": ("of", "relative_to"),
                 "discount": ("relative_to", "discount")}[self.rule]
        for name in needs:
            if getattr(self, name) is None:
                raise FieldIssue(name, f"rule {self.rule!r} needs `{name}`", hint=f"add `{name} = …`")


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One rentable unit of a target (an instance, a slice, a server)."""

    name: str = field(metadata=doc("instance name", internal=True))
    target: str = field(metadata=doc("hardware preset name"))
    chips: int = field(metadata=doc("accelerator chips per instance"))
    note: str | None = field(default=None, metadata=doc("what to know about its prices"))
    prices: tuple[ListedPrice, ...] = field(default=(), metadata=doc("published prices"))
    derived: tuple[DerivedPrice, ...] = field(default=(), metadata=doc("prices derived by a rule"))


@dataclass(frozen=True, kw_only=True)
class CatalogueMeta:
    default_region: str = field(metadata=doc("region used when none is asked for"))
    source: str = field(metadata=doc("where the catalogue's prices come from"))


@dataclass(frozen=True, slots=True)
class Price:
    """A resolved price. ``basis``: "list" (published), "assumption" (derived by a rule) or "override"."""

    target: str
    instance: str
    option: str
    region: str
    usd_per_hour: float  # per instance-hour
    chips: int
    basis: str
    how: str
    sources: tuple[str, ...]

    @property
    def usd_per_chip_hour(self) -> float:
        return self.usd_per_hour / self.chips

    def to_dict(self) -> dict[str, object]:
        return {"instance": self.instance, "option": self.option, "region": self.region,
                "usd_per_instance_hour": self.usd_per_hour, "usd_per_chip_hour": self.usd_per_chip_hour,
                "chips_per_instance": self.chips, "basis": self.basis, "how": self.how, "sources": list(self.sources)}


Rule = Callable[["Catalogue", Instance, DerivedPrice, "str | None", frozenset[tuple[str, str]]], "Price | None"]


def _below(cat: Catalogue, inst: Instance, d: DerivedPrice, region: str | None,
           seen: frozenset[tuple[str, str]]) -> Price | None:
    base = cat.instance_price(cat.instances[cast(str, d.of)], d.option, d.region or region, seen)
    if base is None:
        return None
    cut = statistics.fmean(cast("tuple[float, ...]", d.fraction))
    usd = base.usd_per_hour * (1 - cut)
    return Price(inst.target, inst.name, d.option, base.region, usd, inst.chips, "assumption",
                 f"{base.instance} {d.option} ${base.usd_per_hour:.3f}/h × (1 − {cut:.2f})", (d.source, *base.sources))


def _same_ratio(cat: Catalogue, inst: Instance, d: DerivedPrice, region: str | None,
                seen: frozenset[tuple[str, str]]) -> Price | None:
    rel, of = cast(str, d.relative_to), cat.instances[cast(str, d.of)]
    own = cat.instance_price(inst, rel, region, seen)
    num = cat.instance_price(of, d.option, d.region or region, seen)
    den = cat.instance_price(of, rel, d.region or region, seen)
    if own is None or num is None or den is None:
        return None
    usd = own.usd_per_hour * num.usd_per_hour / den.usd_per_hour
    return Price(inst.target, inst.name, d.option, own.region, usd, inst.chips, "assumption",
                 f"{rel} ${own.usd_per_hour:.3f}/h × {of.name} {d.option}/{rel} "
                 f"({num.usd_per_hour:.3f}/{den.usd_per_hour:.3f}, {num.region})",
                 (d.source, *own.sources, *num.sources, *den.sources))


def _discount(cat: Catalogue, inst: Instance, d: DerivedPrice, region: str | None,
              seen: frozenset[tuple[str, str]]) -> Price | None:
    own = cat.instance_price(inst, cast(str, d.relative_to), region, seen)
    if own is None:
        return None
    off = cast(float, d.discount)
    return Price(inst.target, inst.name, d.option, own.region, own.usd_per_hour * (1 - off), inst.chips,
                 "assumption", f"{d.relative_to} ${own.usd_per_hour:.3f}/h × (1 − {off:.2f})", (d.source, *own.sources))


RULES: dict[str, Rule] = {"below": _below, "same-ratio": _same_ratio, "discount": _discount}


@dataclass(frozen=True)
class Catalogue:
    """Instances by name (file order: the first of a target is the one priced), option fallbacks, overrides."""

    meta: CatalogueMeta
    instances: Mapping[str, Instance]
    fallback: Mapping[str, DerivedPrice]
    file: str
    overrides: Mapping[tuple[str, str], float] = field(default_factory=lambda: {})

    def regions(self) -> list[str]:
        found = {p.region for i in self.instances.values() for p in i.prices}
        found |= {d.region for i in self.instances.values() for d in i.derived if d.region}
        return sorted(found | {self.meta.default_region})

    def instance_for(self, target: str) -> Instance | None:
        return next((i for i in self.instances.values() if i.target == target), None)

    def price(self, target: str, option: str = "on-demand", region: str | None = None) -> Price | None:
        """The price of one chip of ``target`` under ``option`` in ``region`` (``None``: auto), or ``None``."""
        self.check(option, region)
        inst = self.instance_for(target)
        if inst is None:
            if (target, "on-demand") not in self.overrides and (target, option) not in self.overrides:
                return None
            inst = Instance(name=f"{target} (user price)", target=target, chips=1)
        return self.instance_price(inst, option, region, frozenset())

    def check(self, option: str, region: str | None) -> None:
        if option not in PURCHASE_OPTIONS:
            raise PriceError(f"unknown purchase option {option!r}",
                             hint=f"use one of: {', '.join(PURCHASE_OPTIONS)}")
        if region is not None and region not in self.regions():
            raise PriceError(f"unknown region {region!r}: no price in the catalogue is for it", where=self.file,
                             hint=f"use one of: {', '.join(self.regions())}; or add prices for it with --prices FILE")

    def instance_price(self, inst: Instance, option: str, region: str | None,
                       seen: frozenset[tuple[str, str]]) -> Price | None:
        if (inst.name, option) in seen:  # a rule that needs itself: no price
            return None
        seen = seen | {(inst.name, option)}
        if (inst.target, option) in self.overrides:
            usd = self.overrides[(inst.target, option)]
            return Price(inst.target, inst.name, option, region or self.meta.default_region, usd * inst.chips,
                         inst.chips, "override", f"${usd:g} per chip-hour given", ("command line",))
        listed = [p for p in inst.prices if p.option == option]
        exact = [p for p in listed if p.region == (region or self.meta.default_region)]
        pick = exact[0] if exact else (listed[0] if listed and region is None else None)
        if pick is not None:
            how = (f"median of {len(pick.quotes)} zone quotes" if pick.quotes else "listed") + f", {pick.date}"
            return Price(inst.target, inst.name, option, pick.region, pick.value, inst.chips, "list", how,
                         (pick.source,))
        rules = [d for d in inst.derived if d.option == option and (d.region is None or region in (None, d.region))]
        if option in self.fallback:
            rules.append(replace(self.fallback[option], option=option))
        for d in rules:
            found = RULES[d.rule](self, inst, d, region, seen)
            if found is not None:
                return found
        return None

    def missing(self, target: str, option: str, region: str | None) -> str:
        """Why ``price`` gave nothing, and what to do."""
        inst = self.instance_for(target)
        if inst is None:
            return f"no {target} instance in the catalogue: pass --price {target}=USD_PER_CHIP_HOUR"
        where = f" in {region}" if region else ""
        return (f"no {option} price for {inst.name}{where}" + (f" ({inst.note})" if inst.note else "")
                + f"; give one with --price {target}:{option}=USD_PER_CHIP_HOUR")

    def with_overrides(self, overrides: Mapping[tuple[str, str], float]) -> Catalogue:
        return replace(self, overrides={**self.overrides, **overrides})

    def merged(self, user: Catalogue) -> Catalogue:
        """``user``'s instances first (so its instance for a target is the one priced), its entries first."""
        instances: dict[str, Instance] = {}
        for name, inst in user.instances.items():
            base = self.instances.get(name)
            instances[name] = inst if base is None else replace(
                inst, prices=inst.prices + base.prices, derived=inst.derived + base.derived)
        instances |= {n: i for n, i in self.instances.items() if n not in instances}
        return Catalogue(self.meta, instances, {**self.fallback, **user.fallback}, f"{user.file} over {self.file}",
                         {**self.overrides, **user.overrides})


def parse_override(text: str) -> tuple[tuple[str, str], float]:
    """``trn3=2.5`` or ``trn3:spot=0.9`` (USD per chip-hour) → ((target, option), usd)."""
    key, sep, value = text.partition("=")
    target, _, option = key.strip().partition(":")
    option = option or "on-demand"
    try:
        usd = float(value)
    except ValueError:
        usd = -1.0
    if not sep or not target or usd <= 0 or usd != usd:
        raise PriceError(f"cannot read --price {text!r}", hint="write TARGET[:OPTION]=USD_PER_CHIP_HOUR with a "
                         "positive number, e.g. --price trn3=2.5 or --price h200:spot=2.1")
    if option not in PURCHASE_OPTIONS:
        raise PriceError(f"unknown purchase option {option!r} in --price {text!r}",
                         hint=f"use one of: {', '.join(PURCHASE_OPTIONS)}")
    return (target, option), usd


def _parse(table: Mapping[str, Any], file: str) -> Catalogue:
    known = {"meta", "instances", "fallback"}
    for key in table:
        if key not in known:
            raise PriceError(f"unknown section {key!r}", where=file, hint=f"sections: {', '.join(sorted(known))}")
    meta_t: object = table.get("meta", {"default_region": "us-east-1", "source": "user file"})
    meta = build(CatalogueMeta, meta_t, file=file, key="meta")
    inst_t: object = table.get("instances", {})
    fb_t: object = table.get("fallback", {})
    if not isinstance(inst_t, dict) or not isinstance(fb_t, dict):
        raise PriceError("`instances` and `fallback` must be tables", where=file,
                         hint='write [instances."name"] and [fallback."option"] sections')
    instances = {str(n): build(Instance, t, file=file, key=f"instances.{n}", extra={"name": str(n)})
                 for n, t in cast("dict[str, object]", inst_t).items()}
    fallback: dict[str, DerivedPrice] = {}
    for opt, t in cast("dict[str, object]", fb_t).items():
        if opt not in PURCHASE_OPTIONS:
            raise PriceError(f"unknown purchase option {opt!r}", where=f"{file}: fallback.{opt}",
                             hint=f"use one of: {', '.join(PURCHASE_OPTIONS)}")
        fallback[opt] = replace(build(DerivedPrice, t, file=file, key=f"fallback.{opt}"), option=opt)
    return Catalogue(meta, instances, fallback, file)


def _check_references(cat: Catalogue) -> None:
    for inst in cat.instances.values():
        for i, d in enumerate(inst.derived):
            _check_of(cat, d, f"{cat.file}: instances.{inst.name}.derived[{i}].of")
    for opt, d in cat.fallback.items():
        _check_of(cat, d, f"{cat.file}: fallback.{opt}.of")


def _check_of(cat: Catalogue, d: DerivedPrice, where: str) -> None:
    if d.of is not None and d.of not in cat.instances:
        raise PriceError(f"unknown instance {d.of!r}", where=where,
                         hint=f"name one of the catalogue's instances: {', '.join(cat.instances)}")


def load(path: str | Path) -> Catalogue:
    """Read and validate a price file (the catalogue's format)."""
    file = Path(path).expanduser()
    try:
        table = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PriceError(f"cannot read price file: {exc.strerror}", where=str(file),
                         hint="check the path given to --prices") from None
    except UnicodeDecodeError as exc:
        raise PriceError(f"the price file is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
                         where=str(file), hint="save it as UTF-8 TOML (is it the right file given to --prices?)"
                         ) from None
    except tomllib.TOMLDecodeError as exc:
        raise PriceError(f"syntax error: {exc}", where=str(file),
                         hint="a price file is TOML in the format of trnsim/cluster/prices.toml") from None
    try:
        cat = _parse(table, str(file))
    except SpecError as exc:  # the schema builder speaks of presets; a price file is configuration
        raise PriceError(exc.message, where=exc.where, hint=exc.hint) from None
    return cat


@functools.cache
def catalogue() -> Catalogue:
    """The packaged catalogue."""
    cat = load(CATALOGUE_FILE)
    _check_references(cat)
    return cat


def with_user(path: str | Path | None, overrides: Mapping[tuple[str, str], float] | None = None) -> Catalogue:
    """The packaged catalogue under a user file (if given) and command-line overrides."""
    cat = catalogue()
    if path is not None:
        cat = cat.merged(load(path))
        _check_references(cat)
    return cat.with_overrides(overrides or {})
