"""The ``.neff``-style artifact: a fixed-size binary header, then JSON metadata and named binary sections.

Modelled on NEFF's public description (reference/neuron.md §3.2: "a tarball of all the metadata needed to run
the described compute graph" behind a 1024-byte header with versions, sizes and a sha256). Layout, all
integers little-endian::

    offset  size  field
         0     8  magic            b"TRNSNEFF"
         8     4  format_version   FORMAT_VERSION (a reader accepts exactly its own version)
        12     4  header_size      HEADER_SIZE (256)
        16    32  content_hash     sha256 of the whole file with this field zeroed
        48    32  target           UTF-8, NUL-padded (e.g. "trn3")
        80    32  producer         UTF-8, NUL-padded (e.g. "trnsim 0.1.0")
       112     8  meta_size        bytes of the JSON metadata
       120     8  index_size       bytes of the JSON section index
       128     8  data_size        bytes of the section data (sections and their padding)
       136   120  reserved         zeros
       256        body: metadata JSON | section index JSON | section data

The metadata is ``json.dumps(meta, sort_keys=True)`` (compact, ASCII, no NaN). The index is a JSON list of
``[name, offset, size]`` sorted by name, offsets relative to the start of the section data; every section
starts on a 64-byte boundary (so arrays in it can be viewed without copying). Nothing depends on the clock
or the machine: identical inputs give identical bytes.

Reading never executes anything from the file (JSON and raw bytes only, no pickle) and checks, in order:
magic, format version, header fields, size (truncation), hash (corruption), target, then the metadata and
index themselves. Each failure is an ``ArtifactError`` saying what is wrong and what to do.

``pack_arrays``/``unpack_arrays`` store named numpy arrays (ml_dtypes' bfloat16 and float8/6/4 included)
the same way: dtype by name, shape, raw little-endian bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from trnsim import __version__
from trnsim.errors import ArtifactError
from trnsim.fileio import write_atomic

MAGIC = b"TRNSNEFF"
FORMAT_VERSION = 1
HEADER_SIZE = 256
ALIGN = 64

# magic, format_version, header_size, content_hash, target, producer, meta_size, index_size, data_size
_HEADER = struct.Struct("<8sII32s32s32sQQQ")
_HASH_AT = 16  # offset of content_hash in the header
_TEXT_FIELD = 32
_SECTION_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*(/[A-Za-z0-9_\-][A-Za-z0-9_.\-]*)*")

RECOMPILE = "recompile it with `trnsim compile MODULE -o FILE.neff` (or clear the cache: `trnsim cache clear`)"


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: header fields, the metadata and the named sections (raw bytes)."""

    format_version: int
    target: str
    producer: str
    content_hash: str  # hex sha256, as stored in the header
    meta: dict[str, Any] = field(repr=False)
    sections: dict[str, bytes] = field(repr=False)

    def section(self, name: str) -> bytes:
        """The bytes of one section; a missing one is an ``ArtifactError`` listing those present."""
        try:
            return self.sections[name]
        except KeyError:
            raise ArtifactError(f"no section {name!r} (has: {', '.join(sorted(self.sections)) or 'none'})",
                                where=f"artifact {self.content_hash[:12]}", hint=RECOMPILE) from None


# ---------------------------------------------------------------------------------------------------- writing


def _text_field(value: str, what: str) -> bytes:
    raw = value.encode()
    if not raw or len(raw) > _TEXT_FIELD or b"\0" in raw:
        raise ArtifactError(f"{what} {value!r} must be 1 to {_TEXT_FIELD} UTF-8 bytes without NUL")
    return raw


def _canonical_json(obj: object, what: str) -> bytes:
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{what} is not plain JSON: {exc}",
                            hint="metadata may hold only dicts with str keys, lists, str, int, finite float, "
                                 "bool and None; put arrays in a section (pack_arrays)") from None


def _pad(n: int) -> int:
    return -n % ALIGN


