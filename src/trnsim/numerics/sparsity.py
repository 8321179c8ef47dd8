"""N:M structured sparsity (2:4, 4:8): prune, compress to values + index metadata, decompress.

Semantics (``reference/frontend_numerics.md`` §B7): at most ``n`` nonzeros in every ``m`` consecutive
elements along ``axis`` — for a matmul's stationary/weight operand, the contraction (K) dimension.
``prune`` keeps the ``n`` largest magnitudes of each group, ties broken toward the lower index (so the
mask is deterministic). ``compress`` stores the ``n`` kept values of each group and their positions
within the group, ``ceil(log2 m)`` bits each (2 bits for 2:4, 3 for 4:8), positions ascending; a group
with fewer than ``n`` nonzeros is filled with its lowest-index zeros, as CUTLASS pads its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim.errors import NumericsError
from trnsim.numerics.packing import pack_codes, unpack_codes

PATTERNS = ((2, 4), (4, 8), (1, 2), (1, 4), (2, 8))  # accepted (n, m); 2:4 and 4:8 are the accelerated ones


def _check(w: NDArray[Any], n: int, m: int, axis: int) -> int:
    if (n, m) not in PATTERNS:
        raise NumericsError(
            f"unsupported sparsity pattern {n}:{m}",
            hint=f"use one of: {', '.join(f'{a}:{b}' for a, b in PATTERNS)}",
        )
    if not -w.ndim <= axis < w.ndim:
        raise NumericsError(f"axis {axis} is out of range for an array of {w.ndim} dimensions")
    ax = axis % w.ndim
    if w.shape[ax] % m:
        raise NumericsError(
            f"dimension {ax} has size {w.shape[ax]}, not a multiple of the group size {m}",
            hint=f"pad the weight along axis {ax} to a multiple of {m} with zeros",
        )
    if w.dtype.kind == "f" and np.isnan(w).any():
        raise NumericsError("cannot prune a tensor holding NaN", hint="clean the tensor first")
    return ax


def _groups(w: NDArray[Any], ax: int, m: int) -> NDArray[Any]:
    moved = np.moveaxis(w, ax, -1)
    return moved.reshape(*moved.shape[:-1], moved.shape[-1] // m, m)


def _ungroup(g: NDArray[Any], ax: int) -> NDArray[Any]:
    return np.moveaxis(g.reshape(*g.shape[:-2], -1), -1, ax)


def _kept_positions(groups: NDArray[Any], n: int) -> NDArray[np.int64]:
    """Positions (ascending) of the n largest magnitudes in each group; ties → lower index first."""
    mag = np.abs(groups.astype(np.float64))
    order = np.argsort(-mag, axis=-1, kind="stable")[..., :n]
    return np.sort(order, axis=-1)


def prune(w: ArrayLike, n: int = 2, m: int = 4, axis: int = -1) -> NDArray[Any]:
    """Zero all but the ``n`` largest-magnitude elements of every ``m`` consecutive along ``axis``."""
    arr = np.asarray(w)
    ax = _check(arr, n, m, axis)
    g = _groups(arr, ax, m)
    keep = np.zeros(g.shape, dtype=bool)
    np.put_along_axis(keep, _kept_positions(g, n), True, axis=-1)
    return _ungroup(np.where(keep, g, np.zeros((), arr.dtype)), ax)


def satisfies(w: ArrayLike, n: int, m: int, axis: int = -1) -> bool:
    """True when every group of ``m`` along ``axis`` has at most ``n`` nonzeros."""
    arr = np.asarray(w)
    ax = _check(arr, n, m, axis)
    return bool((np.count_nonzero(_groups(arr, ax, m), axis=-1) <= n).all())


@dataclass(frozen=True)
class SparseMetadata:
    """Kept positions of a compressed N:M tensor, packed ``bits`` per position."""

    n: int
    m: int
    axis: int
    shape: tuple[int, ...]  # the dense shape
    packed: bytes

    @property
    def bits(self) -> int:
        return max(1, (self.m - 1).bit_length())

    def positions(self) -> NDArray[np.int64]:
        """Positions in group layout: dense shape with ``axis`` moved last, split into (groups, n)."""
        moved = list(self.shape)
        moved.append(moved.pop(self.axis))
        count = int(np.prod(moved)) // self.m * self.n
        pos = unpack_codes(self.packed, self.bits, count).astype(np.int64)
        return pos.reshape(*moved[:-1], moved[-1] // self.m, self.n)


def compress(w: ArrayLike, n: int = 2, m: int = 4, axis: int = -1) -> tuple[NDArray[Any], SparseMetadata]:
    """Split an N:M-sparse tensor into its kept values (``axis`` shrunk by n/m) and packed positions.

    Raises ``NumericsError`` if some group has more than ``n`` nonzeros: compressing would lose them."""
    arr = np.asarray(w)
    ax = _check(arr, n, m, axis)
    g = _groups(arr, ax, m)
    counts = np.count_nonzero(g, axis=-1)
    if (counts > n).any():
        bad = np.unravel_index(int(np.argmax(counts > n)), counts.shape)
        raise NumericsError(
            f"tensor is not {n}:{m} sparse along axis {ax}: group {tuple(int(i) for i in bad)} "
            f"has {int(counts[bad])} nonzeros",
            hint=f"call prune(w, {n}, {m}, axis={axis}) first",
        )
    pos = _kept_positions(g, n)
    values = _ungroup(np.take_along_axis(g, pos, axis=-1), ax)
    meta = SparseMetadata(n, m, ax, arr.shape, pack_codes(pos.astype(np.uint8), max(1, (m - 1).bit_length())))
    return values, meta


def decompress(values: ArrayLike, meta: SparseMetadata) -> NDArray[Any]:
    """Rebuild the dense tensor from ``compress``'s output."""
    vals = np.asarray(values)
    expected = list(meta.shape)
    expected[meta.axis] = meta.shape[meta.axis] // meta.m * meta.n
    if list(vals.shape) != expected:
        raise NumericsError(
            f"values have shape {vals.shape}, but the metadata describes {tuple(expected)}",
            hint="pass the values and metadata returned by the same compress() call",
        )
    gv = _groups(vals, meta.axis, meta.n)
    pos = meta.positions()
    dense = np.zeros((*gv.shape[:-1], meta.m), dtype=vals.dtype)
    np.put_along_axis(dense, pos, gv, axis=-1)
    return _ungroup(dense, meta.axis)
