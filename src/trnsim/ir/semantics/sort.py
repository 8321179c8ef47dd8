"""sort: by a comparator region, stable or not (trnsim always sorts stably, which is a valid unstable sort).

Two ways, both giving exactly the stable sort's permutation for a comparator that is a strict weak order:

* **Keys** (``_lexicographic``): a comparator that is, op by op, a lexicographic comparison of keys, each
  ``compare(f(lhs), f(rhs))`` with the same elementwise ops ``f`` on the left and on the right operands
  (JAX's floats: ``-0.0`` → ``+0.0`` and NaNs → one NaN, then ``LT`` in the total order)::

      less = lt(key_0) or (eq(key_0) and (lt(key_1) or (eq(key_1) and ... lt(key_m))))

  runs each ``f`` once over whole operands and sorts the keys with ``np.lexsort`` (O(n log n)).
* **Network** (``_network_sort``), any other comparator: a bitonic sorting network over the next power of
  two, each of its log₂n·(log₂n+1)/2 stages one vectorised comparator call for all rows and pairs at once;
  equivalent elements (neither goes first) keep their original order, which makes the network stable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from trnsim.ir.graph import Graph, Node, Value
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import SEMANTICS, semantics
from trnsim.ir.semantics._util import compute, is_float
from trnsim.ir.semantics.elementwise import total_order_key

Arrays = list[np.ndarray]
Form = tuple[Any, ...]  # a value as an expression of ("arg", operand) leaves: equal forms, equal functions
_FLIP = {"LT": "GT", "GT": "LT", "EQ": "EQ"}


@semantics("sort", kind="sort")
def _sort(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = operands permuted along ``dimension`` so that comparator(results[i], results[i+1]) never
    says the later element goes first (stable)"""
    dim = node.attrs["dimension"]
    dim = dim + args[0].ndim if dim < 0 else dim
    if args[0].shape[dim] <= 1:
        return list(args)
    region = node.regions[0]
    keys = _lexicographic(region)
    order = _key_sort(keys, args, dim, region, interp) if keys is not None else None
    if order is None:
        return _network_sort(args, dim, region, interp)
    return [np.take_along_axis(a, order, axis=dim) for a in args]


# ---- keys ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """``compare(direction, f(lhs), f(rhs))``: ``lhs`` is ``f`` of the left-hand parameters."""

    lhs: Value
    direction: str  # LT | GT | EQ, the left-hand side first
    compare_type: str | None
    form: Form


