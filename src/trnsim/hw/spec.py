"""A whole chip: metadata, device memory, compute peaks, interconnect, topology and power.

NeuronCore chips (Trainium) carry a :class:`~trnsim.hw.core.CoreSpec` and their peak FLOP/s per dtype is
derived from it; every other chip carries a :class:`PeakSpec` of datasheet figures. Exactly one of the two
is present. ``documented`` records the vendor's own chip-level figures next to a derived peak, with the
tolerance and the reason for any gap, so the check is data, not code.

    >>> from trnsim import hw
    >>> spec = hw.get("trn3")
    >>> round(spec.peak_flops("bf16") / 1e12)
    629
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from trnsim.errors import SpecError
from trnsim.hw.core import CoreSpec, check_sparse_pattern
from trnsim.hw.schema import FieldIssue, canonical_dtype, doc, to_plain
from trnsim.numerics.formats import FORMATS

LINK_KINDS: dict[str, str] = {
    "neuronlink": "AWS NeuronLink chip-to-chip link",
    "efa": "AWS Elastic Fabric Adapter (scale-out NIC)",
    "nvlink": "NVIDIA NVLink",
    "infiniband": "InfiniBand NIC",
    "ici": "Google TPU inter-chip interconnect",
    "xgmi": "AMD Infinity Fabric (XGMI)",
    "pcie": "PCI Express",
    "ethernet": "Ethernet / data-centre network NIC",
}
LINK_SCOPES: dict[str, str] = {
    "node": "between chips of one node (instance, server, board)",
    "scaleup": "between nodes of one scale-up domain (UltraServer, NVLink domain, TPU pod)",
    "scaleout": "the data-centre network between scale-up domains",
}
# Topology kind → number of dimensions its size is written with ("torus2d 4x4", "switch 8", "torus3d").
TOPOLOGY_KINDS: dict[str, int] = {
    "torus2d": 2, "torus3d": 3, "switch": 1, "fully-connected": 1, "ring": 1, "pcie": 1,
}


def parse_topology(text: str) -> tuple[str, tuple[int, ...]]:
    """``"torus2d 4x4"`` → ``("torus2d", (4, 4))``; the size may be omitted (``"torus3d"``)."""
    kind, _, size = text.strip().partition(" ")
    if kind not in TOPOLOGY_KINDS:
        raise ValueError(f"unknown topology kind {kind!r}; known: {', '.join(TOPOLOGY_KINDS)}")
    if not size.strip():
        return kind, ()
    parts = size.strip().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) != TOPOLOGY_KINDS[kind]:
        raise ValueError(f"{kind} size must be {TOPOLOGY_KINDS[kind]} positive integer(s) joined by 'x'")
    return kind, tuple(int(p) for p in parts)


def _check_topology(text: str) -> None:
    parse_topology(text)


def _topology_size(text: str) -> int | None:
    dims = parse_topology(text)[1]
    return math.prod(dims) if dims else None


@dataclass(frozen=True)
class Meta:
    """Who made the chip, for what, and where the numbers come from."""

    designer: str = field(metadata=doc("designer / vendor"))
    full_name: str = field(metadata=doc("product name"))
    summary: str = field(metadata=doc("one-line summary"))
    target_workload: str = field(metadata=doc("what the chip is built for"))
    software_stack: str = field(metadata=doc("how models reach the chip"))
    process_node: str | None = field(default=None, metadata=doc("fabrication process"))
    sources: tuple[str, ...] = field(default=(), metadata=doc("reference files the figures come from"))


@dataclass(frozen=True)
class MemorySpec:
    """Device memory (HBM on all presets but MTIA's LPDDR5)."""

    kind: str = field(metadata=doc("memory technology"))
    capacity: int = field(metadata=doc("capacity per chip", dim="bytes"))
    bandwidth: float = field(metadata=doc("peak bandwidth per chip", dim="bytes/s"))
    stacks: int | None = field(default=None, metadata=doc("HBM stacks"))


@dataclass(frozen=True)
class PeakSpec:
    """Datasheet peaks (non-NeuronCore chips): dense per dtype, and sparse where the vendor gives it."""

    dense: Mapping[str, float] = field(metadata=doc("dense peak per dtype", dim="FLOP/s", dtype=True))
    sparse: Mapping[str, float] = field(
        default_factory=dict[str, float],
        metadata=doc("structured-sparse peak per dtype", dim="FLOP/s", dtype=True))
    sparse_patterns: tuple[str, ...] = field(default=(), metadata=doc("accelerated N:M patterns",
                                                                      check=check_sparse_pattern))

    def __post_init__(self) -> None:
        for dtype, value in self.sparse.items():
            if dtype not in self.dense:
                raise FieldIssue(f"sparse.{dtype}", f"{dtype} has a sparse peak but no dense peak")
            if value < self.dense[dtype]:
                raise FieldIssue(f"sparse.{dtype}", f"sparse peak is below the dense peak for {dtype}")
        if bool(self.sparse) != bool(self.sparse_patterns):
            raise FieldIssue("sparse_patterns", "sparse peaks and sparse_patterns must be given together")


@dataclass(frozen=True)
class LinkSpec:
    """A group of identical links per chip; ``bandwidth`` is one link, one direction."""

    kind: str = field(metadata=doc("link technology", choices=LINK_KINDS))
    name: str = field(metadata=doc("generation / product"))
    bandwidth: float = field(metadata=doc("per link, per direction", dim="bytes/s"))
    count: int = field(metadata=doc("links of this kind per chip"))
    latency: float = field(metadata=doc("per-hop latency", dim="s"))
    scope: str = field(metadata=doc("which chips the links reach", choices=LINK_SCOPES))

    @property
    def chip_bandwidth(self) -> float:
        """All links of this group together, one direction."""
        return self.bandwidth * self.count


@dataclass(frozen=True)
class ScaleupSpec:
    """A scale-up domain: an UltraServer, an NVLink domain, a TPU pod."""

    name: str = field(metadata=doc("product name"))
    chips: int = field(metadata=doc("chips in the domain"))
    nodes: int = field(metadata=doc("nodes (servers, instances) in the domain"))
    topology: str = field(metadata=doc("how the chips connect", check=_check_topology))

    def __post_init__(self) -> None:
        if self.chips % self.nodes:
            raise FieldIssue("nodes", f"{self.chips} chips do not split evenly into {self.nodes} nodes")
        size = _topology_size(self.topology)
        if size is not None and size != self.chips:
            raise FieldIssue("topology", f"{self.topology!r} has {size} chips, not {self.chips}")


@dataclass(frozen=True)
class TopologySpec:
    """How chips are grouped: node, scale-up domains, scale-out network."""

    chips_per_node: int = field(metadata=doc("chips per node (instance, server, board)"))
    node_topology: str = field(metadata=doc("chip-to-chip topology inside a node", check=_check_topology))
    scale_out: str = field(metadata=doc("network between scale-up domains"))
    scaleup: tuple[ScaleupSpec, ...] = field(default=(), metadata=doc("scale-up domains"))

    def __post_init__(self) -> None:
        size = _topology_size(self.node_topology)
        if size is not None and size != self.chips_per_node:
            raise FieldIssue("node_topology", f"{self.node_topology!r} has {size} chips, but chips_per_node "
                             f"= {self.chips_per_node}")


@dataclass(frozen=True)
class HostSpec:
    """The chip's link to its host CPU and memory: what the compiler's HBM planner spills over."""

    link: str = field(metadata=doc("link generation (PCIe Gen5 x16, ...)"))
    bandwidth: float = field(metadata=doc("chip to host memory, one direction", dim="bytes/s"))


@dataclass(frozen=True)
class PowerSpec:
    """Board power; ``None`` where no source gives it."""

    tdp: float | None = field(default=None, metadata=doc("thermal design / board power", dim="W"))
    idle: float | None = field(default=None, metadata=doc("idle power", dim="W"))


@dataclass(frozen=True)
class DocumentedPeak:
    """A vendor's published chip peak, to compare with the derived one."""

    dtype: str = field(metadata=doc("dtype", dtype=True))
    value: float = field(metadata=doc("published peak per chip", dim="FLOP/s"))
    tolerance: float = field(metadata=doc("accepted relative gap |derived/value - 1|", high=1.0))
    note: str = field(metadata=doc("why the derived figure differs"))
    sparse: bool = field(default=False, metadata=doc("a structured-sparse figure"))


@dataclass(frozen=True, kw_only=True)
class ChipSpec:
    """One accelerator chip. ``name`` is the preset name, ``source`` the file it was read from."""

    name: str = field(metadata=doc("preset name", internal=True))
    source: str = field(metadata=doc("preset file", internal=True))
    meta: Meta = field(metadata=doc("metadata"))
    cores: int | None = field(default=None, metadata=doc("compute cores per chip (NeuronCores, SMs, …)"))
    clock: float | None = field(default=None, metadata=doc("headline chip clock", dim="Hz"))
    memory: MemorySpec = field(metadata=doc("device memory"))
    core: CoreSpec | None = field(default=None, metadata=doc("NeuronCore: peaks are derived from it"))
    peak: PeakSpec | None = field(default=None, metadata=doc("datasheet peaks (non-NeuronCore chips)"))
    topology: TopologySpec = field(metadata=doc("topology"))
    links: tuple[LinkSpec, ...] = field(metadata=doc("interconnect"))
    host: HostSpec | None = field(default=None, metadata=doc("link to host memory (spills)"))
    power: PowerSpec = field(default_factory=PowerSpec, metadata=doc("power"))
    documented: tuple[DocumentedPeak, ...] = field(default=(), metadata=doc("published peaks to check"))

    def __post_init__(self) -> None:
        if (self.core is None) == (self.peak is None):
            raise FieldIssue("core", "give exactly one of [core] (peaks derived from engine geometry) or "
                             "[peak] (datasheet peaks)", hint="NeuronCore chips use [core]; others [peak]")
        if self.core is not None and self.cores is None:
            raise FieldIssue("cores", "a chip with a [core] section needs `cores` to derive its peaks")
        for i, entry in enumerate(self.documented):
            if entry.dtype not in self._peaks(False):
                raise FieldIssue(f"documented[{i}].dtype", f"{entry.dtype} is not a dtype this chip supports",
                                 hint=f"supported: {', '.join(self.dtypes)}")

    def _peaks(self, sparse: bool) -> dict[str, float]:
        """Per-chip peak FLOP/s per dtype: derived from the NeuronCore, else the datasheet table."""
        if self.core is not None and self.cores is not None:
            tensor = self.core.tensor
            return {d: self.cores * tensor.flops(d, sparse) for d in tensor.rate}
        assert self.peak is not None  # guaranteed by __post_init__
        return {d: (self.peak.sparse.get(d, v) if sparse else v) for d, v in self.peak.dense.items()}

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Supported compute dtypes, in the order of ``trnsim.numerics.FORMATS``."""
        order = list(FORMATS)
        return tuple(sorted(self._peaks(False), key=order.index))

    @property
    def derived(self) -> bool:
        """True when peaks come from engine geometry rather than a datasheet."""
        return self.core is not None

    def supports(self, dtype: str) -> bool:
        return canonical_dtype(dtype) in self._peaks(False)

    def sparse_accelerated(self, dtype: str) -> bool:
        name = canonical_dtype(dtype)
        return self.peak_flops(name, sparse=True) > self.peak_flops(name)

    @property
    def sparse_patterns(self) -> tuple[str, ...]:
        return self.core.tensor.sparse_patterns if self.core is not None else self.peak.sparse_patterns \
            if self.peak is not None else ()

    def peak_flops(self, dtype: str, sparse: bool = False) -> float:
        """Peak FLOP/s per chip for ``dtype`` (dense, or with structured sparsity; a dtype whose sparse
        form is not accelerated runs at its dense rate)."""
        supported = f"{self.name} supports: {', '.join(self.dtypes)}"
        try:
            name = canonical_dtype(dtype)
        except SpecError as exc:
            raise SpecError(exc.message, where=self.name, hint=supported) from None
        peaks = self._peaks(sparse)
        if name not in peaks:
            raise SpecError(f"{self.name} does not support {name}", where=self.source, hint=supported)
        return peaks[name]

    def peak_table(self, sparse: bool = False) -> dict[str, float]:
        """``{dtype: FLOP/s}`` for every supported dtype."""
        return {d: self.peak_flops(d, sparse) for d in self.dtypes}

    @property
    def hbm_bytes(self) -> int:
        return self.memory.capacity

    @property
    def hbm_bandwidth(self) -> float:
        return self.memory.bandwidth

    def links_in(self, scope: str) -> tuple[LinkSpec, ...]:
        return tuple(link for link in self.links if link.scope == scope)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: every field in SI base units (bytes, bytes/s, Hz, s, W, FLOP/s), plus peaks."""
        plain = to_plain(self)
        assert isinstance(plain, dict)
        return {"name": self.name, "source": self.source, **plain, "derived_peaks": self.derived,
                "peak_flops": {"dense": self.peak_table(False), "sparse": self.peak_table(True)}}
