"""The integer values a fused group can hold: an interval per integer value, propagated op by op from the
types of the group's inputs, the values of its constants and the sizes of its iotas.

VectorE computes in fp32 (``reference/neuron.md`` §1.5: "integer inputs are computed in FP32"), exact for
integers of magnitude at most 2**24 (``EXACT``), while its bitwise ops act on the exact integers
(``isa.ops.ALU_OPS``). The recipe builder asks these intervals which form of an integer op computes the
program: one fp32 ALU instruction where every operand and the unwrapped result are exact in fp32 (index
arithmetic on iotas, 8- and 16-bit sums), the exact word forms of ``compiler.intmath`` where they are not (a
threefry round's u32 adds); and 64-bit values whose interval is exact in fp32 (JAX's u64 counter iotas of
``jax.random``) are computed as int32. An interval is a bound, not the exact set: wider than the values, never
narrower, so a decision made on it holds for every input.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import numpy as np

from trnsim.ir.graph import Node, Value

EXACT = 1 << 24          # integers of magnitude below this are exact in fp32 (24-bit significand), and no value
                         # beyond it rounds onto one of them (2**24 + 1 rounds to 2**24: a compare with it
                         # would tie)
Interval = tuple[int, int]

# integer element type → its bits and whether it is signed (i1: a 0/1 mask)
_TYPES: dict[str, tuple[int, bool]] = {"i1": (1, False), "i8": (8, True), "i16": (16, True), "i32": (32, True),
                                       "i64": (64, True), "ui8": (8, False), "ui16": (16, False),
                                       "ui32": (32, False), "ui64": (64, False)}
_PASS = frozenset({"broadcast_in_dim", "reshape", "transpose", "slice", "reverse", "copy", "dynamic_slice",
                   "optimization_barrier", "real_dynamic_slice", "gather"})


def type_range(dtype: str) -> Interval:
    """The smallest and largest value of integer type ``dtype`` (i1: 0 and 1)."""
    bits, signed = _TYPES[dtype]
    if dtype == "i1":
        return 0, 1
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def exact(r: Interval | None) -> bool:
    """Whether every integer of ``r`` is exact in fp32, and no integer outside rounds to one of them."""
    return r is not None and r[0] > -EXACT and r[1] < EXACT


class Ranges:
    """The intervals of a group's integer values, computed on demand (``of``) and remembered."""

    def __init__(self, nodes: list[Node]) -> None:
        self.produced = {v.id: nd for nd in nodes for v in nd.outputs}
        self.known: dict[int, Interval] = {}

    def of(self, v: Value) -> Interval | None:
        """``v``'s interval, or None for a float value."""
        dtype = v.type.dtype
        if dtype not in _TYPES:
            return None
        if v.id not in self.known:
            node = self.produced.get(v.id)
            if node is None or node.op == "constant":
                found = _constant(v)
            else:
                found = self.unwrapped(node)
                if found is not None and len(node.outputs) == 1:
                    lo, hi = type_range(dtype)
                    if found[0] < lo or found[1] > hi:
                        found = lo, hi          # the op may wrap (or saturate): any value of the type
            self.known[v.id] = found if found is not None else type_range(dtype)
        return self.known[v.id]

    def unwrapped(self, node: Node) -> Interval | None:
        """The interval of ``node``'s result before it is wrapped into its type, or None if unknown."""
        if len(node.outputs) != 1 or node.out.type.dtype not in _TYPES:
            return None
        if node.op == "iota":
            return 0, max(node.out.type.shape[node.attrs["iota_dimension"]] - 1, 0)
        if node.op == "compare" or node.out.type.dtype == "i1":
            return 0, 1
        args = [self.of(u) for u in node.inputs]
        if node.op in _PASS:
            return args[0]
        if node.op == "convert":
            return args[0] if args[0] is not None else None     # from a float: saturating, any value
        rule = _RULES.get(node.op)
        if rule is None or any(a is None for a in args[:_ARITY.get(node.op, len(args))]):
            return None
        return rule(node, [a for a in args if a is not None])


def _constant(v: Value) -> Interval:
    """A value from outside the group: a constant's smallest and largest element, else its type's range."""
    producer = v.producer
    if producer is not None and producer.op == "constant" and v.type.size:
        value = producer.attrs["value"]
        return int(np.min(value)), int(np.max(value))
    return type_range(v.type.dtype)


def _span(values: list[int]) -> Interval:
    return min(values), max(values)


def _bits_above(r: Interval) -> Interval | None:
    """``[0, 2**k - 1]`` covering every non-negative value of ``r``; None if ``r`` has negatives."""
    return (0, (1 << max(r[1], 0).bit_length()) - 1) if r[0] >= 0 else None


def _and(node: Node, args: list[Interval]) -> Interval | None:
    # a non-negative operand bounds the result (x & m is in [0, m] for m >= 0, whatever x)
    tops = [r[1] for r in args if r[0] >= 0]
    return (0, min(tops)) if tops else None


