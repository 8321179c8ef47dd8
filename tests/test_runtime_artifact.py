"""The .neff-style artifact container: round trip, determinism, and every kind of damage → ArtifactError."""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from trnsim.errors import ArtifactError
from trnsim.runtime.artifact import (
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    pack_arrays,
    pack_artifact,
    read_artifact,
    unpack_arrays,
    unpack_artifact,
    write_artifact,
)

META = {"inputs": [{"name": "x", "shape": [2, 3], "dtype": "bf16"}], "options": {"auto_cast": "none"},
        "compiler": "trnsim 0.1.0", "locations": {"0": "model.mlir:3:5"}}
SECTIONS = {"program.json": b'{"instructions": []}', "constants.bin": bytes(range(256)) * 3, "empty": b""}


def packed() -> bytes:
    return pack_artifact(META, SECTIONS, target="trn3")


def test_round_trip() -> None:
    art = unpack_artifact(packed(), where="mem", expect_target="trn3")
    assert art.meta == META and art.sections == SECTIONS
    assert art.target == "trn3" and art.format_version == FORMAT_VERSION and art.producer.startswith("trnsim ")
    assert len(art.content_hash) == 64
    assert art.section("empty") == b""


def test_layout() -> None:
    data = packed()
    assert data[:8] == MAGIC
    assert struct.unpack_from("<II", data, 8) == (FORMAT_VERSION, HEADER_SIZE)
    assert data[48:52] == b"trn3"
    body_start = HEADER_SIZE + sum(struct.unpack_from("<QQ", data, 112))
    assert body_start % 64 == 0  # section data is aligned


def test_deterministic() -> None:
    shuffled_meta = dict(reversed(list(META.items())))
    shuffled_sections = dict(reversed(list(SECTIONS.items())))
    assert packed() == packed() == pack_artifact(shuffled_meta, shuffled_sections, target="trn3")
    assert packed() != pack_artifact(META, SECTIONS, target="trn2")


def test_missing_section_names_the_present_ones() -> None:
    art = unpack_artifact(packed(), where="mem")
    with pytest.raises(ArtifactError, match=r"no section 'nope' \(has: constants.bin, empty, program.json\)"):
        art.section("nope")


def test_bad_inputs_to_pack() -> None:
    with pytest.raises(ArtifactError, match="not plain JSON"):
        pack_artifact({"x": np.float32(1)}, {}, target="trn3")
    with pytest.raises(ArtifactError, match="not plain JSON"):
        pack_artifact({"x": float("nan")}, {}, target="trn3")
    with pytest.raises(ArtifactError, match="bad section name"):
        pack_artifact({}, {"../evil": b""}, target="trn3")
    with pytest.raises(ArtifactError, match="target"):
        pack_artifact({}, {}, target="x" * 33)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


GOOD = packed()
CASES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "truncated: 0 bytes"),
    ("half magic", GOOD[:5], "truncated: 5 bytes"),
    ("truncated header", GOOD[:100], "truncated: 100 bytes, the header alone is 256"),
    ("truncated body", GOOD[:-10], f"truncated: {len(GOOD) - 10} bytes, the header says {len(GOOD)}"),
    ("header only", GOOD[:HEADER_SIZE], "truncated"),
    ("extra bytes", GOOD + b"\0", "1 unexpected bytes after the end"),
    ("wrong magic", b"PK\x03\x04" + GOOD[4:], "not a trnsim artifact"),
    ("wrong version", GOOD[:8] + struct.pack("<I", FORMAT_VERSION + 1) + GOOD[12:],
     f"format version {FORMAT_VERSION + 1}, but this trnsim .* reads version {FORMAT_VERSION} only"),
    ("wrong header size", GOOD[:12] + struct.pack("<I", 1024) + GOOD[16:], "header_size 1024"),
    ("flipped hash byte", _flip(GOOD, 20), "content hash mismatch"),
    ("flipped target byte", _flip(GOOD, 49), "content hash mismatch"),
    ("flipped metadata byte", _flip(GOOD, HEADER_SIZE + 3), "content hash mismatch"),
    ("flipped section byte", _flip(GOOD, len(GOOD) - 70), "content hash mismatch"),
    ("reserved bytes", GOOD[:200] + b"\1" + GOOD[201:], "reserved bytes are not zero"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in CASES], ids=[c[0] for c in CASES])
def test_damage_is_reported(data: bytes, message: str) -> None:
    with pytest.raises(ArtifactError, match=message) as err:
        unpack_artifact(data, where="model.neff")
    text = str(err.value)
    assert text.startswith("model.neff: ")
    assert "hint:" in text  # every error says what to do