def _lexicographic(region: Graph) -> list[Key] | None:
    """The comparator's keys, most significant first, if it is a lexicographic comparison (module docstring)
    of keys computed by elementwise ops from the left-hand (even) and right-hand (odd) parameters alike."""
    side: dict[int, str] = {}  # value id → "L" | "R" | "" (constant) | "LR" (both)
    forms: dict[int, Form] = {}
    for k, p in enumerate(region.params):
        side[p.id], forms[p.id] = "LR"[k % 2], ("arg", k // 2)
    producers: dict[int, Node] = {}
    for node in region.nodes:
        if len(node.outputs) != 1 or node.regions or any(v.id not in side for v in node.inputs):
            continue
        rule = SEMANTICS.get(node.op)
        if node.op != "constant" and (rule is None or rule.kind != "elementwise"):
            continue
        sides = "".join(sorted(set("".join(side[v.id] for v in node.inputs))))
        producers[node.out.id] = node
        side[node.out.id] = sides
        if sides != "LR":
            forms[node.out.id] = (node.op, _attrs(node.attrs), str(node.out.type),
                                  tuple(forms[v.id] for v in node.inputs))

    def key(v: Value) -> Key | None:
        node = producers.get(v.id)
        if node is None or node.op != "compare":
            return None
        a, b = node.inputs
        direction: str = node.attrs["comparison_direction"]
        if (side[a.id], side[b.id]) == ("R", "L"):
            a, b, direction = b, a, _FLIP.get(direction, "")
        if (side[a.id], side[b.id]) != ("L", "R") or forms[a.id] != forms[b.id] or direction not in _FLIP:
            return None
        return Key(a, direction, node.attrs.get("compare_type"), forms[a.id])

    def lex(v: Value) -> list[Key] | None:
        first = key(v)
        if first is not None:
            return [first] if first.direction != "EQ" else None
        node = producers.get(v.id)
        if node is None or node.op != "or" or len(node.inputs) != 2:
            return None
        for less, tie in (node.inputs, node.inputs[::-1]):
            first, both = key(less), producers.get(tie.id)
            if first is None or first.direction == "EQ" or both is None or both.op != "and" or len(both.inputs) != 2:
                continue
            for eq, rest in (both.inputs, both.inputs[::-1]):
                same = key(eq)
                if same is None or (same.direction, same.form, same.compare_type) != ("EQ", first.form,
                                                                                       first.compare_type):
                    continue
                tail = lex(rest)
                if tail is not None:
                    return [first, *tail]
        return None

    return lex(region.results[0]) if len(region.results) == 1 else None


def _attrs(attrs: dict[str, Any]) -> Form:
    """Attributes as a comparable value (arrays by dtype, shape and bytes)."""
    return tuple((name, (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else repr(v))
                 for name, v in sorted(attrs.items()))


def _key_sort(keys: list[Key], args: Arrays, dim: int, region: Graph, interp: Interpreter) -> np.ndarray | None:
    """The stable order of the keys along ``dim`` (indices), or None if a plain-float key holds a NaN and there
    are several keys (not a strict weak order: no sort is right)."""
    wanted = {k.lhs.id for k in keys}
    nodes: list[Node] = []
    for node in reversed(region.nodes):     # the ops the keys need, in order
        if any(v.id in wanted for v in node.outputs):
            nodes.append(node)
            wanted.update(v.id for v in node.inputs)
    program = Graph(region.params[::2], nodes[::-1], [k.lhs for k in keys], name="sort_keys")
    values = interp.call(program, args, vectorized=True)
    columns: list[np.ndarray] = []
    for k, value in zip(keys, values, strict=True):
        value = np.broadcast_to(value, args[0].shape)
        column = _order_key(value, k, len(keys) == 1)
        if column is None:
            return None
        columns.append(column)
    return np.lexsort(columns[::-1], axis=dim)


def _order_key(value: np.ndarray, key: Key, alone: bool) -> np.ndarray | None:
    """Numbers whose ascending order is ``key``'s (as ``compare`` evaluates it)."""
    x = compute(value)
    if not is_float(x.dtype):
        return ~x if key.direction == "GT" else x      # ~ reverses the order of any integer or bool
    if key.compare_type == "TOTALORDER":
        x = total_order_key(value)
        return ~x if key.direction == "GT" else x
    nan = np.isnan(x)
    if nan.any():
        if not alone:
            return None
        # NOTE: with a plain float compare, NaNs are unordered; keep XLA's placement (NaNs last for LT)
        x = np.where(nan, np.inf if key.direction == "LT" else -np.inf, x)
    return -x if key.direction == "GT" else x


# ---- network ------------------------------------------------------------------------------------------------

def _stages(size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A bitonic sorting network of ``size`` (a power of two) wires, every comparator putting the lesser
    element on the lower wire: per stage the lower and upper wires of its comparators."""
    wires = np.arange(size)
    k = 2
    while k <= size:
        lo = wires[wires % k < k // 2]
        yield lo, lo - lo % k + (k - 1 - lo % k)   # the first merge step mirrors each half-block
        j = k // 4
        while j >= 1:
            lo = wires[wires & j == 0]
            yield lo, lo + j
            j //= 2
        k *= 2


def _network_sort(args: Arrays, dim: int, region: Graph, interp: Interpreter) -> Arrays:
    moved = [np.moveaxis(a, dim, -1) for a in args]
    n = moved[0].shape[-1]
    size = 1 << (n - 1).bit_length()
    # padding (copies of the first element, positions ≥ n) goes after every element
    moved = [np.concatenate([m, np.repeat(m[..., :1], size - n, axis=-1)], axis=-1) for m in moved]
    position = np.broadcast_to(np.arange(size), moved[0].shape).copy()
    for lo, hi in _stages(size):
        left, right = [m[..., lo] for m in moved], [m[..., hi] for m in moved]
        # one call for both orders: comparator(right, left) in the first half, comparator(left, right) after
        pairs = [np.concatenate(two, axis=-1) for a, b in zip(right, left, strict=True) for two in ((a, b), (b, a))]
        less = interp.call(region, pairs, vectorized=True)[0].astype(bool)
        right_first, left_first = less[..., :lo.size], less[..., lo.size:]
        pl, pr = position[..., lo], position[..., hi]
        ties = ~right_first & ~left_first
        swap = (pr < n) & ((pl >= n) | right_first | (ties & (pr < pl)))
        for m, lv, rv in zip([*moved, position], [*left, pl], [*right, pr], strict=True):
            m[..., lo] = np.where(swap, rv, lv)
            m[..., hi] = np.where(swap, lv, rv)
    return [np.moveaxis(m[..., :n], -1, dim) for m in moved]