def pack_artifact(meta: Mapping[str, Any], sections: Mapping[str, bytes], *, target: str,
                  producer: str = f"trnsim {__version__}") -> bytes:
    """The artifact bytes for ``meta`` (plain JSON) and ``sections`` (name -> bytes) built for ``target``.

    Deterministic: the same arguments give the same bytes (keys and sections are sorted, no timestamps).
    """
    target_raw = _text_field(target, "target")
    producer_raw = _text_field(producer, "producer")
    meta_raw = _canonical_json(dict(meta), "metadata")
    index: list[list[object]] = []
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(sections):
        if not isinstance(name, str) or not _SECTION_NAME.fullmatch(name):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ArtifactError(f"bad section name {name!r}",
                                hint="use letters, digits, '_', '.', '-' and '/' (a relative file name)")
        payload = bytes(sections[name])
        index.append([name, offset, len(payload)])
        chunks += [payload, b"\0" * _pad(len(payload))]
        offset += len(payload) + _pad(len(payload))
    index_raw = _canonical_json(index, "section index")
    # NOTE: pad metadata + index so that the section data starts aligned in the file
    lead = b"\0" * _pad(HEADER_SIZE + len(meta_raw) + len(index_raw))
    index_raw += lead  # trailing padding is JSON whitespace-free zeros; the reader slices by index_size
    data = b"".join(chunks)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, HEADER_SIZE, b"\0" * 32, target_raw, producer_raw,
                          len(meta_raw), len(index_raw), len(data)).ljust(HEADER_SIZE, b"\0")
    body = meta_raw + index_raw + data
    digest = hashlib.sha256(header + body).digest()
    return header[:_HASH_AT] + digest + header[_HASH_AT + 32:] + body


def write_artifact(path: str | os.PathLike[str], meta: Mapping[str, Any], sections: Mapping[str, bytes], *,
                   target: str) -> Path:
    """Pack and write atomically (temp file in the same folder, then ``os.replace``); returns the path."""
    return write_bytes_atomic(path, pack_artifact(meta, sections, target=target))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    return write_atomic(path, data, durable=True, error=ArtifactError)


# ---------------------------------------------------------------------------------------------------- reading


def _decode_field(raw: bytes, name: str, where: str) -> str:
    text, _, rest = raw.partition(b"\0")
    if rest.strip(b"\0"):
        raise ArtifactError(f"corrupt header: {name} field has bytes after its terminator", where=where,
                            hint=RECOMPILE)
    try:
        return text.decode()
    except UnicodeDecodeError:
        raise ArtifactError(f"corrupt header: {name} field is not UTF-8", where=where, hint=RECOMPILE) from None


