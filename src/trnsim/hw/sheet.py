"""Spec-sheet rows for putting chips side by side (``trnsim hw compare``, reports).

One table of rows; each row has a stable dotted JSON key, a label, a machine value (SI base units: bytes,
bytes/s, FLOP/s, W) and a text value with units. Peak rows are generated per dtype from the chips being
compared: dense TFLOP/s for every dtype any of them supports, and the sparse figure where accelerated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trnsim.hw.spec import LINK_SCOPES, ChipSpec
from trnsim.hw.units import Dimension, format_quantity
from trnsim.numerics.formats import FORMATS


@dataclass(frozen=True)
class Row:
    key: str  # stable, dotted: "memory.bytes" nests as {"memory": {"bytes": …}} in JSON
    label: str
    value: Callable[[ChipSpec], object]
    text: Callable[[ChipSpec], str]


def row(key: str, label: str, get: Callable[[ChipSpec], object], dim: Dimension | None = None) -> Row:
    """A row whose text is its value, with units when ``dim`` is given; ``None`` shows as "—"."""
    def text(spec: ChipSpec) -> str:
        value = get(spec)
        if value is None:
            return "—"
        if dim is not None and isinstance(value, int | float):
            return format_quantity(value, dim)
        return str(value)
    return Row(key, label, get, text)


# NIC rates read best in bits per second, as vendors quote them; chip-to-chip links in bytes per second.
LINK_UNITS: dict[str, str] = {"efa": "Gbps", "infiniband": "Gbps", "ethernet": "Gbps"}


def _links_text(spec: ChipSpec, scope: str) -> str:
    links = spec.links_in(scope)
    return "; ".join(f"{link.name}: {link.count} × "
                     f"{format_quantity(link.bandwidth, 'bytes/s', unit=LINK_UNITS.get(link.kind))}"
                     for link in links) or "—"


def _links_bandwidth(spec: ChipSpec, scope: str) -> float | None:
    links = spec.links_in(scope)
    return sum(link.chip_bandwidth for link in links) if links else None


def _largest_scaleup(spec: ChipSpec) -> str:
    if not spec.topology.scaleup:
        return "—"
    top = max(spec.topology.scaleup, key=lambda d: d.chips)
    return f"{top.chips} ({top.name}, {top.topology})"


def _ridge(spec: ChipSpec) -> float | None:
    """bf16 FLOP per byte of device memory at which a kernel stops being bandwidth-bound."""
    return spec.peak_flops("bf16") / spec.hbm_bandwidth if spec.supports("bf16") else None


HEAD: tuple[Row, ...] = (
    row("designer", "designer", lambda s: s.meta.designer),
    row("product", "product", lambda s: s.meta.full_name),
    row("target_workload", "target workload", lambda s: s.meta.target_workload),
    row("process_node", "process", lambda s: s.meta.process_node),
    row("cores", "cores", lambda s: s.cores),
    row("memory.kind", "memory", lambda s: s.memory.kind),
    row("memory.bytes", "memory capacity", lambda s: s.hbm_bytes, "bytes"),
    row("memory.bandwidth_bytes_per_s", "memory bandwidth", lambda s: s.hbm_bandwidth, "bytes/s"),
    Row("peak_source", "peaks", lambda s: "derived" if s.derived else "datasheet",
        lambda s: "derived from engines" if s.derived else "datasheet"),
)

TAIL: tuple[Row, ...] = (
    Row("ridge_bf16_flop_per_byte", "bf16 ridge (FLOP/B)", _ridge,
        lambda s: "—" if (r := _ridge(s)) is None else f"{r:.0f}"),
    *(Row(f"interconnect.{scope}_bytes_per_s", f"links ({scope})",
          lambda s, sc=scope: _links_bandwidth(s, sc), lambda s, sc=scope: _links_text(s, sc))
      for scope in LINK_SCOPES),
    row("topology.chips_per_node", "chips per node", lambda s: s.topology.chips_per_node),
    row("topology.node_topology", "node topology", lambda s: s.topology.node_topology),
    Row("topology.scaleup_chips", "scale-up domain",
        lambda s: max((d.chips for d in s.topology.scaleup), default=None), _largest_scaleup),
    row("topology.scale_out", "scale-out", lambda s: s.topology.scale_out),
    row("power.tdp_w", "TDP", lambda s: s.power.tdp, "W"),
    row("software_stack", "software stack", lambda s: s.meta.software_stack),
)


def _peak_value(dtype: str) -> Callable[[ChipSpec], object]:
    def value(spec: ChipSpec) -> object:
        if not spec.supports(dtype):
            return None
        return {"dense": spec.peak_flops(dtype),
                "sparse": spec.peak_flops(dtype, sparse=True) if spec.sparse_accelerated(dtype) else None}
    return value


def _peak_text(dtype: str) -> Callable[[ChipSpec], str]:
    def text(spec: ChipSpec) -> str:
        if not spec.supports(dtype):
            return "—"
        dense = format_quantity(spec.peak_flops(dtype), "FLOP/s", unit="TFLOP/s").removesuffix(" TFLOP/s")
        if not spec.sparse_accelerated(dtype):
            return dense
        sparse = format_quantity(spec.peak_flops(dtype, sparse=True), "FLOP/s", unit="TFLOP/s")
        return f"{dense} ({sparse.removesuffix(' TFLOP/s')} sparse)"
    return text


def peak_rows(specs: Sequence[ChipSpec]) -> list[Row]:
    """One row per dtype any of ``specs`` supports: dense TFLOP/s, and sparse where accelerated."""
    supported = {d for s in specs for d in s.dtypes}
    return [Row(f"peak_flops.{d}", f"{d} TFLOP/s", _peak_value(d), _peak_text(d))
            for d in FORMATS if d in supported]


def sheet(specs: Sequence[ChipSpec]) -> list[Row]:
    """All rows for comparing ``specs``, in display order."""
    return [*HEAD, *peak_rows(specs), *TAIL]


def sheet_json(specs: Sequence[ChipSpec]) -> dict[str, object]:
    """``{"chips": [{"name": …, <nested row keys>…}, …]}`` with values in SI base units."""
    rows = sheet(specs)
    chips: list[dict[str, object]] = []
    for spec in specs:
        entry: dict[str, object] = {"name": spec.name}
        for row in rows:
            _put(entry, row.key.split("."), row.value(spec))
        chips.append(entry)
    return {"chips": chips}


def _put(tree: dict[str, object], path: list[str], value: object) -> None:
    for part in path[:-1]:
        child = tree.setdefault(part, {})
        assert isinstance(child, dict)
        tree = child  # pyright: ignore[reportUnknownVariableType]
    tree[path[-1]] = value