def test_every_single_byte_flip_is_detected() -> None:
    small = pack_artifact({"a": 1}, {"s": b"xyz"}, target="trn3")
    for i in range(len(small)):
        with pytest.raises(ArtifactError):
            unpack_artifact(_flip(small, i), where="f")


def test_every_truncation_is_detected() -> None:
    small = pack_artifact({"a": 1}, {"s": b"xyz"}, target="trn3")
    for n in range(len(small)):
        with pytest.raises(ArtifactError, match="truncated"):
            unpack_artifact(small[:n], where="f")


def test_wrong_target() -> None:
    with pytest.raises(ArtifactError, match="built for target 'trn3', not 'trn2'") as err:
        unpack_artifact(packed(), where="model.neff", expect_target="trn2")
    assert "--target trn2" in str(err.value)


def test_hash_valid_but_malformed_index() -> None:
    """A file whose hash is right but whose contents lie (crafted, not damaged) is still refused."""
    import hashlib

    meta, index = b"{}", b'[["s",0,999]]'
    pad = b"\0" * (-(HEADER_SIZE + len(meta) + len(index)) % 64)
    header = struct.pack("<8sII32s32s32sQQQ", MAGIC, FORMAT_VERSION, HEADER_SIZE, b"\0" * 32, b"trn3", b"x",
                         len(meta), len(index + pad), 0).ljust(HEADER_SIZE, b"\0")
    body = meta + index + pad
    digest = hashlib.sha256(header + body).digest()
    data = header[:16] + digest + header[48:] + body
    with pytest.raises(ArtifactError, match="lies outside the data"):
        unpack_artifact(data, where="crafted")


def test_write_and_read(tmp_path: Path) -> None:
    path = write_artifact(tmp_path / "sub" / "m.neff", META, SECTIONS, target="trn3")
    assert path.read_bytes() == packed()
    assert read_artifact(path, expect_target="trn3").sections == SECTIONS
    assert [p.name for p in path.parent.iterdir()] == ["m.neff"]  # no temp file left behind
    with pytest.raises(ArtifactError, match="no such file"):
        read_artifact(tmp_path / "absent.neff")


def test_write_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_artifact(tmp_path / "m.neff", META, SECTIONS, target="trn3")

    def boom(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(ArtifactError, match="No space"):
        write_artifact(path, {"other": 1}, {}, target="trn3")
    assert path.read_bytes() == packed()  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["m.neff"]


# ---------------------------------------------------------------------------------------------------- arrays

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "uint16", "bool", "complex64",
          "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
          "float4_e2m1fn", "int4"]


def _dtype(name: str) -> np.dtype[np.generic]:
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


@pytest.mark.parametrize("name", DTYPES)
def test_arrays_round_trip_every_dtype(name: str) -> None:
    dt = _dtype(name)
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 4, size=(3, 5)).astype(np.float32).astype(dt)
    back = unpack_arrays(pack_arrays({"a": arr, "scalar": arr[0, 0], "empty": arr[:0]}))
    assert back["a"].dtype == dt and back["a"].shape == (3, 5)
    assert back["a"].tobytes() == arr.tobytes()
    assert back["scalar"].shape == () and back["empty"].shape == (0, 5)


def test_arrays_deterministic_and_views() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    data = pack_arrays({"x": x, "t": x.T, "be": x.astype(">f4")})
    assert data == pack_arrays({"be": x.astype(">f4"), "t": np.ascontiguousarray(x.T), "x": x})
    back = unpack_arrays(data)
    np.testing.assert_array_equal(back["t"], x.T)
    np.testing.assert_array_equal(back["be"], x)
    assert back["be"].dtype.byteorder in "<="
    assert not back["x"].flags.writeable


def test_arrays_refuse_objects_and_damage() -> None:
    with pytest.raises(ArtifactError, match="cannot store arrays of dtype"):
        pack_arrays({"o": np.array([object()])})
    with pytest.raises(ArtifactError, match="cannot store"):
        pack_arrays({"s": np.array(["text"])})
    good = pack_arrays({"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(ArtifactError, match="does not start with"):
        unpack_arrays(b"\x93NUMPY" + good[6:])
    with pytest.raises(ArtifactError, match="do not fit"):
        unpack_arrays(good[:-4])
    with pytest.raises(ArtifactError, match="unknown array dtype 'O'"):
        unpack_arrays(good.replace(b'"int32"', b'"O"    '))
