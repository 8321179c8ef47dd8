"""A cache keyed by hardware-spec objects, which hold dicts and so cannot be hashed.

Entries are keyed by the spec's identity and checked through a weak reference; when a spec is garbage
collected its entries go with it, so a new spec at a recycled address never sees a stale value.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from trnsim.hw.spec import ChipSpec

T = TypeVar("T")
_PER_SPEC: dict[int, tuple[weakref.ref[ChipSpec], dict[str, object]]] = {}


def _drop(ident: int) -> None:
    _PER_SPEC.pop(ident, None)


def per_spec(spec: ChipSpec, key: str, compute: Callable[[], T]) -> T:
    """``compute()``, cached per spec object and ``key``."""
    entry = _PER_SPEC.get(id(spec))
    if entry is None or entry[0]() is not spec:
        entry = _PER_SPEC[id(spec)] = (weakref.ref(spec), {})
        weakref.finalize(spec, _drop, id(spec))
    memo = entry[1]
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[return-value]
