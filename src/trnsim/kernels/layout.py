"""Laying tensors of any shape onto ``[P ≤ 128, F]`` tiles, for kernels that work element by element or row
by row (optimizers, gathers) and so may choose any layout.

A DMA copies in index order between views of equal size (``dsl.dma_copy``), so DMAing ``p · f`` consecutive
elements of a row-major HBM tensor into a ``[p, f]`` tile is a reshape: partition ``i`` gets elements
``i·f .. i·f+f-1``. ``flat_tiles`` cuts a tensor into such runs, each a *view* (slices of the leading axis,
or of the first two), so the same key addresses every tensor of that shape:

    (N,)                  [128, f] tiles of 128·f elements (f ≤ fmax), then one [k < 128, 1] tile
    (R, C), C ≤ fmax      whole rows packed 128 partitions wide: [128, g·C/128] tiles, g rows each (g·C a
                          multiple of 128), then one [k, C] tile of the k < 128 rows left
    (R ≥ 128, C > fmax)   [128 rows, ≤ fmax columns] blocks
    N-D, or fewer rows    per index of axis 0, recursively

    >>> [(key, p, f) for key, p, f in flat_tiles((300,), 128, 2)]
    [((slice(0, 256, None),), 128, 2), ((slice(256, 300, None),), 44, 1)]

``index_tiles`` is the one-element-per-partition case (gathers: one id per partition), in index order:

    >>> index_tiles((5, 50), 128)
    [((slice(0, 2, None),), 100), ((slice(2, 4, None),), 100), ((slice(4, 5, None),), 50)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Key = tuple[int | slice, ...]


def blocks(n: int, size: int, start: int = 0) -> list[tuple[int, int]]:
    """(offset, length) of consecutive blocks of at most ``size`` covering ``start .. start + n``."""
    return [(start + i, min(size, n - i)) for i in range(0, n, size)]


def flat_tiles(shape: Sequence[int], pmax: int, fmax: int) -> list[tuple[Key, int, int]]:
    """``(key, p, f)`` per tile (module docstring): ``x[key]`` holds ``p · f`` consecutive elements of a
    row-major ``x`` of ``shape``, ``p ≤ pmax`` and ``f ≤ fmax``; the keys cover ``x`` once, in order."""
    lead, inner = shape[0], math.prod(shape[1:])
    if inner > fmax:
        if len(shape) == 2 and lead >= pmax:
            return [((slice(r, r + n), slice(c, c + w)), n, w)
                    for r, n in blocks(lead, pmax) for c, w in blocks(inner, fmax)]
        return [((i, *key), p, f) for i in range(lead) for key, p, f in flat_tiles(shape[1:], pmax, fmax)]
    unit = pmax // math.gcd(inner, pmax)  # rows whose elements split evenly over pmax partitions
    per_tile = max(unit, pmax * fmax // inner // unit * unit)
    tiles: list[tuple[Key, int, int]] = []
    r = 0
    while lead - r >= unit:
        g = min(per_tile, (lead - r) // unit * unit)
        tiles.append(((slice(r, r + g),), pmax, g * inner // pmax))
        r += g
    if r < lead:
        tiles.append(((slice(r, lead),), lead - r, inner))
    return tiles


def index_tiles(shape: Sequence[int], pmax: int) -> list[tuple[Key, int]]:
    """``(key, p)`` per tile: ``x[key]`` holds ``p ≤ pmax`` consecutive elements of a row-major ``x`` of
    ``shape``, one per partition; the keys cover ``x`` once, in index order (whole leading-axis rows are
    packed while they fit, else each row is split)."""
    lead, inner = shape[0], math.prod(shape[1:])
    if inner > pmax:
        return [((i, *key), p) for i in range(lead) for key, p in index_tiles(shape[1:], pmax)]
    return [((slice(r, r + g),), g * inner) for r, g in blocks(lead, pmax // inner)]
