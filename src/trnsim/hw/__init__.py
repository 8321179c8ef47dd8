"""Hardware specifications: frozen, validated dataclasses read from preset files.

Presets are TOML files in ``hw/presets/`` (``trn3`` is the default target; ``trn3-aws``, ``trn2``, ``trn1``
and GPU/TPU/MTIA comparators). Every figure in them cites its source, or says "assumption:" and why.
NeuronCore chips derive their peak FLOP/s from engine geometry; the others carry datasheet peaks.

    >>> from trnsim import hw
    >>> spec = hw.get()              # settings.target, i.e. TRNSIM_TARGET (default "trn3")
    >>> spec.cores, spec.core.sbuf.bytes // 2**20, spec.core.psum.banks
    (8, 32, 8)
    >>> spec.peak_flops("fp8") / 1e15 > 2.5
    True
"""

from __future__ import annotations

from trnsim.hw.core import CoreSpec, DmaSpec, EngineSpec, PsumSpec, SbufSpec, TensorEngineSpec
from trnsim.hw.registry import PRESET_DIR, get, load, names, resolve, search_path
from trnsim.hw.spec import (
    LINK_KINDS,
    LINK_SCOPES,
    TOPOLOGY_KINDS,
    ChipSpec,
    DocumentedPeak,
    HostSpec,
    LinkSpec,
    MemorySpec,
    Meta,
    PeakSpec,
    PowerSpec,
    ScaleupSpec,
    TopologySpec,
    parse_topology,
)
from trnsim.hw.units import format_quantity, parse_bytes, parse_quantity

__all__ = [
    "LINK_KINDS",
    "LINK_SCOPES",
    "PRESET_DIR",
    "TOPOLOGY_KINDS",
    "ChipSpec",
    "CoreSpec",
    "DmaSpec",
    "DocumentedPeak",
    "EngineSpec",
    "HostSpec",
    "LinkSpec",
    "MemorySpec",
    "Meta",
    "PeakSpec",
    "PowerSpec",
    "PsumSpec",
    "SbufSpec",
    "ScaleupSpec",
    "TensorEngineSpec",
    "TopologySpec",
    "format_quantity",
    "get",
    "load",
    "names",
    "parse_bytes",
    "parse_quantity",
    "parse_topology",
    "resolve",
    "search_path",
]
