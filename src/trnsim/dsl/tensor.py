"""Tensors of the kernel language: HBM tensors, SBUF/PSUM tiles, and the views slicing makes of them.

A ``Tensor`` is a view of a ``Buffer`` (an HBM tensor of the program, or a tile allocated in SBUF/PSUM):
for each of its dimensions, the buffer axis it walks, where it starts, its step and its length. Slicing,
integer indexing, ``.T`` and ``broadcast_to`` make new views of the same buffer; ``ap()`` turns a view into
the ISA ``AccessPattern`` an instruction addresses, and ``box`` is what it touches (for ``deps``).

    x[i * 128:(i + 1) * 128, :]     rows of an HBM tensor
    a[0:128, 0:64].T                a transposed view: a DMA through it transposes (HBM only)
    t[:, 3:4]                       a [P, 1] column of a tile: a per-partition scalar operand
    bias.broadcast_to((128, n))     one HBM row repeated on every partition (stride 0), for a broadcast DMA

Dimension 0 of a tile is its partition dimension: at most 128, never strided or transposed on chip (each
partition is its own SRAM row), so an on-chip view keeps it first; integer-indexing it keeps a size-1
partition dimension, as NKI does. The first dimension of an HBM view becomes the AP's (strided) rows.
Unlike numpy, a slice bound past a dimension is an error, not clamped (a ragged last tile slices to
``min(stop, n)`` itself); negative bounds count from the end as in numpy.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from types import EllipsisType
from typing import Literal, SupportsIndex

from trnsim.dsl.deps import Box, Hazards
from trnsim.dsl.errors import Location, fail
from trnsim.isa.ap import MAX_FREE_DIMS, AccessPattern
from trnsim.isa.dtypes import get_dtype

Memory = Literal["hbm", "sbuf", "psum"]
Index = SupportsIndex | slice | EllipsisType | None


@dataclass(frozen=True, slots=True)
class Dim:
    """One view dimension: walks buffer ``axis`` from ``start`` by ``step``, ``count`` times (axis -1:
    a broadcast dimension, stride 0)."""

    axis: int
    start: int
    step: int
    count: int


class Buffer:
    """Storage that tensors view: an HBM tensor (``name``) or an on-chip allocation (``offset`` bytes into
    each of partitions ``0..shape[0]-1``). ``on_free`` returns an allocation's memory when the last view of
    it is dropped."""

    __slots__ = ("__weakref__", "dead", "dtype", "hazards", "location", "memory", "name", "nbytes", "offset",
                 "on_free", "shape", "strides")
    memory: Memory
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    nbytes: int
    location: Location | None
    strides: tuple[int, ...]

    def __init__(self, memory: Memory, name: str, shape: tuple[int, ...], dtype: str, *, offset: int = 0,
                 nbytes: int = 0, location: Location | None = None) -> None:
        self.memory, self.name, self.shape, self.dtype = memory, name, shape, dtype
        self.offset, self.nbytes, self.location = offset, nbytes, location
        self.strides = _row_major(shape[1:] if memory != "hbm" else shape)
        if memory != "hbm":
            self.strides = (0, *self.strides)  # the partition axis is not strided on chip
        self.hazards = Hazards()
        self.on_free: Callable[[Buffer], None] | None = None
        self.dead = False

    def __del__(self) -> None:
        if self.on_free is not None and not self.dead:
            self.on_free(self)

    def __repr__(self) -> str:
        return f"{self.memory} {self.name} {list(self.shape)} {self.dtype}"


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, s = [], 1
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return tuple(reversed(strides))


class Tensor:
    """A view of a buffer; see the module docstring. ``shape`` and ``dtype`` are those of the view."""

    __slots__ = ("_ap", "buffer", "dims", "dtype", "fixed")

    def __init__(self, buffer: Buffer, dtype: str, dims: tuple[Dim, ...], fixed: tuple[tuple[int, int], ...] = ()):
        self.buffer, self.dtype, self.dims, self.fixed = buffer, dtype, dims, fixed  # fixed: (axis, index)
        self._ap: AccessPattern | None = None

    @classmethod
    def whole(cls, buffer: Buffer) -> Tensor:
        return cls(buffer, buffer.dtype, tuple(Dim(a, 0, 1, n) for a, n in enumerate(buffer.shape)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.count for d in self.dims)

    @property
    def memory(self) -> Memory:
        return self.buffer.memory

    @property
    def on_chip(self) -> bool:
        return self.buffer.memory != "hbm"

    @property
    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= d.count
        return n

    def __repr__(self) -> str:
        return f"Tensor({self.memory} {list(self.shape)} {self.dtype} of {self.buffer.name})"

    def __getitem__(self, key: Index | tuple[Index, ...]) -> Tensor:
        keys = list(key) if isinstance(key, tuple) else [key]
        if sum(k is Ellipsis for k in keys) > 1:
            fail("more than one ... in an index", "use at most one Ellipsis")
        real = len(keys) - sum(k is None or k is Ellipsis for k in keys)
        if real > len(self.dims):
            fail(f"{len(keys)} indices for a tensor of shape {self.shape}", "index at most one entry per dimension")
        rest: list[Index] = [slice(None)] * (len(self.dims) - real)
        if Ellipsis in keys:
            at = keys.index(Ellipsis)
            keys[at : at + 1] = rest
        else:
            keys += rest
        dims: list[Dim] = []
        fixed = list(self.fixed)
        source = iter(self.dims)
        for pos, k in enumerate(keys):
            if k is None:  # numpy's newaxis: a new dimension of size 1
                if self.on_chip and pos == 0:
                    fail("a new axis cannot come before a tile's partition dimension", "add axes after it")
                dims.append(Dim(-1, 0, 0, 1))
                continue
            d = next(source)
            partition = self.on_chip and d is self.dims[0]
            if isinstance(k, slice):
                start, stop, step = _slice_bounds(k, d.count, pos)
                count = len(range(start, stop, step))
                if count == 0:
                    fail(f"empty slice {start}:{stop}:{step} of dimension {pos} (size {d.count})",
                         "slices select at least one element")
                if partition and step != 1:
                    fail("on-chip partitions cannot be strided", "slice the partition dimension with step 1")
                dims.append(Dim(d.axis, d.start + start * d.step, d.step * step, count))
                continue
            assert not isinstance(k, EllipsisType)  # expanded above
            i = k.__index__()
            if not -d.count <= i < d.count:
                fail(f"index {i} is out of range for dimension {pos} of size {d.count}",
                     f"use an index in 0..{d.count - 1}")
            i %= d.count
            if partition:
                dims.append(Dim(d.axis, d.start + i * d.step, 1, 1))  # the partition dimension stays
            elif d.axis >= 0:
                fixed.append((d.axis, d.start + i * d.step))
        return Tensor(self.buffer, self.dtype, tuple(dims), tuple(fixed))

    @property
    def T(self) -> Tensor:
        """The 2-D transpose (HBM views only: a DMA through it transposes)."""
        if len(self.dims) != 2:
            fail(f".T of a {len(self.dims)}-D tensor", "transpose 2-D views")
        if self.on_chip:
            fail("on-chip tiles cannot be transposed by a view (partitions are not strided)",
                 "use dsl.transpose(tile) on TensorE, or load through a transposed HBM view: load(x[...].T)")
        return Tensor(self.buffer, self.dtype, (self.dims[1], self.dims[0]), self.fixed)

    def permute(self, *axes: int) -> Tensor:
        """The view with its dimensions reordered (``numpy.transpose``; HBM views only: a DMA through it
        moves the data into that order)."""
        if sorted(axes) != list(range(len(self.dims))):
            fail(f"permute{axes} of a {len(self.dims)}-D tensor", f"give each of 0..{len(self.dims) - 1} once")
        if self.on_chip:
            fail("on-chip tiles cannot be permuted by a view (partitions are not strided)",
                 "permute the HBM view you load from")
        return Tensor(self.buffer, self.dtype, tuple(self.dims[a] for a in axes), self.fixed)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        """Repeat size-1 (or missing leading) dimensions with stride 0, numpy-style."""
        if len(shape) < len(self.dims):
            fail(f"cannot broadcast shape {self.shape} to {shape}", "give at least as many dimensions")
        dims: list[Dim] = [Dim(-1, 0, 0, n) for n in shape[: len(shape) - len(self.dims)]]
        fixed = list(self.fixed)
        for d, n in zip(self.dims, shape[len(shape) - len(self.dims) :], strict=True):
            if d.count == n:
                dims.append(d)
            elif d.count == 1:
                if d.axis >= 0:
                    fixed.append((d.axis, d.start))
                dims.append(Dim(-1, 0, 0, n))
            else:
                fail(f"cannot broadcast shape {self.shape} to {shape}", "only size-1 dimensions broadcast")
        if self.on_chip and dims[0].axis != 0:
            fail("on-chip tiles cannot be broadcast across partitions by a view",
                 "use dsl.partition_broadcast, or load from HBM through .broadcast_to")
        return Tensor(self.buffer, self.dtype, tuple(dims), tuple(fixed))

    def bitcast(self, dtype: str) -> Tensor:
        """The same bytes read as ``dtype`` of the same size."""
        if get_dtype(dtype).itemsize != get_dtype(self.dtype).itemsize:
            fail(f"bitcast {self.dtype} → {dtype} changes the element size", "bitcast between equal sizes")
        return Tensor(self.buffer, dtype, self.dims, self.fixed)

    @property
    def box(self) -> Box:
        """Per buffer axis, the half-open index range the view touches."""
        box = [(0, 0)] * len(self.buffer.shape)
        for axis, i in self.fixed:
            box[axis] = (i, i + 1)
        for d in self.dims:
            if d.axis >= 0:
                last = d.start + (d.count - 1) * d.step
                box[d.axis] = (min(d.start, last), max(d.start, last) + 1)
        return tuple(box)

    @property
    def dense(self) -> bool:
        """True when the view touches every element of its box."""
        return all(d.axis >= 0 and abs(d.step) == 1 for d in self.dims if d.count > 1)

    def ap(self, exact: bool = False) -> AccessPattern:
        """The access pattern of this view (cached: views are immutable). ``exact`` keeps one AP free
        dimension per view dimension after the first (reductions name their axes), else size-1 dimensions
        are dropped and contiguous ones merged."""
        if exact:
            return self._make_ap(exact)
        if self._ap is None:
            self._ap = self._make_ap(exact)
        return self._ap

    def _make_ap(self, exact: bool) -> AccessPattern:
        buf, dims = self.buffer, self.dims
        if not dims:
            fail("a 0-d view has no access pattern", "keep at least one dimension (slice instead of indexing)")
        strides = buf.strides
        on_chip = self.on_chip
        first = dims[0]
        if on_chip and first.axis != 0:
            fail("the first dimension of an on-chip view must be the partition dimension",
                 "keep dimension 0 of a tile first")
        base = sum(i * strides[a] for a, i in self.fixed if not (on_chip and a == 0))
        base += sum(d.start * strides[d.axis] for d in dims[1:] if d.axis >= 0)
        free = _free_dims([(d.step * strides[d.axis] if d.axis >= 0 else 0, d.count) for d in dims[1:]], exact)
        itemsize = get_dtype(self.dtype).itemsize
        if on_chip:
            return AccessPattern(buf.memory, self.dtype, first.start, first.count, free, buf.offset + base * itemsize)
        row_stride = first.step * strides[first.axis] if first.axis >= 0 else 0
        if first.axis >= 0:
            base += first.start * strides[first.axis]
        return AccessPattern("hbm", self.dtype, 0, first.count, free, base * itemsize, row_stride, buf.name)


def _slice_bounds(k: slice, n: int, pos: int) -> tuple[int, int, int]:
    """``k.indices(n)``, but a bound past the dimension is an error, not clamped (numpy would clamp it: a
    kernel that reads ``x[0:64, 30:40]`` of 32 columns means columns that do not exist). Negative bounds
    count from the end, as in numpy, down to ``-n``."""
    if k.step is not None and operator.index(k.step) == 0:
        fail(f"slice step 0 for dimension {pos}", "use a nonzero step")
    for bound in (k.start, k.stop):
        if bound is not None and not -n <= operator.index(bound) <= n:
            fail(f"slice {_show(k)} is out of bounds for dimension {pos} of size {n}",
                 f"slice within 0..{n} (negative bounds count from the end, down to -{n})")
    return k.indices(n)


def _show(k: slice) -> str:
    text = ":".join("" if b is None else str(operator.index(b)) for b in (k.start, k.stop))
    return text if k.step is None else f"{text}:{operator.index(k.step)}"


def _free_dims(dims: list[tuple[int, int]], exact: bool) -> tuple[tuple[int, int], ...]:
    """Drop size-1 dimensions and merge contiguous neighbours, so a view fits the AP's 4 free dimensions."""
    out: list[tuple[int, int]] = []
    for stride, count in dims:
        if exact:
            out.append((stride, count))
            continue
        if count == 1:
            continue
        if out and out[-1][0] == stride * count:
            out[-1] = (stride, out[-1][1] * count)
        else:
            out.append((stride, count))
    if len(out) > MAX_FREE_DIMS:
        fail(f"view needs {len(out)} free dimensions", f"access patterns have at most {MAX_FREE_DIMS}; "
             "split the access or make inner dimensions contiguous")
    return tuple(out) or ((1, 1),)
