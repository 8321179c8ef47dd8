"""Exact integer combiners on VectorE's fp32 ALU: add, max, min and multiply of 8-, 16- and 32-bit integers,
wrapped modulo 2**N as StableHLO's integer arithmetic wraps, built from ALU ops that stay exact.

VectorE computes in fp32 (``reference/neuron.md`` §1.5: "integer inputs are computed in FP32"), exact for
integers below 2**24, and its bitwise ops (``and``/``or``/``xor``/``shl``/``shr``; NKI's bitwise operators,
§2.4) act on exact integers (``isa.ops.ALU_OPS``). So:

- 8- and 16-bit integer max/min are one ALU op (``alu``); their add, and 8-bit multiply, are made exactly in
  int32 (a 16-bit sum is below 2**17, an 8-bit product below 2**16), then their low bits kept (``wrapped``);
- 32-bit integers are split into two exact 16-bit halves, as the pool and top-k kernels split them: add
  carries from the low halves' sum (``split_add``); max/min compare by the difference of the high halves
  times 2**16 plus that of the low ones, whose fp32 rounding keeps the sign of ``b - a`` (``split_pick``);
- 16- and 32-bit multiply is schoolbook over byte limbs whose column sums stay below 2**19 (``limb_mul``);
- 32-bit division and remainder correct fp32 quotient estimates with the exact forms above
  (``divide_words``).

The same forms serve the generated tile code's ``word`` steps (``word``: ``tilegen.build.integer_form``
picks them for 32-bit values that may pass 2**24), whose operands may also be ``[P, 1]`` columns broadcast
along a tile or numbers (immediates: split into halves and limbs in Python).

A combiner takes ``(a, b, valid, op, dt)``: tiles (or views) ``a`` and ``b`` of the DSL dtype ``dt``, and
``valid`` (a number or a ``[P, 1]`` tile, 1.0 where the result is wanted); it returns ``(new, valid)``:
``new`` the combined values where it computes them (``alu``, ``wrapped``, ``split_add``, ``limb_mul``: the
``valid`` passed in), or ``b`` and the mask of where ``b`` wins (``split_pick``: ``valid`` times ``b``
beats ``a``), which the caller selects by bits (``select_bits``: an fp32 select would round a 32-bit value).
``ARITH`` maps ``(combiner, KIND of dtype)`` to its combiner; ``compiler.dmascatter`` (``[P, 1]`` columns)
and ``compiler.intreduce`` (whole tiles: ``then``) share it (``ieee``, the float one, takes columns only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# the operand dtypes by how the kernels combine them (``ARITH``): floats in the fp32 ALU; 8- and 16-bit
# integers are exact in fp32; 32-bit ones are not above 2**24 (isa.ops: VectorE computes in fp32)
KIND: dict[str, str] = {"fp32": "float", "bf16": "float", "fp16": "float", "int8": "byte", "uint8": "byte",
                        "int16": "short", "uint16": "short", "int32": "word", "uint32": "word"}
UNSIGNED_TWIN: dict[str, str] = {"int8": "uint8", "uint8": "uint8", "int16": "uint16", "uint16": "uint16",
                                 "int32": "uint32", "uint32": "uint32"}
BITS: dict[str, int] = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32}
WORD32 = ("int32", "uint32")                            # moved exactly by DMA, not by an fp32 select


def _number(x: Any) -> bool:
    return not hasattr(x, "shape")


def _column(y: Any, x: Any) -> bool:
    """Whether ``y`` is a per-partition ``[P, 1]`` column of tile ``x`` (a scalar operand of ``tensor_scalar``)."""
    return _number(y) or (y.size == y.shape[0] == x.shape[0])


def op2(x: Any, y: Any, op: str, dtype: str) -> Any:
    """``x op y`` in one instruction on tiles, ``[P, 1]`` columns (broadcast along a tile's free axis) or a
    number, at least one a tile."""
    from trnsim import dsl

    if _number(x) or _number(y) or x.shape != y.shape:
        return dsl.binary(op, x, y, dtype=dtype)
    return dsl.tensor_tensor(x, y, op, dtype=dtype)


def then(x: Any, op0: str, scalar: Any, op1: str, y: Any, dtype: str, middle: str = "int32") -> Any:
    """``(x op0 scalar) op1 y``: one instruction when ``y`` is a number or a per-partition ``[P, 1]`` column as
    ``x`` is (the scatter kernel's tiles), else an exact intermediate in ``middle`` and a second one (whole
    tiles, or a column ``x`` broadcast over a tile ``y``)."""
    from trnsim import dsl

    if _column(y, x) and (_number(scalar) or scalar.size == scalar.shape[0]):
        return dsl.tensor_scalar(x, op0, scalar, op1, y, dtype=dtype)
    return op2(op2(x, scalar, op0, middle), y, op1, dtype)


def alu(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """One fp32 ALU op rounded once to ``dt``: float add/mul, max/min of 8- and 16-bit integers (exact)."""
    from trnsim import dsl

    return dsl.tensor_tensor(old, values, op), valid


def ieee(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """Float max/min, following IEEE-754 on signed zeros as the interpreter does (max of -0 and +0 is +0, min
    is -0), whatever the ALU returns on ties: where the result is a zero, max adds the two orders' results
    (``+0`` unless both are ``-0``) and min negates the sum of their negations."""
    from trnsim import dsl

    first = dsl.tensor_tensor(old, values, op)
    second = dsl.tensor_tensor(values, old, op)
    if op == "max":
        zero = dsl.tensor_scalar(first, "add", second)
    else:
        zero = dsl.tensor_scalar(dsl.tensor_scalar(first, "mul", -1.0, "sub", second), "mul", -1.0)
    return dsl.where(dsl.tensor_scalar(first, "eq", 0.0, dtype="fp32"), zero, first), valid


def wrapped(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """Add of 8- and 16-bit integers, multiply of 8-bit ones, wrapped as StableHLO's: made exactly in int32
    through the fp32 ALU (a 16-bit sum is below 2**17, an 8-bit product below 2**16), then the low bits kept by
    an ``and`` into the unsigned twin."""
    from trnsim import dsl

    exact = dsl.tensor_tensor(old, values, op, dtype="int32")
    twin = UNSIGNED_TWIN[dt]
    low = dsl.tensor_scalar(exact, "and", float((1 << BITS[dt]) - 1), dtype=twin)
    return (low if twin == dt else low.bitcast(dt)), valid


def _halves(x: Any) -> tuple[Any, Any]:
    """``(x >> 16, x & 0xFFFF)`` of a number (as numbers: its value's, read in its type) or a tile."""
    from trnsim import dsl

    if _number(x):
        return float(int(x) >> 16), float(int(x) & 65535)
    return dsl.tensor_scalar(x, "shr", 16.0, dtype="int32"), dsl.tensor_scalar(x, "and", 65535.0, dtype="int32")


def add_words(a: Any, b: Any, dt: str, op: str = "add") -> Any:
    """``a + b`` (``op`` "add") or ``a - b`` ("sub") of 32-bit integers, wrapped mod 2**32, as two exact 16-bit
    halves (the pool and top-k kernels' split, ``kernels.pool_grad``): each step is an exact integer below
    2**24 or a bitwise op on exact integers (isa.ops.ALU_OPS), where one fp32 add of the words would round
    above 2**24 (neuron.md §1.5: integers are computed in FP32)::

        lo  = (a & 0xFFFF) ± (b & 0xFFFF)                 |lo| < 2**17
        hi  = (a >> 16) ± (b >> 16) + (lo >> 16)          |hi| < 2**17 (halves signed for int32; carry or
                                                          borrow: ``lo >> 16`` is arithmetic, 1, 0 or -1)
        out = ((hi & 0xFFFF) << 16) | (lo & 0xFFFF)       as uint32, bit-cast to ``dt``

    ``a`` and ``b``: tiles, ``[P, 1]`` columns or a number (its value in ``dt``; not both numbers)."""
    from trnsim import dsl

    if _number(a) and op == "add":
        a, b = b, a
    if _number(a):                                  # a number minus a tile: its halves reversed
        high_a, low_a = _halves(a)
        lo = dsl.tensor_scalar(b, "and", 65535.0, "sub", low_a, reverse1=True, dtype="int32")
        high = dsl.tensor_scalar(b, "shr", 16.0, "sub", high_a, reverse1=True, dtype="int32")
    else:
        high_b, low_b = _halves(b)
        lo = then(a, "and", 65535.0, op, low_b, "int32")
        high = then(a, "shr", 16.0, op, high_b, "int32")
    hi = then(lo, "shr", 16.0, "add", high, "int32")
    top = dsl.tensor_scalar(hi, "and", 65535.0, "shl", 16.0, dtype="uint32")
    out = then(lo, "and", 65535.0, "or", top, "uint32")
    return out if dt == "uint32" else out.bitcast(dt)


def split_add(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """32-bit integer add, wrapped mod 2**32 (``add_words``)."""
    return add_words(old, values, dt), valid


def compare_words(a: Any, b: Any) -> Any:
    """An fp32 tile with the sign of ``a - b`` (0 where equal) for 32-bit integers, each read as its own
    tile's type (an int32 remainder against a uint32 divisor: ``_unsigned_divide``), compared by halves (the
    shift is arithmetic on the signed value, isa.ops: int32's high half is signed, uint32's unsigned; the low
    halves are unsigned, so each tile is ``high · 2**16 + low`` of its own value)::

        h   = (a >> 16) - (b >> 16)               |h| < 2**16, exact (h · 2**16 too)
        l   = (a & 0xFFFF) - (b & 0xFFFF)         |l| < 2**16, exact
        d   = h · 2**16 + l                       a - b rounded once to fp32: h · 2**16 is exact, and the
                                                  rounding of a non-zero integer keeps its sign

    ``a`` a tile or column, ``b`` a tile, column or number."""
    high_b, low_b = _halves(b)
    h = then(a, "shr", 16.0, "sub", high_b, "fp32")
    low = then(a, "and", 65535.0, "sub", low_b, "fp32")
    return then(h, "mul", 65536.0, "add", low, "fp32", middle="fp32")


def split_pick(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """32-bit integer max/min as the update where it wins: ``pick = (b - a > 0) · valid`` (``< 0`` for min;
    ``compare_words``); ties keep ``old``, the same bits."""
    from trnsim import dsl

    d = compare_words(values, old)
    return values, dsl.tensor_scalar(d, "gt" if op == "max" else "lt", 0.0, "mul", valid, dtype="fp32")


def _limbs(x: Any, n: int) -> list[Any]:
    """The ``n`` byte limbs ``(x >> 8i) & 0xFF`` of a tile (int32 tiles) or a number (numbers)."""
    from trnsim import dsl

    if _number(x):
        return [float((int(x) >> 8 * i) & 255) for i in range(n)]
    return [dsl.tensor_scalar(x, "shr", 8.0 * i, "and", 255.0, dtype="int32") if i else
            dsl.tensor_scalar(x, "and", 255.0, dtype="int32") for i in range(n)]


def mul_limbs(a: Any, b: Any, dt: str) -> Any:
    """``a · b`` of 16- or 32-bit integers, wrapped mod 2**N, as ``n = N / 8`` byte limbs (schoolbook, the
    columns of weight 2**(8k) ≥ 2**N dropped), every partial sum an exact integer below 2**24 in the fp32 ALU::

        a_i = (a >> 8i) & 0xFF,  b_j = (b >> 8j) & 0xFF        (the top limb's bits of a signed value too)
        c_k = Σ_{i+j=k} a_i · b_j                            ≤ 4 · 255² < 2**18
        r_0 = c_0,  r_k = c_k + (r_{k-1} >> 8)               < 2**19
        out = Σ_k (r_k & 0xFF) << 8k                          as the unsigned twin, bit-cast to ``dt``

    ``a`` a tile or column, ``b`` a tile, column or number (its zero limbs take no instruction)."""
    from trnsim import dsl

    n = BITS[dt] // 8
    if _number(a):
        a, b = b, a
    limbs = _limbs(a, n), _limbs(b, n)
    twin = UNSIGNED_TWIN[dt]
    out, carry = None, None
    for k in range(n):
        column = carry
        for i in range(k + 1):
            x, y = limbs[0][i], limbs[1][k - i]
            if _number(y) and y == 0.0:
                continue
            column = op2(x, y, "mul", "int32") if column is None else then(x, "mul", y, "add", column, "int32")
        byte = None if column is None else dsl.tensor_scalar(column, "and", 255.0, "shl", 8.0 * k, dtype=twin)
        if byte is not None:
            out = byte if out is None else op2(out, byte, "or", twin)
        if k + 1 < n and column is not None:
            carry = dsl.tensor_scalar(column, "shr", 8.0, dtype="int32")
    if out is None:                                 # a product by the number 0
        out = op2(limbs[0][0], 0.0, "mul", twin)
    return out if twin == dt else out.bitcast(dt)


def limb_mul(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """16- and 32-bit integer multiply, wrapped mod 2**N (``mul_limbs``)."""
    return mul_limbs(old, values, dt), valid


def select_bits(old: Any, new: Any, pick: Any, dt: str | None = None) -> Any:
    """``new`` where the 0/1 tile ``pick`` is 1, else ``old``, selected by bits (an fp32 select would round
    32-bit integers above 2**24): ``old ^ ((new ^ old) & -pick)``. ``old`` and ``new`` may be columns or
    numbers (their values in ``dt``)."""
    from trnsim import dsl

    dtype = dt or (old if _number(new) else new).dtype
    mask = dsl.tensor_scalar(pick, "mul", -1.0, dtype="int32")
    diff = float(int(new) ^ int(old)) if _number(new) and _number(old) else op2(new, old, "xor", dtype)
    return op2(op2(diff, mask, "and", dtype), old, "xor", dtype)


def word_tile(value: float, shape: tuple[int, ...], dt: str) -> Any:
    """A tile of ``shape`` holding the 32-bit integer ``value`` (its value in ``dt``), made exactly: a memset
    rounds through fp32 (isa Memset), so the halves are set and joined by bitwise ops."""
    from trnsim import dsl

    v = int(value) & 0xFFFFFFFF
    high = dsl.full(shape, float(v >> 16), "uint32")
    out = dsl.tensor_scalar(high, "shl", 16.0, "or", float(v & 65535), dtype="uint32")
    return out if dt == "uint32" else out.bitcast(dt)


def _unsigned_divide(n: Any, d: Any) -> tuple[Any, Any]:
    """``(n // d, n % d)`` of uint32 tiles (``d != 0``; lanes of a zero divisor hold garbage), exactly, from
    fp32 estimates corrected with exact word arithmetic. For ``d < 2**30``:

        q0 = trunc(fl(n) / fl(d))       |q0 - n/d| <= 3·2**-24 · n/d + 1 (three roundings), so
        r0 = n - q0·d                   |r0| <= 3·2**-24 · n + d < 2**31: exact as an int32 (``mul_limbs``,
                                        ``add_words`` mod 2**32)
        q1 = q0 + floor(fl(r0) / fl(d)) |r0 / d| <= 769, estimated within 2**-12: q1 in {q - 1, q, q + 1}
        r1 = n - q1·d                   in [-d, 2d), exact as an int32
        q  = q1 - (r1 < 0) + (r1 >= d), r = r1 + d·(r1 < 0) - d·(r1 >= d)

    For ``d >= 2**30`` the quotient is at most 3: three exact compare-and-subtract steps. The two are
    selected by bits on ``d >> 30``."""
    from trnsim import dsl

    def floor(x: Any) -> Any:
        f = dsl.tensor_scalar(x, "mod", 1.0, dtype="fp32")
        return op2(op2(x, f, "sub", "fp32"), dsl.tensor_scalar(f, "lt", 0.0, dtype="fp32"), "sub", "int32")

    quotient = op2(n, d, "div", "fp32")
    q0 = op2(quotient, dsl.tensor_scalar(quotient, "mod", 1.0, dtype="fp32"), "sub", "uint32")
    r0 = add_words(n, mul_limbs(q0, d, "uint32"), "int32", "sub")
    q1 = add_words(q0, floor(op2(r0, d, "div", "fp32")), "uint32")
    r1 = add_words(n, mul_limbs(q1, d, "uint32"), "int32", "sub")
    below = dsl.tensor_scalar(r1, "lt", 0.0, dtype="fp32")
    above = dsl.tensor_scalar(compare_words(r1, d), "ge", 0.0, dtype="fp32")
    q = add_words(q1, op2(above, below, "sub", "int32"), "uint32")
    r = add_words(add_words(r1, select_bits(0.0, d, below, "uint32"), "uint32"),
                  select_bits(0.0, d, above, "uint32"), "uint32", "sub")
    rest, count = n, dsl.full(n.shape, 0.0, "fp32")   # d >= 2**30: q <= 3
    for _ in range(3):
        fits = dsl.tensor_scalar(compare_words(rest, d), "ge", 0.0, dtype="fp32")
        rest = select_bits(rest, add_words(rest, d, "uint32", "sub"), fits, "uint32")
        count = op2(fits, count, "add", "fp32")
    large = dsl.tensor_scalar(d, "shr", 30.0, "gt", 0.0, dtype="fp32")
    return (select_bits(q, dsl.copy(count, dtype="uint32"), large, "uint32"),
            select_bits(r, rest, large, "uint32"))


def divide_words(a: Any, b: Any, dt: str) -> tuple[Any, Any]:
    """``(a / b, a % b)`` of 32-bit integers as StableHLO has them: truncating toward zero, the remainder with
    the dividend's sign, ``x / 0`` all ones and ``x % 0 = x``, ``INT_MIN / -1 = INT_MIN`` (wrapped) and
    ``INT_MIN % -1 = 0``. Signed operands divide as magnitudes (``|INT_MIN| = 2**31`` as a uint32) and take
    their signs back (``_unsigned_divide``). ``a``, ``b``: tiles, columns or a number (not both)."""
    from trnsim import dsl

    if _number(a):
        a = word_tile(a, b.shape, dt)
    if _number(b):
        b = word_tile(b, a.shape, dt)
    if dt == "uint32":
        n, d, signs = a, b, None
    else:
        signs = [dsl.tensor_scalar(x, "lt", 0.0, dtype="fp32") for x in (a, b)]   # exact: 0 is exact in fp32
        n, d = (select_bits(x, add_words(0.0, x, "int32", "sub"), neg, "int32").bitcast("uint32")
                for x, neg in zip((a, b), signs, strict=True))
    q, r = _unsigned_divide(n, d)
    if signs is not None:
        flip = op2(signs[0], signs[1], "ne", "fp32")
        q, r = (select_bits(x.bitcast("int32"), add_words(0.0, x, "int32", "sub"), neg, "int32")
                for x, neg in ((q, flip), (r, signs[0])))
    zero = dsl.tensor_scalar(b, "eq", 0.0, dtype="fp32")
    return select_bits(q, -1.0 if dt == "int32" else float(0xFFFFFFFF), zero, dt), select_bits(r, a, zero, dt)


# a compare's direction with its operands swapped
_MIRROR: dict[str, str] = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def word(op: str, args: list[Any], dt: str) -> Any:
    """One of the generated tile code's exact 32-bit integer ops (``tilegen.build.word``) on tiles, ``[P, 1]``
    columns or numbers (at least one a tile): ``add`` / ``sub`` (``add_words``), ``mul`` (``mul_limbs``, 16-
    and 32-bit), ``max`` / ``min`` (``compare_words``, then ``select_bits``), a compare (``eq`` … ``ge``: the
    sign of ``compare_words``, a 0/1 ``dt`` tile), ``select`` (predicate, on true, on false: ``select_bits``)."""
    from trnsim import dsl

    if op in ("add", "sub"):
        return add_words(args[0], args[1], dt, op)
    if op == "mul":
        return mul_limbs(args[0], args[1], dt)
    if op == "select":
        return select_bits(args[2], args[1], args[0], dt)
    if op in ("div", "rem"):
        return divide_words(args[0], args[1], dt)[op == "rem"]
    a, b = args
    swapped = _number(a)
    if swapped:
        a, b = b, a
    d = compare_words(a, b)                         # the sign of a - b
    if op in ("max", "min"):
        return select_bits(b, a, dsl.tensor_scalar(d, "gt" if op == "max" else "lt", 0.0, dtype="fp32"), dt)
    return dsl.tensor_scalar(d, _MIRROR[op] if swapped else op, 0.0, dtype=dt)


Combine = Callable[[Any, Any, Any, str, str], tuple[Any, Any]]
# (combiner, KIND) → the exact combiner (module docstring); a pair not here has none
ARITH: dict[tuple[str, str], Combine] = {
    ("add", "float"): alu, ("mul", "float"): alu, ("max", "float"): ieee, ("min", "float"): ieee,
    ("add", "byte"): wrapped, ("add", "short"): wrapped, ("mul", "byte"): wrapped,
    ("max", "byte"): alu, ("min", "byte"): alu, ("max", "short"): alu, ("min", "short"): alu,
    ("add", "word"): split_add, ("max", "word"): split_pick, ("min", "word"): split_pick,
    ("mul", "short"): limb_mul, ("mul", "word"): limb_mul,
}
PICKS = frozenset({split_pick})       # combiners that return ``(b, where b wins)``, selected by ``select_bits``