def _or(node: Node, args: list[Interval]) -> Interval | None:
    spans = [_bits_above(r) for r in args]
    return None if any(s is None for s in spans) else (0, max(s[1] for s in spans if s is not None))


def _shift_left(node: Node, args: list[Interval]) -> Interval | None:
    x, s = args
    if x[0] < 0 or s[0] < 0 or s[1] >= _TYPES[node.out.type.dtype][0]:
        return None
    return x[0] << s[0], x[1] << s[1]


def _shift_right(node: Node, args: list[Interval]) -> Interval | None:
    # monotone in the value, and in the amount (down for values >= 0, up for negative ones under an arithmetic
    # shift): the extremes are at the corners, amounts capped where the result stops changing
    x, s = args
    bits = _TYPES[node.out.type.dtype][0]
    arithmetic = node.op == "shift_right_arithmetic"
    if s[0] < 0 or (x[0] < 0 and not arithmetic):
        return None                     # (a logical shift reads a negative value's bits unsigned)
    if arithmetic and node.out.type.dtype.startswith("ui") and x[1] >> (bits - 1):
        return None                     # the top bit read as a sign: all ones may come out
    cap = bits - 1 if arithmetic else bits
    return _span([v >> min(a, cap) for v in x for a in s])


def _divide(node: Node, args: list[Interval]) -> Interval | None:
    # truncating toward zero: |a / b| <= |a| for b != 0, negative only if an operand may be; a zero divisor
    # gives -1 (all bits: wraps for unsigned)
    a, b = args
    m = max(abs(a[0]), abs(a[1]))
    lo = -m if a[0] < 0 or b[0] < 0 else 0
    return (min(lo, -1) if b[0] <= 0 <= b[1] else lo), m


def _remainder(node: Node, args: list[Interval]) -> Interval:
    a = args[0]                         # the sign of the dividend, |r| <= |a| (a zero divisor: a itself)
    return min(a[0], 0), max(a[1], 0)


def _reduce(node: Node, args: list[Interval]) -> Interval | None:
    from trnsim.ir.semantics.reduce import simple_combiner

    op = simple_combiner(node.regions[0]) if len(node.inputs) == 2 else None
    (lo, hi), init = args
    count = prod(node.inputs[0].type.shape[d] for d in node.attrs["dimensions"])
    if op == "add":
        return init[0] + count * lo, init[1] + count * hi
    if op in ("maximum", "minimum", "and"):
        return min(lo, init[0]), max(hi, init[1])
    if op in ("or", "xor"):
        return _or(node, [(lo, hi), init])
    return None


def _clamp(node: Node, args: list[Interval]) -> Interval:
    lo, x, hi = args                    # min(max(x, lo), hi), as StableHLO has it (lo > hi gives hi)
    return min(max(x[0], lo[0]), hi[0]), min(max(x[1], lo[1]), hi[1])


_RULES: dict[str, Callable[[Node, list[Interval]], Interval | None]] = {
    "add": lambda n, a: (a[0][0] + a[1][0], a[0][1] + a[1][1]),
    "subtract": lambda n, a: (a[0][0] - a[1][1], a[0][1] - a[1][0]),
    "multiply": lambda n, a: _span([x * y for x in a[0] for y in a[1]]),
    "negate": lambda n, a: (-a[0][1], -a[0][0]),
    "abs": lambda n, a: (0 if a[0][0] <= 0 <= a[0][1] else min(abs(a[0][0]), abs(a[0][1])),
                         max(abs(a[0][0]), abs(a[0][1]))),
    "maximum": lambda n, a: (max(a[0][0], a[1][0]), max(a[0][1], a[1][1])),
    "minimum": lambda n, a: (min(a[0][0], a[1][0]), min(a[0][1], a[1][1])),
    "select": lambda n, a: (min(a[1][0], a[2][0]), max(a[1][1], a[2][1])),
    "clamp": _clamp,
    "sign": lambda n, a: (-1 if a[0][0] < 0 else 0, 1 if a[0][1] > 0 else 0),
    "and": _and, "or": _or, "xor": _or,
    "shift_left": _shift_left, "shift_right_logical": _shift_right, "shift_right_arithmetic": _shift_right,
    "divide": _divide, "remainder": _remainder, "reduce": _reduce,
    "concatenate": lambda n, a: (min(r[0] for r in a), max(r[1] for r in a)),
    "pad": lambda n, a: (min(a[0][0], a[1][0]), max(a[0][1], a[1][1])),
    "dynamic_update_slice": lambda n, a: (min(a[0][0], a[1][0]), max(a[0][1], a[1][1])),
}
# op → how many leading operands its rule reads (the rest, index operands, may be anything)
_ARITY: dict[str, int] = {"pad": 2, "dynamic_update_slice": 2}
