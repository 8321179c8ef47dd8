"""Access patterns: how an instruction addresses a tile of SBUF, PSUM or HBM.

An access pattern (AP) names a memory, an element type, a run of partitions and up to four free dimensions
of ``(stride, count)`` in elements (``reference/neuron.md`` §1.2: sizes uint16, strides int16). Its shape is
``(partitions, *counts)``; element ``[p, i0, i1, …]`` lives at

    on-chip (sbuf/psum):  partition  partition_start + p,
                          byte       offset + itemsize * Σ i_k * stride_k
    hbm:                  byte       base(tensor) + offset
                                     + itemsize * ((partition_start + p) * partition_stride + Σ i_k * stride_k)

On chip the partition dimension is not strided (each partition is a separate SRAM row); in HBM the
"partitions" are rows ``partition_stride`` elements apart, which makes a DMA from HBM a strided gather.

Text form (round-trips through ``parse_ap``)::

    sbuf:bf16[0:128,+1024,64x1]          partitions 0..127, byte offset 1024, 64 elements of stride 1
    hbm:a:fp32[0:128/512,+0,512x1]       rows 0..127 of tensor a, rows 512 elements apart
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Literal, cast

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.dtypes import VerifyError, get_dtype

Memory = Literal["hbm", "sbuf", "psum"]
MEMORIES: tuple[Memory, ...] = ("hbm", "sbuf", "psum")
MAX_FREE_DIMS = 4


@dataclass(frozen=True)
class AccessPattern:
    """A strided view of one memory; see the module docstring for the address formula.

    NOTE: the simulator asks every pattern for its hash, size and byte span on each access, so those are
    computed once per pattern (``cached_property`` stores them beside the fields; equality, ``replace`` and
    the text form see only the fields)."""

    memory: Memory
    dtype: str
    partition_start: int
    partitions: int
    free: tuple[tuple[int, int], ...]  # (stride_elements, count), outermost first
    offset: int = 0  # bytes: within each partition on chip; from the tensor base (or address 0) in HBM
    partition_stride: int = 0  # HBM only: elements between consecutive rows
    tensor: str | None = None  # HBM only: the declared tensor this AP is relative to

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # NOTE: the simulator's dicts compare equal patterns of different instructions on every access: the
        # fields' tuple is built once per pattern (the generated __eq__ built two per comparison)
        if self is other:
            return True
        if not isinstance(other, AccessPattern):
            return NotImplemented
        return self._hash == other._hash and self._key == other._key

    def __getstate__(self) -> dict[str, object]:
        """The fields only: cached values (the hash of strings included) belong to one process."""
        return {f: getattr(self, f) for f in FIELDS}

    @cached_property
    def _key(self) -> tuple[object, ...]:
        return (self.memory, self.dtype, self.partition_start, self.partitions, self.free, self.offset,
                self.partition_stride, self.tensor)

    @cached_property
    def _hash(self) -> int:
        return hash(self._key)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *(count for _, count in self.free))

    @cached_property
    def itemsize(self) -> int:
        return get_dtype(self.dtype).itemsize

    @cached_property
    def free_size(self) -> int:
        """Elements per partition."""
        return math.prod(count for _, count in self.free)

    @cached_property
    def size(self) -> int:
        return self.partitions * self.free_size

    @property
    def on_chip(self) -> bool:
        return self.memory != "hbm"

    def free_offsets(self) -> NDArray[np.int64]:
        """Element offset of every free index, shape ``counts`` (Σ i_k * stride_k)."""
        off = np.zeros((), dtype=np.int64)
        for stride, count in self.free:
            off = off[..., None] + np.arange(count, dtype=np.int64) * stride
        return off

    def free_extent(self) -> tuple[int, int]:
        """Smallest and largest element offset of the free dimensions (relative to ``offset``)."""
        lo = sum(min(0, (c - 1) * s) for s, c in self.free)
        hi = sum(max(0, (c - 1) * s) for s, c in self.free)
        return lo, hi

    def byte_span(self) -> tuple[int, int]:
        """[lo, hi) bytes touched: within each partition on chip; from the tensor base in HBM."""
        return self._byte_span

    @cached_property
    def _byte_span(self) -> tuple[int, int]:
        lo, hi = self.free_extent()
        if not self.on_chip:
            rows = (self.partition_start * self.partition_stride,
                    (self.partition_start + self.partitions - 1) * self.partition_stride)
            lo, hi = lo + min(rows), hi + max(rows)
        return self.offset + lo * self.itemsize, self.offset + (hi + 1) * self.itemsize

    def with_dtype(self, dtype: str) -> AccessPattern:
        """The same bytes read as another dtype of equal size (a bit-cast view)."""
        return replace(self, dtype=dtype)

    def __str__(self) -> str:
        return format_ap(self)


FIELDS = tuple(f.name for f in fields(AccessPattern))


def tile(
    memory: Memory, dtype: str, shape: tuple[int, ...], *, partition_start: int = 0, offset: int = 0
) -> AccessPattern:
    """A contiguous row-major on-chip tile ``[partitions, *free_shape]`` starting at byte ``offset``."""
    if memory == "hbm":
        raise VerifyError("tile() builds SBUF/PSUM patterns", hint="use hbm() for HBM tensors")
    return AccessPattern(memory, dtype, partition_start, shape[0], _row_major(shape[1:]), offset)


def hbm(
    tensor: str, dtype: str, shape: tuple[int, ...], *, rows: tuple[int, int] | None = None, offset: int = 0
) -> AccessPattern:
    """A row-major HBM tensor of ``shape`` viewed as rows (dimension 0) × the rest, optionally rows[a:b]."""
    a, b = rows if rows is not None else (0, shape[0])
    row_len = int(np.prod(shape[1:], dtype=np.int64))
    return AccessPattern("hbm", dtype, a, b - a, _row_major(shape[1:]), offset, row_len, tensor)


def transposed(ap: AccessPattern) -> AccessPattern:
    """The transpose of a 2-D HBM pattern: rows become the single free dimension and vice versa.

    A DMA through it transposes a matrix on the way in or out (``dma_transpose``)."""
    if ap.on_chip or len(ap.free) != 1:
        raise VerifyError("transposed() takes a 2-D HBM pattern", hint="build it with hbm(name, dtype, (R, C))")
    (stride, count), = ap.free
    start = ap.offset + ap.partition_start * ap.partition_stride * ap.itemsize
    return AccessPattern("hbm", ap.dtype, 0, count, ((ap.partition_stride, ap.partitions),), start, stride, ap.tensor)


def _row_major(free_shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    dims: list[tuple[int, int]] = []
    stride = 1
    for count in reversed(free_shape):
        dims.append((stride, count))
        stride *= count
    return tuple(reversed(dims)) if dims else ((1, 1),)


def format_ap(ap: AccessPattern) -> str:
    head = f"hbm:{ap.tensor}" if ap.tensor is not None else ap.memory
    rows = f"{ap.partition_start}:{ap.partition_start + ap.partitions}"
    if ap.partition_stride:
        rows += f"/{ap.partition_stride}"
    dims = ",".join(f"{count}x{stride}" for stride, count in ap.free)
    return f"{head}:{ap.dtype}[{rows},+{ap.offset},{dims}]"


_AP_RE = re.compile(
    r"^(?P<mem>hbm|sbuf|psum)(?::(?P<tensor>[A-Za-z_][\w.]*))?:(?P<dtype>\w+)"
    r"\[(?P<p0>\d+):(?P<p1>\d+)(?:/(?P<ps>-?\d+))?,\+(?P<off>\d+)(?P<dims>(?:,\d+x-?\d+)*)\]$"
)


def parse_ap(text: str) -> AccessPattern:
    """Inverse of ``format_ap``."""
    m = _AP_RE.match(text)
    if m is None:
        raise VerifyError(f"cannot parse access pattern {text!r}", hint="expected e.g. sbuf:bf16[0:128,+0,64x1]")
    memory = cast(Memory, m["mem"])
    if m["tensor"] is not None and memory != "hbm":
        raise VerifyError(f"only HBM patterns name a tensor: {text!r}")
    free = tuple((int(s), int(c)) for c, s in (d.split("x") for d in m["dims"].split(",")[1:]))
    p0, p1 = int(m["p0"]), int(m["p1"])
    return AccessPattern(memory, m["dtype"], p0, p1 - p0, free, int(m["off"]), int(m["ps"] or 0), m["tensor"])
