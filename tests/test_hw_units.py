"""trnsim.hw.units: every dimension parses, and a wrong, missing or non-positive quantity is rejected."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trnsim.errors import SpecError
from trnsim.hw.units import UNITS, Dimension, format_quantity, parse_bytes, parse_quantity


@pytest.mark.parametrize(
    ("raw", "dim", "expected"),
    [
        ("192 GB", "bytes", 192e9),
        ("144 GiB", "bytes", 144 * 2**30),
        ("32 MiB", "bytes", 32 * 2**20),
        ("2 KiB", "bytes", 2048),
        ("5.2 TB/s", "bytes/s", 5.2e12),
        ("820 GiB/s", "bytes/s", 820 * 2**30),
        ("2765 GBps", "bytes/s", 2765e9),  # Google's spelling
        ("1.6 Tbps", "bytes/s", 200e9),  # bits per second become bytes per second
        ("200 Gbps", "bytes/s", 25e9),
        ("2.4 GHz", "Hz", 2.4e9),
        ("1830 MHz", "Hz", 1.83e9),
        ("2 us", "s", 2e-6),
        ("600 ns", "s", 600e-9),
        ("15 µs", "s", 15e-6),
        ("700 W", "W", 700.0),
        ("989 TFLOP/s", "FLOP/s", 989e12),
        ("2.5 PFLOP/s", "FLOP/s", 2.5e15),
        ("624 TOPS", "FLOP/s", 624e12),
        ("190 TFLOPS", "FLOP/s", 190e12),
        ("1e3 B", "bytes", 1000.0),
        ("192GB", "bytes", 192e9),  # the space is optional
    ],
)
def test_parse_each_dimension(raw: str, dim: Dimension, expected: float) -> None:
    assert math.isclose(parse_quantity(raw, dim), expected, rel_tol=1e-12)


def test_decimal_and_binary_prefixes_differ() -> None:
    assert parse_bytes("1 GiB") == 1_073_741_824
    assert parse_bytes("1 GB") == 1_000_000_000


@pytest.mark.parametrize(
    ("raw", "dim", "words"),
    [
        ("2.4 GHz", "bytes/s", ["Hz", "bytes/s"]),
        ("192 GB", "bytes/s", ["bytes", "bytes/s"]),  # a size where a bandwidth is expected
        ("5.2 TB/s", "bytes", ["bytes/s"]),
        ("700 W", "FLOP/s", ["W"]),
        ("2 us", "Hz", ["s", "Hz"]),
    ],
)
def test_wrong_dimension(raw: str, dim: Dimension, words: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_quantity(raw, dim, where="f.toml: k")
    assert "f.toml: k" in str(err.value)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("raw", [2.4, 5, "2.4", "  7  "])
def test_missing_unit(raw: object) -> None:
    with pytest.raises(SpecError, match="missing unit"):
        parse_quantity(raw, "Hz")


@pytest.mark.parametrize(
    ("raw", "dim"),
    [("0 GHz", "Hz"), ("-2.4 GHz", "Hz"), ("0 B", "bytes"), ("-1 TB/s", "bytes/s"), ("0 us", "s"),
     ("0 W", "W"), ("-5 TFLOP/s", "FLOP/s")],
)
def test_zero_or_negative(raw: str, dim: Dimension) -> None:
    with pytest.raises(SpecError, match="positive"):
        parse_quantity(raw, dim)


def test_unknown_unit_suggests_a_near_one() -> None:
    with pytest.raises(SpecError) as err:
        parse_quantity("2.4 Ghz", "Hz")
    assert "GHz" in str(err.value)


@pytest.mark.parametrize("raw", [True, None, ["2 GHz"], {"a": 1}, "~2.4 GHz", "2-3 GHz", "GHz"])
def test_not_a_quantity(raw: object) -> None:
    with pytest.raises(SpecError):
        parse_quantity(raw, "Hz")


def test_bytes_must_be_whole() -> None:
    assert parse_bytes("1.5 KiB") == 1536
    with pytest.raises(SpecError, match="whole number"):
        parse_bytes("0.3 B")


def test_every_unit_belongs_to_a_dimension_and_scales_positively() -> None:
    for unit, (dim, factor) in UNITS.items():
        assert factor > 0, unit
        assert parse_quantity(f"1 {unit}", dim) == pytest.approx(factor)


@pytest.mark.parametrize(
    ("value", "dim", "text"),
    [
        (144 * 2**30, "bytes", "144 GiB"),
        (192e9, "bytes", "192 GB"),
        (32 * 2**20, "bytes", "32 MiB"),
        (5.2e12, "bytes/s", "5.2 TB/s"),
        (2.4e9, "Hz", "2.4 GHz"),
        (2e-6, "s", "2 us"),
        (1000.0, "W", "1000 W"),
        (629.1456e12, "FLOP/s", "629.1 TFLOP/s"),
    ],
)
def test_format_quantity(value: float, dim: Dimension, text: str) -> None:
    assert format_quantity(value, dim) == text


def test_format_in_a_given_unit() -> None:
    assert format_quantity(25e9, "bytes/s", unit="Gbps") == "200 Gbps"
    assert format_quantity(2.5166e15, "FLOP/s", unit="TFLOP/s") == "2517 TFLOP/s"


DIMS: list[Dimension] = ["bytes/s", "Hz", "s", "W", "FLOP/s"]


@given(st.floats(min_value=1e-9, max_value=1e18), st.sampled_from(DIMS))
def test_format_then_parse_round_trips(value: float, dim: Dimension) -> None:
    """What `trnsim hw show` prints can be pasted back into a preset (to 4 significant digits)."""
    assert parse_quantity(format_quantity(value, dim), dim) == pytest.approx(value, rel=1e-3)


@given(st.integers(min_value=1, max_value=2**50))
def test_bytes_format_then_parse_round_trips(value: int) -> None:
    assert parse_bytes(format_quantity(value, "bytes")) == pytest.approx(value, rel=1e-3)