def unpack_artifact(data: bytes, *, where: str, expect_target: str | None = None) -> Artifact:
    """Verify and decode artifact bytes. ``where`` names the source (a path or URL) in errors."""
    n = len(data)
    if n < len(MAGIC) and MAGIC.startswith(bytes(data)):
        raise ArtifactError(f"truncated: {n} bytes, not even a header ({HEADER_SIZE} bytes)", where=where,
                            hint=RECOMPILE)
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise ArtifactError(f"not a trnsim artifact (starts with {bytes(data[:8])!r}, expected {MAGIC!r})",
                            where=where, hint="give the .neff file that `trnsim compile` wrote")
    if n < _HEADER.size:
        raise ArtifactError(f"truncated: {n} bytes, the header alone is {HEADER_SIZE}", where=where,
                            hint=RECOMPILE)
    (_, version, header_size, digest, target_raw, producer_raw,
     meta_size, index_size, data_size) = _HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        raise ArtifactError(f"format version {version}, but this trnsim ({__version__}) reads version "
                            f"{FORMAT_VERSION} only", where=where,
                            hint="recompile it with this trnsim (`trnsim compile MODULE -o FILE.neff`), or load "
                                 "it with the trnsim that wrote it")
    if header_size != HEADER_SIZE:
        raise ArtifactError(f"corrupt header: header_size {header_size}, expected {HEADER_SIZE}", where=where,
                            hint=RECOMPILE)
    if n < HEADER_SIZE:
        raise ArtifactError(f"truncated: {n} bytes, the header alone is {HEADER_SIZE}", where=where,
                            hint=RECOMPILE)
    if any(bytes(data[_HEADER.size:HEADER_SIZE])):
        raise ArtifactError("corrupt header: reserved bytes are not zero", where=where, hint=RECOMPILE)
    expected = HEADER_SIZE + meta_size + index_size + data_size
    if n < expected:
        raise ArtifactError(f"truncated: {n} bytes, the header says {expected} (an interrupted copy or "
                            f"download?)", where=where, hint=RECOMPILE)
    if n > expected:
        raise ArtifactError(f"corrupt: {n - expected} unexpected bytes after the end ({expected} bytes)",
                            where=where, hint=RECOMPILE)
    actual = hashlib.sha256(bytes(data[:_HASH_AT]) + b"\0" * 32 + bytes(data[_HASH_AT + 32:])).digest()
    if actual != digest:
        raise ArtifactError(f"corrupt: content hash mismatch (header {digest.hex()[:16]}…, file "
                            f"{actual.hex()[:16]}…)", where=where, hint=RECOMPILE)
    target = _decode_field(target_raw, "target", where)
    producer = _decode_field(producer_raw, "producer", where)
    if expect_target is not None and target != expect_target:
        raise ArtifactError(f"built for target {target!r}, not {expect_target!r}", where=where,
                            hint=f"recompile for it: `trnsim compile MODULE --target {expect_target} -o "
                                 f"FILE.neff`, or run it on a {target!r} device")
    meta_end = HEADER_SIZE + meta_size
    index_end = meta_end + index_size
    meta = _load_json(bytes(data[HEADER_SIZE:meta_end]), "metadata", where)
    index = _load_json(bytes(data[meta_end:index_end]).rstrip(b"\0"), "section index", where)
    if not isinstance(meta, dict):
        raise ArtifactError("malformed: metadata is not a JSON object", where=where, hint=RECOMPILE)
    sections = _read_sections(index, data, index_end, data_size, where)
    return Artifact(version, target, producer, digest.hex(), meta, sections)


def _load_json(raw: bytes, what: str, where: str) -> object:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"malformed: {what} is not JSON ({exc})", where=where, hint=RECOMPILE) from None


def _read_sections(index: object, data: bytes, start: int, size: int, where: str) -> dict[str, bytes]:
    def bad(why: str) -> ArtifactError:
        return ArtifactError(f"malformed section index: {why}", where=where, hint=RECOMPILE)

    if not isinstance(index, list):
        raise bad("not a list")
    sections: dict[str, bytes] = {}
    for entry in index:
        if not (isinstance(entry, list) and len(entry) == 3):
            raise bad(f"entry {entry!r} is not [name, offset, size]")
        name, off, length = entry
        if not (isinstance(name, str) and isinstance(off, int) and isinstance(length, int)):
            raise bad(f"entry {entry!r} is not [name, offset, size]")
        if name in sections:
            raise bad(f"section {name!r} appears twice")
        if off < 0 or length < 0 or off + length > size:
            raise bad(f"section {name!r} ({off}+{length}) lies outside the data ({size} bytes)")
        sections[name] = bytes(data[start + off:start + off + length])
    return sections


