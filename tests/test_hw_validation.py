"""Malformed presets: every mistake is a SpecError naming the file, the dotted key and what was expected.

Each case edits one line of the real trn3 (or h100) preset and writes the result to tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trnsim import hw
from trnsim.errors import SpecError

TRN3 = hw.resolve("trn3").read_text(encoding="utf-8")
H100 = hw.resolve("h100").read_text(encoding="utf-8")


def edited(tmp_path: Path, old: str, new: str, base: str = TRN3) -> Path:
    assert base.count(old) == 1, f"test setup: {old!r} must occur once"
    path = tmp_path / "broken.toml"
    path.write_text(base.replace(old, new), encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(SpecError) as err:
        hw.load(path)
    return str(err.value)


CASES = [
    # (id, old text, new text, dotted key, words the message must contain)
    ("missing field", 'bandwidth = "5.2 TB/s"', "", "memory.bandwidth",
     ["missing required key", "bandwidth"]),
    ("wrong unit", 'capacity = "192 GB"', 'capacity = "192 GHz"', "memory.capacity", ["Hz", "bytes"]),
    ("bits for bytes ok, Hz not", 'clock = "2.4 GHz"  # ARCHITECTURE.md trn3 table, "Tensor Engine": 2.4 GHz',
     'clock = "2.4 Gbps"', "core.tensor.clock", ["bytes/s", "Hz"]),
    ("missing unit", 'clock = "2.4 GHz"  # ARCHITECTURE.md trn3 table, "Tensor Engine": 2.4 GHz',
     "clock = 2.4", "core.tensor.clock", ["missing unit"]),
    ("negative bandwidth", 'bandwidth = "5.2 TB/s"', 'bandwidth = "-5.2 TB/s"', "memory.bandwidth",
     ["positive"]),
    ("zero capacity", 'capacity = "192 GB"', 'capacity = "0 GB"', "memory.capacity", ["positive"]),
    ("zero clock", 'clock = "2.4 GHz"  # ARCHITECTURE.md trn3 table, "Tensor Engine": 2.4 GHz',
     'clock = "0 GHz"', "core.tensor.clock", ["positive"]),
    ("unknown dtype", "int4 = 4.0", "int3 = 4.0", "core.tensor.rate.int3", ["unknown dtype 'int3'"]),
    ("key typo", 'capacity = "192 GB"', 'capacty = "192 GB"', "memory.capacty", ["did you mean 'capacity'"]),
    ("section typo", "[core.sbuf]", "[core.subf]", "core.subf", ["did you mean 'sbuf'"]),
    ("sbuf not divisible",
     "partitions = 128  # ARCHITECTURE.md trn3 table, \"memory\": SBUF (128 partitions)", "partitions = 96",
     "core.sbuf.bytes", ["not divisible by 96"]),
    ("psum mismatch", 'bytes = "2 MiB"', 'bytes = "4 MiB"', "core.psum.bytes", ["≠"]),
    ("bad sparse pattern", 'sparse_patterns = ["2:4", "4:8"]', 'sparse_patterns = ["2:4", "8:4"]',
     "core.tensor.sparse_patterns[1]", ["N:M"]),
    ("topology size", 'node_topology = "torus2d 4x4"', 'node_topology = "torus2d 4x5"',
     "topology.node_topology", ["20 chips", "16"]),
    ("topology kind", 'node_topology = "torus2d 4x4"', 'node_topology = "torus 4x4"',
     "topology.node_topology", ["unknown topology kind"]),
    ("link kind typo", 'kind = "efa"', 'kind = "eфa"', "links[2].kind", ["not one of"]),
    ("link kind suggestion", 'kind = "efa"', 'kind = "efaa"', "links[2].kind", ["did you mean 'efa'"]),
    ("rate without bf16", "bf16 = 1.0", "bf16 = 2.0", "core.tensor.rate.bf16", ["relative to bf16"]),
    ("sparse without dense", "int4 = 4.0", "", "core.tensor.sparse_multiplier.int4", ["no dense rate"]),
    ("float for int", "cores = 8", "cores = 8.5", "cores", ["integer"]),
    ("bool for int", "cores = 8", "cores = true", "cores", ["integer"]),
    ("string for number", "fp32 = 0.25", 'fp32 = "0.25"', "core.tensor.rate.fp32", ["expected a number"]),
    ("negative rate", "fp32 = 0.25", "fp32 = -0.25", "core.tensor.rate.fp32", ["out of range"]),
    ("tolerance above 1", "tolerance = 0.01  # the table", "tolerance = 3  # the table",
     "documented[0].tolerance", ["≤ 1"]),
    ("documented dtype unsupported", 'dtype = "bf16"  # ARCHITECTURE.md trn3 table, "Tensor Engine"',
     'dtype = "fp6_e2m3"', "documented[0].dtype", ["not a dtype this chip supports"]),
    ("alias collision", "fp8_e5m2 = 4.0  # ARCHITECTURE.md trn3 table, \"low precision\": FP8 at 4×",
     "fp8 = 4.0", "core.tensor.rate.fp8", ["same dtype"]),
    ("scaleup nodes", "nodes = 4  #", "nodes = 5  #", "topology.scaleup[0].nodes", ["evenly"]),
]


@pytest.mark.parametrize(("old", "new", "key", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_preset(tmp_path: Path, old: str, new: str, key: str, words: list[str]) -> None:
    path = edited(tmp_path, old, new)
    message = load_error(path)
    assert str(path) in message, message
    assert f": {key}" in message, message
    for word in words:
        assert word in message, message


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = edited(tmp_path, 'capacity = "192 GB"', "capacity = 192 GB")
    message = load_error(path)
    line = 1 + TRN3[: TRN3.index("capacity = ")].count("\n")
    assert f"{path}:{line}:" in message and "TOML syntax error" in message, message


def test_scalar_where_a_table_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "scalar.toml"
    path.write_text(TRN3.replace("[power]\n", "[unused_power]\n").replace("cores = 8", "power = 5\ncores = 8")
                    .replace("[unused_power]\n", ""), encoding="utf-8")
    message = load_error(path)
    assert f"{path}: power" in message and "expected a table" in message, message


def test_both_or_neither_compute_section(tmp_path: Path) -> None:
    neither = edited(tmp_path, "[core]", "[unused]")
    assert "unknown key 'unused'" in load_error(neither)
    path = tmp_path / "both.toml"
    path.write_text(TRN3 + '\n[peak.dense]\nbf16 = "1 TFLOP/s"\n', encoding="utf-8")
    message = load_error(path)
    assert "exactly one of [core]" in message and str(path) in message


def test_gpu_without_peak(tmp_path: Path) -> None:
    path = edited(tmp_path, "[peak.dense]", "[peek.dense]", base=H100)
    assert "did you mean 'peak'" in load_error(path)


def test_gpu_sparse_below_dense(tmp_path: Path) -> None:
    path = edited(tmp_path, 'int8 = "3958 TOPS"', 'int8 = "1000 TOPS"', base=H100)
    message = load_error(path)
    assert ": peak.sparse.int8" in message and "below the dense" in message


def test_aliases_are_canonicalised(tmp_path: Path) -> None:
    path = edited(tmp_path, "fp8_e4m3 = 4.0  # ARCHITECTURE.md trn3 table, \"low precision\": FP8/MX/INT4",
                  "fp8 = 4.0  # alias")
    spec = hw.load(path)
    assert spec.core is not None
    assert "fp8_e4m3" in spec.core.tensor.rate and "fp8" not in spec.core.tensor.rate


def test_empty_file_lists_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("", encoding="utf-8")
    message = load_error(path)
    assert "missing required key 'meta'" in message and str(path) in message


def test_unreadable_file(tmp_path: Path) -> None:
    assert "cannot read preset" in load_error(tmp_path / "absent.toml")
