"""Quantities with units, as preset files write them: ``"2.4 GHz"``, ``"192 GB"``, ``"1.6 Tbps"``.

Every quantity in a preset is a string ``"<number> <unit>"``; a bare number is rejected, so a figure typed
in the wrong unit (GB for GiB, Gbps for GB/s, TFLOPS for PFLOPS) is visible in the file and a unit of the
wrong *dimension* is caught on load. Values are converted to SI base units: bytes, bytes/s, Hz, seconds,
watts, FLOP/s. Bits per second are a spelling of bytes/s (divided by 8), since link datasheets quote both.

Decimal and binary prefixes are distinct: ``GB`` is 10⁹ bytes and ``GiB`` is 2³⁰ bytes (AWS quotes HBM in
GiB, NVIDIA in GB). Integer operations per second (``TOPS``) count as FLOP/s, as datasheets do for int8.

    >>> parse_quantity("2.4 GHz", "Hz")
    2400000000.0
    >>> parse_quantity("1.6 Tbps", "bytes/s")
    200000000000.0
    >>> format_quantity(144 * 2**30, "bytes")
    '144 GiB'
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Literal

from trnsim.errors import SpecError

Dimension = Literal["bytes", "bytes/s", "Hz", "s", "W", "FLOP/s"]

_SI = {"": 1e0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}


def _table() -> dict[str, tuple[Dimension, float]]:
    """Every unit symbol trnsim accepts → (dimension, factor to the SI base unit)."""
    units: dict[str, tuple[Dimension, float]] = {}
    for p, f in (_SI | _BIN).items():
        units[f"{p}B"] = ("bytes", f)
        units[f"{p}B/s"] = ("bytes/s", f)
        units[f"{p}Bps"] = ("bytes/s", f)  # Google's TPU tables write "GBps"
    for p, f in _SI.items():
        units[f"{p}bps"] = ("bytes/s", f / 8)  # bits per second: link and NIC rates
        units[f"{p}b/s"] = ("bytes/s", f / 8)
        units[f"{p}FLOP/s"] = ("FLOP/s", f)
        units[f"{p}FLOPS"] = ("FLOP/s", f)
        units[f"{p}OPS"] = ("FLOP/s", f)  # integer ops (int8 TOPS) count like FLOPs in datasheets
        units[f"{p}OP/s"] = ("FLOP/s", f)
        units[f"{p}W"] = ("W", f)
    units |= {"Hz": ("Hz", 1e0), "kHz": ("Hz", 1e3), "MHz": ("Hz", 1e6), "GHz": ("Hz", 1e9)}
    units |= {"s": ("s", 1e0), "ms": ("s", 1e-3), "us": ("s", 1e-6), "µs": ("s", 1e-6), "ns": ("s", 1e-9)}
    return units


UNITS: dict[str, tuple[Dimension, float]] = _table()

# What each dimension means, with an example, for error messages.
DIMENSIONS: dict[Dimension, str] = {
    "bytes": "a size in bytes, e.g. '192 GB' (10^9) or '32 MiB' (2^20)",
    "bytes/s": "a bandwidth, e.g. '5.2 TB/s', '820 GiB/s' or '1.6 Tbps' (bits)",
    "Hz": "a clock frequency, e.g. '2.4 GHz' or '1830 MHz'",
    "s": "a time, e.g. '2 us' or '600 ns'",
    "W": "a power, e.g. '700 W'",
    "FLOP/s": "a compute rate, e.g. '989 TFLOP/s' or '624 TOPS'",
}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d.+-][^\s]*)?\s*$")


def parse_quantity(raw: object, dim: Dimension, *, where: str | None = None) -> float:
    """Parse ``"<number> <unit>"`` into SI base units of ``dim``; reject a missing or foreign unit and any
    value that is not strictly positive (no preset has a zero clock, size or bandwidth)."""
    expected = DIMENSIONS[dim]
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise SpecError(f"expected {expected}, got {type(raw).__name__} {raw!r}", where=where,
                        hint="write the quantity as a string with its unit")
    if not isinstance(raw, str):
        raise SpecError(f"missing unit in {raw!r}: expected {expected}", where=where,
                        hint=f'write it as a string with a unit, e.g. "{raw} {_example_unit(dim)}"')
    m = _QUANTITY.match(raw)
    if m is None:
        raise SpecError(f"cannot read {raw!r} as a quantity: expected {expected}", where=where,
                        hint="write '<number> <unit>', e.g. '2.4 GHz'; no '~' or ranges")
    number, unit = float(m.group(1)), m.group(2)
    if unit is None:
        raise SpecError(f"missing unit in {raw!r}: expected {expected}", where=where,
                        hint=f"append a unit, e.g. '{m.group(1)} {_example_unit(dim)}'")
    known = UNITS.get(unit)
    if known is None:
        near = difflib.get_close_matches(unit, [u for u, (d, _) in UNITS.items() if d == dim], n=3)
        raise SpecError(f"unknown unit {unit!r} in {raw!r}: expected {expected}", where=where,
                        hint=f"did you mean {' or '.join(near)}?" if near else _units_hint(dim))
    unit_dim, factor = known
    if unit_dim != dim:
        raise SpecError(f"{raw!r} is in {unit_dim} but {dim} is expected here ({expected})", where=where,
                        hint=_units_hint(dim))
    if not math.isfinite(number) or number <= 0:
        raise SpecError(f"{raw!r} must be positive and finite", where=where,
                        hint="a zero or negative size, rate, clock or time is never meaningful in a spec")
    return number * factor


def parse_bytes(raw: object, *, where: str | None = None) -> int:
    """Parse a size and require a whole number of bytes (``"1.5 KiB"`` is fine, ``"0.3 B"`` is not)."""
    value = parse_quantity(raw, "bytes", where=where)
    whole = round(value)
    if abs(value - whole) > 1e-6 * max(1.0, value):
        raise SpecError(f"{raw!r} is not a whole number of bytes ({value} B)", where=where)
    return whole


def _example_unit(dim: Dimension) -> str:
    return {"bytes": "GB", "bytes/s": "TB/s", "Hz": "GHz", "s": "us", "W": "W", "FLOP/s": "TFLOP/s"}[dim]


def _units_hint(dim: Dimension) -> str:
    return "units for this key: " + ", ".join(sorted(u for u, (d, _) in UNITS.items() if d == dim))


# Display: decimal prefixes for rates and times; sizes (and byte rates) that are exact binary multiples
# are shown in binary so that 144 GiB reads as written rather than as 154.6 GB.
_DISPLAY: dict[Dimension, tuple[tuple[str, float], ...]] = {
    "bytes": (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)),
    "bytes/s": (("PB/s", 1e15), ("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("B/s", 1.0)),
    "Hz": (("GHz", 1e9), ("MHz", 1e6), ("kHz", 1e3), ("Hz", 1.0)),
    "s": (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)),
    "W": (("W", 1.0),),
    "FLOP/s": (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("FLOP/s", 1.0)),
}
_BINARY_DISPLAY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_quantity(value: float, dim: Dimension, *, unit: str | None = None, digits: int = 4) -> str:
    """Render ``value`` (SI base units of ``dim``) with a readable prefix, or in ``unit`` if given."""
    if unit is not None:
        return f"{_num(value / UNITS[unit][1], digits)} {unit}"
    if dim in ("bytes", "bytes/s") and value == int(value):
        suffix = "" if dim == "bytes" else "/s"
        for name, size in _BINARY_DISPLAY:
            if value >= size and int(value) % size == 0 and value / size < 10_000:
                return f"{int(value) // size} {name}{suffix}"
    for name, size in _DISPLAY[dim]:
        if value >= size:
            return f"{_num(value / size, digits)} {name}"
    name, size = _DISPLAY[dim][-1]
    return f"{_num(value / size, digits)} {name}"


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.0f}"