def read_artifact(path: str | os.PathLike[str], *, expect_target: str | None = None) -> Artifact:
    """Read and verify the artifact at ``path`` (see ``unpack_artifact``)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ArtifactError("no such file", where=str(path),
                            hint="compile one with `trnsim compile MODULE -o FILE.neff`") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read: {exc.strerror or exc}", where=str(path)) from None
    return unpack_artifact(data, where=str(path), expect_target=expect_target)


# ---------------------------------------------------------------------------------------------------- arrays

ARRAYS_MAGIC = b"TRNSARRS"
_ARRAYS_HEAD = struct.Struct("<8sQ")  # magic, index size; then JSON index, then aligned raw data
# numpy kinds whose raw bytes are the whole value: bool, signed, unsigned, float, complex
_PLAIN_KINDS = frozenset("biufc")


def _dtype_name(dt: np.dtype[Any]) -> str:
    name = dt.name
    ml = getattr(ml_dtypes, name, None)
    if isinstance(ml, type) and np.dtype(ml) == dt:
        return name
    if dt.kind in _PLAIN_KINDS and np.dtype(name) == dt.newbyteorder("="):
        return name
    raise ArtifactError(f"cannot store arrays of dtype {dt!r}",
                        hint="use a numeric numpy dtype or an ml_dtypes one (bfloat16, float8_*, ...)")


def _dtype_of(name: str, where: str) -> np.dtype[Any]:
    hit = _DTYPES_READ.get(name)
    return hit if hit is not None else _read_dtype(name, where)


_DTYPES_READ: dict[str, np.dtype[Any]] = {}


def _read_dtype(name: str, where: str) -> np.dtype[Any]:
    ml = getattr(ml_dtypes, name, None)
    if isinstance(ml, type):
        dt = _DTYPES_READ[name] = np.dtype(ml)
        return dt
    try:
        dt = np.dtype(name)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _PLAIN_KINDS or dt.name != name:
        raise ArtifactError(f"unknown array dtype {name!r}", where=where, hint=RECOMPILE)
    _DTYPES_READ[name] = dt
    return dt


def pack_arrays(arrays: Mapping[str, np.ndarray[Any, Any]]) -> bytes:
    """Named arrays as deterministic bytes: dtype by name, shape, raw little-endian data. No pickle."""
    index: list[list[object]] = []
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(arrays):
        arr = np.asarray(arrays[name])
        dtype = _dtype_name(arr.dtype)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        raw = np.ascontiguousarray(arr).tobytes()
        chunks.append(b"\0" * _pad(offset))
        offset += _pad(offset)
        index.append([name, dtype, list(arr.shape), offset, len(raw)])
        chunks.append(raw)
        offset += len(raw)
    index_raw = _canonical_json(index, "array index")
    index_raw += b" " * _pad(_ARRAYS_HEAD.size + len(index_raw))
    return _ARRAYS_HEAD.pack(ARRAYS_MAGIC, len(index_raw)) + index_raw + b"".join(chunks)


def unpack_arrays(data: bytes, *, where: str = "arrays") -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of ``pack_arrays``, as read-only views into ``data`` (copy one to modify it)."""
    def bad(why: str) -> ArtifactError:
        return ArtifactError(f"malformed array section: {why}", where=where, hint=RECOMPILE)

    if len(data) < _ARRAYS_HEAD.size or bytes(data[:8]) != ARRAYS_MAGIC:
        raise bad(f"does not start with {ARRAYS_MAGIC!r}")
    _, index_size = _ARRAYS_HEAD.unpack_from(data)
    start = _ARRAYS_HEAD.size + index_size
    if start > len(data):
        raise bad("truncated index")
    index = _load_json(bytes(data[_ARRAYS_HEAD.size:start]), "array index", where)
    if not isinstance(index, list):
        raise bad("index is not a list")
    buf = memoryview(data).toreadonly()
    out: dict[str, np.ndarray[Any, Any]] = {}
    for entry in index:
        try:
            name, dtype_name, shape, off, length = entry
        except (TypeError, ValueError):
            raise bad(f"entry {entry!r} is not [name, dtype, shape, offset, size]") from None
        if not (isinstance(name, str) and isinstance(dtype_name, str) and isinstance(shape, list)
                and all(isinstance(d, int) and d >= 0 for d in shape)
                and isinstance(off, int) and isinstance(length, int) and off >= 0):
            raise bad(f"entry {entry!r} is not [name, dtype, shape, offset, size]")
        dt = _dtype_of(dtype_name, where).newbyteorder("<")
        count = math.prod(shape)
        if count * dt.itemsize != length or start + off + length > len(data):
            raise bad(f"array {name!r}: {length} bytes at {off} do not fit shape {shape} of {dtype_name}")
        arr = np.frombuffer(buf, dtype=dt, count=count, offset=start + off).reshape(shape)
        out[name] = arr
    return out


__all__ = [
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "Artifact",
    "pack_arrays",
    "pack_artifact",
    "read_artifact",
    "unpack_arrays",
    "unpack_artifact",
    "write_artifact",
    "write_bytes_atomic",
]
